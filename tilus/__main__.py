"""``python -m tilus``: the command line (``info``, ``inspect``, ``cache``, ``tune``)."""

import sys

from tilus.cli import main

if __name__ == "__main__":
    sys.exit(main())

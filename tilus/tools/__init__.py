"""Developer tools run as modules (``python -m tilus.tools.coverage``)."""

"""tilus.ir."""

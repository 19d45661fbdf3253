"""tilus.lang."""

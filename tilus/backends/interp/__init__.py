"""tilus.backends.interp."""

"""tilus.backends."""

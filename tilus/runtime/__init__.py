"""tilus.runtime."""

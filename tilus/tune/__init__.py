"""tilus.tune."""

"""tilus.passes."""

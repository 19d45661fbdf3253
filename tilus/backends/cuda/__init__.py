"""tilus.backends.cuda."""

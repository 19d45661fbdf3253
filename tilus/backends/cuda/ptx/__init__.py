"""tilus.backends.cuda.ptx."""

"""The version of tilus (a key of the artifact cache and of tuning decisions)."""

__version__ = "0.1.0"

"""Instruction groups available as methods on Scripts and Classes."""

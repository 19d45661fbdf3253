"""tilus: a tile-level GPU kernel language embedded in Python."""

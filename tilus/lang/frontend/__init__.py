"""The front end: Python source of Scripts and Classes to tile IR."""

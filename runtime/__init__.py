"""tetrachip runtime package."""

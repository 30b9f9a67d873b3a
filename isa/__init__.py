"""tetrachip isa package."""

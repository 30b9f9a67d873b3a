"""tetrachip compiler package."""

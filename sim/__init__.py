"""tetrachip sim package."""

"""tetrachip rtl package."""

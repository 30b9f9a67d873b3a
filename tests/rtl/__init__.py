"""Tests of ``rtl``: units and the whole chip under Amaranth's simulator (marked ``rtl``)."""

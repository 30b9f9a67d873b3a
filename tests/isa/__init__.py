"""Tests of ``isa``."""

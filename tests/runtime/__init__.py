"""Tests of ``runtime``."""

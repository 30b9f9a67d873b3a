"""Tests of ``verify`` that need no HDL simulator: the reference level of the case library and the random
program generator."""

"""The test suite, one folder per package (``tests/conftest.py`` marks each test by its folder)."""

"""Markers by folder: every test carries the name of its folder under ``tests/`` as a marker
(``isa``, ``sim``, ``rtl``, ``cosim``, ``verify``, ``compiler``, ``runtime``, ``gpu``, ``bench``; registered in
pyproject.toml), so the lanes select by what a test needs without a ``pytestmark`` line per file:
``-m "not rtl and not cosim"`` is every test without an RTL simulation (``make test-fast``)."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)          # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    known = {line.split(":")[0].strip() for line in config.getini("markers")}
    for item in items:
        parts = Path(item.path).resolve().relative_to(TESTS).parts
        if len(parts) < 2:
            continue
        folder = parts[0]
        if folder not in known:
            raise pytest.UsageError(f"{item.nodeid}: tests/{folder} has no marker; register `{folder}` in "
                                    "[tool.pytest.ini_options] markers of pyproject.toml")
        item.add_marker(folder)


#: how many inputs each of the project's fuzzers tries per test: 1 in ``make test``; ``make fuzz-long``
#: sets TETRACHIP_FUZZ_SCALE=10 (20,000 assembly texts, binaries, CLI vectors and API tuples each)
FUZZ_SCALE_ENV = "TETRACHIP_FUZZ_SCALE"


@pytest.fixture(autouse=True)
def _frontend_seed():
    """Every test starts from the frontend's generator seeded with 0: a model's default initialisation and
    ``tc.rand*`` draw from it, so without this a test's values (and error bounds measured on them) would
    depend on the tests its xdist worker ran before. A test that calls ``tc.manual_seed`` itself overrides it."""
    from compiler.frontend.random import manual_seed
    manual_seed(0)


@pytest.fixture
def fuzz_scale() -> int:
    """Multiplier of every fuzzer's count (``make test``: 1; ``make fuzz-long``: 10)."""
    import os
    raw = os.environ.get(FUZZ_SCALE_ENV, "1")
    try:
        scale = int(raw)
    except ValueError:
        raise pytest.UsageError(f"{FUZZ_SCALE_ENV}={raw!r} is not a whole number") from None
    if scale < 1:
        raise pytest.UsageError(f"{FUZZ_SCALE_ENV}={raw!r} must be at least 1")
    return scale

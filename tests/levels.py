"""The base class of the case library's tests (``verify.cases``), as PyMTL3's ``BaseTests``: one
test per case, ``test_case[<case>-<level>]``, the same checks at every level; a subclass swaps only
the device under test. The subclasses, one file per level's folder (so the folder's marker applies):

* ``tests/verify/test_cases_reference.py``  ``reference``: the program in order on ``isa.semantics``
* ``tests/sim/test_cases_sim.py``           ``sim``: the cycle-level simulator
* ``tests/rtl/test_cases_rtl.py``           ``rtl``, ``rtl-lvt``, ``rtl-mac-*``: the Amaranth chip
* ``tests/cosim/test_cases_verilog.py``     ``verilog``: the chip's Verilog under cocotb
"""

from __future__ import annotations

import pytest

from verify.cases import core, library


class CaseTests:
    """``level``: which level of the library's cases this class runs (``verify.cases.core.LEVELS``);
    ``tag``: what the test ids say ran (default: the level); ``run(case)``: the device under test,
    returning an ``Outcome`` per chip (and checking the run against the simulator where that is
    part of the level's contract)."""

    level: str = ""
    tag: str = ""

    def cases(self) -> list:
        return library.at_level(self.level)

    def pytest_generate_tests(self, metafunc):
        if "case" in metafunc.fixturenames:
            cases = self.cases()
            tag = self.tag or self.level
            metafunc.parametrize("case", cases, ids=[f"{c.name}-{tag}" for c in cases])

    def run(self, case: core.Case) -> list:
        raise NotImplementedError(f"{type(self).__name__} names no device under test")

    def test_case(self, case):
        try:
            outs = self.run(case)
        except core.NotApplicable as e:
            pytest.skip(str(e))
        core.check(case, outs)

"""The case library (``verify.cases``) on the cycle-level simulator: every case's expectation, its
error code and, where the case pins one, its cycle count."""

from __future__ import annotations

from tests.levels import CaseTests
from verify.cases import core


class TestSim(CaseTests):
    level = core.SIM

    def run(self, case):
        return core.run_sim(case)

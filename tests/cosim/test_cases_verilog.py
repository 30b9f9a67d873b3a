"""The case library (``verify.cases``) on the chip's Verilog under cocotb (``verify.cosim``; the
simulator from ``SIM``, default Verilator): each run equals the simulator's from the same start
(total cycles, error code, DRAM, SPM, ACC, per-instance line trace) and meets the case's
expectation.

Every selected case of a config runs as one job of one simulator process, on the first test that
needs it (building a model and starting the simulator cost far more than a case): a ring as large
as the library's largest ring case (``verify.cases.library.verilog_chips``; one-chip cases run on
chip 0, the others halt), started from the previous job's SPM and ACC. The tests of this class
share one pytest-xdist group, so under ``-n`` one worker runs the batch once.
"""

from __future__ import annotations

import os

import pytest

from tests.levels import CaseTests
from verify.cases import core, library

SIM = os.environ.get("SIM", "verilator")
pytestmark = pytest.mark.xdist_group("verilog-cases")


class _Batches:
    """The results of the session's selected Verilog-level cases, one batch per config."""

    def __init__(self, session):
        self.session, self.results = session, {}

    def result(self, case) -> tuple[dict, int]:
        if case.config not in self.results:
            try:
                self._run(case.config)
            except Exception as e:        # a failed build fails every case of the config, once
                self.results[case.config] = e
        got = self.results[case.config]
        if isinstance(got, Exception):
            raise got
        return got[case.name]

    def _run(self, config: str) -> None:
        from verify.cosim import Cosim, available
        why = available(SIM)
        if why:
            pytest.skip(f"SIM={SIM}: {why}")
        cases = [item.callspec.params["case"] for item in self.session.items
                 if item.cls is TestVerilog and item.callspec.params["case"].config == config]
        chips = library.verilog_chips(config)
        results = Cosim(cases[0].cfg, chips, SIM).run([c.job(chips) for c in cases])
        self.results[config] = {c.name: (r, chips) for c, r in zip(cases, results)}


@pytest.fixture(scope="session")
def verilog_batches(request):
    return _Batches(request.session)


class TestVerilog(CaseTests):
    level = core.VERILOG

    @pytest.fixture(autouse=True)
    def _batches(self, verilog_batches):
        self.batches = verilog_batches

    def run(self, case):
        result, chips = self.batches.result(case)
        core.check_against_sim_run(case, result, chips)
        return core.from_result(case, self.level, result)


def test_the_batches_share_one_xdist_worker(request):
    """Under ``--dist loadgroup`` (``make test``) each test here carries its group in its id, which is
    how pytest-xdist keeps a group on one worker, so each config's batch runs once. A pytest whose ids
    no longer take it (9.2 with pytest-xdist 3.8, pyproject.toml) let the two workers run both
    batches, each building both models."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not an xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@verilog-cases"), request.node.nodeid

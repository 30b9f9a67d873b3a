"""Jobs of the ring co-simulation tests: the case library's Verilog-level cases and random
programs on ``Ring(cfg, 2)``, and their comparison with the simulator."""

from __future__ import annotations

import pytest

from verify.cases import library
from verify.cosim import Cosim, available, compare
from verify.fuzz import case_job, generate


def directed_and_random_jobs(cfg, first_seed: int, count: int):
    """The library's cases of ``cfg`` at the Verilog level on a 2-chip ring and ``count`` random
    programs from seed ``first_seed`` on: (the random cases, all jobs)."""
    cases = [generate(cfg, first_seed + s) for s in range(count)]
    return cases, library.verilog_jobs(cfg.name, 2) + [case_job(cfg, c) for c in cases]


def assert_ring_results_match(cfg, jobs, results, what: str = "") -> None:
    """Every job's RTL result equals the simulator's (``verify.cosim.compare``, ring mode)."""
    bad = [r for r in (compare(cfg, j, r, ring=True) for j, r in zip(jobs, results)) if r]
    assert not bad, f"{len(bad)} of {len(jobs)} jobs differ{what}; first:\n{bad[0]}"


def run_one_chip(cfg, jobs: dict, sim: str) -> dict:
    """``{name: job}`` run on one chip's Verilog under ``sim`` (``verify.cosim.Cosim``): ``{name: result}``;
    the test is skipped when the simulator is not available."""
    why = available(sim)
    if why:
        pytest.skip(f"SIM={sim}: {why}")
    return dict(zip(jobs, Cosim(cfg, 1, sim).run(list(jobs.values()))))

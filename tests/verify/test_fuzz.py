"""The random program generator alone (no HDL simulator): replayable, legal programs run clean on
the simulator, illegal ones stop with an error, and 200 seeds cover every opcode."""

from __future__ import annotations

from isa import ChipConfig
from isa.errors import ErrorCode
from verify.cosim import sim_run
from verify.fuzz import ALL_OPCODES, case_job, coverage_table, generate

TINY = ChipConfig.preset("tiny")


def test_same_seed_same_case():
    a, b = generate(TINY, 1234), generate(TINY, 1234)
    assert a.sources == b.sources and a.regs == b.regs and a.points == b.points
    assert (a.drams[0] == b.drams[0]).all()
    assert generate(TINY, 1235).sources != a.sources


def test_legal_programs_run_clean_and_illegal_ones_stop():
    points, stopped, faults = set(), 0, 0
    for seed in range(200):
        c = generate(TINY, seed)
        points |= c.points
        _, cycles, codes = sim_run(TINY, case_job(TINY, c), ring=True)
        if not c.illegal:
            assert codes == [ErrorCode.OK, ErrorCode.OK], f"seed {seed}: {codes}\n{c.sources[0]}"
        else:
            faults += 1
            stopped += any(x != ErrorCode.OK for x in codes)
    assert faults > 10 and stopped >= 0.8 * faults
    cov = coverage_table(points)
    assert cov["missing"] == []
    assert set(cov["opcodes"]) >= set(ALL_OPCODES)
    depths = set().union(*(set(e["depths"]) for e in cov["opcodes"].values()))
    assert depths == {0, 1, 2, 3, 4}

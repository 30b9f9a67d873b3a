"""The shrinker (``verify.fuzz.shrink``) on synthetic and simulator-only predicates, and the
functional coverage points (``verify.fuzz.functional_points``) on directed programs and on 200 random
ones: no HDL simulator needed."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

import sim
from isa import ChipConfig, assemble
from isa.errors import ErrorCode
from verify.cosim import sim_run
from verify.fuzz import (FUNCTIONAL, _is_instr, case_job, functional_points, functional_table, generate, host_regs,
                         host_text, shrink, source_job)

TINY = ChipConfig.preset("tiny")


def _instr(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if _is_instr(ln)]


def _mm(ln: str) -> bool:
    return ln.startswith("mxu.mm ") and "rep=" in ln and "n=" in ln


def test_shrink_keeps_exactly_what_a_synthetic_predicate_needs():
    case = next(c for c in (generate(TINY, s, illegal=False) for s in range(100))
                if any(_mm(ln) and int(ln.split("n=")[1].split(",")[0]) > 1 for ln in _instr(c.sources[0])))
    lines = _instr(case.sources[0])
    fence = next(ln for ln in lines if ln.startswith("fence"))
    calls = []

    def fails(cands):
        calls.append(len(cands))
        return [any(_mm(ln) for ln in _instr(c[0])) and fence in _instr(c[0]) for c in cands]

    assert fails([case.sources]) == [True]
    r = shrink(case.sources, fails)
    kept = _instr(r.sources[0]) + _instr(r.sources[1])
    # 1-minimal: an mxu.mm with a repeat nest and the fence, nothing else, on either chip
    assert len(kept) == 2, kept
    assert fence in kept and any(_mm(ln) for ln in kept)
    assert "n=1," in next(ln for ln in kept if _mm(ln))          # its row count lowered as far as it goes
    assert r.lines_from == len(lines) + len(_instr(case.sources[1])) and r.lines_to == 2
    assert r.rounds == len(calls) - 1 and r.tried == sum(calls) - 1


def test_shrink_an_illegal_program_on_the_simulator_alone():
    case = next(c for c in (generate(TINY, s) for s in range(200)) if c.fault == "dram_range")
    _, _, want = sim_run(TINY, case_job(TINY, case), ring=True)
    assert want[0] == ErrorCode.ADDRESS_RANGE

    def fails(cands):
        out = []
        for srcs in cands:
            job = source_job(TINY, case, srcs)
            out.append(job is not None and sim_run(TINY, job, ring=True)[2] == want)
        return out

    t = time.perf_counter()
    r = shrink(case.sources, fails)
    took = time.perf_counter() - t
    assert fails([r.sources]) == [True]
    kept = _instr(r.sources[0])
    assert [ln.split()[0] for ln in kept][:1] == ["dma.ld"] and len(kept) <= 2, kept   # the faulting load (+ halt)
    assert not re.search(r"^\s*L\d+:", r.sources[0], re.M)       # labels no instruction names are gone
    assert assemble(r.sources[0], TINY).words() == source_job(TINY, case, r.sources).progs[0]
    assert r.lines_to < r.lines_from / 5
    assert took < 30, took


def test_host_registers_shrink_with_the_program():
    """Chip 0's host registers ride along as one more text (``host_text``): cut to 0 when the failure
    does not need them, lowered as far as it goes when it does."""
    case = generate(TINY, 7, illegal=False)
    regs = {1: 3, 2: 3, 3: 5, 9: -17}
    texts = list(case.sources) + [host_text(regs)]
    assert host_regs(texts[-1]) == regs

    def fails(cands):           # needs r1 >= 2 and a halt on chip 0; nothing else
        return [host_regs(c[-1]).get(1, 0) >= 2 and "halt" in _instr(c[0]) for c in cands]
    r = shrink(texts, fails)
    assert host_regs(r.sources[-1]) == {1: 2} and _instr(r.sources[0]) == ["halt"]
    job = source_job(TINY, case, [r.sources[0], r.sources[1], r.sources[-1]])
    assert job.regs[0] == {1: 2} and job.regs[1] == case.regs[1]


def test_a_candidate_that_does_not_assemble_is_not_a_failure():
    case = generate(TINY, 3, illegal=False)
    broken = [case.sources[0] + "        jmp nowhere\n", case.sources[1]]
    assert source_job(TINY, case, broken) is None
    assert source_job(TINY, case, case.sources) is not None


def test_shrink_keeps_everything_when_no_candidate_fails():
    case = generate(TINY, 5, illegal=False)
    r = shrink(case.sources, lambda cands: [False] * len(cands))
    assert _instr(r.sources[0]) == _instr(case.sources[0]) and r.lines_to == r.lines_from


DIRECTED = """.config tiny
        seti r4, 1
        beq r4, r0, skip
        nop
skip:
        beq r0, r0, skip2
        nop
skip2:
        dma.ld spm[0], dram[0], rows=1, len=4, signal=vpu
        dma.ld spm[1], dram[3], rows=1, len=3
        vmov spm[8], spm[0], wait=load
        vmov spm[20], spm[30], n=8
        vmov spm[40], spm[50], n=8
        vmov spm[60], spm[70], n=8
        vmov spm[80], spm[90], n=8
        vmov spm[100], spm[110], n=8
        vmov spm[120], spm[130], n=8
        fence all
        halt
"""


def _points(src: str) -> set:
    p = assemble(src, TINY)
    ch = sim.Chip(TINY, trace=True)
    ch.load(p)
    ch.run(max_cycles=10_000)
    return functional_points(TINY, [p], [{}], [ch])


def test_functional_points_of_a_directed_program():
    assert TINY.dma_beat_bytes == 4 and TINY.cols >= 4        # the program's alignments assume it
    pts = _points(DIRECTED)
    for want in [("branch", "beq", "taken"), ("branch", "beq", "not_taken"), ("queue_full", "vpu"),
                 ("token_wait", "load->vpu"), ("dma", "dma.ld", "contig", "aligned", "full"),
                 ("dma", "dma.ld", "contig", "unaligned", "partial")]:
        assert want in pts, (want, pts)
    assert all(p in FUNCTIONAL for p in pts)
    # and what the program does not do is not hit
    assert not any(p[0] == "dma" and p[1] == "dma.st" for p in pts)
    assert ("queue_full", "load") not in pts and ("token_wait", "mxu->vpu") not in pts


def test_no_branch_no_queue_full_in_a_straight_program():
    pts = _points(".config tiny\n        vmov spm[8], spm[0]\n        fence all\n        halt\n")
    assert not any(p[0] in ("branch", "queue_full", "token_wait", "dma") for p in pts), pts


@pytest.mark.parametrize("count", [200])
def test_functional_coverage_of_random_programs(count):
    t = time.perf_counter()
    pts, token_modes = set(), set()
    for seed in range(count):
        c = generate(TINY, seed)
        chips, _, _ = sim_run(TINY, case_job(TINY, c), ring=True)
        pts |= functional_points(TINY, c.programs, c.regs, chips)
        token_modes |= {m for mn, _, m in c.points if mn == "token"}
    tab = functional_table(pts)
    # every token pair the generator made is a point of the universe
    assert {("token_wait", m) for m in token_modes} <= set(FUNCTIONAL)
    assert tab["hit"] + len(tab["missing"]) == tab["of"] == len(FUNCTIONAL)
    kinds = {p[0] for p in pts}
    assert kinds >= {"queue_full", "token_wait", "branch", "dma", "mem_ports"}, kinds
    # the bursts fill every unit's queue and the stores stride: every point of the universe is hit
    assert not tab["missing"], tab["missing"]
    for op in ("beq", "bne", "blt", "bge"):
        assert ("branch", op, "taken") in pts and ("branch", op, "not_taken") in pts, op
    assert time.perf_counter() - t < 60


@pytest.mark.parametrize("name", ["my-chip", "a b", "x/y", "9lives", "tiny"])
def test_model_names_are_verilog_identifiers_and_folder_names(monkeypatch, name):
    import dataclasses
    import re

    import verify.cosim as vc
    monkeypatch.setattr(vc, "available", lambda sim: None)
    cfg = dataclasses.replace(TINY, name=name)
    c = vc.Cosim(cfg, 1, "verilator", build_root=Path("/tmp/unused"))
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", c.top) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", c.hdl_top)
    assert c.dir.parent.name == "unused" and "/" not in c.dir.name
    assert (c.top == "tetrachip_tiny") == (name == "tiny")
    twin = re.sub(r"[^A-Za-z0-9_]", "_", name)                 # the name its characters map to
    if twin != name:
        assert vc.Cosim(dataclasses.replace(TINY, name=twin), 1, "verilator").top != c.top   # two names, two models


def _fake_rtl(job, done: int, error: int = 0, cycles: int = 20004) -> dict:
    spm = np.zeros((TINY.spm_rows, TINY.cols), np.int8)
    acc = np.zeros((TINY.acc_rows, TINY.cols), np.int32)
    return {"chips": [{"error": error, "done": done, "cycles": cycles, "dram": job.drams[0].copy(), "spm": spm,
                       "acc": acc, "pre_spm": spm, "pre_acc": acc, "records": []}], "bench_cycles": 20000}


def test_a_simulator_deadlock_equals_an_rtl_run_that_never_finishes():
    from verify.cosim import Job, compare, mismatch_kinds
    prog = assemble(".config tiny\n        sld r5, acc[0], 0, wait=vpu\n        halt\n", TINY)
    job = Job([prog], [np.zeros(TINY.dram_bytes, np.uint8)], [{}], 20000, 1, "deadlock")
    assert compare(TINY, job, _fake_rtl(job, done=0)) is None
    rep = compare(TINY, job, _fake_rtl(job, done=1, cycles=3))
    assert rep and "sim DEADLOCK" in rep and mismatch_kinds(rep) == {"DEADLOCK"}
    bad = _fake_rtl(job, done=0)
    bad["chips"][0]["dram"][5] = 1
    assert mismatch_kinds(compare(TINY, job, bad)) == {"DRAM"}        # the deadlock agrees, DRAM does not


def test_progress_lines_on_stderr(capsys, monkeypatch):
    import sys

    from verify.cosim import Progress
    with Progress("building x"):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "building x..." and err[1].startswith("building x: done in ") and err[1].endswith(" s")
    with pytest.raises(RuntimeError), Progress("building y"):
        raise RuntimeError("boom")
    assert "building y: failed after" in capsys.readouterr().err
    with Progress("quiet", on=False):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with Progress("ticking"):
        time.sleep(1.3)
    err = capsys.readouterr().err
    assert "\rticking... 1 s" in err and "ticking: done in 1." in err


def test_shrink_case_runs_each_round_in_one_session_and_returns_the_shrunk_report(monkeypatch):
    import verify.cosim as vc
    from verify.fuzz import shrink_case
    case = next(c for c in (generate(TINY, s, illegal=False, link=False) for s in range(50))
                if sum("vsra" in ln for ln in _instr(c.sources[0])) >= 1 and len(_instr(c.sources[0])) > 10)

    class FakeCosim:
        sessions: list = []

        def run(self, jobs):
            self.sessions.append(len(jobs))
            return [None] * len(jobs)

    def compare(cfg, job, result, ring=False):       # "mismatches" while a vsra is left on chip 0
        if any(ln.startswith("vsra") for ln in _instr(job.meta["sources"][0])):
            return f"MISMATCH {job.name} seed={job.seed} config=tiny\nSPM differs first at row 0: rtl [1] sim [2]"
        return "MISMATCH other\nrtl OK after 3 cycles, sim OK after 4 cycles"  # another kind: not kept
    monkeypatch.setattr(vc, "compare", compare)
    cs = FakeCosim()
    first = compare(TINY, case_job(TINY, case, chips=1), None)
    sh, rep = shrink_case(TINY, case, cs, chips=1, report=first)
    assert _instr(sh.sources[0]) and all(ln.startswith("vsra") for ln in _instr(sh.sources[0]))
    assert len(_instr(sh.sources[0])) == 1 and rep is not None and "SPM differs" in rep
    assert len(cs.sessions) == sh.rounds and sum(cs.sessions) <= sh.tried     # one session per round

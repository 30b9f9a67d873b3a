"""Directed co-simulation jobs: the example programs, hand-written nests/branches/errors, GEMMs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from isa import ChipConfig, assemble, assemble_file
from verify.cosim import Job
from sim.programs import gemm

ROOT = Path(__file__).resolve().parents[2]

NESTS = """
        loop l0, r1, s0=2, s1=8
        loop l1, 3, s0=1, s1=1
        loop l2, r2, s0=7, s1=5
        dma.ld spm[0], dram[0], rows=2, rstride=4, rep=l0:2, signal=vpu
        vadd spm[100], spm[0], spm[50], rep=l0:2, wait=load
        fence vpu
        mxu.lw spm[100], rep=l0:1
        mxu.mma acc[0], spm[0], n=3, rep=l2:1, sync=once, signal=store
        mxu.lw spm[104], k=2
        mxu.mm acc[40], spm[8], n=1, signal=vpu
        mxu.mm acc[41], spm[8], n=0
        dma.st dram[0x800], acc[0], rows=4, len=3, rstride=16, rep=l2:1, wait=mxu, sync=once, signal=vpu
        vqcfg shift=2, zp=-3, round=half_up
        vreq spm[200], acc[0], 77, n=3, wait=store|mxu
        vreq spm[210], acc[0], acc[40], n=2
        vlutld spm[0]
        vlut spm[220], spm[0], n=4
        vrmax acc[60], spm[0], n=2
        halt
"""

ERRORS = [
    "dma.ld spm[0], dram[0], rows=4\nfence load\nvadd spm[2], spm[0], 1, n=4\nhalt",
    "seti r1, 1\nnop\njmp 7\nhalt",
    "seti r1, 2000\nsld r2, spm[r1], 0\nhalt",
    "dma.ld spm[0], dram[8], rows=3\nfence all\ndma.ld spm[1020], dram[0], rows=8\nhalt",
    "loop l0, 300\nvmov spm[0], spm[1], rep=l0:1, signal=scalar\nhalt",
    "mxu.mm acc[250], spm[0], n=8\nhalt",
]

RING_SRC = """
        dma.ld spm[0], dram[0], rows=6, rstride=4, signal=ltx
        link.send 0, spm[0], n=6, wait=load
        link.recv 1, spm[100], n=6, signal=store
        dma.st dram[0x400], spm[100], rows=6, rstride=4, wait=lrx
        halt
"""
RING_FWD = """
        link.recv 1, spm[0], n=6, signal=ltx
        link.send 0, spm[0], n=6, wait=lrx
        halt
"""


def rand_dram(cfg, seed, n=4096):
    rng = np.random.default_rng(seed)
    d = np.zeros(cfg.dram_bytes, np.uint8)
    d[:n] = rng.integers(0, 256, n)
    return d


def chip_jobs(cfg: ChipConfig, chips: int = 1) -> list[Job]:
    """Single-chip directed jobs for ``cfg`` (tiny); on a ring the other chips halt at once."""
    halt = [assemble("halt", cfg)] * (chips - 1)
    none = [None] * (chips - 1)
    no = [{}] * (chips - 1)

    def job(prog, dram, regs, name, max_cycles=4000):
        return Job([prog] + halt, [dram] + none, [regs] + no, max_cycles, None, name)

    jobs = [job(assemble_file(ROOT / "examples/gemm_tiled.s"), rand_dram(cfg, 1, 0x800), {}, "gemm_tiled.s")]
    for n in (0, 1, 6, 13):
        jobs.append(job(assemble_file(ROOT / "examples/vector_loop.s"), rand_dram(cfg, n, 0x400), {1: n, 2: -9},
                        f"vector_loop.s N={n}"))
    for c0, c2 in ((2, 3), (0, 2), (1, 0)):
        jobs.append(job(assemble(NESTS, cfg), rand_dram(cfg, 4, 1024), {1: c0, 2: c2}, f"nests {c0},{c2}"))
    for k, src in enumerate(ERRORS):
        jobs.append(job(assemble(src, cfg), rand_dram(cfg, 5, 64), {}, f"error {k}"))
    words = assemble("seti r1, 1\nnop\nhalt", cfg).words()
    words[1] = 0xFF
    jobs.append(job(words, None, {}, "illegal word", 50))
    return jobs


def ring_jobs(cfg: ChipConfig, n: int = 2) -> list[Job]:
    progs = [assemble(RING_SRC, cfg)] + [assemble(RING_FWD, cfg) for _ in range(n - 1)]
    return [Job(progs, [rand_dram(cfg, 6, 6 * cfg.cols)] + [None] * (n - 1), [{}] * n, 2000, None, "ring pass-around")]


def gemm_jobs(cfg: ChipConfig, shapes) -> list[Job]:
    jobs = []
    for shape in shapes:
        g = gemm(*shape, cfg)
        rng = np.random.default_rng(sum(shape))
        A = rng.integers(-128, 128, shape[:2]).astype(np.int8)
        B = rng.integers(-128, 128, shape[1:]).astype(np.int8)
        dram = np.zeros(cfg.dram_bytes, np.uint8)
        dram[g.a_addr:g.a_addr + A.size] = A.view(np.uint8).reshape(-1)
        dram[g.b_addr:g.b_addr + B.size] = B.view(np.uint8).reshape(-1)
        jobs.append(Job([g.program], [dram], [{}], 200000, None, f"gemm {shape}",
                        {"A": A, "B": B, "c_addr": g.c_addr}))
    return jobs


def ring_and_random_jobs(cfg: ChipConfig, first_seed: int, count: int):
    """The 2-chip ring's directed jobs (``chip_jobs`` + ``ring_jobs``) and ``count`` random
    programs from seed ``first_seed`` on: (the random cases, all jobs)."""
    from verify.fuzz import case_job, generate  # noqa: PLC0415
    cases = [generate(cfg, first_seed + s) for s in range(count)]
    return cases, chip_jobs(cfg, 2) + ring_jobs(cfg, 2) + [case_job(cfg, c) for c in cases]


def assert_ring_results_match(cfg: ChipConfig, jobs, results, what: str = "") -> None:
    """Every job's RTL result equals the simulator's (``verify.cosim.compare``, ring mode)."""
    from verify.cosim import compare  # noqa: PLC0415
    bad = [r for r in (compare(cfg, j, r, ring=True) for j, r in zip(jobs, results)) if r]
    assert not bad, f"{len(bad)} of {len(jobs)} jobs differ{what}; first:\n{bad[0]}"

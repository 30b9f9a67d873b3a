"""Chip(tiny) under Amaranth's simulator against the cycle-level simulator (``sim``): the same
programs and DRAM images give equal total cycles, error codes, final DRAM, SPM and ACC, and the
same per-instance line trace (issue, start and retire cycle of every instance, from the RTL's
trace port). ``rtl/`` never imports ``sim``; only this test joins them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import sim
from isa import ChipConfig, assemble, assemble_file
from isa.errors import ErrorCode
from sim.programs import gemm
from chip_bench import run_chip, run_ring

pytestmark = pytest.mark.rtl
ROOT = Path(__file__).resolve().parents[2]
TINY = ChipConfig.preset("tiny")


def _sim_run(prog, dram, regs, max_cycles):
    chip = sim.Chip(TINY, trace=True)
    chip.load(prog)
    chip.write_dram(0, dram)
    chip.set_args(regs or {})
    try:
        st = chip.run(max_cycles=max_cycles)
        return chip, st.cycles, ErrorCode.OK
    except sim.SimError as e:
        return chip, e.cycle + 1, e.code


def check(prog, dram=None, regs=None, *, max_cycles=4000, code=ErrorCode.OK, memories=True):
    """Run ``prog`` on both; assert equal cycles, error code, DRAM (and SPM/ACC and line trace when
    the run completes). Returns (cycles, rtl result)."""
    if isinstance(prog, str):
        prog = assemble(prog, TINY)
    if dram is None:
        dram = np.zeros(TINY.dram_bytes, np.uint8)
    chip, cycles, err = _sim_run(prog, dram, regs, max_cycles)
    r = run_chip(prog, dram, regs, max_cycles=max_cycles + 10)
    assert err == code, f"simulator: {err!r}, expected {code!r}"
    assert (r.error, r.cycles) == (err, cycles), \
        f"rtl {ErrorCode(r.error).name} after {r.cycles} cycles, sim {err.name} after {cycles}"
    if memories:
        np.testing.assert_array_equal(r.dram, chip.dram, err_msg="DRAM differs")
    if err == ErrorCode.OK:
        np.testing.assert_array_equal(r.spm, chip.spm, err_msg="SPM differs")
        np.testing.assert_array_equal(r.acc, chip.acc, err_msg="ACC differs")
        assert r.line_trace() == chip.trace.line_trace()
    return cycles, r


def _rand_dram(seed, n=4096):
    rng = np.random.default_rng(seed)
    d = np.zeros(TINY.dram_bytes, np.uint8)
    d[:n] = rng.integers(0, 256, n)
    return d


def test_gemm_tiled_example():
    dram = _rand_dram(1, 0x800)
    cycles, r = check(assemble_file(ROOT / "examples/gemm_tiled.s"), dram)
    assert cycles == 138
    A = dram[:64].view(np.int8).reshape(8, 8).astype(np.int64)
    B = dram[0x400:0x440].view(np.int8).reshape(8, 8).astype(np.int64)
    np.testing.assert_array_equal(r.dram[0x800:0x900].view("<i4").reshape(8, 8), A @ B)


@pytest.mark.parametrize("n", [0, 1, 6, 13])
def test_vector_loop_example(n):
    """N rows from a register: y = relu(x * 3 + bias), int8."""
    dram = _rand_dram(n, 0x400)
    dram[0x800:0x900] = 0x55
    cycles, r = check(assemble_file(ROOT / "examples/vector_loop.s"), dram, {1: n, 2: -9})
    if n in (0, 6):
        assert cycles == {0: 10, 6: 100}[n]
    x = dram[:n * TINY.cols].view(np.int8).reshape(n, TINY.cols).astype(np.int64)
    want = np.clip(np.maximum(x * 3 - 9, 0), -128, 127)
    np.testing.assert_array_equal(r.dram[0x800:0x800 + x.size].view(np.int8).reshape(n, TINY.cols), want)
    assert (r.dram[0x800 + x.size:0x900] == 0x55).all()


@pytest.mark.parametrize("shape", [(8, 8, 8), (5, 6, 7)])
def test_generated_gemm(shape):
    g = gemm(*shape, "tiny")
    rng = np.random.default_rng(sum(shape))
    A = rng.integers(-128, 128, shape[:2]).astype(np.int8)
    B = rng.integers(-128, 128, shape[1:]).astype(np.int8)
    dram = np.zeros(TINY.dram_bytes, np.uint8)
    dram[g.a_addr:g.a_addr + A.size] = A.view(np.uint8).reshape(-1)
    dram[g.b_addr:g.b_addr + B.size] = B.view(np.uint8).reshape(-1)
    _, r = check(g.program, dram, max_cycles=20000)
    C = r.dram[g.c_addr:g.c_addr + 4 * A.shape[0] * B.shape[1]].view("<i4").reshape(A.shape[0], B.shape[1])
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


BRANCHES = """
        seti r1, 0               ; i
        seti r2, 5               ; rows
        seti r3, 0               ; acc row
        dma.ld acc[0], dram[0], rows=8, signal=vpu
again:  vadd acc[r3+20], acc[r3], r1, wait=load, signal=scalar
        sld  r4, acc[r3+20], 1, wait=vpu
        blt  r4, r0, neg
        sst  r4, spm[r3+40], 0
        jmp  next
neg:    sub  r4, r0, r4
        sst  r4, spm[r3+40], 1
next:   addi r3, r3, 1
        addi r1, r1, 3
        bne  r3, r2, again
        fence vpu
        loop l0, r2, s0=1, s1=16
        dma.st dram[0x400], acc[20], rep=l0:1
        loop l1, 0
        dma.st dram[0x600], spm[40], rep=l1:1, sync=once, signal=scalar
        sld  r5, spm[40], 0, wait=store
        halt
"""


def test_branches_tokens_and_zero_trips():
    check(BRANCHES.replace("rows=8, signal=vpu", "rows=8, signal=vpu\n        loop l3, 5\n"
                           "        dma.ld acc[100], dram[0], rep=l3:1, signal=vpu"), _rand_dram(3, 256))


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


@pytest.mark.parametrize("c0,c2", [(2, 3), (0, 2), (1, 0)])
def test_repeat_nests_sync_and_mxu_timing(c0, c2):
    check(NESTS, _rand_dram(4, 1024), {1: c0, 2: c2})


@pytest.mark.parametrize("src,code,memories", [
    ("dma.ld spm[0], dram[0], rows=4\nfence load\nvadd spm[2], spm[0], 1, n=4\nhalt", ErrorCode.OVERLAP, True),
    ("seti r1, 1\nnop\njmp 7\nhalt", ErrorCode.PC_RANGE, True),
    ("seti r1, 2000\nsld r2, spm[r1], 0\nhalt", ErrorCode.ADDRESS_RANGE, True),
    ("dma.ld spm[0], dram[8], rows=3\nfence all\ndma.ld spm[1020], dram[0], rows=8\nhalt",
     ErrorCode.ADDRESS_RANGE, True),
    ("loop l0, 300\nmxu.lw spm[0], k=0, rep=l0:1, signal=scalar\nhalt", ErrorCode.TOKEN_OVERFLOW, True),
    ("mxu.mm acc[250], spm[0], n=8\nhalt", ErrorCode.ADDRESS_RANGE, True),
    # a trip count register reads as unsigned 32-bit: -1 is 2**32 - 1 instances (the third is out of range)
    ("seti r1, -1\nloop l0, r1, s0=600\nvmov spm[0], spm[700], n=2, rep=l0:1\nhalt", ErrorCode.ADDRESS_RANGE, True),
])
def test_errors(src, code, memories):
    check(src, _rand_dram(5, 64), code=code, memories=memories)


def test_illegal_word():
    good = assemble("seti r1, 1\nnop\nhalt", TINY)
    words = good.words()
    words[1] = 0xFF

    class Bad:
        config = TINY
        instructions = []

        def words(self):
            return words

    code = b"".join(w.to_bytes(24, "little") for w in words)
    chip = sim.Chip(TINY)
    chip.load(code)
    with pytest.raises(sim.SimError) as e:
        chip.run()
    r = run_chip(Bad(), max_cycles=50)
    assert (r.error, r.cycles) == (e.value.code, e.value.cycle + 1) == (ErrorCode.ILLEGAL_INSTRUCTION, 2)


RING_SRC = """
        dma.ld spm[0], dram[0], rows=6, rstride=4, signal=ltx|scalar
        link.send 0, spm[0], n=6, wait=load
        link.send 1, spm[0], n=0, signal=scalar
        sld r1, spm[0], 0, wait=ltx
        link.recv 1, spm[100], n=6, signal=store
        dma.st dram[0x400], spm[100], rows=6, rstride=4, wait=lrx
        halt
"""
RING_FWD = """
        link.recv 1, spm[0], n=6, signal=ltx
        link.send 0, spm[0], n=6, wait=lrx
        halt
"""


@pytest.mark.parametrize("n", [2])
def test_ring_passes_a_block_around(n):
    """Chip 0 sends a block to chip 1, which forwards it ... back to chip 0 (sim.System vs Ring)."""
    progs = [assemble(RING_SRC.replace("signal=ltx|scalar", "signal=ltx"), TINY)] + \
        [assemble(RING_FWD, TINY) for _ in range(n - 1)]
    data = _rand_dram(6, 6 * TINY.cols)
    system = sim.System(TINY, n, trace=True)
    for i, p in enumerate(progs):
        system.load(i, p)
    system[0].write_dram(0, data)
    stats = system.run()
    rs = run_ring(progs, [data] + [None] * (n - 1), max_cycles=2000)
    assert [r.error for r in rs] == [0] * n
    assert [r.cycles for r in rs] == [s.cycles for s in stats]
    for r, ch in zip(rs, system.chips):
        np.testing.assert_array_equal(r.dram, ch.dram)
        np.testing.assert_array_equal(r.spm, ch.spm)
    got = rs[0].dram[0x400:0x400 + 6 * TINY.cols]
    np.testing.assert_array_equal(got, data[:6 * TINY.cols])
    tr = sim.Trace()
    for r in rs:
        tr.records += r.trace().records
    assert tr.line_trace() == system.trace.line_trace()


def test_link_mismatch():
    src = "dma.ld acc[0], dram[0], rows=2, signal=ltx\nlink.send 0, acc[0], n=2, wait=load\n" \
          "link.recv 1, spm[10], n=2\nhalt"
    prog = assemble(src, TINY)
    system = sim.System(TINY, 1)
    system.load(0, prog)
    with pytest.raises(sim.SimError) as e:
        system.run()
    r = run_chip(prog, _rand_dram(7, 64), loopback=True, max_cycles=500)
    assert (r.error, r.cycles) == (e.value.code, e.value.cycle + 1)
    assert r.error == ErrorCode.LINK_MISMATCH


FUZZ_COUNT = int(os.environ.get("TETRACHIP_RTL_FUZZ", "3"))


@pytest.mark.parametrize("seed", range(FUZZ_COUNT))
def test_random_programs(seed):
    """Constrained-random single-chip programs (``verify.fuzz``, the co-simulation generator):
    every unit, repeat nests, register trip counts, tokens, fences, branches, faults. Programs the
    simulator stops with a diagnostic the RTL does not make (RACE, DEADLOCK) are not compared."""
    from verify.fuzz import generate
    case = generate(TINY, 1000 + seed, link=False)
    if case.fault == "reserved":
        pytest.skip("reserved-word faults are patched into the binary (covered by test_illegal_word)")
    prog = assemble(case.sources[0], TINY)
    chip, cycles, err = _sim_run(prog, case.drams[0], case.regs[0], 6000)
    if err in (ErrorCode.RACE, ErrorCode.DEADLOCK, ErrorCode.CYCLE_LIMIT):
        pytest.skip(f"simulator diagnostic {err.name}")
    check(prog, case.drams[0], case.regs[0], max_cycles=6000, code=err, memories=err == ErrorCode.OK)


def test_second_weight_load_before_a_matmul_replaces_the_first():
    """Two mxu.lw in a row (the second partial): the mm uses the second tile, rows k.. zero."""
    cycles, r = check("""
        dma.ld spm[100], dram[0], rows=8, rstride=4
        dma.ld spm[8], dram[64], rows=1
        fence load
        mxu.lw spm[100]
        mxu.lw spm[104], k=2
        mxu.mm acc[40], spm[8], n=1
        fence all
        dma.st dram[0x800], acc[40], rows=1
        halt""", _rand_dram(11))
    d = _rand_dram(11)
    w = d[16:24].view(np.int8).reshape(2, 4).astype(np.int64)   # SPM rows 104, 105
    x = d[64:66].view(np.int8).astype(np.int64)                  # lanes 0, 1 of SPM row 8
    want = (x @ w).astype(np.int32)
    np.testing.assert_array_equal(r.dram[0x800:0x810].view(np.int32), want)

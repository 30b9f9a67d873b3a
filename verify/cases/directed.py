"""Directed cases: the example programs, hand-written nests, branches, tokens and errors, the
scalar unit's timing, strided DMA with requantization, links (a ring, a chip looped back on itself),
generated GEMMs on ``tiny`` and ``small``, and constrained-random programs (``verify.fuzz``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from isa import assemble, assemble_file
from isa import semantics as sem
from isa.errors import ErrorCode

from .core import RTL, Case, Expect, Setup, one, rand_dram

ROOT = Path(__file__).resolve().parents[2]


def _gemm_tiled(cfg) -> Setup:
    dram = rand_dram(cfg, 1, 0x800)
    A = dram[:64].view(np.int8).reshape(8, 8).astype(np.int64)
    B = dram[0x400:0x440].view(np.int8).reshape(8, 8).astype(np.int64)
    return Setup(cfg, [assemble_file(ROOT / "examples/gemm_tiled.s", cfg)], [dram], [{}],
                 Expect(dram=[(0x800, (A @ B).astype("<i4").view(np.uint8).reshape(-1))]))


def _vector_loop(n: int):
    """N rows from a register: y = relu(x * 3 + bias), int8; the bytes after y are untouched."""
    def build(cfg):
        dram = rand_dram(cfg, n, 0x400)
        dram[0x800:0x900] = 0x55
        x = dram[:n * cfg.cols].view(np.int8).reshape(n, cfg.cols).astype(np.int64)
        y = np.clip(np.maximum(x * 3 - 9, 0), -128, 127).astype(np.int8)
        out = np.full(0x100, 0x55, np.uint8)
        out[:y.size] = y.view(np.uint8).reshape(-1)
        return Setup(cfg, [assemble_file(ROOT / "examples/vector_loop.s", cfg)], [dram], [{1: n, 2: -9}],
                     Expect(dram=[(0x800, out)]))
    # N=6: 18 VPU instances of one row, back to back, each holding the VPU 1 + VPU_LATENCY (4) cycles
    return Case(f"vector_loop.s-N{n}", build, cycles={0: 10, 6: 118}.get(n))


def _gemm(shape, config: str) -> Case:
    """``sim.programs.gemm``: C = A @ B, int8 in, int32 out, A and B random."""
    def build(cfg):
        from sim.programs import gemm
        g = gemm(*shape, cfg)
        rng = np.random.default_rng(sum(shape))
        A = rng.integers(-128, 128, shape[:2]).astype(np.int8)
        B = rng.integers(-128, 128, shape[1:]).astype(np.int8)
        dram = np.zeros(cfg.dram_bytes, np.uint8)
        dram[g.a_addr:g.a_addr + A.size] = A.view(np.uint8).reshape(-1)
        dram[g.b_addr:g.b_addr + B.size] = B.view(np.uint8).reshape(-1)
        C = (A.astype(np.int64) @ B.astype(np.int64)).astype("<i4")
        return Setup(cfg, [g.program], [dram], [{}], Expect(dram=[(g.c_addr, C.view(np.uint8).reshape(-1))]))
    name = "gemm-" + "x".join(map(str, shape)) + ("" if config == "tiny" else f"-{config}")
    return Case(name, build, config=config, max_cycles=20000 if config == "tiny" else 200000)


BRANCHES = """
        seti r1, 0               ; i
        seti r2, 5               ; rows
        seti r3, 0               ; acc row
        dma.ld acc[0], dram[0], rows=8, signal=vpu
        loop l3, 5
        dma.ld acc[100], dram[0], rep=l3:1, signal=vpu
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


def _src(src: str, seed: int, n: int, regs=None, code=ErrorCode.OK, expect=None):
    return lambda cfg: one(cfg, src, rand_dram(cfg, seed, n), regs, expect, code)


#: (name, program, error code); DRAM: 64 random bytes
ERRORS = [
    ("error-overlap-after-load", "dma.ld spm[0], dram[0], rows=4\nfence load\nvadd spm[2], spm[0], 1, n=4\nhalt",
     ErrorCode.OVERLAP),
    ("error-overlap", "vadd spm[1], spm[0], 1, n=4\nhalt", ErrorCode.OVERLAP),
    ("error-jump-beyond-program", "seti r1, 1\nnop\njmp 7\nhalt", ErrorCode.PC_RANGE),
    ("error-jump-to-end", "seti r1, 1\njmp 5\nhalt", ErrorCode.PC_RANGE),
    ("error-sld-row", "seti r1, 2000\nsld r2, spm[r1], 0\nhalt", ErrorCode.ADDRESS_RANGE),
    ("error-dma-spm-rows-after-load",
     "dma.ld spm[0], dram[8], rows=3\nfence all\ndma.ld spm[1020], dram[0], rows=8\nhalt", ErrorCode.ADDRESS_RANGE),
    ("error-dma-spm-rows", "dma.ld spm[1020], dram[0], rows=8\nhalt", ErrorCode.ADDRESS_RANGE),
    ("error-dma-dram-bytes", "dma.ld spm[0], dram[65530], rows=2, rstride=4\nhalt", ErrorCode.ADDRESS_RANGE),
    ("error-token-overflow-mxu", "loop l0, 300\nmxu.lw spm[0], k=0, rep=l0:1, signal=scalar\nhalt",
     ErrorCode.TOKEN_OVERFLOW),
    ("error-token-overflow-vpu", "loop l0, 300\nvmov spm[0], spm[1], rep=l0:1, signal=scalar\nhalt",
     ErrorCode.TOKEN_OVERFLOW),
    ("error-mm-acc-rows", "mxu.mm acc[250], spm[0], n=8\nhalt", ErrorCode.ADDRESS_RANGE),
    # a trip count register reads as unsigned 32-bit: -1 is 2**32 - 1 instances (the third is out of range)
    ("error-trip-count-unsigned", "seti r1, -1\nloop l0, r1, s0=600\nvmov spm[0], spm[700], n=2, rep=l0:1\nhalt",
     ErrorCode.ADDRESS_RANGE),
]


def _illegal_word(cfg) -> Setup:
    """A word whose opcode the table lacks, fetched second: ILLEGAL_INSTRUCTION after 2 cycles."""
    words = assemble("seti r1, 1\nnop\nhalt", cfg).words()
    words[1] = 0xFF
    return Setup(cfg, [words], [None], [{}], code=ErrorCode.ILLEGAL_INSTRUCTION)


def _second_weight_load(cfg) -> Setup:
    """Two mxu.lw in a row (the second partial): the mm uses the second tile, rows k.. zero."""
    d = rand_dram(cfg, 11)
    w = d[16:24].view(np.int8).reshape(2, 4).astype(np.int64)    # SPM rows 104, 105
    x = d[64:66].view(np.int8).astype(np.int64)                   # lanes 0, 1 of SPM row 8
    want = (x @ w).astype("<i4")
    return one(cfg, """
        dma.ld spm[100], dram[0], rows=8, rstride=4
        dma.ld spm[8], dram[64], rows=1
        fence load
        mxu.lw spm[100]
        mxu.lw spm[104], k=2
        mxu.mm acc[40], spm[8], n=1
        fence all
        dma.st dram[0x800], acc[40], rows=1
        halt""", d, expect=Expect(dram=[(0x800, want.view(np.uint8))]))


def _ports(cfg) -> Setup:
    """sst (one lane, merged with the rest of the row) after a DMA load of the same row, then a
    VPU write over it: the row read back comes from the port that wrote it last (with LVT
    memories, from that port's bank)."""
    dram = np.arange(cfg.dram_bytes, dtype=np.uint64).astype(np.uint8)
    return one(cfg, """
        seti r1, -77
        dma.ld spm[10], dram[64], rows=2, len=4, rstride=4, signal=scalar
        sst r1, spm[10], 2, wait=load
        sst r1, acc[3], 1
        vadd acc[4], spm[10], spm[11], n=1
        fence all
        vmov spm[11], acc[4], n=1
        fence all
        halt
    """, dram, expect=Expect(rows=[("spm", 10, [64, 65, -77, 67]), ("acc", 4, [64 + 68, 65 + 69, -77 + 70, 67 + 71]),
                                   ("spm", 11, [127, 127, -7, 127])], check=_acc3))


def _acc3(o) -> None:
    """``sst r1, acc[3], 1`` wrote lane 1; the other lanes keep what the row held at the start."""
    want = o.acc0[3].copy()
    want[1] = -77
    assert o.acc[3].tolist() == want.tolist(), f"ACC row 3: {o.acc[3].tolist()}, expected {want.tolist()}"


def _scalar_timing(cfg) -> Setup:
    """8 issues before the loop with one taken beq (+1 bubble) and one sld (+1: ``SLD_PENALTY``);
    the loop: 3 addi + 3 bne, two taken (+2); halt issues at cycle 18, so the run takes 19 cycles."""
    return one(cfg, """
        seti r1, 5
        seti r2, 7
        add  r3, r1, r2
        beq  r1, r1, skip
        seti r3, 99
skip:   addi r4, r3, -20
        sst  r4, spm[3], 2
        sld  r5, spm[3], 2
        seti r6, 3
again:  addi r6, r6, -1
        bne  r6, r0, again
        halt
    """, expect=Expect(regs=dict(enumerate([0, 5, 7, 12, -8, -8, 0])),
                       check=lambda o: _lane(o.spm, 3, 2, -8)))


def _forwarding(cfg) -> Setup:
    """Every instruction reads a register that the one just before it wrote, in each role the
    issue stage reads one (ALU operands, an ``sld`` result, a ``loop`` count, a slot's index
    register, a ``vbin`` register operand, a branch compare, an ``sst`` value and row): the RTL's
    decode stage reads registers a cycle before they issue and must forward the result being
    written. The registers end up in ACC rows 12 and 13, so every level compares them."""
    return one(cfg, """
        seti r1, 3
        addi r2, r1, 4
        add  r3, r1, r2
        sst  r3, spm[r1+2], 1
        sld  r4, spm[5], 1
        addi r5, r4, -8
        loop l0, r5, s0=1, s1=4
        seti r6, 8
        dma.ld spm[r6+0], dram[0], rows=1, len=4, rep=l0:1, signal=vpu
        seti r7, 1
        vadd spm[20], spm[r6+0], r7, wait=load
        seti r8, 2
        beq  r8, r5, same
        seti r9, 99
same:   sub  r9, r8, r5
        bne  r9, r0, bad
        sld  r10, spm[5], 1
        bne  r10, r3, bad
        sld  r11, spm[5], 1
        sst  r11, spm[r11+0], 0
        fence all
        sst  r2, acc[12], 0
        sst  r3, acc[12], 1
        sst  r5, acc[12], 2
        sst  r9, acc[12], 3
        sst  r4, acc[13], 0
        sst  r7, acc[13], 1
        sst  r10, acc[13], 2
        sst  r11, acc[13], 3
        halt
bad:    seti r12, 1
        sst  r12, acc[12], 3
        halt
    """, dram=rand_dram(cfg, 2, 0x40), expect=Expect(
        rows=[("acc", 12, [7, 10, 2, 0]), ("acc", 13, [10, 1, 10, 10])],
        regs={2: 7, 3: 10, 4: 10, 5: 2, 8: 2, 9: 0, 11: 10, 12: 0},
        check=lambda o: (_lane(o.spm, 5, 1, 10), _lane(o.spm, 10, 0, 10))))


def _lane(mem, row, lane, want):
    assert mem[row][lane] == want, f"row {row} lane {lane}: {mem[row][lane]}, expected {want}"


def _dma_strided_requantize(cfg) -> Setup:
    """Strided/element-wise DMA into ACC and back, mxu.lw with k < rows and mma, vreq with a row
    scale; the expectation from ``isa.semantics``."""
    cols, R = cfg.cols, cfg.rows
    rng = np.random.default_rng(9)
    dram = np.zeros(cfg.dram_bytes, np.uint8)
    dram[:cfg.dram_bytes // 16] = rng.integers(0, 256, cfg.dram_bytes // 16)
    acc0 = sem.dma_gather(dram, 3, 5, 3, 20, 6, 1, cols)
    w = sem.load_weights(sem.dma_gather(dram, 100, 3, cols, 7, 1, 0, cols), 3, R, cols)
    xs = sem.dma_gather(dram, 200, 6, 2, 5, 3, 0, cols)
    c = sem.matmul_acc(sem.matmul_rows(xs, w), xs, w)
    q = sem.requantize(c, sem.scale16(acc0[0]), 3, 5, -100, 90, 2)
    want = sem.dma_scatter(dram, q, 0x2000, cols, 9, 2, 0)
    want = sem.dma_scatter(want, acc0, 0x3000, cols, 16, 4, 1)
    return one(cfg, f"""
        dma.ld  acc[0], dram[3], rows=5, len=3, rstride=20, estride=6, signal=vpu
        dma.ld  spm[10], dram[100], rows=3, len={cols}, rstride=7, signal=mxu
        dma.ld  spm[20], dram[200], rows=6, len=2, rstride=5, estride=3, signal=mxu
        mxu.lw  spm[10], k=3, wait=load
        mxu.mm  acc[20], spm[20], n=6, wait=load
        mxu.mma acc[20], spm[20], n=6, signal=vpu
        vqcfg   shift=3, zp=5, lo=-100, hi=90, round=half_even
        vreq    spm[40], acc[20], acc[0], n=6, wait=mxu|load, signal=store
        dma.st  dram[0x2000], spm[40], rows=6, len={cols}, rstride=9, estride=2, wait=vpu
        dma.st  dram[0x3000], acc[0], rows=5, rstride=16, signal=scalar
        sld     r1, acc[2], 1, wait=store
        halt
    """, dram, expect=Expect(rows=[("acc", 0, acc0), ("acc", 20, c), ("spm", 40, q)], dram=[(0, want)],
                             regs={1: int(acc0[2][1])}))


RING_SRC = """
        dma.ld spm[0], dram[0], rows=6, rstride=4, signal=ltx
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


def _ring(n: int):
    """Chip 0 sends a block to chip 1, which forwards it ... back to chip 0."""
    def build(cfg):
        data = rand_dram(cfg, 6, 6 * cfg.cols)
        block = data[:6 * cfg.cols].copy()
        return Setup(cfg, [assemble(RING_SRC, cfg)] + [assemble(RING_FWD, cfg) for _ in range(n - 1)],
                     [data] + [None] * (n - 1), [{}] * n, Expect(dram=[(0x400, block)]))
    return Case(f"ring{n}-pass-around", build, topology="ring", max_cycles=2000)


def _link_mismatch(cfg) -> Setup:
    """ACC rows sent, SPM rows expected: LINK_MISMATCH (one chip, port 0 looped back to port 1)."""
    return one(cfg, "dma.ld acc[0], dram[0], rows=2, signal=ltx\nlink.send 0, acc[0], n=2, wait=load\n"
                    "link.recv 1, spm[10], n=2\nhalt", rand_dram(cfg, 7, 64), code=ErrorCode.LINK_MISMATCH)


def _loopback_lut_reduce(cfg) -> Setup:
    """SPM and ACC rows cross the link (credits, flits); then vlutld/vlut and a lane reduction on
    what arrived; the expectation from ``isa.semantics``."""
    cols = cfg.cols
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (12, cols)).astype(np.int8)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    dram = np.zeros(cfg.dram_bytes, np.uint8)
    dram[:x.size] = x.view(np.uint8).reshape(-1)
    dram[0x400:0x500] = table.view(np.uint8)
    return one(cfg, f"""
        dma.ld   spm[0], dram[0], rows=12, rstride={cols}, signal=ltx
        dma.ld   spm[100], dram[0x400], rows={256 // cols}, rstride={cols}, signal=vpu
        link.send 0, spm[0], n=12, wait=load
        link.recv 1, spm[200], n=12, signal=vpu
        vlutld   spm[100], wait=load
        vlut     spm[300], spm[200], n=12, wait=lrx
        vmov     acc[0], spm[200], n=12, signal=ltx
        link.send 0, acc[0], n=12, wait=vpu
        link.recv 1, acc[50], n=12, signal=vpu
        vrsum    acc[100], acc[50], n=12, wait=lrx
        halt
    """, dram, expect=Expect(rows=[("spm", 200, x), ("spm", 300, sem.vpu_unary("vlut", x, 0, lut_table=table)),
                                   ("acc", 50, x.astype(np.int32)), ("acc", 100, sem.vpu_unary("vrsum", x, 1))]))


def _random(seed: int) -> Case:
    """A constrained-random single-chip program (``verify.fuzz``): every unit, repeat nests,
    register trip counts, tokens, fences, branches, faults; the simulator says how it ends."""
    def build(cfg):
        from verify.fuzz import case_job, generate
        job = case_job(cfg, generate(cfg, seed, link=False), max_cycles=6000, chips=1)
        return Setup(cfg, job.progs, job.drams, job.regs, code=None)
    return Case(f"random-{seed}", build, max_cycles=6000, levels=(RTL,))


#: random programs at the RTL level (``TETRACHIP_RTL_FUZZ``, default 3; the Verilog level runs
#: hundreds in ``tests/cosim``)
RANDOM_COUNT = int(os.environ.get("TETRACHIP_RTL_FUZZ", "3"))

CASES: tuple[Case, ...] = (
    Case("gemm_tiled.s", _gemm_tiled, cycles=138),
    *[_vector_loop(n) for n in (0, 1, 6, 13)],
    _gemm((8, 8, 8), "tiny"), _gemm((5, 6, 7), "tiny"),
    *[_gemm(s, "small") for s in ((8, 8, 8), (16, 24, 16), (5, 13, 11))],
    Case("branches-tokens-zero-trips", _src(BRANCHES, 3, 256)),
    *[Case(f"nests-{c0}-{c2}", _src(NESTS, 4, 1024, {1: c0, 2: c2})) for c0, c2 in ((2, 3), (0, 2), (1, 0))],
    *[Case(name, _src(src, 5, 64, code=code)) for name, src, code in ERRORS],
    Case("illegal-word", _illegal_word, cycles=2, max_cycles=50),
    Case("second-weight-load", _second_weight_load),
    Case("rows-written-by-several-ports", _ports),
    Case("scalar-unit-branch-timing", _scalar_timing, cycles=19),
    Case("front-end-forwarding", _forwarding),
    Case("dma-strided-requantize", _dma_strided_requantize, max_cycles=3000),
    _ring(2),
    Case("link-mismatch", _link_mismatch, topology="loopback", max_cycles=500),
    Case("link-loopback-lut-reduce", _loopback_lut_reduce, topology="loopback", max_cycles=3000),
    *[_random(1000 + s) for s in range(RANDOM_COUNT)],
)

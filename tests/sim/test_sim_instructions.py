"""Every instruction on the simulator against a plain numpy/Python definition written here.

Each test assembles a small program for the ``tiny`` config (4x4 array, 4 lanes), fills memories
with random data, runs it, and compares with an expectation computed element by element.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from isa.table import INSTRUCTIONS
from sim import Chip
from sim.handlers import HANDLERS

CFG = "tiny"
L = 4          # lanes (cols) of tiny
R = 4          # array rows of tiny


def run(src: str, setup=None, args=None, **kw) -> Chip:
    chip = Chip(CFG, **kw)
    chip.load(src if src.endswith("halt\n") else src + "\nhalt\n")
    if setup:
        setup(chip)
    if args:
        chip.set_args(args)
    chip.run(max_cycles=1_000_000)
    return chip


def w32(v: int) -> int:
    v %= 1 << 32
    return v - (1 << 32) if v >= 1 << 31 else v


def sat8(v: int) -> int:
    return max(-128, min(127, v))


RNG = np.random.default_rng(12345)


def test_every_instruction_has_a_handler():
    issue_stage = {"sld", "sst", "fence", "halt"}
    for ins in INSTRUCTIONS:
        assert (HANDLERS[ins.mnemonic] is None) == (ins.mnemonic in issue_stage), ins.mnemonic


# ----------------------------------------------------------------------------- scalar
ALU = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
       "sll": lambda a, b: (a % 2**32) << (b % 32), "srl": lambda a, b: (a % 2**32) >> (b % 32),
       "sra": lambda a, b: a >> (b % 32), "slt": lambda a, b: int(a < b)}


@pytest.mark.parametrize("op", sorted(ALU))
def test_alu(op):
    pairs = [(7, 3), (-5, 2), (0x7FFFFFFF, 1), (-(1 << 31), 33), (123456789, -987654)]
    src = []
    for i, (a, b) in enumerate(pairs):
        src += [f"seti r1, {a}", f"seti r2, {b}", f"{op} r{3 + i}, r1, r2"]
    chip = run("\n".join(src))
    for i, (a, b) in enumerate(pairs):
        assert chip.regs[3 + i] == w32(ALU[op](a, b)), (op, a, b)


def test_seti_addi_r0_and_nop():
    chip = run("seti r1, -7\naddi r2, r1, 0x7FFFFFFF\nseti r0, 5\naddi r3, r0, 9\nnop")
    assert chip.regs[1] == -7 and chip.regs[2] == w32(-7 + 0x7FFFFFFF)
    assert chip.regs[0] == 0 and chip.regs[3] == 9


@pytest.mark.parametrize("op,a,b", [("beq", 3, 3), ("beq", 3, 4), ("bne", 3, 4), ("bne", 4, 4),
                                     ("blt", -2, 1), ("blt", 1, -2), ("bge", 5, 5), ("bge", -9, 0)])
def test_branches(op, a, b):
    taken = {"beq": a == b, "bne": a != b, "blt": a < b, "bge": a >= b}[op]
    chip = run(f"seti r1, {a}\nseti r2, {b}\n{op} r1, r2, skip\nseti r3, 1\nskip: seti r4, 1\nhalt\n")
    assert chip.regs[3] == (0 if taken else 1) and chip.regs[4] == 1


def test_jmp_and_scalar_loop():
    chip = run("seti r1, 0\nseti r2, 10\ntop: addi r1, r1, 3\naddi r5, r5, 1\nblt r5, r2, top\n"
               "jmp end\nseti r1, 999\nend: halt\n")
    assert chip.regs[1] == 30


def test_sld_sst():
    def setup(c):
        c.write_spm(5, [1, -2, 3, -128])
        c.write_acc(7, [10, -20, 1 << 30, -(1 << 31)])
    chip = run("sld r1, spm[5], 3\nsld r2, acc[7], 3\nseti r3, 300\nsst r3, spm[6], 1\n"
               "seti r4, -70000\nsst r4, acc[8], 2\nseti r9, 2\nsld r5, spm[3+r9], 1\nsst r4, spm[6], 2", setup)
    assert chip.regs[1] == -128 and chip.regs[2] == -(1 << 31) and chip.regs[5] == -2
    assert chip.spm[6, 1] == 127 and chip.spm[6, 2] == -128 and chip.acc[8, 2] == -70000


# ----------------------------------------------------------------------------- DMA + repeat depths
def _nest(counts):
    return itertools.product(*[range(c) for c in counts])


@pytest.mark.parametrize("depth", [0, 1, 2, 3, 4])
def test_dma_load_every_repeat_depth(depth):
    counts = [2, 3, 2, 2][:depth]
    # strides: slot 0 = SPM rows, slot 1 = DRAM bytes; chosen so no two instances share a row
    s_rows = [24, 8, 4, 2][:depth]
    s_dram = [200, 64, 16, 5][:depth]
    dram = RNG.integers(-128, 128, 4096, dtype=np.int8)
    loops = "\n".join(f"loop l{j}, {c}, s0={s_rows[j]}, s1={s_dram[j]}" for j, c in enumerate(counts))
    rep = f", rep=l0:{depth}" if depth else ""
    chip = run(f"{loops}\ndma.ld spm[3], dram[100], rows=2, len=3, rstride=9{rep}",
               lambda c: c.write_dram(0, dram))
    want = np.zeros((1024, L), np.int8)
    for idx in _nest(counts):
        row = 3 + sum(i * s for i, s in zip(idx, s_rows))
        d = 100 + sum(i * s for i, s in zip(idx, s_dram))
        for r in range(2):
            for e in range(3):
                want[row + r, e] = dram[d + r * 9 + e]
    assert (chip.spm == want).all()
    assert chip.stats.instances["load"] == int(np.prod(counts)) if depth else 1


def test_trip_count_from_register_is_snapshotted_at_loop_issue():
    dram = RNG.integers(-128, 128, 512, dtype=np.int8)
    # r1 holds N (a host argument); changing r1 after `loop` does not change the nest
    src = "loop l0, r1, s0=1, s1=4\nseti r1, 1\ndma.ld spm[0], dram[0], rep=l0:1"
    for n in (0, 1, 5, 17):
        chip = run(src, lambda c: c.write_dram(0, dram), args={1: n})
        assert (chip.spm[:n] == dram[:4 * n].reshape(n, 4)).all()
        assert (chip.spm[n:] == 0).all()
        assert chip.stats.instances["load"] == n


def test_index_registers_and_snapshot_at_issue():
    dram = RNG.integers(-128, 128, 512, dtype=np.int8)
    chip = run("seti r2, 40\nseti r3, 7\ndma.ld spm[1+r3], dram[8+r2], rows=2, rstride=4\nseti r3, 100\nseti r2, 0",
               lambda c: c.write_dram(0, dram))
    assert (chip.spm[8:10] == dram[48:56].reshape(2, 4)).all()


@pytest.mark.parametrize("space", ["spm", "acc"])
def test_dma_store_and_acc_elements(space):
    eb = 4 if space == "acc" else 1
    dt = np.int32 if eb == 4 else np.int8
    data = RNG.integers(-(1 << 31) if eb == 4 else -128, (1 << 31) - 1 if eb == 4 else 127, (3, L)).astype(dt)

    def setup(c):
        (c.write_acc if eb == 4 else c.write_spm)(10, data)
    # store lanes 0..2 of 3 rows with a row stride of 40 bytes and an element stride of 2*eb
    chip = run(f"dma.st dram[64], {space}[10], rows=3, len=3, rstride=40, estride={2 * eb}, signal=load\n"
               f"dma.ld {space}[20], dram[64], rows=3, len=3, rstride=40, estride={2 * eb}, wait=store", setup)
    raw = chip.dram
    for r in range(3):
        for e in range(3):
            a = 64 + r * 40 + e * 2 * eb
            assert int.from_bytes(bytes(raw[a:a + eb]), "little", signed=True) == data[r, e]
    back = (chip.acc if eb == 4 else chip.spm)[20:23]
    assert (back[:, :3] == data[:, :3]).all() and (back[:, 3] == 0).all()


# ----------------------------------------------------------------------------- MXU
@pytest.mark.parametrize("k", [1, 3, 4])
def test_mxu_lw_mm_mma(k):
    W = RNG.integers(-128, 128, (R, L), dtype=np.int8)
    X = RNG.integers(-128, 128, (6, L), dtype=np.int8)
    acc0 = RNG.integers(-1000, 1000, (6, L), dtype=np.int32)

    def setup(c):
        c.write_spm(0, W)
        c.write_spm(10, X)
        c.write_acc(20, acc0)
        c.write_acc(40, acc0)
    chip = run(f"mxu.lw spm[0], k={k}\nmxu.mm acc[40], spm[10], n=6\nmxu.mma acc[20], spm[10], n=6", setup)
    Wk = W.astype(np.int64).copy()
    Wk[k:] = 0
    prod = X[:, :R].astype(np.int64) @ Wk
    assert (chip.acc[40:46] == prod).all()
    assert (chip.acc[20:26] == acc0 + prod).all()
    assert chip.stats.mxu_macs == 2 * 6 * k * L


def test_mxu_double_buffer_uses_weights_in_program_order():
    W1 = RNG.integers(-128, 128, (R, L), dtype=np.int8)
    W2 = RNG.integers(-128, 128, (R, L), dtype=np.int8)
    X = RNG.integers(-128, 128, (3, L), dtype=np.int8)

    def setup(c):
        c.write_spm(0, W1)
        c.write_spm(4, W2)
        c.write_spm(8, X)
    chip = run("mxu.lw spm[0]\nmxu.mm acc[0], spm[8], n=3\nmxu.lw spm[4]\nmxu.mm acc[3], spm[8], n=3\n"
               "mxu.mm acc[6], spm[8], n=3", setup)
    x = X.astype(np.int64)
    assert (chip.acc[0:3] == x @ W1).all() and (chip.acc[3:6] == x @ W2).all() and (chip.acc[6:9] == x @ W2).all()


# ----------------------------------------------------------------------------- VPU
VBIN = {"vadd": lambda a, b: a + b, "vsub": lambda a, b: a - b, "vmul": lambda a, b: a * b,
        "vmin": min, "vmax": max, "vshl": lambda a, b: (a % 2**32) << (b % 32), "vsra": lambda a, b: a >> (b % 32)}


@pytest.mark.parametrize("op", sorted(VBIN))
@pytest.mark.parametrize("bmode", ["spm", "acc", "reg", "imm"])
@pytest.mark.parametrize("dst", ["spm", "acc"])
def test_vbin(op, bmode, dst):
    n = 3
    a = RNG.integers(-(1 << 31), (1 << 31) - 1, (n, L)).astype(np.int32)
    bs = RNG.integers(-128, 128, (n, L)).astype(np.int8)
    ba = RNG.integers(-(1 << 31), (1 << 31) - 1, (n, L)).astype(np.int32)
    scal = -1234567

    def setup(c):
        c.write_acc(0, a)
        c.write_spm(100, bs)
        c.write_acc(100, ba)
    bop = {"spm": "spm[100]", "acc": "acc[100]", "reg": "r5", "imm": str(scal)}[bmode]
    chip = run(f"seti r5, {scal}\n{op} {dst}[200], acc[0], {bop}, n={n}", setup)
    out = (chip.spm if dst == "spm" else chip.acc)[200:200 + n]
    for i in range(n):
        for j in range(L):
            b = {"spm": int(bs[i, j]), "acc": int(ba[i, j]), "reg": scal, "imm": scal}[bmode]
            v = w32(VBIN[op](int(a[i, j]), b))
            assert out[i, j] == (sat8(v) if dst == "spm" else v), (op, bmode, dst, i, j)


def test_vbin_in_place_and_third_slot_repeat():
    # a 2-level nest advancing dst (slot 0), a (slot 1) and b (slot 2) with different strides
    a = RNG.integers(-100, 100, (40, L)).astype(np.int32)
    b = RNG.integers(-100, 100, (40, L)).astype(np.int32)

    def setup(c):
        c.write_acc(0, a)
        c.write_acc(100, b)
    chip = run("loop l1, 2, s0=10, s1=10, s2=1\nloop l2, 3, s0=2, s1=2, s2=5\n"
               "vadd acc[0], acc[0], acc[100], n=2, rep=l1:2", setup)
    want = a.astype(np.int64).copy()
    for i1, i2 in _nest([2, 3]):
        d = 10 * i1 + 2 * i2
        bb = 100 + i1 + 5 * i2 - 100
        want[d:d + 2] = want[d:d + 2] + b[bb:bb + 2]
    assert (chip.acc[:40] == want).all()


VUN = {"vmov": lambda r: list(r), "vrelu": lambda r: [max(x, 0) for x in r], "vabs": lambda r: [w32(abs(x)) for x in r],
       "vrsum": lambda r: [w32(sum(r))] * len(r), "vrmax": lambda r: [max(r)] * len(r),
       "vrmin": lambda r: [min(r)] * len(r)}


@pytest.mark.parametrize("op", sorted(VUN) + ["vlut"])
@pytest.mark.parametrize("src,dst", [("acc", "acc"), ("acc", "spm"), ("spm", "spm"), ("spm", "acc")])
def test_vun(op, src, dst):
    n = 4
    a32 = RNG.integers(-(1 << 31), (1 << 31) - 1, (n, L)).astype(np.int32)
    a32[0, 0] = -(1 << 31)
    a8 = RNG.integers(-128, 128, (n, L)).astype(np.int8)
    table = RNG.integers(-128, 128, 256).astype(np.int8)

    def setup(c):
        c.write_acc(0, a32)
        c.write_spm(0, a8)
        c.write_spm(500, table.reshape(-1, L))
    chip = run(f"vlutld spm[500]\n{op} {dst}[200], {src}[0], n={n}", setup)
    a = a32 if src == "acc" else a8
    out = (chip.spm if dst == "spm" else chip.acc)[200:200 + n]
    for i in range(n):
        row = [int(x) for x in a[i]]
        want = [int(table[x % 256]) for x in row] if op == "vlut" else VUN[op](row)
        want = [sat8(v) for v in want] if dst == "spm" else want
        assert out[i].tolist() == want, (op, src, dst, i)


def _requant(x, scale, shift, zp, lo, hi, rnd):
    p = x * scale
    if shift:
        if rnd == "floor":
            p = p >> shift
        elif rnd == "half_up":
            p = (p + (1 << (shift - 1))) >> shift
        else:
            q, rem = p >> shift, p & ((1 << shift) - 1)
            half = 1 << (shift - 1)
            p = q + (1 if rem > half or (rem == half and q & 1) else 0)
    return min(max(p + zp, lo), hi)


@pytest.mark.parametrize("rnd", ["floor", "half_up", "half_even"])
@pytest.mark.parametrize("smode", ["imm", "reg", "row"])
def test_vqcfg_vreq(rnd, smode):
    n = 3
    x = RNG.integers(-(1 << 20), 1 << 20, (n, L)).astype(np.int32)
    x[0, :] = [6, 10, -6, -10]            # ties at shift 2 with scale 1... exercised below
    scale_row = np.array([3, -2, 0x10005, 0xFFFF], np.int32)   # low 16 bits, signed: 3, -2, 5, -1

    def setup(c):
        c.write_acc(0, x)
        c.write_acc(50, scale_row)
    scale_op = {"imm": "-3", "reg": "r4", "row": "acc[50]"}[smode]
    chip = run(f"seti r4, 0x30005\nvqcfg shift=2, zp=3, lo=-100, hi=90, round={rnd}\n"
               f"vreq spm[10], acc[0], {scale_op}, n={n}", setup)
    for i in range(n):
        for j in range(L):
            s = {"imm": -3, "reg": 5, "row": [3, -2, 5, -1][j]}[smode]
            assert chip.spm[10 + i, j] == _requant(int(x[i, j]), s, 2, 3, -100, 90, rnd), (i, j)


def test_vreq_reset_config():
    chip = run("vreq spm[0], acc[0], 1, n=1", lambda c: c.write_acc(0, [5, -300, 300, -5]))
    assert chip.spm[0].tolist() == [5, -128, 127, -5]


def test_fence_orders_units():
    # without tokens, a fence between the load and the VPU makes the VPU see the loaded rows
    dram = RNG.integers(-128, 128, 64, dtype=np.int8)
    chip = run("dma.ld spm[0], dram[0], rows=4, rstride=4\nfence load\nvadd acc[0], spm[0], 1, n=4\nfence vpu\n"
               "dma.st dram[256], acc[0], rows=4, rstride=16", lambda c: c.write_dram(0, dram))
    got = chip.read_dram(256, 16, np.int32).reshape(4, 4)
    assert (got == dram[:16].reshape(4, 4).astype(np.int32) + 1).all()

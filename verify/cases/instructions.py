"""Per-instruction cases: each instruction against a plain Python/numpy definition written here.

Operands reach SPM and ACC through DMA loads from the DRAM image (``core.Data``), so every level
starts from the same inputs; scalar results are also stored to ACC with ``sst``, where every
level reads them (the Verilog bench does not read registers back). Sizes are those of ``tiny``
(a 4x4 array, 4 lanes); the data is random but seeded per case.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np

from isa.config import ChipConfig
from isa.table import SPACE_BYTES, Space

from .core import Case, Data, Expect, Setup, one

TINY = ChipConfig.preset("tiny")
L = TINY.cols  # lanes of tiny
R = TINY.rows  # array rows of tiny


def w32(v: int) -> int:
    v %= 1 << 32
    return v - (1 << 32) if v >= 1 << 31 else v


def sat8(v: int) -> int:
    return max(-128, min(127, v))


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _regs_to_acc(regs: list[int], row: int) -> str:
    """``sst`` of registers ``regs`` into ACC from ``row`` on (4 lanes per row)."""
    return "\n".join(f"sst r{r}, acc[{row + k // L}], {k % L}" for k, r in enumerate(regs))


def _acc_rows(values: list[int], row: int) -> list:
    """Expectation of ``_regs_to_acc``: the rows holding ``values`` (unused lanes 0)."""
    out = []
    for k in range(0, len(values), L):
        v = np.zeros(L, np.int64)
        v[:len(values[k:k + L])] = values[k:k + L]
        out.append(("acc", row + k // L, v))
    return out


def _scalar_case(name: str, src: str, want: dict[int, int]) -> Case:
    """A scalar program whose registers ``want`` are also stored to ACC rows 240.. (cleared first:
    the lanes no register fills stay 0)."""
    rs = sorted(want)

    def build(cfg):
        d = Data(cfg)
        rows = _acc_rows([want[r] for r in rs], 240)
        d.put("acc", 240, np.zeros((len(rows), L)))
        return Setup(cfg, [d.program(src + "\n" + _regs_to_acc(rs, 240))], [d.dram], [{}],
                     Expect(rows=rows, regs=want))
    return Case(name, build)


# ----------------------------------------------------------------------------- scalar
ALU = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
       "sll": lambda a, b: (a % 2**32) << (b % 32), "srl": lambda a, b: (a % 2**32) >> (b % 32),
       "sra": lambda a, b: a >> (b % 32), "slt": lambda a, b: int(a < b)}
PAIRS = [(7, 3), (-5, 2), (0x7FFFFFFF, 1), (-(1 << 31), 33), (123456789, -987654)]


def _alu(op: str) -> Case:
    src = []
    for i, (a, b) in enumerate(PAIRS):
        src += [f"seti r1, {a}", f"seti r2, {b}", f"{op} r{3 + i}, r1, r2"]
    return _scalar_case(op, "\n".join(src), {3 + i: w32(ALU[op](a, b)) for i, (a, b) in enumerate(PAIRS)})


SETI = _scalar_case("seti-addi-nop", "seti r1, -7\naddi r2, r1, 0x7FFFFFFF\nseti r0, 5\naddi r3, r0, 9\nnop",
                    {0: 0, 1: -7, 2: w32(-7 + 0x7FFFFFFF), 3: 9})

BRANCH_PAIRS = [("beq", 3, 3), ("beq", 3, 4), ("bne", 3, 4), ("bne", 4, 4), ("blt", -2, 1), ("blt", 1, -2),
                ("bge", 5, 5), ("bge", -9, 0)]


def _branch(op: str, a: int, b: int) -> Case:
    taken = {"beq": a == b, "bne": a != b, "blt": a < b, "bge": a >= b}[op]
    return _scalar_case(f"{op}-{'taken' if taken else 'not-taken'}",
                        f"seti r1, {a}\nseti r2, {b}\n{op} r1, r2, skip\nseti r3, 1\nskip: seti r4, 1",
                        {3: 0 if taken else 1, 4: 1})


JMP = _scalar_case("jmp-loop", "seti r1, 0\nseti r2, 10\ntop: addi r1, r1, 3\naddi r5, r5, 1\nblt r5, r2, top\n"
                   "jmp end\nseti r1, 999\nend: nop", {1: 30, 5: 10})


def _sld_sst(cfg) -> Setup:
    d = Data(cfg)
    d.put("spm", 5, [1, -2, 3, -128])
    d.put("acc", 7, [10, -20, 1 << 30, -(1 << 31)])
    d.put("spm", 6, np.zeros(L))
    d.put("acc", 8, np.zeros((1, L)))
    d.put("acc", 240, np.zeros((1, L)))
    store = _regs_to_acc([1, 2, 5], 240)
    prog = d.program("sld r1, spm[5], 3\nsld r2, acc[7], 3\nseti r3, 300\nsst r3, spm[6], 1\n"
                     "seti r4, -70000\nsst r4, acc[8], 2\nseti r9, 2\nsld r5, spm[3+r9], 1\nsst r4, spm[6], 2\n"
                     + store)
    want = {1: -128, 2: -(1 << 31), 5: -2}
    return Setup(cfg, [prog], [d.dram], [{}], Expect(
        rows=[("spm", 6, [0, 127, -128, 0]), ("acc", 8, [0, 0, -70000, 0])] + _acc_rows([-128, -(1 << 31), -2], 240),
        regs=want))


# ----------------------------------------------------------------------------- DMA + repeat depths
def _nest(counts):
    return itertools.product(*[range(c) for c in counts])


def _dma_depth(depth: int) -> Case:
    def build(cfg):
        counts = [2, 3, 2, 2][:depth]
        # strides: slot 0 = SPM rows, slot 1 = DRAM bytes; chosen so no two instances share a row
        s_rows, s_dram = [24, 8, 4, 2][:depth], [200, 64, 16, 5][:depth]
        dram = np.zeros(cfg.dram_bytes, np.uint8)
        dram[:4096] = _rng(f"dma.ld-depth{depth}").integers(-128, 128, 4096).astype(np.int8).view(np.uint8)
        src = dram[:4096].view(np.int8)
        loops = "\n".join(f"loop l{j}, {c}, s0={s_rows[j]}, s1={s_dram[j]}" for j, c in enumerate(counts))
        rep = f", rep=l0:{depth}" if depth else ""
        rows = []
        for idx in _nest(counts):
            row = 3 + sum(i * s for i, s in zip(idx, s_rows))
            a = 100 + sum(i * s for i, s in zip(idx, s_dram))
            want = np.zeros((2, L), np.int64)
            for r in range(2):
                for e in range(3):
                    want[r, e] = src[a + r * 9 + e]
            rows.append(("spm", row, want))
        return one(cfg, f"{loops}\ndma.ld spm[3], dram[100], rows=2, len=3, rstride=9{rep}\nhalt", dram,
                   expect=Expect(rows=rows, exact=("spm", "acc"),
                                 instances={"load": int(np.prod(counts)) if depth else 1}))
    return Case(f"dma.ld-depth{depth}", build)


def _trip_count_register(n: int) -> Case:
    """r1 holds N (a host argument); changing r1 after ``loop`` does not change the nest."""
    def build(cfg):
        dram = np.zeros(cfg.dram_bytes, np.uint8)
        x = _rng("trip-count").integers(-128, 128, 512).astype(np.int8)
        dram[:512] = x.view(np.uint8)
        return one(cfg, "loop l0, r1, s0=1, s1=4\nseti r1, 1\ndma.ld spm[0], dram[0], rep=l0:1\nhalt", dram, {1: n},
                   Expect(rows=[("spm", 0, x[:4 * n])] if n else [], exact=("spm", "acc"), instances={"load": n}))
    return Case(f"loop-count-register-{n}", build)


def _index_registers(cfg) -> Setup:
    dram = np.zeros(cfg.dram_bytes, np.uint8)
    x = _rng("index-registers").integers(-128, 128, 512).astype(np.int8)
    dram[:512] = x.view(np.uint8)
    return one(cfg, "seti r2, 40\nseti r3, 7\ndma.ld spm[1+r3], dram[8+r2], rows=2, rstride=4\nseti r3, 100\n"
                    "seti r2, 0\nhalt", dram, expect=Expect(rows=[("spm", 8, x[48:56])], exact=("spm",)))


def _dma_store(space: str) -> Case:
    """Lanes 0..2 of 3 rows stored with a row stride of 40 bytes and an element stride of 2 elements,
    then loaded back the same way (lane 3 of each row comes back 0)."""
    def build(cfg):
        eb = SPACE_BYTES[Space.ACC if space == "acc" else Space.SPM]
        dt = np.int32 if eb == 4 else np.int8
        lo, hi = (-(1 << 31), (1 << 31) - 1) if eb == 4 else (-128, 127)
        data = _rng(f"dma.st-{space}").integers(lo, hi, (3, L)).astype(dt)
        d = Data(cfg)
        d.put(space, 10, data)
        prog = d.program(f"dma.st dram[64], {space}[10], rows=3, len=3, rstride=40, estride={2 * eb}, signal=load\n"
                         f"dma.ld {space}[20], dram[64], rows=3, len=3, rstride=40, estride={2 * eb}, wait=store")
        dram_want = []
        for r in range(3):
            for e in range(3):
                dram_want.append((64 + r * 40 + e * 2 * eb, np.array([data[r, e]], dt).view(np.uint8)))
        back = data.astype(np.int64).copy()
        back[:, 3] = 0
        return Setup(cfg, [prog], [d.dram], [{}], Expect(rows=[(space, 20, back)], dram=dram_want))
    return Case(f"dma.st-{space}", build)


# ----------------------------------------------------------------------------- MXU
def _mxu(k: int) -> Case:
    def build(cfg):
        rng = _rng(f"mxu-k{k}")
        d = Data(cfg)
        W = d.put("spm", 0, rng.integers(-128, 128, (R, L)))
        X = d.put("spm", 10, rng.integers(-128, 128, (6, L)))
        acc0 = d.put("acc", 20, rng.integers(-1000, 1000, (6, L)))
        d.put("acc", 40, acc0)
        prog = d.program(f"mxu.lw spm[0], k={k}\nmxu.mm acc[40], spm[10], n=6\nmxu.mma acc[20], spm[10], n=6")
        Wk = W.astype(np.int64).copy()
        Wk[k:] = 0
        prod = X[:, :R].astype(np.int64) @ Wk
        return Setup(cfg, [prog], [d.dram], [{}], Expect(rows=[("acc", 40, prod), ("acc", 20, acc0 + prod)]))
    return Case(f"mxu-k{k}", build)


def _mxu_double_buffer(cfg) -> Setup:
    rng = _rng("mxu-double-buffer")
    d = Data(cfg)
    W1 = d.put("spm", 0, rng.integers(-128, 128, (R, L)))
    W2 = d.put("spm", 4, rng.integers(-128, 128, (R, L)))
    X = d.put("spm", 8, rng.integers(-128, 128, (3, L)))
    prog = d.program("mxu.lw spm[0]\nmxu.mm acc[0], spm[8], n=3\nmxu.lw spm[4]\nmxu.mm acc[3], spm[8], n=3\n"
                     "mxu.mm acc[6], spm[8], n=3")
    x = X.astype(np.int64)
    return Setup(cfg, [prog], [d.dram], [{}],
                 Expect(rows=[("acc", 0, x @ W1), ("acc", 3, x @ W2), ("acc", 6, x @ W2)]))


# ----------------------------------------------------------------------------- VPU
VBIN = {"vadd": lambda a, b: a + b, "vsub": lambda a, b: a - b, "vmul": lambda a, b: a * b,
        "vmin": min, "vmax": max, "vshl": lambda a, b: (a % 2**32) << (b % 32), "vsra": lambda a, b: a >> (b % 32)}
BMODES = ("spm", "acc", "reg", "imm")


def _vbin(op: str) -> Case:
    """``op`` with every kind of b operand (SPM row, ACC row, register, immediate), into SPM
    (saturated) and into ACC."""
    def build(cfg):
        n, scal = 3, -1234567
        rng = _rng(op)
        d = Data(cfg)
        a = d.put("acc", 0, rng.integers(-(1 << 31), (1 << 31) - 1, (n, L)))
        bs = d.put("spm", 100, rng.integers(-128, 128, (n, L)))
        ba = d.put("acc", 100, rng.integers(-(1 << 31), (1 << 31) - 1, (n, L)))
        lines, rows = [f"seti r5, {scal}"], []
        for k, (bmode, dst) in enumerate(itertools.product(BMODES, ("spm", "acc"))):
            row = 200 + n * k
            bop = {"spm": "spm[100]", "acc": "acc[100]", "reg": "r5", "imm": str(scal)}[bmode]
            lines.append(f"{op} {dst}[{row}], acc[0], {bop}, n={n}")
            want = np.zeros((n, L), np.int64)
            for i in range(n):
                for j in range(L):
                    b = {"spm": int(bs[i, j]), "acc": int(ba[i, j]), "reg": scal, "imm": scal}[bmode]
                    v = w32(VBIN[op](int(a[i, j]), b))
                    want[i, j] = sat8(v) if dst == "spm" else v
            rows.append((dst, row, want))
        return Setup(cfg, [d.program("\n".join(lines))], [d.dram], [{}], Expect(rows=rows))
    return Case(op, build)


def _vbin_in_place(cfg) -> Setup:
    """A 2-level nest advancing dst (slot 0), a (slot 1) and b (slot 2) with different strides."""
    rng = _rng("vadd-in-place")
    d = Data(cfg)
    a = d.put("acc", 0, rng.integers(-100, 100, (40, L)))
    b = d.put("acc", 100, rng.integers(-100, 100, (40, L)))
    prog = d.program("loop l1, 2, s0=10, s1=10, s2=1\nloop l2, 3, s0=2, s1=2, s2=5\n"
                     "vadd acc[0], acc[0], acc[100], n=2, rep=l1:2")
    want = a.astype(np.int64).copy()
    for i1, i2 in _nest([2, 3]):
        dst = 10 * i1 + 2 * i2
        bb = i1 + 5 * i2
        want[dst:dst + 2] = want[dst:dst + 2] + b[bb:bb + 2]
    return Setup(cfg, [prog], [d.dram], [{}], Expect(rows=[("acc", 0, want)]))


VUN = {"vmov": lambda r: list(r), "vrelu": lambda r: [max(x, 0) for x in r], "vabs": lambda r: [w32(abs(x)) for x in r],
       "vrsum": lambda r: [w32(sum(r))] * len(r), "vrmax": lambda r: [max(r)] * len(r),
       "vrmin": lambda r: [min(r)] * len(r)}
SRC_DST = (("acc", "acc"), ("acc", "spm"), ("spm", "spm"), ("spm", "acc"))


def _vun(op: str) -> Case:
    """``op`` from ACC and SPM rows into ACC and SPM (``vlut``: through a loaded table)."""
    def build(cfg):
        n = 4
        rng = _rng(op)
        a32 = rng.integers(-(1 << 31), (1 << 31) - 1, (n, L))
        a32[0, 0] = -(1 << 31)
        d = Data(cfg)
        a32 = d.put("acc", 0, a32)
        a8 = d.put("spm", 0, rng.integers(-128, 128, (n, L)))
        table = d.put("spm", 500, rng.integers(-128, 128, 256)).reshape(-1)
        lines, rows = ["vlutld spm[500]"], []
        for k, (src, dst) in enumerate(SRC_DST):
            row = 200 + n * k
            lines.append(f"{op} {dst}[{row}], {src}[0], n={n}")
            a = a32 if src == "acc" else a8
            want = []
            for i in range(n):
                r = [int(x) for x in a[i]]
                w = [int(table[x % 256]) for x in r] if op == "vlut" else VUN[op](r)
                want.append([sat8(v) for v in w] if dst == "spm" else w)
            rows.append((dst, row, np.array(want, np.int64)))
        return Setup(cfg, [d.program("\n".join(lines))], [d.dram], [{}], Expect(rows=rows))
    return Case(op, build)


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


def _vreq(rnd: str) -> Case:
    """``vqcfg`` then ``vreq`` with an immediate scale, a register's and a per-lane ACC row's."""
    def build(cfg):
        n = 3
        x = _rng(f"vreq-{rnd}").integers(-(1 << 20), 1 << 20, (n, L))
        x[0, :] = [6, 10, -6, -10]            # ties at shift 2 with scale 1
        d = Data(cfg)
        x = d.put("acc", 0, x)
        d.put("acc", 50, np.array([3, -2, 0x10005, 0xFFFF]))    # low 16 bits, signed: 3, -2, 5, -1
        lines, rows = ["seti r4, 0x30005", f"vqcfg shift=2, zp=3, lo=-100, hi=90, round={rnd}"], []
        for k, smode in enumerate(("imm", "reg", "row")):
            row = 10 + n * k
            lines.append(f"vreq spm[{row}], acc[0], {({'imm': '-3', 'reg': 'r4', 'row': 'acc[50]'})[smode]}, n={n}")
            want = [[_requant(int(x[i, j]), {"imm": -3, "reg": 5, "row": [3, -2, 5, -1][j]}[smode], 2, 3, -100, 90,
                              rnd) for j in range(L)] for i in range(n)]
            rows.append(("spm", row, np.array(want)))
        return Setup(cfg, [d.program("\n".join(lines))], [d.dram], [{}], Expect(rows=rows))
    return Case(f"vreq-{rnd}", build)


def _vreq_reset(cfg) -> Setup:
    """Without vqcfg: scale 1, no shift, clamp to int8."""
    d = Data(cfg)
    d.put("acc", 0, [5, -300, 300, -5])
    return Setup(cfg, [d.program("vreq spm[0], acc[0], 1, n=1")], [d.dram], [{}],
                 Expect(rows=[("spm", 0, [5, -128, 127, -5])]))


def _fence(cfg) -> Setup:
    """Without tokens, a fence between the load and the VPU makes the VPU see the loaded rows."""
    dram = np.zeros(cfg.dram_bytes, np.uint8)
    x = _rng("fence").integers(-128, 128, 64).astype(np.int8)
    dram[:64] = x.view(np.uint8)
    want = x[:16].reshape(4, 4).astype(np.int32) + 1
    return one(cfg, "dma.ld spm[0], dram[0], rows=4, rstride=4\nfence load\nvadd acc[0], spm[0], 1, n=4\nfence vpu\n"
                    "dma.st dram[256], acc[0], rows=4, rstride=16\nhalt", dram,
               expect=Expect(dram=[(256, want.astype("<i4").view(np.uint8).reshape(-1))]))


CASES: tuple[Case, ...] = (
    *[_alu(op) for op in ALU],
    SETI,
    *[_branch(*p) for p in BRANCH_PAIRS],
    JMP,
    Case("sld-sst", _sld_sst),
    *[_dma_depth(d) for d in range(5)],
    *[_trip_count_register(n) for n in (0, 1, 5, 17)],
    Case("index-registers", _index_registers),
    *[_dma_store(s) for s in ("spm", "acc")],
    *[_mxu(k) for k in (1, 3, 4)],
    Case("mxu-double-buffer", _mxu_double_buffer),
    *[_vbin(op) for op in VBIN],
    Case("vadd-nest-three-slots", _vbin_in_place),
    *[_vun(op) for op in [*VUN, "vlut"]],
    *[_vreq(r) for r in ("floor", "half_up", "half_even")],
    Case("vreq-reset-config", _vreq_reset),
    Case("fence", _fence),
)

"""Constrained-random programs for co-simulation (riscv-dv style), seeded and replayable.

``generate(cfg, seed)`` returns a ``FuzzCase``: the programs of chip 0 and chip 1 of a 2-chip ring
(built with ``isa.builder``, with their listings for reports), a DRAM image per chip, host-written
scalar registers, and the coverage points it exercises. The same seed gives the same case.

Legal programs are a sequence of blocks:

* **phase**: up to five queued instructions of any unit, each on its own freshly allocated SPM/ACC
  rows and DRAM bytes (so nothing races), some with a repeat nest (depth 0-4, trip counts from
  immediates or from host-written registers, strides that keep instances apart), some joined as
  producer -> consumer by a token (``signal=`` / ``wait=``, ``sync=once``) where the consumer reads
  what the producer wrote; the phase ends with ``fence`` over the units it used.
* **scalar**: ALU ops on scratch registers, ``sld``/``sst`` on rows no phase is touching.
* **branch**: a forward conditional skip, or a counted loop around a phase (``bne`` back).
* **link**: on chip 0 a ``link.send`` / ``link.recv``; chip 1 runs the matching recv/send.
* **burst** (``BURSTS`` of the cases, after the blocks above): ``QUEUE_DEPTH + 2`` instructions of one
  unit (DMA loads, strided DMA stores, MXU, link transfers) in a row, so its queue fills.

Illegal programs (``illegal=True``) are a legal prefix followed by one fault: a VPU overlap, an address
out of range, a token overflow, a jump out of the program, a reserved word, a link type mismatch.

Registers: r1, r2 trip counts (host), r3 an address base (host), r4-r7 scratch, r8 loop counter,
r9 a VPU/requantizer scalar operand (host).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

from isa import ChipConfig
from isa.builder import Label, Mem, ProgramBuilder, acc, dram, spm
from isa.regs import L0, ZERO, LoopReg, Reg
from isa.table import (BRANCHES, BY_MNEMONIC, INSTRUCTIONS, LINK_UNITS, QUEUED_UNITS, SCALAR_ALU, SPACE_BYTES,
                       UNIT_NAMES, VPU_BINARY, VPU_UNARY, Space, SrcMode, Unit)
from isa.timing import QUEUE_DEPTH, lut_rows

UNIT_NAME = dict(zip(Unit, UNIT_NAMES))
ALL_OPCODES = tuple(i.mnemonic for i in INSTRUCTIONS)
DRAM_IN = 0x4000          # bytes of random input data at DRAM 0 (read-only for the program)
#: "race" is not among them: races are a simulator diagnostic (docs/microarchitecture.md section 4),
#: the chip has no race detector, so a racy program has no defined result to compare
FAULTS = ("overlap", "spm_range", "acc_range", "dram_range", "token_overflow", "pc_range", "reserved",
          "link_mismatch")


@dataclass
class FuzzCase:
    seed: int
    sources: list          # the listing of chip 0's and chip 1's program (``ProgramBuilder.text``)
    drams: list            # uint8 DRAM image per chip
    regs: list             # {reg: value} per chip
    illegal: bool = False
    fault: str | None = None
    #: (mnemonic, depth, mode) coverage points of chip 0 and chip 1
    points: set = field(default_factory=set)
    raw: dict = field(default_factory=dict)   # {"reserved": True}: a word to patch after building
    programs: list = field(default_factory=list)   # the isa.Program of chip 0 and chip 1


@dataclass
class _Ins:
    """An instruction not emitted yet: the generator still adjusts its strides and tokens."""

    op: str
    args: tuple
    kw: dict = field(default_factory=dict)


MEM = {"spm": spm, "acc": acc}
#: the consumers a phase may join to a producer by a token, by the memory the producer wrote
CONSUMERS = {"spm": ("dma.st", "mxu.lw", "mxu.mm", "vmov", "vadd"), "acc": ("dma.st", "vreq", "vrelu", "vsub")}
#: the memories each producing unit's instructions write in ``Gen.queued`` (dma.ld: SPM or ACC; mxu.mm/mma:
#: ACC; the VPU ops: SPM or ACC)
PRODUCES = {"load": ("spm", "acc"), "mxu": ("acc",), "vpu": ("spm", "acc")}
#: registers of the generated programs (see the module docstring)
TRIPS = {1: Reg(1), 2: Reg(2)}
BASE, LOOP, OPERAND = Reg(3), Reg(8), Reg(9)
SCRATCH = range(4, 8)
SLD_DST, FAULT_ADDR = Reg(5), Reg(4)
#: the share of cases that end their legal part with a burst of one unit (``Gen.burst``)
BURSTS = 0.3


class _Alloc:
    """Bump allocator of rows / bytes; ``reset`` at a phase boundary. Rows an instruction writes
    (``write=True``) start a bank of ``bank`` rows that no other instruction writes (two units
    writing one bank at once race, docs/microarchitecture.md section 4); rows it only reads may
    share the bank of the rows written just before."""

    def __init__(self, lo: int, hi: int, bank: int = 1):
        self.lo, self.hi, self.bank = lo, hi, bank
        self.reset()

    def reset(self):
        self.at = self.wnext = self.lo

    def take(self, n: int, write: bool = False) -> int | None:
        a = self.at
        if write:
            a = max(a, self.wnext)
            a += (-a) % self.bank
        if a + n > self.hi:
            return None
        self.at = a + n
        if write:
            self.wnext = self.at + (-self.at) % self.bank
        return a


class Gen:
    def __init__(self, cfg: ChipConfig, rng: random.Random, regs: dict):
        self.cfg, self.r, self.regs = cfg, rng, regs
        self.C, self.R = cfg.cols, cfg.rows
        self.b = ProgramBuilder(cfg)          # chip 0
        self.partner = ProgramBuilder(cfg)    # chip 1: the complement of chip 0's link traffic
        self.points: set = set()
        self.labels = 0
        # scalar rows at the top of SPM/ACC, in banks of their own: no queued instruction touches them
        sb, ab = cfg.spm_bank_rows, cfg.acc_bank_rows
        self.spm = _Alloc(0, max(0, (cfg.spm_rows - 16) // sb * sb), sb)
        self.acc = _Alloc(0, max(0, (cfg.acc_rows - 8) // ab * ab), ab)
        self.dram_out = _Alloc(DRAM_IN, cfg.dram_bytes)

    # -- helpers ------------------------------------------------------------------------
    def emit(self, op: str, *args, **kw) -> None:
        self.b.emit(op, *args, **kw)

    def put(self, ins: _Ins) -> None:
        self.b.emit(ins.op, *ins.args, **ins.kw)

    def label(self) -> Label:
        self.labels += 1
        return self.b.new_label(f"L{self.labels}")

    def cover(self, mn: str, depth: int, mode: str) -> None:
        self.points.add((mn, depth, mode))

    def alloc(self, space: str, n: int, write: bool = False) -> int | None:
        """Fresh rows; ``write``: rows the instruction writes (a bank no other instruction writes)."""
        return (self.spm if space == "spm" else self.acc).take(max(n, 1), write)

    def addr(self, space: str, base: int) -> tuple[Mem, str]:
        """``space[base]`` or, sometimes, ``space[r3 + k]`` with r3 a host register (mode 'x')."""
        v = self.regs.get(3, 0)
        if base >= v and self.r.random() < 0.3:
            return MEM[space][base - v + BASE], "x"
        return MEM[space][base], ""

    def nest(self, rowspan: int, nslots: int):
        """A repeat nest: (loop instructions, rep modifier, depth, trip count, mode, per-slot total offsets).

        Stride of each slot at level j = rowspan * (product of inner trip counts) so instances
        never overlap; trip counts from immediates or from r1/r2 (host-written)."""
        d = self.r.choice([0, 0, 1, 1, 2, 3, 4][: 3 + self.cfg.loop_regs])
        d = min(d, self.cfg.loop_regs)
        if d == 0:
            return [], None, 0, 1, "imm", rowspan
        base = self.r.randint(0, self.cfg.loop_regs - d)
        counts, modes = [], []
        for _ in range(d):
            if self.r.random() < 0.3:
                rr = self.r.choice([1, 2])
                counts.append(self.regs[rr])
                modes.append(TRIPS[rr])
            else:
                counts.append(self.r.choice([1, 2, 2, 3]))
                modes.append(None)
        loops, stride = [], rowspan
        strides = [0] * d
        for j in reversed(range(d)):
            strides[j] = stride
            stride *= max(counts[j], 1)
        for j in range(d):
            self.cover("loop", 0, "reg" if modes[j] else "imm")
            loops.append(_Ins("loop", (LoopReg(base + j), modes[j] or counts[j]),
                              {f"s{k}": strides[j] for k in range(nslots)}))
        total = 1
        for c in counts:
            total *= c
        cm = "reg" if any(modes) else "imm"
        return loops, (LoopReg(base), d), d, total, cm, stride

    # -- queued instructions --------------------------------------------------------------
    def queued(self, kind: str, reads_from=None, strided: bool = False):
        """One queued instruction (with its loops); returns (instructions, unit, written region) or None.

        Every operand has its own freshly allocated rows. ``reads_from``: (space, row, rows) a
        producer wrote; the instruction reads those rows instead (a consumer, no repeat nest).
        ``strided``: a ``dma.st`` writes its DRAM elements ``estride`` bytes apart, more than their size."""
        r, C = self.r, self.C
        rf = reads_from
        cap = rf[2] if rf else 4

        def nest(rows, nslots):
            if rf:
                return [], None, 0, 1, "imm", max(rows, 1)
            return self._nest_for(rows, nslots)

        def src(space, span):
            if rf and rf[0] == space:
                return rf[1]
            return self.alloc(space, span)

        if kind == "dma.ld":
            space = r.choice(["spm", "acc"])
            rows = r.randint(1, 4)
            esz = SPACE_BYTES[Space[space.upper()]]
            ln = r.choice([C, C, r.randint(1, C)])
            rs = r.choice([C * esz, r.randint(0, 3 * C)])
            es = r.choice([esz, esz, r.randint(1, 2 * esz)])
            loops, rep, d, total, cm, span = nest(rows, 2)
            dst = self.alloc(space, span, write=True)
            if dst is None:
                return None
            for lp in loops:                                    # slot 1 strides DRAM bytes
                lp.kw["s1"] = r.randint(0, 64)
            a, x = self.addr(space, dst)
            self.cover(kind, d, f"{space}{x}/{cm}")
            return loops + [_Ins("dma.ld", (a, dram[r.randint(0, DRAM_IN // 2)]),
                                 dict(rows=rows, len=ln, rstride=rs, estride=es, rep=rep))], Unit.LOAD, \
                (space, dst, span)
        if kind == "dma.st":
            space = rf[0] if rf else r.choice(["spm", "acc"])
            rows = min(cap, r.randint(1, 4))
            esz = SPACE_BYTES[Space[space.upper()]]
            ln = r.choice([C, r.randint(1, C)])
            es = r.randint(esz + 1, 2 * esz) if strided else esz
            rs = (ln - 1) * es + esz + r.choice([0, 0, 4])        # rows never overlap
            loops, rep, d, total, cm, span = nest(rows, 2)
            if d:   # DRAM stride per level: the bytes one instance writes (instances stay apart)
                self._dram_strides(loops, rows * rs)
            s = src(space, span)
            if s is None:
                return None
            nbytes = rows * rs * max(total, 1) + 16
            out = self.dram_out.take(nbytes)
            if out is None:
                self.dram_out.reset()
                out = self.dram_out.take(nbytes)
            a, x = self.addr(space, s)
            self.cover(kind, d, f"{space}{x}/{cm}")
            kw = dict(rows=rows, len=ln, rstride=rs, rep=rep) | (dict(estride=es) if strided else {})
            return loops + [_Ins("dma.st", (dram[out], a), kw)], Unit.STORE, None
        if kind == "mxu.lw":
            k = r.randint(1, min(self.R, cap))
            loops, rep, d, total, cm, _ = ([], None, 0, 1, "imm", 0) if rf else self.nest(0, 1)
            s = src("spm", self.R)
            if s is None:
                return None
            a, x = self.addr("spm", s)
            self.cover(kind, d, f"spm{x}/{cm}")
            return loops + [_Ins("mxu.lw", (a,), dict(k=k, rep=rep))], Unit.MXU, None
        if kind in ("mxu.mm", "mxu.mma"):
            n = r.randint(0 if not rf else 1, min(4, cap))
            loops, rep, d, total, cm, span = nest(n, 2)
            dst = self.alloc("acc", span, write=True)
            s = src("spm", span)
            if dst is None or s is None:
                return None
            a, x = self.addr("acc", dst)
            self.cover(kind, d, f"acc{x}/{cm}")
            return loops + [_Ins(kind, (a, spm[s]), dict(n=n, rep=rep))], Unit.MXU, ("acc", dst, span)
        if kind in VPU_BINARY + VPU_UNARY:
            n = r.randint(1, min(4, cap))
            dsp = r.choice(["spm", "acc"])
            asp = rf[0] if rf else r.choice(["spm", "acc"])
            loops, rep, d, total, cm, span = nest(n, 3 if kind in VPU_BINARY else 2)
            dst = self.alloc(dsp, span, write=True)
            asrc = src(asp, span)
            if dst is None or asrc is None:
                return None
            da, x = self.addr(dsp, dst)
            mode = f"{dsp}{x},{asp}"
            args: tuple = (da, MEM[asp][asrc])
            if kind in VPU_BINARY:
                bm = r.choice(["spm", "acc", "reg", "imm"])
                if bm in ("spm", "acc"):
                    b = self.alloc(bm, span)
                    if b is None:
                        return None
                    args += (MEM[bm][b],)
                elif bm == "reg":
                    args += (OPERAND,)
                else:
                    args += (r.randint(-40, 40) if kind not in ('vshl', 'vsra') else r.randint(0, 33),)
                mode += f",{bm}"
            self.cover(kind, d, mode + f"/{cm}")
            return loops + [_Ins(kind, args, dict(n=n, rep=rep))], Unit.VPU, (dsp, dst, span)
        if kind == "vreq":
            n = r.randint(1, min(4, cap))
            loops, rep, d, total, cm, span = nest(n, 3)
            dst = self.alloc("spm", span, write=True)
            s = src("acc", span)
            if dst is None or s is None:
                return None
            sm = r.choice(["imm", "reg", "row"])
            imm = r.randint(-300, 300)                            # drawn whatever the mode
            sc = {"imm": imm, "reg": OPERAND}.get(sm)
            if sm == "row":
                row = self.alloc("acc", span)
                if row is None:
                    return None
                sc = acc[row]
            self.cover(kind, d, f"{sm}/{cm}")
            return loops + [_Ins("vreq", (spm[dst], acc[s], sc), dict(n=n, rep=rep))], Unit.VPU, ("spm", dst, span)
        if kind == "vqcfg":
            rnd = r.choice(["floor", "half_up", "half_even"])
            self.cover(kind, 0, rnd)
            lo = r.randint(-128, 0)
            shift, zp = r.randint(0, 12), r.randint(-5, 5)
            return [_Ins("vqcfg", (), dict(shift=shift, zp=zp, lo=lo, hi=r.randint(lo, 127), round=rnd))], \
                Unit.VPU, None
        if kind == "vlutld":
            s = self.alloc("spm", lut_rows(self.cfg))
            if s is None:
                return None
            self.cover(kind, 0, "spm")
            return [_Ins("vlutld", (spm[s],))], Unit.VPU, None
        raise ValueError(kind)

    def _nest_for(self, rows: int, nslots: int):
        loops, rep, d, total, cm, span = self.nest(max(rows, 1), nslots)
        return loops, rep, d, total, cm, (span if d else max(rows, 1))

    def _dram_strides(self, loops: list, inst_bytes: int) -> None:
        """Slot 0 of each level strides the DRAM bytes of one instance times the inner trip counts."""
        counts = [self.regs[c.n] if isinstance(c, Reg) else c for _, c in (lp.args for lp in loops)]
        s = inst_bytes
        res = [0] * len(loops)
        for j in reversed(range(len(loops))):
            res[j] = s
            s *= max(counts[j], 1)
        for j, lp in enumerate(loops):
            lp.kw = {"s0": res[j], "s1": lp.kw["s1"]}

    # -- blocks -----------------------------------------------------------------------------
    def phase(self, link: bool):
        r = self.r
        self.spm.reset()
        self.acc.reset()
        kinds = ["dma.ld", "dma.st", "mxu.lw", "mxu.mm", "mxu.mma", "vreq", "vqcfg", "vlutld", *VPU_BINARY,
                 *VPU_UNARY]
        used = set()
        stored = set()          # memories a dma.st of this phase reads (an sld of one would race: its port)
        for _ in range(r.randint(1, 5)):
            k = r.choice(kinds)
            got = self.queued(k)
            if got is None:
                continue
            instrs, unit, wrote = got
            consumer = None
            if wrote and r.random() < 0.4:
                # a consumer of what this instruction wrote, ordered by a token
                c = r.choice(CONSUMERS[wrote[0]])
                consumer = self.queued(c, reads_from=wrote)
                if consumer and (UNIT_NAME[consumer[1]] == UNIT_NAME[unit]):
                    consumer = None
            if consumer:
                cu = UNIT_NAME[consumer[1]]
                instrs[-1].kw.update(sync="once", signal=cu)
                consumer[0][-1].kw.update(sync="once", wait=UNIT_NAME[unit])
                instrs += consumer[0]
                used.add(cu)
                self.cover("token", 0, f"{UNIT_NAME[unit]}->{cu}")
            # (not while a store of that memory may be in flight: an sld shares its read port, a race)
            elif wrote and wrote[0] not in stored and r.random() < 0.2:
                # the scalar unit waits for it and reads one lane of what it wrote
                instrs[-1].kw.update(sync="once", signal="scalar")
                instrs.append(_Ins("sld", (SLD_DST, MEM[wrote[0]][wrote[1]], r.randint(0, self.C - 1)),
                                   dict(wait=UNIT_NAME[unit])))
                self.cover("token", 0, f"{UNIT_NAME[unit]}->scalar")
            used.add(UNIT_NAME[unit])
            stored |= {ins.args[1].space for ins in instrs if ins.op == "dma.st"}
            for ins in instrs:
                self.put(ins)
        if link:
            self.link()
            used |= {"ltx", "lrx"}
        if used and r.random() < 0.5:
            self.emit("fence", "|".join(sorted(used)))
            self.cover("fence", 0, "units")
        else:
            self.emit("fence", "all")
            self.cover("fence", 0, "all")

    def burst(self, link_ok: bool):
        """``QUEUE_DEPTH + 2`` queued instructions of one unit in a row, each on its own rows, then a fence:
        the issue stage meets that unit's full queue (``queue_full``); a store burst writes strided rows."""
        r = self.r
        self.spm.reset()
        self.acc.reset()
        unit = r.choice(["load", "store", "mxu"] + (["link"] if link_ok else []))
        n = QUEUE_DEPTH + 2
        if unit == "link":
            space, rows, send = r.choice(["spm", "acc"]), r.randint(2, 4), r.random() < 0.5
            for i in range(n):
                mine = self.alloc(space, rows, write=True)
                if mine is None:
                    break
                ours, theirs = ("link.send", 0), ("link.recv", 1)
                if not send:
                    ours, theirs = theirs, ours
                self.emit(ours[0], ours[1], MEM[space][mine], n=rows)
                self.partner.emit(theirs[0], theirs[1], MEM[space][i * rows], n=rows)
                self.cover(ours[0], 0, space)
                self.cover(theirs[0], 0, space)
            self.partner.emit("fence", "all")
        else:
            for _ in range(n):
                kind = {"load": "dma.ld", "store": "dma.st"}.get(unit) or r.choice(["mxu.lw", "mxu.mm", "mxu.mma"])
                got = self.queued(kind, strided=unit == "store")
                for ins in got[0] if got else ():
                    self.put(ins)
        self.emit("fence", "all")
        self.cover("burst", 0, unit)

    def link(self):
        r = self.r
        space = r.choice(["spm", "acc"])
        n = r.randint(1, 4)
        mine = self.alloc(space, n, write=True)
        if mine is None:
            return
        # (the partner's rows: below the scalar rows at the top, as the allocator's)
        top = self.spm.hi if space == "spm" else self.acc.hi
        theirs = r.randint(0, min(200 if space == "spm" else 100, top - n))
        if r.random() < 0.5:
            self.emit("link.send", 0, MEM[space][mine], n=n)
            self.partner.emit("link.recv", 1, MEM[space][theirs], n=n)
            self.cover("link.send", 0, space)
            self.cover("link.recv", 0, space)      # chip 1's side
        else:
            self.emit("link.recv", 1, MEM[space][mine], n=n)
            self.partner.emit("link.send", 0, MEM[space][theirs], n=n)
            self.cover("link.recv", 0, space)
            self.cover("link.send", 0, space)
        self.partner.emit("fence", "all")

    def scalar(self):
        r = self.r
        for _ in range(r.randint(1, 4)):
            op = r.choice(list(SCALAR_ALU) + ["addi", "seti", "sld", "sst", "nop"])
            rd, a, b = (Reg(r.randint(SCRATCH[0], SCRATCH[-1])) for _ in range(3))
            if op in SCALAR_ALU:
                self.emit(op, rd, a, r.choice([b, OPERAND, ZERO]))
            elif op == "addi":
                self.emit("addi", rd, a, r.randint(-1000, 1000))
            elif op == "seti":
                self.emit("seti", rd, r.randint(-2**31, 2**31 - 1))
            elif op == "nop":
                self.emit("nop")
            else:
                space = r.choice(["spm", "acc"])
                top = self.cfg.spm_rows if space == "spm" else self.cfg.acc_rows
                row = r.randint(top - 8, top - 1)
                self.emit(op, rd, MEM[space][row], r.randint(0, self.C - 1))
                self.cover(op, 0, space)
                continue
            self.cover(op, 0, "reg")

    def branch(self, link_ok: bool):
        r = self.r
        if r.random() < 0.5:
            op = r.choice(BRANCHES)
            skip = self.label()
            self.emit(op, Reg(r.randint(SCRATCH[0], SCRATCH[-1])), Reg(r.choice([0, 1, 2, 9])), skip)
            self.cover(op, 0, "fwd")
            self.scalar()
            if r.random() < 0.3:
                self.emit("jmp", skip)
                self.cover("jmp", 0, "fwd")
                self.emit("nop")
            self.b.place(skip)
        else:
            top = self.label()
            self.emit("seti", LOOP, r.randint(1, 3))
            self.b.place(top)
            self.phase(link=False)
            self.emit("addi", LOOP, LOOP, -1)
            self.emit("bne", LOOP, ZERO, top)
            self.cover("bne", 0, "back")


def generate(cfg, seed: int, *, illegal: bool | None = None, link: bool = True, blocks: int | None = None) -> FuzzCase:
    """A random program pair for a 2-chip ring (chip 1 runs ``halt`` unless chip 0 uses the link)."""
    cfg = ChipConfig.load(cfg)
    r = random.Random(seed)
    if illegal is None:
        illegal = r.random() < 0.15
    regs = {1: r.randint(0, 3), 2: r.randint(0, 3), 3: r.randint(0, 7), 9: r.randint(-20, 20)}
    g = Gen(cfg, r, regs)
    for _ in range(blocks or r.randint(2, 7)):
        k = r.random()
        if k < 0.55:
            g.phase(link=link and r.random() < 0.25)
        elif k < 0.75:
            g.scalar()
        else:
            g.branch(link)
    # a burst of one unit (its queue fills) in some cases: drawn from a stream of its own, so the blocks
    # above stay what they were for every seed
    rb = random.Random(f"burst {seed}")
    if rb.random() < BURSTS:
        g.r = rb
        g.burst(link)
        g.r = r
    fault = None
    raw = {}
    if illegal:
        fault = r.choice(FAULTS if link else [f for f in FAULTS if f != "link_mismatch"])
        _fault(g, fault, raw)
    g.emit("halt")
    g.cover("halt", 0, "")
    g.partner.emit("halt")
    rng = np.random.default_rng(seed)
    drams = []
    for _ in range(2):
        d = np.zeros(cfg.dram_bytes, np.uint8)
        d[:DRAM_IN] = rng.integers(0, 256, DRAM_IN, dtype=np.uint8)
        drams.append(d)
    chips = (g.b, g.partner)
    return FuzzCase(seed, [f".config {cfg.name}\n" + b.text() for b in chips], drams, [regs, {}], illegal, fault,
                    g.points, raw, [b.build(f"<fuzz seed {seed} chip {i}>") for i, b in enumerate(chips)])


def _fault(g: Gen, fault: str, raw: dict) -> None:
    cfg, r = g.cfg, g.r
    g.emit("fence", "all")
    if fault == "overlap":       # a VPU destination partly overlapping its source
        g.emit("vadd", spm[r.choice([1, 2, 3])], spm[0], 1, n=4)
    elif fault == "spm_range":
        g.emit("seti", FAULT_ADDR, cfg.spm_rows + r.randint(0, 5))
        g.emit("sld", SLD_DST, spm[FAULT_ADDR], 0)
    elif fault == "acc_range":
        g.emit("mxu.mm", acc[cfg.acc_rows - 2], spm[0], n=4)
    elif fault == "dram_range":
        g.emit("dma.ld", spm[0], dram[cfg.dram_bytes - 8], rows=4, rstride=cfg.cols)
    elif fault == "token_overflow":
        g.emit("loop", L0, 300)
        g.emit("vmov", spm[0], spm[1], rep=L0, signal="scalar")
    elif fault == "pc_range":
        g.emit("jmp", len(g.b) + 50)
    elif fault == "reserved":
        raw["reserved"] = True          # the word after this marker is replaced by a bad opcode
        g.emit("nop")
    elif fault == "link_mismatch":
        g.emit("link.send", 0, acc[0], n=1)
        g.partner.emit("link.recv", 1, spm[0], n=1)
    g.cover("fault", 0, fault)


def coverage_table(points: set, opcodes: tuple = ALL_OPCODES) -> dict:
    """{mnemonic: {"depths": [...], "modes": [...], "points": n}} and the ``opcodes`` never covered."""
    per: dict = {}
    for mn, d, mode in points:
        e = per.setdefault(mn, {"depths": set(), "modes": set(), "points": 0})
        e["depths"].add(d)
        e["modes"].add(mode)
        e["points"] += 1
    out = {k: {"depths": sorted(v["depths"]), "modes": sorted(v["modes"]), "points": v["points"]}
           for k, v in sorted(per.items())}
    missing = [m for m in opcodes if m not in per]
    return {"opcodes": out, "missing": missing, "points": len(points)}


def case_job(cfg, case: FuzzCase, max_cycles: int = 20000, chips: int = 2):
    """The co-simulation job of a case: the chips' words (a reserved word patched in); ``chips=1``
    for one ``Chip`` (cases generated with ``link=False``)."""
    from .cosim import Job
    words = [p.words() for p in case.programs]
    if case.fault == "reserved":
        words[0][-2] = 0xFF                    # the nop before halt: an opcode the table lacks
    return Job(words[:chips], case.drams[:chips], case.regs[:chips], max_cycles, case.seed, f"fuzz seed {case.seed}",
               {"illegal": case.illegal, "fault": case.fault, "sources": case.sources})


def run_fuzz(cfg, seed: int, count: int, simulator: str | None = None, *, batch: int = 250,
             progress=None, require_all_opcodes: bool = True, mem: str | None = None, shrink_first: bool = True,
             waves_dir=None, waves: str = "vcd", max_rounds: int = 200, mac: str = "dsp") -> dict:
    """``count`` random cases (seeds ``seed .. seed+count-1``) on the Verilog of ``Ring(cfg, 2)``
    against ``sim.System`` (a config with fewer than 2 link ports: one ``Chip`` and programs without
    link instructions); returns figures, mismatch reports, coverage (opcode x depth x mode) and
    functional coverage (``functional_points``: what was hit and what was not). ``mem``: how SPM and
    ACC are built (``rtl.mem.IMPLS``; default ``$TETRACHIP_COSIM_MEM``, else flat); ``mac``: the
    array's products (``rtl/mac.py``: ``"lut+reg2"`` co-simulates every product in LUTs).

    On a mismatch, ``shrink_first`` shrinks the first failing case (``shrink_case``: its programs cut
    down while the mismatch persists) into ``"shrunk"``; ``waves_dir``: the failing program (shrunk, if
    it was) runs again on a model that dumps waves (``waves``: vcd or fst) into
    ``waves_dir/fuzz_seed<S>.<waves>``, named in ``"waves"``."""
    import time
    from pathlib import Path

    from .cosim import Cosim, compare, sim_of
    cfg = ChipConfig.load(cfg)
    t0 = time.perf_counter()
    chips = 2 if cfg.links >= 2 else 1
    ring = chips > 1
    cs = Cosim(cfg, chips, simulator, mem=mem, mac=mac).build()
    build_s = time.perf_counter() - t0
    points, fpoints, mismatches, failing = set(), set(), [], []
    illegal = cycles = raced = 0
    from isa.errors import ErrorCode
    for lo in range(seed, seed + count, batch):
        cases = [generate(cfg, s, link=ring) for s in range(lo, min(seed + count, lo + batch))]
        jobs = [case_job(cfg, c, chips=chips) for c in cases]
        results = cs.run(jobs)
        for c, j, r in zip(cases, jobs, results):
            points |= c.points
            illegal += c.illegal
            cycles += r["bench_cycles"]
            sr = sim_of(cfg, j, r, ring=ring)
            raced += ErrorCode.RACE in sr[2]       # no defined result: not compared
            fpoints |= functional_points(cfg, c.programs, c.regs, sr[0])
            rep = compare(cfg, j, r, ring=ring, sim=sr)
            if rep:
                mismatches.append(rep + "\n--- program (chip 0)\n" + c.sources[0])
                failing.append((c, rep))
        if progress:
            progress(len(cases))
    # (one chip: no link instructions to cover)
    cov = coverage_table(points, ALL_OPCODES if ring else tuple(
        m for m in ALL_OPCODES if BY_MNEMONIC[m].unit not in LINK_UNITS))
    out = {"config": cfg.name, "simulator": cs.simulator, "mem": cs.mem, "mac": mac, "seed": seed, "programs": count,
           "illegal": illegal, "raced": raced, "mismatches": len(mismatches), "reports": mismatches,
           "failing_seeds": [c.seed for c, _ in failing], "rtl_cycles": cycles,
           "build_s": round(build_s, 2), "coverage": cov, "functional": functional_table(fpoints),
           "ok": not mismatches and not (require_all_opcodes and cov["missing"])}
    if failing and shrink_first:
        c, first = failing[0]
        sh, report = shrink_case(cfg, c, cs, chips=chips, max_rounds=max_rounds, report=first)
        out["shrunk"] = {"seed": c.seed, "lines_from": sh.lines_from, "lines_to": sh.lines_to, "rounds": sh.rounds,
                         "tried": sh.tried, "seconds": sh.seconds, "sources": sh.sources, "regs": sh.regs,
                         "report": report}
    if failing and waves_dir is not None:
        c = failing[0][0]
        srcs = out["shrunk"]["sources"] + [host_text(out["shrunk"]["regs"])] if "shrunk" in out else c.sources
        job = source_job(cfg, c, srcs, chips) or case_job(cfg, c, chips=chips)
        path = Path(waves_dir) / f"fuzz_seed{c.seed}.{waves}"
        r = Cosim(cfg, chips, simulator, mem=mem, waves=waves, mac=mac).run([job], waves_file=path)[0]
        out["waves"] = str(path)
        # a fresh simulator starts from zeroed SPM/ACC: say whether the mismatch shows in this run too
        out["waves_mismatch"] = compare(cfg, job, r, ring=ring) is not None
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    return out


# -- functional coverage ------------------------------------------------------------------------
#
# Points beyond (opcode, depth, mode), taken from the simulator's run of each program (its Stats and
# Trace) and the program itself; ``FUNCTIONAL`` is every point a run can hit, so what was not hit
# can be listed.

def _unit(mn: str) -> str:
    return UNIT_NAME[BY_MNEMONIC[mn].unit]


def _token_pairs() -> list[str]:
    """``producer->consumer`` of every token pair ``Gen.phase`` can make (``CONSUMERS``, ``PRODUCES``),
    the scalar unit (an ``sld`` waiting) among the consumers."""
    out = []
    for prod, spaces in PRODUCES.items():
        cons = {_unit(c) for sp in spaces for c in CONSUMERS[sp]} | {"scalar"}
        out += [f"{prod}->{c}" for c in sorted(cons - {prod})]
    return out


def _functional_universe() -> list[tuple]:
    pts = [("queue_full", UNIT_NAME[u]) for u in QUEUED_UNITS]
    pts += [("token_wait", pair) for pair in _token_pairs()]
    pts += [("branch", op, t) for op in BRANCHES for t in ("taken", "not_taken")]
    for op in ("dma.ld", "dma.st"):
        pts += [("dma", op, "contig", a, ln) for a in ("aligned", "unaligned") for ln in ("full", "partial")]
        pts += [("dma", op, "strided", a) for a in ("aligned", "unaligned")]
    pts += [("mem_ports", sp, k) for sp in ("spm", "acc") for k in ("read+write", "write+write", "3_units")]
    return pts


#: every functional coverage point (see ``functional_points``)
FUNCTIONAL = tuple(_functional_universe())


def _static_loops(prog) -> list[dict]:
    """Per pc, the loop registers as the ``loop`` instructions before it in program order set them:
    {lr: (cmode, count, (s0, s1, s2))}. Exact for the generator's programs, whose nests sit right
    before their instruction; an approximation for a program that sets a loop register on another path."""
    cur: dict = {}
    out = []
    for ins in prog.instructions:
        out.append(dict(cur))
        if ins is not None and ins.op == "loop":
            f = ins.as_dict()
            cur[f["lr"]] = (f["cmode"], f["count"], tuple(f.get(f"s{k}", 0) for k in range(3)))
    return out


def _dma_rows(cfg, ins, loops: dict, regs: dict, index: int):
    """(DRAM byte address of each row, contiguous, row bytes) of instance ``index`` of a DMA instruction;
    None when an operand depends on a register the host did not write."""
    from isa.semantics import nest_slice
    f = ins.as_dict()
    slots = ins.spec.slots
    bases = []
    for sl in slots:
        x = f["x" + sl]
        if x and x not in regs:
            return None
        bases.append(f[sl] + (regs.get(x, 0) if x else 0))
    counts, strides = [], []
    for lr in range(f["rep_base"], f["rep_base"] + f["rep_depth"]):
        if lr not in loops:
            return None
        cmode, count, st = loops[lr]
        if cmode:
            if count not in regs:
                return None
            count = regs[count]
        counts.append(count)
        strides.append(st[:len(slots)])
    a = nest_slice(counts, strides, bases, index, index + 1)[0] if counts else bases
    addr = int(a[slots.index("dram")])
    e = SPACE_BYTES[Space(f["space"])]
    return [addr + r * f["rstride"] for r in range(f["rows"])], f["estride"] == e, f["len"] * e


def _touches(ins) -> tuple[set, set]:
    """(memories read, memories written) by an instance of ``ins`` ("spm"/"acc")."""
    f, op = ins.as_dict(), ins.op
    sp = lambda k: "acc" if f[k] == Space.ACC else "spm"     # noqa: E731
    if op == "dma.ld":
        return set(), {sp("space")}
    if op == "dma.st":
        return {sp("space")}, set()
    if op in ("mxu.lw", "vlutld"):
        return {"spm"}, set()
    if op in ("mxu.mm", "mxu.mma"):
        return ({"spm", "acc"} if op == "mxu.mma" else {"spm"}), {"acc"}
    if op == "vreq":
        return {"acc"}, {"spm"}
    if op == "link.send":
        return {sp("space")}, set()
    if op == "link.recv":
        return set(), {sp("space")}
    if "dspace" in f:
        rd = {sp("aspace")}
        if f.get("bmode") in (SrcMode.SPM, SrcMode.ACC):
            rd.add("acc" if f["bmode"] == SrcMode.ACC else "spm")
        return rd, {sp("dspace")}
    return set(), set()


def functional_points(cfg, programs, regs, chips) -> set:
    """The ``FUNCTIONAL`` points one simulator run hit; ``programs``: the Program of each chip,
    ``regs``: the host-written registers of each chip, ``chips``: the simulator's chips after the run
    (``sim_run(..., trace on)``: their ``stats`` and ``trace``). A stopped run counts up to its stop.

    * ``queue_full`` U: the issue stage waited because U's queue held ``isa.timing.QUEUE_DEPTH`` entries
      (``Stats.stalls["queue_full(U)"]``).
    * ``token_wait`` P->C: an instance of C (or the issue stage's ``sld``/``sst`` for C = scalar) was
      ready but waited for a token from P (``Stats.stalls["C.token(P)"]``, ``["token(P)"]``).
    * ``branch`` op taken / not_taken: from the trace, the next instruction issued after the branch is
      its target (taken) or the one after it (not taken). An entry with a zero trip count leaves no
      record, so the next one seen may lie further on: a forward branch counts as taken when the next
      pc is >= its target or before it, a backward one when the next pc is in target..branch.
    * ``dma`` op contig|strided, aligned|unaligned, full|partial: each row an instance moves, as the
      DMA walks it (rtl/dma.py, contract section 3): contiguous (``estride`` = element size,
      ``ceil(len*e / beat)`` beats) or one element per beat; its DRAM address a multiple of
      ``dma_beat_bytes`` or not; for a contiguous row, ``len*e`` a multiple of the beat (the last beat
      full) or not. The instance's address comes from the program (its loop nest as the ``loop``
      instructions before it set it, the host registers).
    * ``mem_ports`` space read+write / write+write / 3_units: the default SPM and ACC are one flat
      memory each with several ports (``rtl.chip.MEMORY_PORTS``; no banks), so a "bank conflict" is
      several units using one memory at once: the start..retire windows of instances of different
      units overlap, one reading and another writing it, two writing it (the live-value-table build,
      ``rtl/mem.py`` lvt, keeps one bank per write port: there the two writes land in different banks
      and the table picks), or three units at once.
    """
    pts: set = set()
    bad = {f"queue_full({UNIT_NAME[u]})": UNIT_NAME[u] for u in QUEUED_UNITS}
    for ch, prog, rg in zip(chips, programs, regs):
        rg = {k: v for k, v in (rg or {}).items() if k}
        for k, v in ch.stats.stalls.items():
            if v <= 0:
                continue
            if k in bad:
                pts.add(("queue_full", bad[k]))
            m = re.fullmatch(r"(?:(\w+)\.)?token\((\w+)\)", k)
            if m:
                pts.add(("token_wait", f"{m.group(2)}->{m.group(1) or 'scalar'}"))
        if ch.trace is None:
            continue
        recs = ch.trace.records
        ins = prog.instructions
        # issued instructions in issue order: scalar records, and one (pc, issue) per queued entry
        issued = sorted({(r.issue, r.pc) for r in recs})
        nxt = {}
        for (t, pc), (_, p2) in zip(issued, issued[1:]):
            nxt[(t, pc)] = p2
        for r in recs:
            if r.unit != Unit.SCALAR or r.pc >= len(ins) or ins[r.pc] is None or ins[r.pc].op not in BRANCHES:
                continue
            p = nxt.get((r.issue, r.pc))
            if p is None:
                continue
            tg = ins[r.pc].as_dict()["target"]
            taken = (p >= tg or p <= r.pc) if tg > r.pc else (tg <= p <= r.pc)
            pts.add(("branch", ins[r.pc].op, "taken" if taken else "not_taken"))
        loops = _static_loops(prog)
        beat = cfg.dma_beat_bytes
        spans: dict = {"spm": [], "acc": []}
        for r in recs:
            if r.pc >= len(ins) or ins[r.pc] is None or r.unit == Unit.SCALAR:
                continue
            i = ins[r.pc]
            if i.op in ("dma.ld", "dma.st"):
                got = _dma_rows(cfg, i, loops[r.pc], rg, r.index)
                if got:
                    rows, contig, nbytes = got
                    for a in rows:
                        al = "aligned" if a % beat == 0 else "unaligned"
                        pts.add(("dma", i.op, "contig", al, "full" if nbytes % beat == 0 else "partial")
                                if contig else ("dma", i.op, "strided", al))
            rd, wr = _touches(i)
            end = r.retire if r.retire is not None else r.start
            for s in rd | wr:
                spans[s].append((r.start, end, r.unit, s in wr))
        for s, iv in spans.items():
            pts |= _port_points(s, iv)
    return pts


def _port_points(space: str, spans: list) -> set:
    """``mem_ports`` points of one memory from (start, end, unit, writes) windows: a sweep over time."""
    ev = sorted([(a, 0, k) for k, (a, _, _, _) in enumerate(spans)] + [(b + 1, -1, k) for k, (_, b, _, _)
                                                                         in enumerate(spans)])
    active: dict = {}
    out: set = set()
    j = 0
    while j < len(ev):
        t = ev[j][0]
        while j < len(ev) and ev[j][0] == t:        # every change at t, removals first
            _, kind, k = ev[j]
            if kind < 0:
                active.pop(k, None)
            else:
                active[k] = spans[k]
            j += 1
        units = {}
        for _, _, u, w in active.values():
            units[u] = units.get(u, False) or w
        if len(units) >= 2:
            writers = sum(units.values())
            if writers >= 2:
                out.add(("mem_ports", space, "write+write"))
            if writers >= 1 and len(units) > writers:
                out.add(("mem_ports", space, "read+write"))
            if len(units) >= 3:
                out.add(("mem_ports", space, "3_units"))
    return out


def functional_table(points: set) -> dict:
    """{"hit": n, "of": n, "missing": [points not hit, as text]} over ``FUNCTIONAL``."""
    missing = [p for p in FUNCTIONAL if p not in points]
    return {"hit": len(FUNCTIONAL) - len(missing), "of": len(FUNCTIONAL),
            "missing": [" ".join(map(str, p)) for p in missing],
            "points": sorted(" ".join(map(str, p)) for p in points if p in set(FUNCTIONAL))}


# -- shrinking ---------------------------------------------------------------------------------
#
# A failing program pair is shrunk on its assembly text: delta debugging (ddmin) removes
# instruction lines of either chip while the failure persists, then numbers are lowered (loop trip
# counts, ``n=``, ``rows=``, ``len=``, ``k=``, ``seti`` counts of a counted loop), and both again
# until nothing more goes. ``shrink_case`` adds chip 0's host registers as one more text
# (``host_text``): a register cut is 0, a value lowered is lowered. Each round's candidates are
# judged together (one batch: one HDL simulator session for co-simulation).

_NUM = re.compile(r"(\b(?:n|rows|len|k)=)(\d+)|^(\s*loop\s+l\d+,\s*)(\d+)|^(\s*seti\s+r\d+,\s*)(\d+)\s*$")


def _is_instr(line: str) -> bool:
    t = line.split(";")[0].split("#")[0].strip()
    return bool(t) and not t.startswith(".") and not re.fullmatch(r"[\w.$]+:", t)


@dataclass
class Shrunk:
    sources: list           # the shrunk program text of each chip
    lines_from: int         # instruction lines before (both chips)
    lines_to: int           # and after
    rounds: int             # batches judged
    tried: int              # candidates judged
    seconds: float
    keep: list = field(default_factory=list)   # per chip: original line numbers kept
    regs: dict | None = None                    # chip 0's host registers after the shrink (shrink_case)


def shrink(sources: list, fails, *, max_rounds: int = 200) -> Shrunk:
    """The smallest program pair found that still ``fails``: ``fails(list of candidates) -> list of
    bools``, a candidate being a list with the text of each chip's program (a candidate that does not
    assemble must be judged not failing). ``sources`` must fail. Deterministic for a deterministic
    ``fails``."""
    import time
    t0 = time.perf_counter()
    lines = [s.splitlines() for s in sources]
    items = [(c, k) for c, ls in enumerate(lines) for k, ln in enumerate(ls) if _is_instr(ln)]
    total = len(items)
    state = {"rounds": 0, "tried": 0}

    def text(keep, edits) -> list:
        ks = set(keep)
        out = []
        for c, ls in enumerate(lines):
            out.append("\n".join(edits.get((c, k), ln) for k, ln in enumerate(ls)
                                 if (c, k) in ks or not _is_instr(ln)) + "\n")
        return out

    def judge(cands) -> int | None:
        """Index of the first failing candidate (all judged in one batch), or None."""
        if not cands or state["rounds"] >= max_rounds:
            return None
        state["rounds"] += 1
        state["tried"] += len(cands)
        res = list(fails([text(k, e) for k, e in cands]))
        return next((i for i, f in enumerate(res) if f), None)

    keep, edits = list(items), {}
    changed = True
    while changed and state["rounds"] < max_rounds:
        changed = False
        n = 2
        while len(keep) >= 1 and state["rounds"] < max_rounds:            # ddmin over lines
            n = min(n, len(keep))
            size = -(-len(keep) // n)
            chunks = [keep[i:i + size] for i in range(0, len(keep), size)]
            cands = [([x for x in keep if x not in drop], edits) for drop in map(set, chunks)]
            hit = judge(cands)
            if hit is not None:
                keep = cands[hit][0]
                n = max(n - 1, 2)
                changed = True
                continue
            if n >= len(keep):
                break
            n = min(2 * n, len(keep))
        while state["rounds"] < max_rounds:                                 # lower numbers
            cands = []
            for it in keep:
                ln = edits.get(it, lines[it[0]][it[1]])
                for m in _NUM.finditer(ln):
                    g = next(i for i in (2, 4, 6) if m.group(i) is not None)
                    v = int(m.group(g))
                    for w in sorted({1, v // 2, v - 1}):
                        if 1 <= w < v:
                            new = ln[:m.start(g)] + str(w) + ln[m.end(g):]
                            cands.append((keep, {**edits, it: new}))
            hit = judge(cands)
            if hit is None:
                break
            edits = cands[hit][1]
            changed = True
    out = [_drop_unused_labels(t) for t in text(keep, edits)]
    return Shrunk(out, total, len(keep), state["rounds"], state["tried"], round(time.perf_counter() - t0, 3),
                  [[k for (c, k) in keep if c == ch] for ch in range(len(lines))])


def _drop_unused_labels(text: str) -> str:
    """``text`` without the label lines no instruction names (they emit no word: the program is the same)."""
    lines = text.splitlines()
    used = set(re.findall(r"[\w.$]+", " ".join(ln.split(";")[0] for ln in lines if _is_instr(ln))))
    return "\n".join(ln for ln in lines if _is_instr(ln) or not re.fullmatch(r"\s*([\w.$]+):\s*", ln)
                     or re.fullmatch(r"\s*([\w.$]+):\s*", ln).group(1) in used) + "\n"


#: the header of the text that carries chip 0's host registers through a shrink (``host_text``)
HOST_HEADER = "; host registers of chip 0 (written before the run)"


def host_text(regs: dict) -> str:
    """Chip 0's host-written registers as lines ``seti rN, V`` that ``shrink`` cuts (a register left out
    is 0) and lowers like a program's numbers; ``host_regs`` reads them back."""
    return HOST_HEADER + "\n" + "".join(f"        seti r{r}, {v}\n" for r, v in sorted(regs.items()) if r and v)


def host_regs(text: str) -> dict:
    """The registers of a ``host_text``."""
    return {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^\s*seti\s+r(\d+),\s*(-?\d+)\s*$", text, re.M)}


def source_job(cfg, case: FuzzCase, sources: list, chips: int = 2, max_cycles: int = 20000):
    """The co-simulation job of ``case`` with its programs replaced by ``sources`` (a shrinking
    candidate); None when a text does not assemble. A text after the chips' (``host_text``) replaces
    chip 0's host registers. A ``reserved`` fault's patched word stays with its line (the ``nop``
    before ``halt``) while that line is kept."""
    from isa import assemble
    from isa.errors import TetrachipError
    from .cosim import Job
    words = []
    for c, src in enumerate(sources[:chips]):
        try:
            prog = assemble(src, cfg, filename=f"<fuzz seed {case.seed} chip {c} shrunk>")
        except (TetrachipError, ValueError):
            return None
        w = prog.words()
        if c == 0 and case.fault == "reserved":
            instr = [ln for ln in src.splitlines() if _is_instr(ln)]
            if len(instr) >= 2 and instr[-2].strip() == "nop" and instr[-1].strip() == "halt":
                w[-2] = 0xFF
        words.append(w)
    regs = list(case.regs[:chips])
    if len(sources) > chips:
        regs[0] = host_regs(sources[chips])
    return Job(words, case.drams[:chips], regs, max_cycles, case.seed,
               f"fuzz seed {case.seed} (shrunk)", {"illegal": case.illegal, "fault": case.fault, "sources": sources})


def shrink_case(cfg, case: FuzzCase, cosim, *, chips: int = 2, max_rounds: int = 200,
                report: str | None = None) -> tuple[Shrunk, str | None]:
    """Shrink a case that mismatches on ``cosim`` (a built ``verify.cosim.Cosim``): every round's
    candidates run in one HDL simulator session; a candidate fails when it assembles and ``compare``
    reports a mismatch of a kind the original's ``report`` has (``mismatch_kinds``; without it, any
    mismatch). Returns the shrunk result and its mismatch report."""
    from .cosim import compare, mismatch_kinds
    cfg = ChipConfig.load(cfg)
    reports: dict = {}
    want = mismatch_kinds(report) if report else None

    def fails(cands):
        jobs = [source_job(cfg, case, s, chips) for s in cands]
        live = [j for j in jobs if j is not None]
        results = iter(cosim.run(live)) if live else iter(())
        out = []
        for s, j in zip(cands, jobs):
            if j is None:
                out.append(False)
                continue
            r = next(results)
            try:
                rep = compare(cfg, j, r, ring=chips > 1)
            except Exception:           # noqa: BLE001 -- a candidate that breaks the checker is another failure
                rep = None
            if rep and want and not (mismatch_kinds(rep) & want):
                rep = None                      # a mismatch, but another one than the case's
            if rep:             # keyed as shrink returns its texts (unused labels dropped)
                reports[tuple(_drop_unused_labels(t) for t in s)] = rep
            out.append(rep is not None)
        return out

    # chip 0's host registers shrink with the programs: a text of their own (``host_text``)
    host = host_text(case.regs[0])
    sh = shrink(list(case.sources[:chips]) + [host], fails, max_rounds=max_rounds)
    report = reports.get(tuple(sh.sources))
    sh.regs = host_regs(sh.sources[chips])
    sh.sources = sh.sources[:chips]
    sh.lines_from -= len(host_regs(host))           # instruction lines of the programs only
    sh.lines_to -= len(sh.regs)
    sh.keep = sh.keep[:chips]
    return sh, report

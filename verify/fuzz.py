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

Illegal programs (``illegal=True``) are a legal prefix followed by one fault: a VPU overlap, an address
out of range, a token overflow, a jump out of the program, a reserved word, a link type mismatch.

Registers: r1, r2 trip counts (host), r3 an address base (host), r4-r7 scratch, r8 loop counter,
r9 a VPU/requantizer scalar operand (host).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from isa import ChipConfig
from isa.builder import Label, Mem, ProgramBuilder, acc, dram, spm
from isa.regs import L0, ZERO, LoopReg, Reg
from isa.table import (BRANCHES, INSTRUCTIONS, SCALAR_ALU, SPACE_BYTES, UNIT_NAMES, VPU_BINARY, VPU_UNARY, Space,
                       Unit)
from isa.timing import lut_rows

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
#: registers of the generated programs (see the module docstring)
TRIPS = {1: Reg(1), 2: Reg(2)}
BASE, LOOP, OPERAND = Reg(3), Reg(8), Reg(9)
SCRATCH = range(4, 8)
SLD_DST, FAULT_ADDR = Reg(5), Reg(4)


class _Alloc:
    """Bump allocator of rows / bytes; ``reset`` at a phase boundary."""

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi, self.at = lo, hi, lo

    def reset(self):
        self.at = self.lo

    def take(self, n: int) -> int | None:
        if self.at + n > self.hi:
            return None
        a, self.at = self.at, self.at + n
        return a


class Gen:
    def __init__(self, cfg: ChipConfig, rng: random.Random, regs: dict):
        self.cfg, self.r, self.regs = cfg, rng, regs
        self.C, self.R = cfg.cols, cfg.rows
        self.b = ProgramBuilder(cfg)          # chip 0
        self.partner = ProgramBuilder(cfg)    # chip 1: the complement of chip 0's link traffic
        self.points: set = set()
        self.labels = 0
        # scalar rows at the top of SPM/ACC: no queued instruction touches them
        self.spm = _Alloc(0, cfg.spm_rows - 16)
        self.acc = _Alloc(0, cfg.acc_rows - 8)
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

    def alloc(self, space: str, n: int) -> int | None:
        return (self.spm if space == "spm" else self.acc).take(max(n, 1))

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
    def queued(self, kind: str, reads_from=None):
        """One queued instruction (with its loops); returns (instructions, unit, written region) or None.

        Every operand has its own freshly allocated rows. ``reads_from``: (space, row, rows) a
        producer wrote; the instruction reads those rows instead (a consumer, no repeat nest)."""
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
            dst = self.alloc(space, span)
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
            rs = ln * esz + r.choice([0, 0, 4])
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
            return loops + [_Ins("dma.st", (dram[out], a), dict(rows=rows, len=ln, rstride=rs, rep=rep))], \
                Unit.STORE, None
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
            dst = self.alloc("acc", span)
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
            dst = self.alloc(dsp, span)
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
            dst = self.alloc("spm", span)
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
        for _ in range(r.randint(1, 5)):
            k = r.choice(kinds)
            got = self.queued(k)
            if got is None:
                continue
            instrs, unit, wrote = got
            consumer = None
            if wrote and r.random() < 0.4:
                # a consumer of what this instruction wrote, ordered by a token
                ck = {"spm": ["dma.st", "mxu.lw", "mxu.mm", "vmov", "vadd"],
                      "acc": ["dma.st", "vreq", "vrelu", "vsub"]}[wrote[0]]
                c = r.choice(ck)
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
            elif wrote and r.random() < 0.2:
                # the scalar unit waits for it and reads one lane of what it wrote
                instrs[-1].kw.update(sync="once", signal="scalar")
                instrs.append(_Ins("sld", (SLD_DST, MEM[wrote[0]][wrote[1]], r.randint(0, self.C - 1)),
                                   dict(wait=UNIT_NAME[unit])))
                self.cover("token", 0, f"{UNIT_NAME[unit]}->scalar")
            used.add(UNIT_NAME[unit])
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

    def link(self):
        r = self.r
        space = r.choice(["spm", "acc"])
        n = r.randint(1, 4)
        mine = self.alloc(space, n)
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


def coverage_table(points: set) -> dict:
    """{mnemonic: {"depths": [...], "modes": [...], "points": n}} and the opcodes never covered."""
    per: dict = {}
    for mn, d, mode in points:
        e = per.setdefault(mn, {"depths": set(), "modes": set(), "points": 0})
        e["depths"].add(d)
        e["modes"].add(mode)
        e["points"] += 1
    out = {k: {"depths": sorted(v["depths"]), "modes": sorted(v["modes"]), "points": v["points"]}
           for k, v in sorted(per.items())}
    missing = [m for m in ALL_OPCODES if m not in per]
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
             progress=None, require_all_opcodes: bool = True, mem: str | None = None) -> dict:
    """``count`` random cases (seeds ``seed .. seed+count-1``) on the Verilog of ``Ring(cfg, 2)``
    against ``sim.System``; returns figures, mismatch reports and coverage. ``mem``: how SPM and
    ACC are built (``rtl.mem.IMPLS``; default ``$TETRACHIP_COSIM_MEM``, else flat)."""
    import time
    from .cosim import Cosim, compare
    cfg = ChipConfig.load(cfg)
    t0 = time.perf_counter()
    cs = Cosim(cfg, 2, simulator, mem=mem).build()
    build_s = time.perf_counter() - t0
    points, mismatches = set(), []
    illegal = cycles = 0
    for lo in range(seed, seed + count, batch):
        cases = [generate(cfg, s) for s in range(lo, min(seed + count, lo + batch))]
        jobs = [case_job(cfg, c) for c in cases]
        results = cs.run(jobs)
        for c, j, r in zip(cases, jobs, results):
            points |= c.points
            illegal += c.illegal
            cycles += r["bench_cycles"]
            rep = compare(cfg, j, r, ring=True)
            if rep:
                mismatches.append(rep + "\n--- program (chip 0)\n" + c.sources[0])
        if progress:
            progress(len(cases))
    cov = coverage_table(points)
    return {"config": cfg.name, "simulator": cs.simulator, "mem": cs.mem, "seed": seed, "programs": count,
            "illegal": illegal, "mismatches": len(mismatches), "reports": mismatches, "rtl_cycles": cycles,
            "build_s": round(build_s, 2), "wall_s": round(time.perf_counter() - t0, 2), "coverage": cov,
            "ok": not mismatches and not (require_all_opcodes and cov["missing"])}

"""The reference level: a Program run one instruction at a time, in program order, on
``isa.semantics`` — the architectural meaning of a program, with no queues, tokens or time.

Where the simulator overlaps units and times every instance (the timing contract), this model
finishes each instruction, every instance of its loop nest in order, before fetching the next, and
ignores ``wait``/``signal``/``sync``/``fence``: a program free of races means the same either way,
so for every such program the final memories here equal the simulator's and the RTL's
(``verify.cases`` checks that for every case). Errors with an architectural cause stop the run with
their code: an undecodable word (ILLEGAL_INSTRUCTION), a fetch beyond the program (PC_RANGE), an
address outside its memory (ADDRESS_RANGE), a VPU destination partly overlapping a source
(OVERLAP). Token counts, races, deadlocks and links belong to the timed models; a program with a
link instruction is refused (``NotModelled``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from isa import semantics as sem
from isa import timing
from isa.config import ChipConfig
from isa.encoding import check_values, decode
from isa.errors import DecodeError, EncodeError, ErrorCode, TetrachipError
from isa.table import (LINK_UNITS, LUT_ENTRIES, QCFG_RESET, SPACE_DTYPE, SPACE_NAME, CountMode, ScaleMode, Space,
                       SrcMode, Unit)

__all__ = ["NotModelled", "Stop", "State", "run"]


class NotModelled(TetrachipError):
    """A program the reference level does not model (it uses a link)."""


class Stop(Exception):
    """The run stopped with an error code at ``pc``."""

    def __init__(self, code: ErrorCode, msg: str, pc: int | None):
        super().__init__(f"{code.name} at pc {pc}: {msg}")
        self.code, self.pc = code, pc


@dataclass
class State:
    """Architectural state after a run; ``code`` is OK or the error that stopped it at ``pc``."""

    cfg: ChipConfig
    dram: np.ndarray
    spm: np.ndarray
    acc: np.ndarray
    regs: list[int]
    code: ErrorCode = ErrorCode.OK
    pc: int | None = None
    #: instances executed per unit, keyed like ``sim.Stats.instances`` ("scalar", "load", ...)
    instances: Counter = field(default_factory=Counter)

    def mem(self, space: int) -> np.ndarray:
        return self.spm if space == Space.SPM else self.acc


def _decode_all(words, cfg) -> list:
    """One Instruction per word, or the (code, message) that fetching it raises."""
    out = []
    for pc, w in enumerate(words):
        try:
            ins = decode(int(w), cfg, pc=pc)
            check_values(ins, cfg)
            out.append(ins)
        except (DecodeError, EncodeError) as e:
            out.append((ErrorCode.ILLEGAL_INSTRUCTION, str(e)))
    return out


def _rows(st: State, space: int, lo: int, n: int, what: str, pc: int) -> None:
    depth = st.cfg.spm_rows if space == Space.SPM else st.cfg.acc_rows
    if n > 0 and (lo < 0 or lo + n > depth):
        raise Stop(ErrorCode.ADDRESS_RANGE, f"{what} rows {lo}..{lo + n - 1} outside {SPACE_NAME[space]}", pc)


def _overlap(dspace: int, dst: int, n: int, sources, pc: int) -> None:
    for sp, lo, cnt in sources:
        if sp == dspace and n and cnt and lo < dst + n and dst < lo + cnt and not (lo == dst and cnt == n):
            raise Stop(ErrorCode.OVERLAP, f"destination rows {dst}.. partly overlap source rows {lo}..", pc)


def _indices(counts):
    """Every index tuple of a nest, innermost fastest, lazily (a trip count may be 2**32 - 1)."""
    if any(c == 0 for c in counts):
        return
    idx = [0] * len(counts)
    while True:
        yield tuple(idx)
        j = len(counts) - 1
        while j >= 0 and idx[j] + 1 == counts[j]:
            idx[j] = 0
            j -= 1
        if j < 0:
            return
        idx[j] += 1


class _Machine:
    def __init__(self, st: State):
        self.st, self.cfg = st, st.cfg
        self.loops = [(0, (0, 0, 0))] * self.cfg.loop_regs
        self.weights = np.zeros((self.cfg.rows, self.cfg.cols), np.int8)
        self.lut = np.zeros(LUT_ENTRIES, np.int8)
        self.qcfg = tuple(QCFG_RESET.values())

    # -- queued instructions: every instance of the nest, in order ----------------------------
    def queued(self, ins, f: dict, pc: int) -> None:
        regs = self.st.regs
        if ins.spec.unit in LINK_UNITS:
            raise NotModelled(f"pc {pc}: {ins.op} needs a link; the reference level models one chip "
                                 "without links")
        nest = self.loops[f["rep_base"]:f["rep_base"] + f["rep_depth"]]
        # addresses are 32-bit two's complement: base + register and every instance address wrap
        # modulo 2**32 as the chip's adders wrap them (docs/microarchitecture.md section 2)
        bases = [sem.wrap32_int(f[s] + regs[f["x" + s]]) for s in ins.spec.slots]
        b = regs[f["b"]] if f.get("bmode") == SrcMode.REG else f.get("b")
        scale = regs[f["scale"]] if f.get("smode") == ScaleMode.REG else f.get("scale")
        unit = Unit(ins.spec.unit).name.lower()
        for idx in _indices([c for c, _ in nest]):
            a = [sem.wrap32_int(base + sum(i * s[k] for i, (_, s) in zip(idx, nest))) for k, base in enumerate(bases)]
            getattr(self, "q_" + ins.spec.format)(ins.op, f, a, b, scale, pc)
            self.st.instances[unit] += 1

    def q_dma(self, op, f, a, b, scale, pc):
        st, cfg = self.st, self.cfg
        local, dram = (a[0], a[1]) if op == "dma.ld" else (a[1], a[0])
        space, rows, length, rs, es = f["space"], f["rows"], f["len"], f["rstride"], f["estride"]
        if length == 0:                 # no element: nothing moves, nothing is checked (section 3)
            return
        _rows(st, space, local, rows, op, pc)
        lo, hi = sem.dma_footprint(dram, rows, length, rs, es, space)
        if hi > lo and (lo < 0 or hi > cfg.dram_bytes):
            raise Stop(ErrorCode.ADDRESS_RANGE, f"{op} DRAM bytes {lo}..{hi - 1} outside DRAM", pc)
        mem = st.mem(space)
        if op == "dma.ld":
            mem[local:local + rows] = sem.dma_gather(st.dram, dram, rows, length, rs, es, space, cfg.cols)
        else:
            sem.dma_scatter_into(st.dram, mem[local:local + rows], dram, length, rs, es, space)

    def q_lw(self, op, f, a, b, scale, pc):
        k = f["k"]
        _rows(self.st, Space.SPM, a[0], k, op, pc)
        self.weights = sem.load_weights(self.st.spm[a[0]:a[0] + k], k, self.cfg.rows, self.cfg.cols)

    def q_mm(self, op, f, a, b, scale, pc):
        st, (dst, src), n = self.st, a[:2], f["n"]
        _rows(st, Space.ACC, dst, n, op, pc)
        _rows(st, Space.SPM, src, n, op, pc)
        x = st.spm[src:src + n]
        if n:
            st.acc[dst:dst + n] = (sem.matmul_acc(st.acc[dst:dst + n], x, self.weights) if op == "mxu.mma"
                                   else sem.matmul_rows(x, self.weights))

    def q_vbin(self, op, f, a, b, scale, pc):
        st, n = self.st, f["n"]
        srcs = [(f["aspace"], a[1], n)]
        if f["bmode"] in (SrcMode.SPM, SrcMode.ACC):
            srcs.append((Space(int(f["bmode"])), a[2], n))
        for sp, lo, cnt in [(f["dspace"], a[0], n)] + srcs:
            _rows(st, sp, lo, cnt, op, pc)
        _overlap(f["dspace"], a[0], n, srcs, pc)
        if n:
            bv = st.mem(srcs[1][0])[srcs[1][1]:srcs[1][1] + n] if len(srcs) > 1 else b
            st.mem(f["dspace"])[a[0]:a[0] + n] = sem.vpu_binary(op, st.mem(f["aspace"])[a[1]:a[1] + n], bv,
                                                                f["dspace"])

    def q_vun(self, op, f, a, b, scale, pc):
        st, n = self.st, f["n"]
        _rows(st, f["dspace"], a[0], n, op, pc)
        _rows(st, f["aspace"], a[1], n, op, pc)
        _overlap(f["dspace"], a[0], n, [(f["aspace"], a[1], n)], pc)
        if n:
            st.mem(f["dspace"])[a[0]:a[0] + n] = sem.vpu_unary(op, st.mem(f["aspace"])[a[1]:a[1] + n], f["dspace"],
                                                               self.lut)

    def q_vlutld(self, op, f, a, b, scale, pc):
        n = timing.lut_rows(self.cfg)
        _rows(self.st, Space.SPM, a[0], n, op, pc)
        self.lut = sem.lut_from_rows(self.st.spm[a[0]:a[0] + n])

    def q_vqcfg(self, op, f, a, b, scale, pc):
        self.qcfg = tuple(f[k] for k in QCFG_RESET)

    def q_vreq(self, op, f, a, b, scale, pc):
        st, n, (dst, src) = self.st, f["n"], a[:2]
        _rows(st, Space.SPM, dst, n, op, pc)
        _rows(st, Space.ACC, src, n, op, pc)
        if f["smode"] == ScaleMode.ROW:
            _rows(st, Space.ACC, a[2], 1, "vreq scale", pc)
            s = sem.scale16(st.acc[a[2]])
        else:
            s = int(sem.scale16(scale))
        if n:
            st.spm[dst:dst + n] = sem.requantize(st.acc[src:src + n], s, *self.qcfg)

    # -- scalar instructions ------------------------------------------------------------------
    def scalar(self, ins, f: dict, pc: int) -> int:
        """Execute one scalar instruction; the next pc."""
        st, op = self.st, ins.op
        regs = st.regs
        fmt = ins.spec.format

        def set_reg(r, v):
            if r:
                regs[r] = sem.wrap32_int(v)
        if fmt == "seti":
            set_reg(f["rd"], f["imm"])
        elif fmt == "alu":
            set_reg(f["rd"], sem.scalar_alu(op, regs[f["rs1"]], regs[f["rs2"]]))
        elif fmt == "alui":
            set_reg(f["rd"], sem.scalar_alu("add", regs[f["rs1"]], f["imm"]))
        elif fmt == "branch":
            if sem.branch_taken(op, regs[f["rs1"]], regs[f["rs2"]]):
                return f["target"]
        elif fmt == "jump":
            return f["target"]
        elif fmt == "loop":
            count = f["count"] if f["cmode"] == CountMode.IMM else sem.u32(regs[f["count"]])
            self.loops[f["lr"]] = (count, (f["s0"], f["s1"], f["s2"]))
        elif fmt == "smem":
            space, row, lane = f["space"], f["addr"] + regs[f["xaddr"]], f["lane"]
            _rows(st, space, row, 1, op, pc)
            if op == "sld":
                set_reg(f["rd"], sem.scalar_load(st.mem(space)[row], lane))
            else:
                st.mem(space)[row, lane] = sem.scalar_store_value(regs[f["rd"]], space)
        return pc + 1                   # nop, fence (every earlier instruction has finished)


def run(cfg, words, dram: np.ndarray | None = None, regs: dict[int, int] | None = None,
        max_instructions: int = 1_000_000) -> State:
    """Run the program ``words`` (raw words or a Program) from pc 0 until ``halt`` or an error;
    ``dram``: the initial DRAM image, ``regs``: scalar registers written before the start.
    More than ``max_instructions`` executed instructions stop the run with CYCLE_LIMIT."""
    cfg = ChipConfig.load(cfg)
    words = words.words() if hasattr(words, "words") else list(words)
    st = State(cfg, np.zeros(cfg.dram_bytes, np.uint8), np.zeros((cfg.spm_rows, cfg.cols), SPACE_DTYPE[Space.SPM]),
               np.zeros((cfg.acc_rows, cfg.cols), SPACE_DTYPE[Space.ACC]), [0] * cfg.scalar_regs)
    if dram is not None:
        st.dram[:len(dram)] = np.asarray(dram, np.uint8)
    for r, v in (regs or {}).items():
        if r:
            st.regs[r] = sem.wrap32_int(v)
    prog = _decode_all(words, cfg)
    m = _Machine(st)
    pc = 0
    try:
        for _ in range(max_instructions):
            if not 0 <= pc < len(prog):
                raise Stop(ErrorCode.PC_RANGE, f"fetch beyond the end of the program ({len(prog)} instructions)",
                           None)
            ins = prog[pc]
            if isinstance(ins, tuple):
                raise Stop(*ins, pc)
            f = ins.as_dict()
            if ins.spec.queued:
                m.queued(ins, f, pc)
                pc += 1
                continue
            st.instances["scalar"] += 1
            if ins.op == "halt":
                return st
            pc = m.scalar(ins, f, pc)
        raise Stop(ErrorCode.CYCLE_LIMIT, f"more than {max_instructions} instructions", pc)
    except Stop as e:
        st.code, st.pc = e.code, e.pc
        return st

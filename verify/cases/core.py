"""What a case is, what every level reports about it, and how a level's report is checked.

A ``Case`` names a config, a program per chip (assembly, or raw words for an undecodable one), a
DRAM image and scalar registers per chip, the error code the run must stop with (OK: it halts),
the cycle count where the case pins one, and what to check (an ``Expect``). ``Case.setup()``
builds all of that once.

Levels (``LEVELS``), from the meaning down to the gates:

* ``reference``: ``verify.reference``, the program in program order on ``isa.semantics``;
* ``sim``: the cycle-level simulator (the living definition of the ISA and its timing);
* ``rtl``: the Amaranth chip under Amaranth's simulator (flat memories, LVT memories, the MAC
  variants; ``tests/rtl/chip_bench.py``);
* ``verilog``: the Verilog of the chip under cocotb (``verify.cosim``).

Each level reports an ``Outcome`` per chip. ``check`` holds every level to the case: its error
code, its pinned cycle count (timed levels), its expectation. Every level but ``sim`` is also
held to the simulator: the reference's final memories and registers equal the simulator's; the RTL
and Verilog runs equal it bit for bit in DRAM, SPM and ACC, in total cycles and error code, and
in the per-instance line trace (``verify.cosim.compare``).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from isa import ChipConfig, assemble
from isa.errors import ErrorCode
from isa.table import SPACE_BYTES, SPACE_DTYPE, SPACE_NAME, Space, Unit

REFERENCE, SIM, RTL, VERILOG = "reference", "sim", "rtl", "verilog"
LEVELS = (REFERENCE, SIM, RTL, VERILOG)
#: error codes the reference level models (the others come from tokens, time or links)
ARCHITECTURAL = (ErrorCode.OK, ErrorCode.ILLEGAL_INSTRUCTION, ErrorCode.ADDRESS_RANGE, ErrorCode.PC_RANGE,
                 ErrorCode.OVERLAP)
#: what the simulator reports for programs with no defined result on the chip (not compared)
SIM_DIAGNOSTICS = (ErrorCode.RACE, ErrorCode.DEADLOCK, ErrorCode.CYCLE_LIMIT)
UNIT_KEYS = {int(u): u.name.lower() for u in Unit}       # sim.Stats.instances keys


class NotApplicable(Exception):
    """The case has nothing to compare at this level (a random program the simulator stops with a
    diagnostic the chip does not make); the test skips with this reason."""


@dataclass
class Expect:
    """What a run must leave behind (checked when it ends with the case's code, OK or not).

    ``rows``: (space, first row, values) of SPM/ACC; ``dram``: (byte address, uint8 bytes);
    ``regs``: {register: value}, checked where the level reads registers back (the Verilog bench
    does not); ``instances``: {unit key: instances run}; ``exact``: memories ("spm", "acc") whose
    other rows must hold what they held at the start; ``check``: anything else, given the
    ``Outcome`` of chip 0.
    """

    rows: list = field(default_factory=list)
    dram: list = field(default_factory=list)
    regs: dict = field(default_factory=dict)
    instances: dict = field(default_factory=dict)
    exact: tuple = ()
    check: Callable | None = None


@dataclass
class Setup:
    """A case built for its config: one entry per chip (a program is a Program or raw words)."""

    cfg: ChipConfig
    progs: list
    drams: list
    regs: list
    expect: Expect = field(default_factory=Expect)
    #: the error code the run must stop with; None: whatever the simulator says (random programs)
    code: ErrorCode | None = ErrorCode.OK

    def words(self, i: int) -> list[int]:
        p = self.progs[i]
        return list(p) if isinstance(p, (list, tuple)) else p.words()


@dataclass(eq=False)
class Case:
    """One program (or one per chip of a ring) and what its run must give.

    ``build(cfg) -> Setup`` makes the programs and data; ``topology``: "chip" (one chip),
    "loopback" (one chip whose link port 0 feeds its port 1) or "ring" (one chip per program);
    ``levels``: where it runs (default: every level that models it, ``default_levels``).
    """

    name: str
    build: Callable[[ChipConfig], Setup]
    config: str = "tiny"
    cycles: int | None = None
    max_cycles: int = 4000
    topology: str = "chip"
    levels: tuple = ()

    def __post_init__(self):
        if self.topology not in ("chip", "loopback", "ring"):
            raise ValueError(f"case {self.name}: topology {self.topology!r} (chip, loopback or ring)")
        bad = set(self.levels) - set(LEVELS)
        if bad:
            raise ValueError(f"case {self.name}: unknown levels {sorted(bad)} (of {', '.join(LEVELS)})")

    @functools.cached_property
    def cfg(self) -> ChipConfig:
        return ChipConfig.preset(self.config)

    @functools.cached_property
    def setup(self) -> Setup:
        s = self.build(self.cfg)
        if len({len(s.progs), len(s.drams), len(s.regs)}) != 1:
            raise ValueError(f"case {self.name}: programs, DRAM images and registers per chip differ in number")
        return s

    @property
    def chips(self) -> int:
        return len(self.setup.progs)

    @property
    def ring(self) -> bool:
        """Runs on linked chips (``sim.System``, ``rtl.Ring``)."""
        return self.topology != "chip"

    def mnemonics(self) -> set[str]:
        out = set()
        for i in range(self.chips):
            p = self.setup.progs[i]
            if not isinstance(p, (list, tuple)):
                out |= {ins.op for ins in p.instructions}
        return out

    def runs_at(self, level: str) -> bool:
        return level in (self.levels or default_levels(self))

    def job(self, chips: int | None = None):
        """The ``verify.cosim.Job``; ``chips`` > the case's: the other chips of the ring halt."""
        from verify.cosim import Job
        s, n = self.setup, chips or self.chips
        extra = n - self.chips
        halt = [assemble("halt", s.cfg)] * extra
        return Job(list(s.progs) + halt, list(s.drams) + [None] * extra, list(s.regs) + [{}] * extra,
                   self.max_cycles, None, self.name)


def default_levels(case: Case) -> tuple:
    """Every level that models the case: the reference runs one chip without links and knows
    only the architectural error codes; the Verilog bench builds a chip or a ring, not a chip
    looped back on itself."""
    out = [SIM, RTL]
    code = case.setup.code
    if case.topology == "chip" and code in ARCHITECTURAL and "link.send" not in case.mnemonics() \
            and "link.recv" not in case.mnemonics():
        out.insert(0, REFERENCE)
    if case.topology != "loopback":
        out.append(VERILOG)
    return tuple(out)


# -- what a level reports ---------------------------------------------------------------------

@dataclass
class Outcome:
    """One chip after a run at one level. ``cycles``: None at the reference level (no time);
    ``regs``: None where the level does not read registers back; ``spm0``/``acc0``: SPM and ACC
    at the start (the Verilog bench runs jobs back to back: a job starts with the previous
    job's memories)."""

    level: str
    code: ErrorCode
    cycles: int | None
    dram: np.ndarray
    spm: np.ndarray
    acc: np.ndarray
    regs: list | None
    spm0: np.ndarray
    acc0: np.ndarray
    instances: dict | None
    chips: list = field(default_factory=list, repr=False)

    def mem(self, space) -> np.ndarray:
        return self.spm if space_of(space) == Space.SPM else self.acc


def space_of(space) -> Space:
    """A memory named as in assembly ("spm", "acc") or by its ``Space``."""
    return Space[space.upper()] if isinstance(space, str) else Space(space)


def _zeros(cfg, space):
    rows = cfg.spm_rows if space == Space.SPM else cfg.acc_rows
    return np.zeros((rows, cfg.cols), SPACE_DTYPE[space])


def _link(outs: list) -> list:
    for o in outs:
        o.chips = outs
    return outs


def run_reference(case: Case) -> list:
    from verify.reference import run
    s = case.setup
    st = run(s.cfg, s.words(0), s.drams[0], s.regs[0], max_instructions=case.max_cycles)
    return _link([Outcome(REFERENCE, st.code, None, st.dram, st.spm, st.acc, list(st.regs),
                          _zeros(s.cfg, Space.SPM), _zeros(s.cfg, Space.ACC), dict(st.instances))])


def run_sim(case: Case) -> list:
    """The simulator's run (``sim.Chip``, or ``sim.System`` for linked chips), traced."""
    from verify.cosim import sim_run
    s = case.setup
    chips, cycles, codes = sim_run(s.cfg, case.job(), ring=case.ring)
    return _link([Outcome(SIM, codes[i], cycles[i], ch.dram, ch.spm, ch.acc, list(ch.regs),
                          _zeros(s.cfg, Space.SPM), _zeros(s.cfg, Space.ACC), dict(ch.stats.instances))
                  for i, ch in enumerate(chips)])


def from_result(case: Case, level: str, result: dict) -> list:
    """Outcomes from a bench's result in ``verify.cosim``'s form (``Cosim.run``; the Amaranth bench
    converts to it): per chip cycles, error, dram, spm, acc, pre_spm, pre_acc, records, and
    ``regs`` where the bench reads them."""
    outs = []
    for c in result["chips"][:case.chips]:
        n = Counter(UNIT_KEYS[r[0]] for r in c["records"])
        outs.append(Outcome(level, ErrorCode(c["error"]), c["cycles"], c["dram"], c["spm"], c["acc"], c.get("regs"),
                            c["pre_spm"], c["pre_acc"], {k: n.get(k, 0) for k in UNIT_KEYS.values()}))
    return _link(outs)


# -- checks -----------------------------------------------------------------------------------

def check(case: Case, outs: list) -> None:
    """Hold a level's outcomes to the case: chip 0 stops with the case's code (every other chip
    finishes cleanly), the pinned cycle count (timed levels), the expectation."""
    s, o = case.setup, outs[0]
    if s.code is not None:
        got = [x.code for x in outs]
        want = [s.code] + [ErrorCode.OK] * (len(outs) - 1)
        assert got == want, f"{case.name} at {o.level}: stopped with {[c.name for c in got]}, " \
                            f"expected {[c.name for c in want]}"
    if case.cycles is not None and o.cycles is not None:
        assert o.cycles == case.cycles, f"{case.name} at {o.level}: {o.cycles} cycles, expected {case.cycles}"
    e = s.expect
    for space, row, values in e.rows:
        v = np.asarray(values).reshape(-1, s.cfg.cols)
        got = o.mem(space)[row:row + len(v)]
        np.testing.assert_array_equal(got, v, err_msg=f"{case.name} at {o.level}: {SPACE_NAME[space_of(space)]} "
                                                      f"rows {row}..{row + len(v) - 1}")
    for name in e.exact:
        space = space_of(name)
        written = np.zeros(len(o.mem(space)), bool)
        for sp, row, values in e.rows:
            if space_of(sp) == space:
                written[row:row + len(np.asarray(values).reshape(-1, s.cfg.cols))] = True
        start = o.spm0 if space == Space.SPM else o.acc0
        bad = np.flatnonzero((o.mem(space) != start).any(axis=1) & ~written)
        assert bad.size == 0, f"{case.name} at {o.level}: {name} row {bad[0]} changed: " \
                              f"{start[bad[0]].tolist()} -> {o.mem(space)[bad[0]].tolist()}"
    for addr, data in e.dram:
        data = np.asarray(data).reshape(-1).view(np.uint8) if np.asarray(data).dtype != np.uint8 else np.asarray(data)
        np.testing.assert_array_equal(o.dram[addr:addr + data.size], data,
                                      err_msg=f"{case.name} at {o.level}: DRAM bytes {addr:#x}..")
    if e.regs and o.regs is not None:
        got = {r: o.regs[r] for r in e.regs}
        assert got == e.regs, f"{case.name} at {o.level}: registers {got}, expected {e.regs}"
    if e.instances and o.instances is not None:
        got = {u: o.instances.get(u, 0) for u in e.instances}
        assert got == e.instances, f"{case.name} at {o.level}: instances {got}, expected {e.instances}"
    if e.check is not None:
        e.check(o)


def check_against_sim(case: Case, outs: list) -> None:
    """The reference level against the simulator: the same error code; after a clean run the
    same DRAM, SPM, ACC and registers (an error's partial results depend on timing)."""
    sim = run_sim(case)
    o, so = outs[0], sim[0]
    if so.code in SIM_DIAGNOSTICS:
        raise NotApplicable(f"the simulator stops with {so.code.name}")
    assert o.code == so.code, f"{case.name}: reference {o.code.name}, simulator {so.code.name}"
    if o.code == ErrorCode.OK:
        for what in ("dram", "spm", "acc"):
            a, b = getattr(o, what), getattr(so, what)
            if not np.array_equal(a, b):
                where = np.flatnonzero((a != b).reshape(len(a), -1).any(axis=1))[0]
                raise AssertionError(f"{case.name}: reference and simulator {what.upper()} differ first at "
                                     f"{'byte' if what == 'dram' else 'row'} {where}: {a[where]} vs {b[where]}")
        assert o.regs == so.regs, f"{case.name}: registers: reference {o.regs}, simulator {so.regs}"


def check_against_sim_run(case: Case, result: dict, chips: int | None = None) -> None:
    """An RTL or Verilog run (``verify.cosim`` result form) against the simulator from the same
    start: ``verify.cosim.compare`` (memories, cycles, error code, line trace)."""
    from verify.cosim import compare, sim_run
    job = case.job(chips)
    ring = case.ring or (chips or case.chips) > 1
    if case.setup.code is None:           # a random program: only where the chip has a defined result
        pre = [(c["pre_spm"], c["pre_acc"]) for c in result["chips"]]
        _, _, codes = sim_run(case.setup.cfg, job, pre, ring)
        if codes[0] in SIM_DIAGNOSTICS:
            raise NotApplicable(f"the simulator stops with {codes[0].name}")
    report = compare(case.setup.cfg, job, result, ring=ring)
    assert report is None, report


# -- building blocks of cases -----------------------------------------------------------------

def rand_dram(cfg, seed: int, n: int = 4096) -> np.ndarray:
    """A DRAM image whose first ``n`` bytes are random (seeded), the rest zero."""
    rng = np.random.default_rng(seed)
    d = np.zeros(cfg.dram_bytes, np.uint8)
    d[:n] = rng.integers(0, 256, n)
    return d


class Data:
    """A case's operands: arrays placed in a DRAM image from byte ``at`` on, and the loads that
    bring them into SPM/ACC rows before the instruction under test (``prologue``)."""

    def __init__(self, cfg, at: int = 0x8000, dram: np.ndarray | None = None):
        self.cfg, self.at = cfg, at
        self.dram = np.zeros(cfg.dram_bytes, np.uint8) if dram is None else dram
        self.lines: list[str] = []

    def put(self, space, row: int, values) -> np.ndarray:
        """Place ``values`` (rows of ``cols`` lanes) to be loaded into ``space`` rows ``row..``."""
        space = space_of(space)
        v = np.asarray(values).astype(SPACE_DTYPE[space]).reshape(-1, self.cfg.cols)
        raw = v.reshape(-1).view(np.uint8)
        self.dram[self.at:self.at + raw.size] = raw
        self.lines.append(f"dma.ld {SPACE_NAME[space]}[{row}], dram[{self.at:#x}], rows={len(v)}, "
                          f"rstride={self.cfg.cols * SPACE_BYTES[space]}")
        self.at += raw.size
        return v

    def program(self, body: str):
        """The loads, a fence, then ``body`` (and ``halt`` unless it ends with one)."""
        pro = "\n".join(self.lines) + ("\nfence load\n" if self.lines else "")
        body = body.strip()
        if not body.endswith("halt"):
            body += "\nhalt"
        return assemble(pro + body + "\n", self.cfg)


def one(cfg, src: str, dram=None, regs=None, expect: Expect | None = None, code=ErrorCode.OK) -> Setup:
    """The setup of a one-chip case from assembly text."""
    return Setup(cfg, [assemble(src, cfg)], [dram], [dict(regs or {})], expect or Expect(), code)

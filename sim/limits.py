"""The default cycle limit of a run: derived from the programs, so that a program that never halts
(``top: jmp top``) stops with ``CYCLE_LIMIT`` within seconds instead of running for days, while
every program that halts, however long, stays well inside it (docs/simulator.md, "Cycle limit").

The rule (``default_max_cycles``), per chip, then summed over the chips of a run (a chip may wait for
another one's whole run). A *scalar loop* is the pcs from a branch's or jump's target up to it, when
the target is not later. A *plain* register is one the program writes only with ``seti`` and
``addi r, r, imm`` (a counter or a bound); its *value bound* is the largest magnitude of its ``seti``
immediates and of what the host wrote into it.

* A scalar loop closed by a conditional branch on two plain registers, with no forward branch landing inside
  it, makes at most ``2 * (a + b) + 2`` trips (``a``, ``b`` their value bounds): its counter steps
  from one named value towards another. Any other loop makes at most ``B = 2 * V + LOOP_SLACK``
  trips, ``V`` the largest magnitude of any immediate of ``seti``/``addi``, any immediate ``loop``
  count, any register the host wrote, and 128 if the program reads SPM with ``sld`` (an int8 lane);
  each ``mul`` squares ``V``. ``B = 2**32`` for a loop whose compared registers may hold any 32-bit
  value (*tainted*: written by ``sld`` from ACC or ``sll``, or computed from a tainted register), and
  for a loop without compared registers (a ``jmp``, or one a forward branch lands inside) in a program
  with any tainted register; a value read from ACC for an address does not unbound the loops.
* Every instruction costs, per execution, ``1 + BRANCH_PENALTY`` (scalar) or ``1 + T * (I + LAT)``
  (queued): ``T`` its nest's largest instance count (the product of its loop registers' largest trip
  counts: the largest immediate count any ``loop`` gives the register, or the value bound of the
  register that gives the count, ``B`` if that register is not plain), ``I`` the most cycles one
  instance occupies its unit (DMA beats, streamed rows, flits: its fields and the timing contract),
  ``LAT`` every latency of the contract added up (DRAM, MXU pipe and swap, VPU, link, token, issue to
  start); it executes at most the product of the trip bounds of the loops around it.
* The chip's limit: ``MARGIN`` times the sum, at least ``MIN_CYCLES``, at most ``MAX_CYCLES`` (the
  old fixed default: a run that legitimately needs more must name its limit).

A halting program could still exceed it only by counting in a way the rule does not see (an inner
loop that moves an outer loop's counter back, a counter stepped by 0 some trips): the error then says
the limit and how to raise it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from isa import timing
from isa.config import ChipConfig
from isa.encoding import Instruction
from isa.table import BRANCHES, SCALAR_ALU, SPACE_BITS, Space


class Clocked(Protocol):
    """What the bound reads of a loaded chip (``sim.chip.Chip``; the engine's ``Clocked`` has it)."""

    @property
    def cfg(self) -> ChipConfig: ...
    @property
    def regs(self) -> Sequence[int]: ...
    @property
    def prog(self) -> Sequence[Instruction | None]: ...
    @property
    def fields(self) -> Sequence[Mapping[str, int]]: ...

#: how many times one estimated pass over the program a run may take
MARGIN = 4
#: trips a scalar loop may make beyond twice the largest value the program or the host names
LOOP_SLACK = 1 << 10
#: the fewest cycles a run is allowed by default
MIN_CYCLES = 1 << 20
#: the most cycles a run is allowed by default
MAX_CYCLES = 1 << 40
#: trip bound of a scalar loop whose bound the program may compute or read from memory
UNKNOWN_TRIPS = 1 << 32


def _latencies(cfg: ChipConfig) -> int:
    return (cfg.dram_latency + timing.mxu_pipe(cfg) + timing.mxu_swap_delay(cfg) + timing.VPU_LATENCY
            + cfg.link_latency + timing.TOKEN_LATENCY + timing.ISSUE_TO_START)


def _instance_cycles(cfg: ChipConfig, ins: Instruction, f: Mapping[str, int]) -> int:
    """The most cycles one instance of ``ins`` occupies its unit (contract section 3)."""
    op = ins.op
    if op in ("dma.ld", "dma.st"):
        return timing.dma_occupancy(cfg, f["rows"], f["len"], f["space"], f["estride"])
    if op == "mxu.lw":
        return max(1, f["k"])
    if op in ("link.send", "link.recv"):
        return max(1, f["n"]) * timing.flits_per_row(cfg, Space.ACC)
    if op == "vlutld":
        return timing.lut_rows(cfg)
    return max(1, f.get("n", 1))


#: scalar instructions that write their ``rd``
_WRITES_RD = ("seti", "addi", "sld") + SCALAR_ALU


class _Terms:
    """What the bound takes from the loaded program alone (cached per loaded program).

    ``v``: the largest value the program names; ``opaque``: a loop bound may be any 32-bit value;
    ``muls``: its ``mul`` count; ``plain``: ``{r: largest |seti immediate| into r}`` for the registers
    written by nothing but ``seti`` and ``addi r, r, imm`` (a counter or a bound); ``loops``: per scalar
    loop, its compared registers (None for a ``jmp``); ``segments``: per run of pcs enclosed by the
    same loops, those loops and the costs ``{register-count loop registers: cycles}`` of one pass;
    ``imm_max``, ``count_regs``: per loop register, its largest immediate count and the registers
    that give it a count."""

    def __init__(self, chip: Clocked):
        cfg, prog, fields = chip.cfg, chip.prog, chip.fields
        named = [0]
        self.opaque, self.muls = False, 0
        self.imm_max: dict[int, int] = {}
        self.count_regs: dict[int, set[int]] = {}
        seti_max: dict[int, int] = {}
        other_writes: set[int] = set()
        self.loops: list[tuple[int, int, tuple[int, int] | None]] = []
        forward: list[tuple[int, int]] = []          # (pc, target) of each forward branch or jump
        #: registers that may hold any 32-bit value: written by ``sld`` from ACC or ``sll``, or computed
        #: from such a register (closed below)
        self.tainted: set[int] = set()
        for pc, ins in enumerate(prog):
            if ins is None:
                continue
            f, op = fields[pc], ins.op
            if op in ("seti", "addi"):
                named.append(abs(int(f["imm"])))
            if op == "seti":
                seti_max[f["rd"]] = max(seti_max.get(f["rd"], 0), abs(int(f["imm"])))
            elif op in _WRITES_RD and not (op == "addi" and f["rs1"] == f["rd"]):
                other_writes.add(f["rd"])
            if op == "loop":
                if f["cmode"] == 0:
                    named.append(int(f["count"]))
                    self.imm_max[f["lr"]] = max(self.imm_max.get(f["lr"], 0), int(f["count"]))
                else:
                    self.count_regs.setdefault(f["lr"], set()).add(int(f["count"]))
            elif op == "sld" and f["space"] == Space.SPM:
                named.append(1 << (SPACE_BITS[Space.SPM] - 1))      # an int8 lane
            elif op in ("sld", "sll"):          # an int32 lane; a shift by up to 31
                self.opaque = True
                self.tainted.add(f["rd"])
            elif op == "mul":
                self.muls += 1
            if (op in BRANCHES or op == "jmp") and f["target"] <= pc:
                self.loops.append((int(f["target"]), pc, (f["rs1"], f["rs2"]) if op in BRANCHES else None))
            elif op in BRANCHES or op == "jmp":
                forward.append((pc, int(f["target"])))
        self.v = max(named)
        grew = bool(self.tainted)
        while grew:                         # what is computed from a tainted register is tainted
            grew = False
            for pc, ins in enumerate(prog):
                if ins is None or (ins.op not in SCALAR_ALU and ins.op != "addi"):
                    continue
                f = fields[pc]
                if f["rd"] not in self.tainted and ({f.get("rs1"), f.get("rs2")} & self.tainted):
                    self.tainted.add(f["rd"])
                    grew = True
        self.tainted.discard(0)             # r0 reads 0
        # a loop with a forward branch that lands inside it may count in ways its compared registers
        # do not show (a skipped increment, a count kept in another register): it gets the general
        # bound. A forward branch out of the loop (a bounds check that leaves it) only ends it sooner.
        self.loops = [(lo, hi, regs if not any(lo <= b < hi and t <= hi for b, t in forward) else None)
                      for lo, hi, regs in self.loops]
        self.plain = {r: seti_max.get(r, 0) for r in range(cfg.scalar_regs) if r not in other_writes}
        # runs of pcs with the same enclosing loops
        starts: dict[int, list[int]] = {}
        ends: dict[int, list[int]] = {}
        for i, (lo, hi, _) in enumerate(self.loops):
            starts.setdefault(lo, []).append(i)
            ends.setdefault(hi + 1, []).append(i)
        lat = _latencies(cfg)
        self.segments: list[tuple[tuple[int, ...], dict[tuple[int, ...], int]]] = []
        inside: set[int] = set()
        costs: dict[tuple[int, ...], int] = {}
        for pc, ins in enumerate(prog):
            if pc in starts or pc in ends:
                if costs:
                    self.segments.append((tuple(sorted(inside)), costs))
                costs = {}
                inside -= set(ends.get(pc, ()))
                inside |= set(starts.get(pc, ()))
            if ins is None or not ins.spec.queued:
                costs[()] = costs.get((), 0) + 1 + timing.BRANCH_PENALTY
                continue
            f = fields[pc]
            t, by_reg = 1, []               # instances: t * the register-given counts of by_reg
            for lr in range(f["rep_base"], f["rep_base"] + f["rep_depth"]):
                if lr in self.count_regs:
                    by_reg.append(lr)
                else:
                    t *= self.imm_max.get(lr, 0)    # never set by the program: zero trips
            costs[()] = costs.get((), 0) + 1
            if t:
                key = tuple(by_reg)
                costs[key] = costs.get(key, 0) + t * (_instance_cycles(cfg, ins, f) + lat)
        if costs:
            self.segments.append((tuple(sorted(inside)), costs))


def _terms(chip: Clocked) -> _Terms:
    cached = getattr(chip, "_limit_terms", None)
    if cached is not None and cached[0] is chip.prog:
        return cached[1]
    out = _Terms(chip)
    chip._limit_terms = (chip.prog, out)     # type: ignore[attr-defined]
    return out


def chip_cycle_bound(chip: Clocked) -> int:
    """The default cycle limit of one chip's loaded program and host-written registers (module docstring)."""
    tm = _terms(chip)
    host = [abs(int(r)) for r in chip.regs]
    v = max([tm.v] + host)
    for _ in range(min(tm.muls, 6)):        # a product of two values the program can make
        v = min(UNKNOWN_TRIPS, v * v)
    bounded = min(UNKNOWN_TRIPS, 2 * v + LOOP_SLACK)

    def big(regs: Sequence[int] | None) -> int:
        """Trips of a loop its registers do not bound: ``2 * V + LOOP_SLACK``, or 2**32 when one of
        them may hold any 32-bit value (a loop without compared registers: when any register may)."""
        if regs is None:
            return UNKNOWN_TRIPS if tm.opaque else bounded
        return UNKNOWN_TRIPS if any(r in tm.tainted for r in regs) else bounded

    def values(regs: Sequence[int]) -> list[int] | None:
        """The largest |value| of each register (counters, bounds), or None if one is not plain."""
        if not all(r in tm.plain for r in regs):
            return None
        return [max(tm.plain[r], host[r]) for r in regs]

    trips = []
    for _, _, regs in tm.loops:
        vals = values(regs) if regs is not None else None
        trips.append(2 * sum(vals) + 2 if vals is not None else big(regs))
    counts = {}
    for lr, cregs in tm.count_regs.items():
        vals = values(sorted(cregs))
        counts[lr] = max([tm.imm_max.get(lr, 0)] + vals) if vals is not None else big(sorted(cregs))
    total = 0
    for loops, costs in tm.segments:
        times = 1
        for i in loops:
            times *= trips[i]
        for lrs, c in costs.items():
            n = c
            for lr in lrs:
                n *= counts[lr]
            total += n * times
    return min(MAX_CYCLES, max(MIN_CYCLES, MARGIN * total))


def default_max_cycles(chips: Sequence[Clocked]) -> int:
    """The cycle limit of a run of ``chips`` when the caller names none: the sum of each chip's
    ``chip_cycle_bound`` (at most ``MAX_CYCLES``)."""
    return min(MAX_CYCLES, sum(chip_cycle_bound(ch) for ch in chips))


__all__ = ["default_max_cycles", "chip_cycle_bound", "MARGIN", "LOOP_SLACK", "MIN_CYCLES", "MAX_CYCLES",
           "UNKNOWN_TRIPS"]


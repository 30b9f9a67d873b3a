"""The default cycle limit of a run: derived from the programs, so that a program that never halts
(``top: jmp top``) stops with ``CYCLE_LIMIT`` within seconds instead of running for days, while
every program that halts, however long, stays well inside it (docs/simulator.md, "Cycle limit").

The rule (``default_max_cycles``), per chip, then summed over the chips of a run (a chip may wait for
another one's whole run):

* ``B``, the trip bound of a scalar loop (the pcs from a branch's or jump's target up to the branch,
  when the target is not later): a loop of a program that halts counts a register towards a bound
  that the program or the host names, or a sum of two such, so it makes at most
  ``B = 2 * V + LOOP_SLACK`` trips, ``V`` the largest magnitude of any immediate of ``seti``/``addi``,
  any immediate ``loop`` count, any register the host wrote, and 128 if the program reads SPM with
  ``sld`` (an int8 lane); each ``mul`` squares ``V``. Where a bound may be any 32-bit value (``sld``
  from ACC, ``sll``), ``B = 2**32``.
* Every instruction costs, per execution, ``1 + BRANCH_PENALTY`` (scalar) or ``1 + T * (I + LAT)``
  (queued): ``T`` its nest's largest instance count (the product of its loop registers' largest trip
  counts: the largest immediate count any ``loop`` gives the register, or ``B`` for a count from a
  scalar register), ``I`` the most cycles one instance occupies its unit (DMA beats, streamed rows,
  flits: its fields and the timing contract), ``LAT`` every latency of the contract added up (DRAM,
  MXU pipe and swap, VPU, link, token, issue to start); it executes at most ``B ** d`` times, ``d``
  the number of scalar loops around it.
* The chip's limit: ``MARGIN`` times the sum, at least ``MIN_CYCLES``, at most ``MAX_CYCLES`` (the
  old fixed default: a run that legitimately needs more must name its limit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from isa import timing
from isa.config import ChipConfig
from isa.encoding import Instruction
from isa.table import BRANCHES, SPACE_BITS, Space

if TYPE_CHECKING:
    from .engine import Clocked

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


def _program_terms(chip: Clocked) -> tuple[int, bool, int, dict[int, int]]:
    """What the bound takes from the loaded program alone (cached per loaded program): the largest value
    it names, whether a loop bound may be any 32-bit value, its ``mul`` count, and ``{e: c}``: the
    one-pass cost is ``sum(c * B**e)`` (``e`` counts the scalar loops around an instruction and the
    loop registers of its nest whose count comes from a scalar register)."""
    cached = getattr(chip, "_limit_terms", None)
    if cached is not None and cached[0] is chip.prog:
        return cached[1]
    cfg, prog, fields = chip.cfg, chip.prog, chip.fields
    named = [0]
    opaque, muls = False, 0
    spans = []
    imm_max: dict[int, int] = {}
    reg_counts: set[int] = set()
    for pc, ins in enumerate(prog):
        if ins is None:
            continue
        f = fields[pc]
        if ins.op in ("seti", "addi"):
            named.append(abs(int(f["imm"])))
        elif ins.op == "loop":
            if f["cmode"] == 0:
                named.append(int(f["count"]))
                imm_max[f["lr"]] = max(imm_max.get(f["lr"], 0), int(f["count"]))
            else:
                reg_counts.add(f["lr"])
        elif ins.op == "sld" and f["space"] == Space.SPM:
            named.append(1 << (SPACE_BITS[Space.SPM] - 1))      # an int8 lane
        elif ins.op in ("sld", "sll"):          # an int32 lane; a shift by up to 31
            opaque = True
        elif ins.op == "mul":
            muls += 1
        if (ins.op in BRANCHES or ins.op == "jmp") and f["target"] <= pc:
            spans.append((int(f["target"]), pc))
    # how many scalar loops enclose each pc (a difference array over the loops' pc ranges)
    enclosing = [0] * (len(prog) + 1)
    for lo, hi in spans:
        enclosing[lo] += 1
        enclosing[hi + 1] -= 1
    lat = _latencies(cfg)
    terms: dict[int, int] = {}
    depth = 0
    for pc, ins in enumerate(prog):
        depth += enclosing[pc]
        if ins is None or not ins.spec.queued:
            terms[depth] = terms.get(depth, 0) + 1 + timing.BRANCH_PENALTY
            continue
        f = fields[pc]
        t, k = 1, 0                 # instances: t * B**k (a count from a register: at most B, >= any immediate)
        for lr in range(f["rep_base"], f["rep_base"] + f["rep_depth"]):
            if lr in reg_counts:
                k += 1
                # (B >= 2 * every immediate count: B covers an immediate count of the same register)
            else:
                t *= imm_max.get(lr, 0)         # never set by the program: zero trips
        terms[depth] = terms.get(depth, 0) + 1
        if t:
            terms[depth + k] = terms.get(depth + k, 0) + t * (_instance_cycles(cfg, ins, f) + lat)
    out = (max(named), opaque, muls, terms)
    chip._limit_terms = (prog, out)     # type: ignore[attr-defined]
    return out


def chip_cycle_bound(chip: Clocked) -> int:
    """The default cycle limit of one chip's loaded program and host-written registers (module docstring)."""
    v, opaque, muls, terms = _program_terms(chip)
    v = max([v] + [abs(int(r)) for r in chip.regs])
    for _ in range(min(muls, 6)):           # a product of two values the program can make
        v = min(UNKNOWN_TRIPS, v * v)
    trips = UNKNOWN_TRIPS if opaque else min(UNKNOWN_TRIPS, 2 * v + LOOP_SLACK)
    total = sum(c * trips ** e for e, c in terms.items())
    return min(MAX_CYCLES, max(MIN_CYCLES, MARGIN * total))


def default_max_cycles(chips: Sequence[Clocked]) -> int:
    """The cycle limit of a run of ``chips`` when the caller names none: the sum of each chip's
    ``chip_cycle_bound`` (at most ``MAX_CYCLES``)."""
    return min(MAX_CYCLES, sum(chip_cycle_bound(ch) for ch in chips))


__all__ = ["default_max_cycles", "chip_cycle_bound", "MARGIN", "LOOP_SLACK", "MIN_CYCLES", "MAX_CYCLES",
           "UNKNOWN_TRIPS"]


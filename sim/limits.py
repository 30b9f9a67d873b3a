"""The default cycle limit of a run: derived from the programs, so that a program that never halts
(``top: jmp top``) stops with ``CYCLE_LIMIT`` within seconds instead of running for days, while
every program that halts, however long, stays well inside it (docs/simulator.md, "Cycle limit").

The rule (``default_max_cycles``), per chip, then summed over the chips of a run (a chip may wait for
another one's whole run). A *scalar loop* is the pcs from a branch's or jump's target up to it, when
the target is not later. A *plain* register is one the program writes only with ``seti`` and
``addi r, r, imm`` (a counter or a bound); a register's *range* is the interval of values it may hold,
from its host value and every write (``seti``, ``addi`` from another register, the ALU ops on
ranges, an SPM lane for ``sld``; unknown for a counter, an ACC lane, or a value that keeps growing).

A loop's trips are the fewest any of these allows:

* *Induction*: closed by ``blt``/``bge``/``bne`` on a counter (one ``addi c, c, s`` inside the loop)
  and a bound (not written inside), the loop entered only by falling into it: the counter's and the
  bound's values on entry, from the straight-line code before the loop (the same register plus
  constants, or ranges), give ``|bound - counter| // |s| + 2`` trips (``bound = counter + 2496``
  stepped by 4: 626).
* *Compared registers*: closed, or left by a forward branch (an exit, in a loop nothing jumps into),
  on two registers that are plain or have a range and are not written inside: ``2 * (a + b) + 2``
  trips, ``a``, ``b`` their largest magnitudes (a plain register's: its ``seti`` immediates and host
  value). A write of a compared register that a forward branch inside the loop, or a jump into it
  from outside, can skip voids both rules for the closing branch.
* *Detour*: a backward jump from past a loop into its middle (the path of an exit that comes back,
  as an embedding lookup's fix-up of a negative row), when every way round it within the loop's pcs
  takes the loop's own back branch: the loop's trips + 1, for the pcs after the loop only.
* Otherwise ``B = 2 * V + LOOP_SLACK`` trips, ``V`` the largest magnitude of any immediate of
  ``seti``/``addi``, any immediate ``loop`` count, any register the host wrote, and 128 if the
  program reads SPM with ``sld`` (an int8 lane); each ``mul`` squares ``V``. ``B = 2**32`` for a loop
  whose compared registers may hold any 32-bit value (*tainted*: written by ``sld`` from ACC or
  ``sll``, or computed from a tainted register), and for a loop without compared registers (a
  ``jmp``) in a program with any tainted register; a value read from ACC for an address does not
  unbound the loops.

Every instruction costs, per execution, ``1 + max(BRANCH_PENALTY, SLD_PENALTY)`` (scalar) or ``1 + T * (I + LAT)``
(queued): ``T`` its nest's largest instance count (the product of its loop registers' largest trip
counts: the largest immediate count any ``loop`` gives the register, or the largest value of a
register that gives the count, ``B`` if unknown), ``I`` the most cycles one instance occupies its unit
(DMA beats, streamed rows, flits: its fields and the timing contract), ``LAT`` every latency of the
contract added up (DRAM, MXU pipe and swap, VPU, link, token, issue to start); it executes at most the
product of the trip bounds of the loops around it. The chip's limit: ``MARGIN`` times the sum, at
least ``MIN_CYCLES``, at most ``MAX_CYCLES`` (the old fixed default: a run that legitimately needs
more must name its limit).

A halting program could still exceed it only by counting in a way the rule does not see (an inner
loop that moves an outer loop's counter back, a counter that wraps around 2**32): the error then says
the limit and how to raise it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
#: rounds of the register-range fixpoint before a range still growing counts as unknown
RANGE_ROUNDS = 12
#: instructions the entry-value search walks back from a loop's start
PREHEADER_SPAN = 256

_INT32 = (-(1 << 31), (1 << 31) - 1)
Range = tuple[int, int]
Prog = Sequence[Instruction | None]
Fields = Sequence[Mapping[str, int]]
#: branch or jump target -> the pcs that go there
Sources = dict[int, list[int]]
#: a register's value as (register at a straight-line code's start or None, constant); None: unknown
Sym = tuple[int | None, int] | None


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
#: (op, counter compared first): the direction the counter must step for the loop to end
_STEP_SIGN = {("blt", True): 1, ("blt", False): -1, ("bge", True): -1, ("bge", False): 1}


@dataclass
class _Loop:
    """One scalar loop: ``lo..hi`` the pcs its trips repeat (a detour: the pcs after the loop it
    returns into); ``regs`` the registers the closing branch compares when its rules apply;
    ``consts`` those of them that hold a constant at the branch; ``exits`` the registers of the
    forward branches that leave it, with their constants; ``induction`` (op, counter
    compared first, step, counter's and bound's entry values as (register at the block start or
    None, constant)); ``parent`` the loop a detour returns into; ``compared`` whether the closing
    instruction is a branch (a ``jmp`` compares nothing)."""
    lo: int
    hi: int
    compared: tuple[int, int] | None
    regs: tuple[int, int] | None = None
    consts: dict[int, int] = field(default_factory=dict)
    exits: list[tuple[tuple[int, int], dict[int, int]]] = field(default_factory=list)
    induction: tuple | None = None
    parent: int | None = None


def _is_transfer(ins: Instruction | None) -> bool:
    return ins is None or ins.op in ("jmp", "halt")


class _Terms:
    """What the bound takes from the loaded program alone (cached per loaded program): the named
    values ``v``, the ``mul`` count, the *plain* registers' largest ``seti`` immediates, the tainted
    registers, the scalar writes (for the ranges), the loops and the cost segments (runs of pcs with
    the same enclosing loops and the costs ``{register-count loop registers: cycles}`` of one pass)."""

    def __init__(self, chip: Clocked):
        cfg, prog, fields = chip.cfg, chip.prog, chip.fields
        self.nregs = cfg.scalar_regs
        named = [0]
        self.opaque, self.muls = False, 0
        self.imm_max: dict[int, int] = {}
        #: per loop register, the (pc, register) of each ``loop`` that takes its count from a register
        self.count_regs: dict[int, list[tuple[int, int]]] = {}
        seti_max: dict[int, int] = {}
        other_writes: set[int] = set()
        self.writes: list[tuple[str, Mapping[str, int]]] = []     # every scalar register write
        self.write_pcs: dict[int, list[int]] = {}
        back: list[tuple[int, int]] = []             # (pc, target) of each backward branch or jump
        forward: list[tuple[int, int]] = []          # (pc, target) of each forward branch or jump
        sources: dict[int, list[int]] = {}           # target -> the pcs that branch or jump to it
        self.tainted: set[int] = set()
        for pc, ins in enumerate(prog):
            if ins is None:
                continue
            f, op = fields[pc], ins.op
            if op in _WRITES_RD:
                self.writes.append((op, f))
                self.write_pcs.setdefault(f["rd"], []).append(pc)
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
                    self.count_regs.setdefault(f["lr"], []).append((pc, int(f["count"])))
            elif op == "sld" and f["space"] == Space.SPM:
                named.append(1 << (SPACE_BITS[Space.SPM] - 1))      # an int8 lane
            elif op in ("sld", "sll"):          # an int32 lane; a shift by up to 31
                self.opaque = True
                self.tainted.add(f["rd"])
            elif op == "mul":
                self.muls += 1
            if op in BRANCHES or op == "jmp":
                t = int(f["target"])
                sources.setdefault(t, []).append(pc)
                (back if t <= pc else forward).append((pc, t))
        self.v = max(named)
        grew = bool(self.tainted)
        while grew:                         # what is computed from a tainted register is tainted
            grew = False
            for op, f in self.writes:
                if op in SCALAR_ALU or op == "addi":
                    if f["rd"] not in self.tainted and ({f.get("rs1"), f.get("rs2")} & self.tainted):
                        self.tainted.add(f["rd"])
                        grew = True
        self.tainted.discard(0)             # r0 reads 0
        self.plain = {r: seti_max.get(r, 0) for r in range(cfg.scalar_regs) if r not in other_writes}
        self.loops = self._loops(prog, fields, back, forward, sources)
        #: per register-count ``loop``: the writes of the straight-line code before it (replayed on the ranges)
        self.count_code: dict[int, list[tuple[str, Mapping[str, int]]]] = {
            pc: [(ins.op, fields[q]) for q in range(self._block_start(prog, pc, sources), pc)
                 if (ins := prog[q]) is not None and ins.op in _WRITES_RD]
            for uses in self.count_regs.values() for pc, _ in uses}
        self._segments(cfg, prog, fields, sources)

    # ------------------------------------------------------------------------------------------
    def written_in(self, r: int, lo: int, hi: int) -> bool:
        """Whether a pc in ``lo..hi`` writes register ``r``."""
        return any(lo <= pc <= hi for pc in self.write_pcs.get(r, ()))

    def _loops(self, prog: Prog, fields: Fields, back: list[tuple[int, int]], forward: list[tuple[int, int]],
               sources: Sources) -> list[_Loop]:
        loops: list[_Loop] = []
        for p, t in back:
            ins, f = prog[p], fields[p]
            assert ins is not None              # a branch or jump
            compared = (f["rs1"], f["rs2"]) if ins.op in BRANCHES else None
            lp = _Loop(t, p, compared)
            inner = [(b, x) for b, x in forward if t <= b < p and t < x <= p]      # forward branches landing inside
            entries = [(s, x) for x, srcs in sources.items() if t < x <= p for s in srcs if not t <= s <= p]

            def skippable(r: int, t: int = t, inner: list = inner, entries: list = entries) -> bool:
                """Whether a trip can skip a write of ``r``: a forward branch inside jumps over one, or an
                entry from outside lands after one."""
                return (any(self.written_in(r, b + 1, x - 1) for b, x in inner)
                        or any(self.written_in(r, t, x - 1) for _, x in entries))
            if compared is not None:
                lp.consts = self._constants(prog, fields, p, compared, sources)
                if not any(skippable(r) for r in compared if r not in lp.consts):
                    lp.regs = compared
                    lp.induction = self._induction(prog, fields, lp, ins.op, sources, entries)
            for b, x in forward:                # exits every trip passes, on registers no trip skips
                bi = prog[b]
                if not (t <= b < p and x > p and bi is not None and bi.op in BRANCHES):
                    continue
                if any(a < b < y for a, y in inner) or any(y > b for _, y in entries):
                    continue
                regs = (fields[b]["rs1"], fields[b]["rs2"])
                consts = self._constants(prog, fields, b, regs, sources)
                if not any(skippable(r) for r in regs if r not in consts):
                    lp.exits.append((regs, consts))
            loops.append(lp)
        # detours: a backward jump from past a counted loop into its middle, every way round it (within the
        # loop's pcs) through the loop's own back branch
        for j, lp in enumerate(loops):
            if lp.regs is not None or lp.parent is not None:
                continue
            for i, host in enumerate(loops):
                if i == j or host.regs is None or host.parent is not None:
                    continue
                if host.lo < lp.lo <= host.hi < lp.hi and not self._reaches(prog, fields, lp.lo, lp.hi, host):
                    lp.parent, lp.lo = i, host.hi + 1
                    break
        return loops

    def _constants(self, prog: Prog, fields: Fields, at: int, regs: Sequence[int], sources: Sources) -> dict[int, int]:
        """Those of ``regs`` that hold a constant at ``at`` on every visit (set by the straight-line code before it)."""
        value = self._values_at(prog, fields, at, sources)
        out = {}
        for r in regs:
            v = value(r)
            if v is not None and v[0] is None:
                out[r] = v[1]
        return out

    @staticmethod
    def _reaches(prog: Prog, fields: Fields, start: int, goal: int, host: _Loop) -> bool:
        """Whether ``goal`` can be reached from ``start`` within ``host.lo..goal`` without ``host``'s back branch."""
        seen, todo = {start}, [start]
        while todo:
            pc = todo.pop()
            if pc == goal:
                return True
            ins = prog[pc] if 0 <= pc < len(prog) else None
            if ins is None or ins.op == "halt":
                continue
            nxt = []
            if ins.op in BRANCHES or ins.op == "jmp":
                if not (pc == host.hi and int(fields[pc]["target"]) == host.lo):
                    nxt.append(int(fields[pc]["target"]))
            if ins.op != "jmp":
                nxt.append(pc + 1)
            for n in nxt:
                if host.lo <= n <= goal and n not in seen:
                    seen.add(n)
                    todo.append(n)
        return False

    def _induction(self, prog: Prog, fields: Fields, lp: _Loop, op: str, sources: Sources,
                   entries: list[tuple[int, int]]) -> tuple | None:
        """The induction form of a loop closed by ``op`` on a counter and a bound, or None."""
        if op not in ("blt", "bge", "bne") or entries:
            return None
        if any(not lp.lo <= s <= lp.hi for s in sources.get(lp.lo, ())):
            return None                         # entered at its start from elsewhere too
        assert lp.compared is not None
        r1, r2 = lp.compared
        entry = self._values_at(prog, fields, lp.lo, sources)     # the values on falling into the loop
        for c, b, first in ((r1, r2, True), (r2, r1, False)):
            if c == 0 or c == b:
                continue
            inc = [pc for pc in self.write_pcs.get(c, ()) if lp.lo <= pc <= lp.hi]
            step_ins = prog[inc[0]] if len(inc) == 1 else None
            if step_ins is None or step_ins.op != "addi" or fields[inc[0]]["rs1"] != c:
                continue
            step = int(fields[inc[0]]["imm"])
            if step == 0:
                continue
            if self.written_in(b, lp.lo, lp.hi):
                bound = self._values_at(prog, fields, lp.hi, sources)(b)      # a constant set on every trip
                if bound is None or bound[0] is not None:
                    continue
            else:
                bound = entry(b)
            return (op, first, step, entry(c), bound)
        return None

    @staticmethod
    def _block_start(prog: Prog, at: int, sources: Sources) -> int:
        """The first pc of the straight-line code that reaches ``at``: no pc of it but its first is a
        target, none follows a ``jmp`` or ``halt`` (at most ``PREHEADER_SPAN`` back)."""
        x = at
        while x > 0 and at - x < PREHEADER_SPAN:
            if x < at and x in sources:
                break                           # entered here from elsewhere too: the code starts here
            if _is_transfer(prog[x - 1]):
                break
            x -= 1
        return x

    def local_range(self, pc: int, r: int, rng: list[Range | None]) -> Range | None:
        """The range of ``r`` at a register-count ``loop``: the ranges replayed through the straight-line
        code before it (a counter set there has a value)."""
        view = list(rng)
        for op, f in self.count_code[pc]:
            if op == "addi" and f["rs1"] == f["rd"]:
                cur = view[f["rd"]]
                new = None if cur is None else (cur[0] + int(f["imm"]), cur[1] + int(f["imm"]))
            else:
                new = _eval(op, f, view)
            if new is not None and not (_INT32[0] <= new[0] and new[1] <= _INT32[1]):
                new = None
            if f["rd"] != 0:
                view[f["rd"]] = new
        return view[r]

    def _values_at(self, prog: Prog, fields: Fields, at: int, sources: Sources) -> Callable[[int], Sym]:
        """The registers' values on reaching ``at`` through the straight-line code before it (no pc of it
        but its first is a target; none follows a ``jmp`` or ``halt``): a function ``r -> (register at
        that code's start or None, constant)``, None when unknown."""
        x = self._block_start(prog, at, sources)
        state: dict[int, tuple[int | None, int] | None] = {}
        for pc in range(x, at):
            ins = prog[pc]
            if ins is None or ins.op not in _WRITES_RD:
                continue
            f = fields[pc]
            if ins.op == "seti":
                val: tuple[int | None, int] | None = (None, int(f["imm"]))
            elif ins.op == "addi":
                src = state.get(f["rs1"], (f["rs1"], 0)) if f["rs1"] != 0 else (None, 0)
                val = None if src is None else (src[0], src[1] + int(f["imm"]))
            else:
                val = None
            state[f["rd"]] = val

        def value(r: int) -> tuple[int | None, int] | None:
            return (None, 0) if r == 0 else state.get(r, (r, 0))
        return value

    def _segments(self, cfg: ChipConfig, prog: Prog, fields: Fields, sources: Sources) -> None:
        """The cost segments. A queued instruction's loop register takes its count from the ``loop`` that
        last set it in the straight-line code before it (no target between: that ``loop`` ran just
        before), else the largest count any ``loop`` gives that register."""
        starts: dict[int, list[int]] = {}
        ends: dict[int, list[int]] = {}
        for i, lp in enumerate(self.loops):
            starts.setdefault(lp.lo, []).append(i)
            ends.setdefault(lp.hi + 1, []).append(i)
        lat = _latencies(cfg)
        self.segments: list[tuple[tuple[int, ...], dict[tuple, int]]] = []
        inside: set[int] = set()
        costs: dict[tuple, int] = {}
        last: dict[int, int] = {}               # loop register -> pc of the ``loop`` that set it
        for pc, ins in enumerate(prog):
            if pc in sources:
                last = {}                       # a join: the count may come from elsewhere
            if ins is not None and ins.op == "loop":
                last[fields[pc]["lr"]] = pc
            if pc in starts or pc in ends:
                if costs:
                    self.segments.append((tuple(sorted(inside)), costs))
                costs = {}
                inside -= set(ends.get(pc, ()))
                inside |= set(starts.get(pc, ()))
            if ins is None or not ins.spec.queued:
                costs[()] = costs.get((), 0) + 1 + max(timing.BRANCH_PENALTY, timing.SLD_PENALTY)
                continue
            f = fields[pc]
            t, by_reg = 1, []               # instances: t * the register-given counts of by_reg
            for lr in range(f["rep_base"], f["rep_base"] + f["rep_depth"]):
                at = last.get(lr)
                if at is not None and fields[at]["cmode"] == 0:
                    t *= int(fields[at]["count"])
                elif at is not None:
                    by_reg.append(("at", at))
                elif lr in self.count_regs:
                    by_reg.append(("lr", lr))
                else:
                    t *= self.imm_max.get(lr, 0)    # never set by the program: zero trips
            costs[()] = costs.get((), 0) + 1
            if t:
                key = tuple(by_reg)
                costs[key] = costs.get(key, 0) + t * (_instance_cycles(cfg, ins, f) + lat)
        if costs:
            self.segments.append((tuple(sorted(inside)), costs))

    # ------------------------------------------------------------------------------------------
    def ranges(self, host: Sequence[int]) -> list[Range | None]:
        """Each register's range of values (None: unknown) over the whole run, from its host value and
        every write: a fixpoint over the scalar writes; a counter (``addi r, r, imm``), an ACC lane and
        a range still growing after ``RANGE_ROUNDS`` rounds are unknown."""
        rng: list[Range | None] = [(int(h), int(h)) for h in host]
        rng[0] = (0, 0)
        rounds = 0
        while True:
            changed: set[int] = set()
            for op, f in self.writes:
                rd = f["rd"]
                cur = rng[rd]
                if rd == 0 or cur is None:
                    continue
                new = _eval(op, f, rng)
                out = None if new is None else (min(cur[0], new[0]), max(cur[1], new[1]))
                if out is not None and not (_INT32[0] <= out[0] and out[1] <= _INT32[1]):
                    out = None
                if out != cur:
                    rng[rd] = out
                    changed.add(rd)
            if not changed:
                return rng
            rounds += 1
            if rounds >= RANGE_ROUNDS:      # still growing (a value fed back into itself): unknown
                for r in changed:
                    rng[r] = None


def _eval(op: str, f: Mapping[str, int], rng: list[Range | None]) -> Range | None:
    """The range of what one write may produce, from its operands' ranges."""
    if op == "seti":
        return (int(f["imm"]), int(f["imm"]))
    if op == "sld":
        return (-128, 127) if f["space"] == Space.SPM else None
    if op == "addi":
        if f["rs1"] == f["rd"]:
            return None                     # a counter: its loop bounds it, not its range
        a = rng[f["rs1"]]
        return None if a is None else (a[0] + int(f["imm"]), a[1] + int(f["imm"]))
    a, b = rng[f["rs1"]], rng[f["rs2"]]
    if op == "slt":
        return (0, 1)
    if a is None or b is None:
        return None
    if op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if op == "mul":
        ps = [x * y for x in a for y in b]
        return (min(ps), max(ps))
    if op == "and":                         # at most a non-negative operand
        tops = [g[1] for g in (a, b) if g[0] >= 0]
        return (0, min(tops)) if tops else None
    if op in ("or", "xor"):
        if a[0] < 0 or b[0] < 0:
            return None
        return (0, (1 << max(a[1], b[1]).bit_length()) - 1)
    if not (0 <= b[0] and b[1] <= 31):      # a shift amount is taken modulo 32
        return None
    if op == "sll":
        ps = [x << s for x in a for s in b]
    elif op == "sra":
        ps = [x >> s for x in a for s in b]
    elif a[0] >= 0:                         # srl of a non-negative value
        ps = [x >> s for x in a for s in b]
    else:
        return None
    return (min(ps), max(ps))


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
    host = [int(r) for r in chip.regs]
    rng = tm.ranges(host)
    v = max([tm.v] + [abs(h) for h in host])
    for _ in range(min(tm.muls, 6)):        # a product of two values the program can make
        v = min(UNKNOWN_TRIPS, v * v)
    bounded = min(UNKNOWN_TRIPS, 2 * v + LOOP_SLACK)

    def big(regs: Sequence[int] | None) -> int:
        """Trips of a loop its registers do not bound: ``2 * V + LOOP_SLACK``, or 2**32 when one of
        them may hold any 32-bit value (a loop without compared registers: when any register may)."""
        if regs is None:
            return UNKNOWN_TRIPS if tm.opaque else bounded
        return UNKNOWN_TRIPS if any(r in tm.tainted for r in regs) else bounded

    def magnitude(r: int, lp: _Loop | None = None, consts: Mapping[int, int] | None = None) -> int | None:
        """The largest |value| of ``r`` a loop's count may use: the constant it holds at the branch; a
        plain register's ``seti`` immediates and host value; else its range when ``lp`` does not write
        it; None when unknown."""
        if r == 0:
            return 0
        if consts and r in consts:
            return abs(consts[r])
        if r in tm.plain:
            return max(tm.plain[r], abs(host[r]))
        g = rng[r]
        if g is None or (lp is not None and tm.written_in(r, lp.lo, lp.hi)):
            return None
        return max(abs(g[0]), abs(g[1]))

    def compared(regs: Sequence[int], lp: _Loop, consts: Mapping[int, int]) -> int | None:
        m = [magnitude(r, lp, consts) for r in regs]
        return None if None in m else 2 * sum(m) + 2        # type: ignore[arg-type]

    def induction(ind: tuple) -> int | None:
        op, first, step, c, b = ind
        if c is None or b is None:
            return None

        def span(sym_const):
            sym, k = sym_const
            if sym is None:
                return (k, k)
            g = rng[sym]
            return None if g is None else (g[0] + k, g[1] + k)
        if c[0] == b[0]:
            lo_d = hi_d = b[1] - c[1]           # bound - counter, exactly
        else:
            cs, bs = span(c), span(b)
            if cs is None or bs is None:
                return None
            lo_d, hi_d = bs[0] - cs[1], bs[1] - cs[0]
        if op == "bne":
            if lo_d != hi_d or lo_d % step or lo_d // step < 1:
                return None
            return lo_d // step + 1
        sign = _STEP_SIGN[(op, first)]
        if step * sign <= 0:
            return None                         # steps away from its bound: ends only by wrapping
        dist = hi_d if sign > 0 else -lo_d
        return max(0, dist) // abs(step) + 2

    trips: list[int] = []
    for lp in tm.loops:
        if lp.parent is not None:
            trips.append(0)                     # filled in below, from the loop it returns into
            continue
        cands: list[int | None] = [big(lp.compared)]
        if lp.regs is not None:
            cands.append(compared(lp.regs, lp, lp.consts))
            if lp.induction is not None:
                cands.append(induction(lp.induction))
        cands += [compared(regs, lp, consts) for regs, consts in lp.exits]
        trips.append(min(c for c in cands if c is not None))
    for i, lp in enumerate(tm.loops):
        if lp.parent is not None:
            trips[i] = min(big(None), trips[lp.parent] + 1)
    def count_at(pc: int, r: int) -> int | None:
        """The largest count the register-count ``loop`` at ``pc`` may give (its register ``r``)."""
        g = tm.local_range(pc, r, rng)
        return max(abs(g[0]), abs(g[1])) if g is not None else magnitude(r)

    counts: dict[tuple, int] = {}
    for lr, uses in tm.count_regs.items():
        most: int | None = tm.imm_max.get(lr, 0)
        for pc, r in uses:
            c = count_at(pc, r)
            counts[("at", pc)] = c if c is not None else big([r])
            most = None if c is None or most is None else max(most, c)
        counts[("lr", lr)] = most if most is not None else big(sorted({r for _, r in uses}))
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

"""The queued units' timing models (docs/microarchitecture.md sections 2-3).

Every unit keeps its queue of issued entries, expands the head entry's loop nest into instances
and computes, for the next instance, the earliest cycle it may start: the generic rules (issue
cycle + ISSUE_TO_START, one start per cycle, tokens) and the unit's own rule (``lower_bound``).
When the engine reaches that cycle the unit starts the instance (``begin``): the handler's data
effect runs and the retire cycle is computed from the contract's formulas. Nothing here loops over
cycles: each instance costs a constant amount of work.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from isa import semantics as sem
from isa import timing
from isa.encoding import Instruction
from isa.errors import ErrorCode
from isa.table import ScaleMode, SrcMode, Sync, Unit

from .errors import SimError
from .handlers import HANDLERS, Plan
from .state import INF, ChipState

if TYPE_CHECKING:
    from .stats import Record

#: instances whose addresses are expanded at once (longer nests are expanded in chunks)
CHUNK = 4096


class Decoded:
    """What every instance of the queued instruction at one pc shares, worked out once when the program
    is loaded (``Chip.load``) instead of at every issue: its fields, unit, handler, token masks and
    where its operands' base addresses come from."""

    __slots__ = ("ins", "f", "uid", "handler", "wait", "signal", "once", "slots", "rep_base", "rep_depth",
                 "breg", "sreg")

    def __init__(self, ins: Instruction, f: dict[str, int]) -> None:
        self.ins, self.f, self.uid = ins, f, ins.spec.unit
        self.handler = HANDLERS[ins.op]
        self.wait, self.signal = f["wait"], f["signal"]
        self.once = f["sync"] == Sync.ONCE
        #: per memory operand (stride-slot order): its immediate base and the register added to it
        self.slots = [(f[s], f["x" + s]) for s in ins.spec.slots]
        self.rep_base, self.rep_depth = f["rep_base"], f["rep_depth"]
        #: the register holding the vbin scalar operand / the vreq scale, if the instruction reads one
        self.breg = f["b"] if f.get("bmode") == SrcMode.REG else None
        self.sreg = f["scale"] if f.get("smode") == ScaleMode.REG else None


class Entry:
    """A queued instruction as issued: its snapshot of loop registers and scalar operands."""

    __slots__ = ("ins", "f", "pc", "q", "T", "i", "d", "counts", "strides", "bases", "wait", "signal",
                 "once", "bval", "scale_val", "_addrs", "_lo", "handler")

    def __init__(self, dec: Decoded, pc: int, q: int, counts: list[int],
                 strides: list[tuple[int, int, int]], bases: list[int], bval: int = 0, scale_val: int = 0) -> None:
        self.ins, self.f, self.pc, self.q = dec.ins, dec.f, pc, q
        self.counts, self.strides, self.bases = counts, strides, bases
        self.T = sem.nest_count(counts) if counts else 1
        self.i = 0
        self.d: int | None = None       # the cycle its last instance started (it left the queue)
        self.wait, self.signal, self.once = dec.wait, dec.signal, dec.once
        self.bval, self.scale_val = bval, scale_val
        self._addrs: list[list[int]] | None = None
        self._lo = 0
        self.handler = dec.handler

    def addrs(self, i: int) -> list[int]:
        """Memory-operand addresses of instance ``i`` (stride-slot order)."""
        if not self.counts:
            return self.bases
        a = self._addrs
        if a is None or not self._lo <= i < self._lo + len(a):
            lo = i - i % CHUNK          # (addresses are 32-bit: wrapped as the chip's adders wrap them)
            self._addrs = a = sem.wrap32(sem.nest_slice(self.counts, self.strides, self.bases, lo,
                                                        min(self.T, lo + CHUNK))).tolist()
            self._lo = lo
        return a[i - self._lo]

    def waits(self) -> int:
        return self.wait if (not self.once or self.i == 0) else 0

    def signals(self) -> int:
        return self.signal if (not self.once or self.i == self.T - 1) else 0


class Instance:
    """A started instance whose retire cycle may not be known yet (links)."""

    __slots__ = ("ent", "i", "s", "signal", "race", "rec")

    def __init__(self, ent: Entry, i: int, s: int, signal: int, race: list[Any], rec: Record | None) -> None:
        self.ent, self.i, self.s, self.signal, self.race, self.rec = ent, i, s, signal, race, rec


class QueuedUnit:
    """Queue, repeat expansion, tokens and bookkeeping shared by every queued unit."""

    def __init__(self, chip: ChipState, uid: Unit) -> None:
        self.chip, self.uid, self.name = chip, uid, uid.name.lower()
        #: the stall causes this unit counts (Stats.stalls), named once: the issue stage's when the
        #: queue is full, the unit's own rule's by reason, a token wait's by producer
        self.queue_full = f"queue_full({self.name})"
        self._reason_stall: dict[str, str] = {}
        self._token_stall = [f"{self.name}.token({p.name.lower()})" for p in Unit]
        self.queue: deque[Entry] = deque()
        self.recent: deque[Entry] = deque(maxlen=timing.QUEUE_DEPTH)
        self.last_start = -1
        self.max_retire = -1
        self.open = 0                   # started instances whose retire is not known yet
        self.plan: Plan | None = None   # plan of the head instance, prepared once
        #: (cycle, SimError) found ahead of time (link mismatch)
        self.pending_error: tuple[int, SimError] | None = None
        #: what bounds the next start: (base, unit_lb, reason, tok_t, tok_p, the head's wait mask)
        self._why: tuple[int, int, str | None, int, int | None, int] | None = None
        #: next_time() as last computed, while ``fresh``: it depends on this unit's queue and state
        #: and on the tokens it waits for, so only its own act, a push to an empty queue and a token signalled to it
        #: change it (``stale``)
        self._t = INF
        self.fresh = False

    # -- the issue stage's view -----------------------------------------------------------
    def accept_time(self, t: int) -> int:
        """First cycle >= t at which the queue has a free entry (INF: not known yet)."""
        if len(self.recent) < timing.QUEUE_DEPTH:
            return t
        d = self.recent[0].d
        return INF if d is None else max(t, d + 1)

    #: whether next_time() may be cached (a link unit's depends on its channel)
    cacheable = True

    def stale(self) -> None:
        """Something next_time() depends on changed."""
        self.fresh = False

    def push(self, ent: Entry) -> None:
        self.queue.append(ent)
        self.recent.append(ent)
        if len(self.queue) == 1:        # only the head entry bears on next_time(): a push behind it
            self.fresh = False          # changes nothing the cached time depends on

    def drained_time(self) -> int:
        """First cycle at which the queue is empty and every instance has retired (INF: not known)."""
        if self.queue or self.open:
            return INF
        last_d = self.recent[-1].d if self.recent else -1
        assert last_d is not None       # the queue is empty: every entry has left it
        return max(last_d + 1, self.max_retire + 1)

    # -- unit-specific rules (overridden) ---------------------------------------------------
    def lower_bound(self, ent: Entry, plan: Plan) -> tuple[int, str | None]:
        return 0, None

    def begin(self, t: int, ent: Entry, plan: Plan, inst: Instance) -> int | None:
        raise NotImplementedError

    # -- the engine's view -------------------------------------------------------------------
    def next_time(self) -> int:
        if self.fresh:
            return self._t
        if self.pending_error is not None:
            return min(self._next_time(), self.pending_error[0])
        t = self._next_time() if self.queue else INF
        # (a link unit's time depends on its channel only while it has work: idle, it stays INF
        # until a push or its act, which clear ``fresh``)
        self._t, self.fresh = t, self.cacheable or not (self.queue or self.open)
        return t

    def _next_time(self) -> int:
        if not self.queue:
            return INF
        ent = self.queue[0]
        base = max(ent.q + timing.ISSUE_TO_START, self.last_start + 1)
        ulb, reason = base, None
        if ent.T:
            if self.plan is None:
                self.plan = ent.handler(self.chip, ent, ent.addrs(ent.i) if ent.counts else ent.bases)
            lb, reason = self.lower_bound(ent, self.plan)   # (an instance with an error stops the
            ulb = max(base, lb)                             #  chip when it would have started)
        t = ulb
        w = ent.waits()
        tok_t, tok_p = t, None
        if w:
            tok_t, tok_p = self.chip.tokens.wait_time(w, self.uid, t)
            t = tok_t
        self._why = (base, ulb, reason, tok_t, tok_p, w)
        return t

    def act(self, t: int, horizon: int) -> None:
        if self.pending_error is not None and self.pending_error[0] == t:
            raise self.pending_error[1]
        self.fresh = False
        chip, ent = self.chip, self.queue[0]
        assert self._why is not None    # next_time() ran first
        base, ulb, reason, tok_t, tok_p, w = self._why
        st = chip.stats
        if reason and ulb > base:
            name = self._reason_stall.get(reason)
            if name is None:
                name = self._reason_stall[reason] = f"{self.name}.{reason}"
            st.stall(name, ulb - base)
        if tok_p is not None and tok_t > ulb:
            st.stall(self._token_stall[tok_p], tok_t - ulb)
        if ent.T == 0:                  # an empty nest: pop it, with its sync=once tokens
            if w:
                chip.tokens.consume(w, self.uid, t)
            if ent.signal:
                chip.tokens.signal(self.uid, ent.signal, t, ent.pc)
            self.max_retire = max(self.max_retire, t)
            self._finish_entry(t)
            return
        plan = self.plan
        self.plan = None
        assert plan is not None         # prepared by next_time() for an entry with instances
        if plan.error is not None:
            code, msg, addr = plan.error
            raise chip.error(code, msg, t, ent.pc, addr)
        if w:
            chip.tokens.consume(w, self.uid, t)
        race = chip.races.start(self.uid, ent.pc, t, plan.reads, plan.writes, ports=plan.ports)
        rec = chip.trace.add(chip.index, int(self.uid), ent.pc, ent.i, chip.text(ent.pc), ent.q, t) \
            if chip.trace is not None else None
        if rec is not None:
            rec.dram_bytes, rec.waits = plan.dram_bytes, w
        inst = Instance(ent, ent.i, t, ent.signals(), race, rec)
        st.instances[self.name] += 1
        self.open += 1                  # a link may retire inside begin (retired_later)
        r = self.begin(t, ent, plan, inst)
        self.last_start = t
        ent.i += 1
        if ent.i == ent.T:
            self._finish_entry(t)
        if r is not None:
            self.open -= 1
            self._retired(inst, r)

    def _finish_entry(self, t: int) -> None:
        ent = self.queue.popleft()
        ent.d = t
        self.last_start = t

    def _retired(self, inst: Instance, r: int) -> None:
        self.max_retire = max(self.max_retire, r)
        inst.race[3] = r
        if inst.rec is not None:
            inst.rec.retire, inst.rec.signals = r, inst.signal
        if inst.signal:
            self.chip.tokens.signal(self.uid, inst.signal, r, inst.ent.pc)

    def retired_later(self, inst: Instance, r: int) -> None:
        """A link instance's retire cycle became known."""
        self.fresh = False
        self.open -= 1
        self._retired(inst, r)

    def blocked_on(self) -> str:
        """Why the head cannot start (for a deadlock report)."""
        if not self.queue:
            return "link transfer that never completes" if self.open else "nothing"
        ent = self.queue[0]
        w = ent.waits()
        if w:
            missing = [Unit(p).name.lower() for p in Unit if w >> p & 1
                       and self.chip.tokens.usable_time(int(p), int(self.uid)) >= INF]
            if missing:
                return f"a token from {'|'.join(missing)} that is never signalled"
        return "an earlier instance that never completes" if self.open else "its unit"


class DmaUnit(QueuedUnit):
    """LOAD (DRAM read channel) or STORE (write channel): one beat per cycle, fixed latency."""

    def __init__(self, chip, uid):
        super().__init__(chip, uid)
        self.free = 0                   # s + O of the previous instance

    def lower_bound(self, ent, plan):
        return self.free, None

    def begin(self, t, ent, plan, inst):
        plan.run()
        o = plan.n
        self.free = t + o
        self.chip.stats.busy[self.name] += o
        return timing.dma_retire(self.chip.cfg, t, o)


class MxuUnit(QueuedUnit):
    """Weight loads through the shadow buffer and streaming matmuls with the swap rule."""

    def __init__(self, chip, uid):
        super().__init__(chip, uid)
        self.lw_free = 0                # s + L of the previous lw (weight-load port free)
        self.mm_free = 0                # s + max(1, n) of the previous mm
        self.ready = 0                  # when the pending shadow weights are complete
        self.swap_s = None              # start of the most recent mm that swapped buffers

    def lower_bound(self, ent, plan):
        if ent.ins.op == "mxu.lw":
            if self.swap_s is not None:
                sw = self.swap_s + timing.mxu_swap_delay(self.chip.cfg)
                if sw > self.lw_free:
                    return sw, "swap"
            return self.lw_free, None
        if self.chip.mxu.pending and self.ready > self.mm_free:
            return self.ready, "weights"
        return self.mm_free, None

    def begin(self, t, ent, plan, inst):
        n = plan.n
        if ent.ins.op == "mxu.lw":
            plan.run()
            self.lw_free = self.ready = t + n
            return t + n - 1
        if self.chip.mxu.pending:
            self.swap_s = t
        plan.run()
        self.mm_free = t + n
        self.chip.stats.busy[self.name] += n
        return t + n - 1 + timing.mxu_pipe(self.chip.cfg)


class VpuUnit(QueuedUnit):
    """One instance at a time; a row read at s + i is written VPU_LATENCY later."""

    def lower_bound(self, ent, plan):
        return self.max_retire + 1, None

    def begin(self, t, ent, plan, inst):
        plan.run()
        self.chip.stats.busy[self.name] += plan.n
        return t + plan.n - 1 + timing.VPU_LATENCY


class LinkUnit(QueuedUnit):
    """LTX or LRX: instances run one after another; flit timing is the channel's (sim.links)."""

    cacheable = False

    def lower_bound(self, ent, plan):
        return (INF, None) if self.open else (self.max_retire + 1, None)

    def begin(self, t, ent, plan, inst):
        port, space, addr = plan.addr
        return self.chip.link_start(self, inst, t, port, space, addr, plan.n)


def make_units(chip: ChipState) -> dict[Unit, QueuedUnit]:
    kinds = {Unit.LOAD: DmaUnit, Unit.STORE: DmaUnit, Unit.MXU: MxuUnit, Unit.VPU: VpuUnit,
             Unit.LTX: LinkUnit, Unit.LRX: LinkUnit}
    return {u: kinds[u](chip, u) for u in Unit if u is not Unit.SCALAR}


__all__ = ["Decoded", "Entry", "Instance", "QueuedUnit", "make_units", "SimError", "ErrorCode"]

"""What every queued unit shares: its queue, token gating, in-flight count, memory port signatures.

A unit is a ``UnitBase`` subclass that implements ``datapath(m, q, go)``: ``q`` is its
``RepeatQueue`` (head instance), ``go`` is asserted in the cycle an instance starts (queue valid,
the unit's own ``ready``, tokens available, chip running). The datapath returns its ``ready``
(unit-specific start rules of the timing contract), its retire events ``[(valid, event)]`` (one per
instance, in the instance's retire cycle ``r``; ``event`` is the ``q.event`` of the instance's start,
carried down the unit's pipeline: its token mask, pc and index) and its error conditions ``[(cond, ErrorCode)]``
checked at start.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.ints import clog2
from isa.table import SPACE_BITS, Space, Unit

from .queue import INDEX_BITS, UNITS, EntrySignature, RepeatQueue, unit_reads

__all__ = ["RowReadSignature", "RowWriteSignature", "TokenSignature", "UnitBase", "ERR_BITS", "SPM_BITS", "ACC_BITS",
           "in_range", "span_ok", "select", "UnitTraceSignature", "RETIRE_SLOTS"]

ERR_BITS = 4
#: Bits of one SPM lane and of one ACC lane (``isa.table.SPACE_BITS``); a row port is ``cols`` lanes.
SPM_BITS, ACC_BITS = SPACE_BITS[Space.SPM], SPACE_BITS[Space.ACC]
EVENTS = 3     # retire events one unit may report in one cycle (slot 0: a zero-trip entry's pop)
#: instances one unit may retire in one cycle (the MXU: an lw and an mm)
RETIRE_SLOTS = EVENTS - 1


def RowReadSignature(addr_w: int, row_bits: int) -> wiring.Signature:
    """Unit -> memory read port (initiator's side): ``addr`` now, ``data`` (sync ports: next cycle)."""
    return wiring.Signature({"addr": Out(addr_w), "data": In(row_bits)})


def RowWriteSignature(addr_w: int, row_bits: int, lanes: int) -> wiring.Signature:
    """Unit -> memory write port: ``en`` one bit per lane, written at the end of the cycle."""
    return wiring.Signature({"addr": Out(addr_w), "data": Out(row_bits), "en": Out(lanes)})


def TokenSignature() -> wiring.Signature:
    """Unit -> issue stage (token counters, fence, errors).

    wait      Out(7)   producers whose token the head instance needs this cycle
    ok        In(1)    every counter (P, this unit) for P in ``wait`` is >= 1
    take      Out(1)   the head instance starts: decrement those counters
    sig_valid Out(3)   retire events this cycle
    sig_mask  Out(21)  7 bits per event: consumers to signal (0 in a slot without an event, so a
                       counter adds up its mask bits alone)
    busy      Out(1)   the queue holds an entry or an instance is in flight
    err       Out(1)   an error condition at this cycle
    err_code  Out(4)   its ``ErrorCode``
    en        In(1)    the chip is running (instances may start)
    """
    return wiring.Signature({
        "wait": Out(UNITS), "ok": In(1), "take": Out(1),
        "sig_valid": Out(EVENTS), "sig_mask": Out(data.ArrayLayout(UNITS, EVENTS)),
        "busy": Out(1), "err": Out(1), "err_code": Out(ERR_BITS), "en": In(1)})


def UnitTraceSignature(cfg) -> wiring.Signature:
    """Unit -> trace port (the unit's side): instances starting and retiring this cycle.

    start       Out(1)                   an instance starts (its start cycle ``s``)
    start_pc    Out(pc), start_index Out(32)   its instruction's pc and its index in the nest
    start_issue Out(32)                  the cycle its entry issued
    retire      Out(2)                   retire slot j holds an instance retiring now (cycle ``r``)
    retire_pc   Out(ArrayLayout(pc, 2)), retire_index Out(ArrayLayout(32, 2))
    Zero-trip entries have no instance and appear on neither.
    """
    pcw = clog2(cfg.imem_words)
    return wiring.Signature({
        "start": Out(1), "start_pc": Out(pcw), "start_index": Out(INDEX_BITS), "start_issue": Out(32),
        "retire": Out(RETIRE_SLOTS), "retire_pc": Out(data.ArrayLayout(pcw, RETIRE_SLOTS)),
        "retire_index": Out(data.ArrayLayout(INDEX_BITS, RETIRE_SLOTS))})


def in_range(lo, n, limit):
    """Rows lo .. lo+n-1 lie in 0 .. limit-1 (true when n == 0)."""
    return (n == 0) | ((lo >= 0) & (lo + n <= limit))


def span_ok(lo, n, limit):
    return in_range(lo, n, limit)


def select(index, options, default=0):
    """``options[index]`` (``default`` past the end) as a binary tree of 2-way muxes on the bits of
    ``index``.

    Used instead of a shift by a variable amount: a wide shifter makes every output bit depend on
    every input bit, which is slow to elaborate and to synthesise, while the byte or flit
    positions a datapath actually selects between are few.
    """
    opts = list(options)
    bits = max(1, (len(opts) - 1).bit_length())
    opts += [default] * ((1 << bits) - len(opts))
    for b in range(bits):
        opts = [Mux(index[b], opts[i + 1], opts[i]) for i in range(0, len(opts), 2)]
    out = opts[0]
    if len(index) > bits:
        out = Mux(index[bits:] == 0, out, default)
    return out


class UnitBase(wiring.Component):
    """A queued unit. Ports: ``push`` In(EntrySignature) from issue, ``tok`` Out(TokenSignature),
    plus the subclass's memory, DRAM or link ports (``extra_ports``)."""

    unit: Unit
    #: the unit reads its entries' scalar operand / DRAM window (the queue stores only what is read)
    uses_sval = False
    uses_dram = False

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({"push": In(EntrySignature(cfg)), "tok": Out(TokenSignature()),
                          "trace": Out(UnitTraceSignature(cfg)),
                          **self.extra_ports(cfg)})

    def extra_ports(self, cfg) -> dict:
        return {}

    def datapath(self, m, q, go):
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = q = RepeatQueue(self.cfg, sval=self.uses_sval, dram=self.uses_dram,
                                             **unit_reads(self.cfg, self.unit))
        wiring.connect(m, wiring.flipped(self.push), q.push)
        go = Signal()
        ready, events, errors = self.datapath(m, q, go)
        tok = self.tok
        m.d.comb += tok.wait.eq(q.wait_now)
        m.d.comb += go.eq(q.valid & ready & tok.ok & tok.en)
        zpop = Signal()
        m.d.comb += zpop.eq(q.zero & tok.ok & tok.en)
        m.d.comb += [q.start.eq(go | zpop), tok.take.eq(go | zpop)]
        # retire events: slot 0 is a zero-trip entry (retires as it is popped)
        # (a unit's events carry ``q.event`` from the start: Cat(signal mask, pc, index))
        evs = [(zpop, q.event)] + list(events)
        assert len(evs) <= EVENTS
        pcw = clog2(self.cfg.imem_words)
        inflight = Signal(16)
        dec = Const(0, 2)
        tr = self.trace
        for i, (v, ev) in enumerate(evs):
            m.d.comb += [tok.sig_valid[i].eq(v), tok.sig_mask[i].eq(Mux(v, ev[:UNITS], 0))]
            if i:
                dec = dec + v
                m.d.comb += [tr.retire[i - 1].eq(v), tr.retire_pc[i - 1].eq(ev[UNITS:UNITS + pcw]),
                             tr.retire_index[i - 1].eq(ev[UNITS + pcw:])]
        m.d.sync += inflight.eq(inflight + go - dec)
        m.d.comb += tok.busy.eq((q.level != 0) | (inflight != 0))
        # errors found when an instance starts
        for cond, code in getattr(self, "late_errors", []):
            with m.If(cond & tok.en):
                m.d.comb += [tok.err.eq(1), tok.err_code.eq(code)]
        start_err = Const(0)
        with m.If(go):
            for cond, code in errors:
                start_err = start_err | cond
                with m.If(cond):
                    m.d.comb += [tok.err.eq(1), tok.err_code.eq(code)]
        # an instance that stops the chip at its start never starts (as in the simulator)
        m.d.comb += [tr.start.eq(go & ~start_err), tr.start_pc.eq(q.pc), tr.start_index.eq(q.index),
                     tr.start_issue.eq(q.issued_at)]
        return m

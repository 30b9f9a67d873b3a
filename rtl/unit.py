"""What every queued unit shares: its queue, token gating, in-flight count, memory port signatures.

A unit is a ``UnitBase`` subclass that implements ``datapath(m, q, go)``: ``q`` is its
``RepeatQueue`` (head instance), ``go`` is asserted in the cycle an instance starts (queue valid,
the unit's own ``ready``, tokens available, chip running). The datapath returns its ``ready``
(unit-specific start rules of the timing contract), its retire events ``[(valid, mask)]`` (one per
instance, in the instance's retire cycle ``r``) and its error conditions ``[(cond, ErrorCode)]``
checked at start.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.errors import ErrorCode
from isa.table import Space, Unit

from .queue import UNITS, EntrySignature, RepeatQueue

__all__ = ["RowReadSignature", "RowWriteSignature", "TokenSignature", "UnitBase", "ERR_BITS",
           "in_range", "span_ok"]

ERR_BITS = 4
EVENTS = 3     # retire events one unit may report in one cycle


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
    sig_mask  Out(21)  7 bits per event: consumers to signal
    busy      Out(1)   the queue holds an entry or an instance is in flight
    err       Out(1)   an error condition at this cycle
    err_code  Out(4)   its ``ErrorCode``
    en        In(1)    the chip is running (instances may start)
    """
    return wiring.Signature({
        "wait": Out(UNITS), "ok": In(1), "take": Out(1),
        "sig_valid": Out(EVENTS), "sig_mask": Out(data.ArrayLayout(UNITS, EVENTS)),
        "busy": Out(1), "err": Out(1), "err_code": Out(ERR_BITS), "en": In(1)})


def in_range(lo, n, limit):
    """Rows lo .. lo+n-1 lie in 0 .. limit-1 (true when n == 0)."""
    return (n == 0) | ((lo >= 0) & (lo + n <= limit))


def span_ok(lo, n, limit):
    return in_range(lo, n, limit)


class UnitBase(wiring.Component):
    """A queued unit. Ports: ``push`` In(EntrySignature) from issue, ``tok`` Out(TokenSignature),
    plus the subclass's memory, DRAM or link ports (``extra_ports``)."""

    unit: Unit

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({"push": In(EntrySignature(cfg)), "tok": Out(TokenSignature()),
                          **self.extra_ports(cfg)})

    def extra_ports(self, cfg) -> dict:
        return {}

    def datapath(self, m, q, go):
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = q = RepeatQueue(self.cfg)
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
        evs = [(zpop, q.signal_now)] + list(events)
        assert len(evs) <= 3
        inflight = Signal(16)
        dec = Const(0, 2)
        for i, (v, mask) in enumerate(evs):
            m.d.comb += [tok.sig_valid[i].eq(v), tok.sig_mask[i].eq(mask)]
            if i:
                dec = dec + v
        m.d.sync += inflight.eq(inflight + go - dec)
        m.d.comb += tok.busy.eq((q.level != 0) | (inflight != 0))
        # errors found when an instance starts
        for cond, code in getattr(self, "late_errors", []):
            with m.If(cond & tok.en):
                m.d.comb += [tok.err.eq(1), tok.err_code.eq(code)]
        with m.If(go):
            for cond, code in errors:
                with m.If(cond):
                    m.d.comb += [tok.err.eq(1), tok.err_code.eq(code)]
        return m

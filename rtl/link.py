"""Chip-to-chip links: transmit (``link.send``) and receive (``link.recv``) units with credit flow.

A link channel is one ``LinkSignature`` from the transmitter's side: a flit (``valid``, ``data``,
``space``: the memory type of its row) one per cycle, and a ``credit`` pulse back for every flit
the receiver pops. The link's wire latency is built into the chips, so two chips' ports connect
directly. A flit that leaves at ``t_f`` (the contract's cycle: its credit is taken and its row is
read from a registered memory port) is on the wire at ``t_f + WIRE_AFTER_SEND``; the receiver
delays arriving flits by ``link_latency - WIRE_AFTER_SEND - 1`` register stages and the
transmitter delays arriving credits by ``link_latency - 1``; a flit written into the receive
buffer (or a credit added to the counter) is usable the next cycle, ``link_latency`` cycles after
it left (contract section 3, Links; ``isa.config.MIN_LINK_LATENCY`` leaves room for the read).
"""

from __future__ import annotations

from amaranth import Cat, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from isa.config import MIN_LINK_LATENCY
from isa.errors import ErrorCode
from isa.ints import clog2
from isa.table import SPACE_BYTES, Space, Unit
from isa.timing import flits_per_row

from .queue import event_width
from .unit import ACC_BITS, SPM_BITS, RowReadSignature, RowWriteSignature, UnitBase, in_range, select

__all__ = ["LinkSignature", "LinkTx", "LinkRx", "WIRE_AFTER_SEND"]

#: cycles from a flit's send (``t_f``) to the wire: the registered read of its row
WIRE_AFTER_SEND = 1
assert MIN_LINK_LATENCY >= WIRE_AFTER_SEND + 1


def LinkSignature(cfg) -> wiring.Signature:
    """One direction of a link port (transmitter's side).

    valid Out(1)                     a flit this cycle
    data  Out(8*link_width_bytes)    its bytes (bytes f*W.. of the row image)
    space Out(1)                     memory type of the row (0 SPM, 1 ACC)
    credit In(1)                     the receiver popped a flit: one credit back
    """
    return wiring.Signature({"valid": Out(1), "data": Out(8 * cfg.link_width_bytes), "space": Out(1),
                             "credit": In(1)})


def _delay(m, sig, stages, name):
    v = sig
    for i in range(stages):
        nv = Signal.like(sig, name=f"{name}{i}")
        m.d.sync += nv.eq(v)
        v = nv
    return v


def _ends(m, cfg, go, v, n, i, f, space):
    """(no rows, the flit ends its row, the row is the last) of the current flit: for the starting
    instance (from its entry: row 0, flit 0) and for the latched walk apart, chosen by ``go`` last,
    so the start decision reaches the walk's registers through one multiplexer, not the compares."""
    def nflits(sp):
        return Mux(sp == Space.ACC, flits_per_row(cfg, Space.ACC), flits_per_row(cfg, Space.SPM))
    out = []
    for name, s_val, l_val in (("empty", v.n == 0, n == 0), ("eor", nflits(v.space) == 1, f + 1 == nflits(space)),
                               ("row_last", v.n == 1, i + 1 == n)):
        sig = Signal(name=f"cur_{name}")
        m.d.comb += sig.eq(Mux(go, s_val, l_val))
        out.append(sig)
    return out


def _advance(m, move, eor, go, cur, i, f, addr, start_addr):
    """A flit moves (``move``): the next flit of the row, or (``eor``) the first of the next row;
    an instance starting without moving a flit begins at flit 0 of row 0. Written as one reset or
    load and one enable per register (nested conditions made a multiplexer per bit)."""
    with m.If(move & ~eor):
        m.d.sync += f.eq(cur["f"] + 1)
    with m.Elif(move | go):
        m.d.sync += f.eq(0)
    with m.If(move & eor):
        m.d.sync += [i.eq(cur["i"] + 1), addr.eq(cur["addr"] + 1)]
    with m.Elif(go):
        m.d.sync += [i.eq(0), addr.eq(start_addr)]


class LinkTx(UnitBase):
    """``link.send``. Ports: push, tok (UnitBase); tx Out(LinkSignature).array(links);
    spm_rd Out(RowReadSignature(laddr, 8*cols)), acc_rd Out(RowReadSignature(laddr, 32*cols)) (registered:
    a flit's row is read in its send cycle ``t_f`` and the flit is on the wire at ``t_f + 1``)."""

    unit = Unit.LTX

    def extra_ports(self, cfg):
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        return {"tx": Out(LinkSignature(cfg)).array(cfg.links),
                "spm_rd": Out(RowReadSignature(aw, SPM_BITS * cfg.cols)),
                "acc_rd": Out(RowReadSignature(aw, ACC_BITS * cfg.cols))}

    def datapath(self, m, q, go):
        cfg = self.cfg
        W = cfg.link_width_bytes
        v = q.word.link
        credits = [Signal(range(cfg.link_credits + 1), init=cfg.link_credits, name=f"credits{p}")
                   for p in range(cfg.links)]
        active = Signal()
        i, f, n = Signal.like(v.n), Signal(range(max(2, flits_per_row(cfg, Space.ACC)))), Signal.like(v.n)
        addr = Signal(clog2(max(cfg.spm_rows, cfg.acc_rows)))      # the row ports' bits (range checked at start)
        space, port, mask = Signal(), Signal(range(cfg.links)), Signal(event_width(cfg))
        cur = dict(i=Mux(go, 0, i), f=Mux(go, 0, f), n=Mux(go, v.n, n), addr=Mux(go, q.addr[0], addr),
                   space=Mux(go, v.space, space), port=Mux(go, v.port, port), mask=Mux(go, q.event, mask))
        with m.If(go):
            m.d.sync += [n.eq(v.n), space.eq(v.space), port.eq(v.port), mask.eq(q.event)]
        have = Signal()
        for p in range(cfg.links):
            with m.If(cur["port"] == p):
                m.d.comb += have.eq(credits[p] != 0)
        working = go | active
        empty, eor, row_last = _ends(m, cfg, go, v, n, i, f, space)
        send = working & ~empty & have
        last = empty | (send & eor & row_last)
        # the flit's row is read at t_f from a registered port; the flit goes on the wire at t_f + 1
        m.d.comb += [self.spm_rd.addr.eq(cur["addr"]), self.acc_rd.addr.eq(cur["addr"])]
        sends = [send & (cur["port"] == p) for p in range(cfg.links)]      # a flit leaves on port p
        out_v, out_f = Signal(cfg.links, name="wire_valid"), Signal.like(f, name="wire_flit")
        out_space = Signal(name="wire_space")
        m.d.sync += [out_v.eq(Cat(*sends)), out_f.eq(cur["f"]), out_space.eq(cur["space"])]
        image = Mux(out_space == Space.ACC, self.acc_rd.data, self.spm_rd.data.as_unsigned())
        nmax = flits_per_row(cfg, Space.ACC)
        flit = select(out_f, [image[k * 8 * W:(k + 1) * 8 * W] for k in range(nmax)])[:8 * W]
        for p in range(cfg.links):
            port_if = self.tx[p]
            m.d.comb += [port_if.valid.eq(out_v[p]), port_if.data.eq(flit), port_if.space.eq(out_space)]
            back = _delay(m, port_if.credit, cfg.link_latency - 1, f"credit{p}_")
            m.d.sync += credits[p].eq(credits[p] + back - sends[p])
        with m.If(working):
            m.d.sync += active.eq(~last)
        _advance(m, send, eor, go, cur, i, f, addr, q.addr[0])
        limit = Mux(v.space == Space.ACC, cfg.acc_rows, cfg.spm_rows)
        errors = [(~in_range(q.addr[0], v.n, limit), ErrorCode.ADDRESS_RANGE)]
        return ~active, [(working & last, cur["mask"])], errors


class LinkRx(UnitBase):
    """``link.recv``. Ports: push, tok (UnitBase); rx In(LinkSignature).array(links) (flits in,
    credits out); spm_wr Out(RowWriteSignature(laddr, 8*cols, cols)),
    acc_wr Out(RowWriteSignature(laddr, 32*cols, cols))."""

    unit = Unit.LRX

    def __init__(self, cfg, idle: bool = False):
        # ``idle``: no flit ever arrives (``rx`` never valid: ``Chip(idle_links=True)``), so no flit is
        # taken: no receive buffers, and the memory write ports never write
        self.idle = idle
        super().__init__(cfg)

    def extra_ports(self, cfg):
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        C = cfg.cols
        return {"rx": In(LinkSignature(cfg)).array(cfg.links),
                "spm_wr": Out(RowWriteSignature(aw, SPM_BITS * C, C)),
                "acc_wr": Out(RowWriteSignature(aw, ACC_BITS * C, C))}

    def datapath(self, m, q, go):
        cfg = self.cfg
        W = cfg.link_width_bytes
        D = cfg.link_credits
        v = q.word.link
        active = Signal()
        i, f, n = Signal.like(v.n), Signal(range(max(2, flits_per_row(cfg, Space.ACC)))), Signal.like(v.n)
        addr = Signal(clog2(max(cfg.spm_rows, cfg.acc_rows)))      # the row ports' bits (range checked at start)
        space, port, mask = Signal(), Signal(range(cfg.links)), Signal(event_width(cfg))
        cur = dict(i=Mux(go, 0, i), f=Mux(go, 0, f), n=Mux(go, v.n, n), addr=Mux(go, q.addr[0], addr),
                   space=Mux(go, v.space, space), port=Mux(go, v.port, port), mask=Mux(go, q.event, mask))
        with m.If(go):
            m.d.sync += [n.eq(v.n), space.eq(v.space), port.eq(v.port), mask.eq(q.event)]
        working = go | active
        empty, eor, row_last = _ends(m, cfg, go, v, n, i, f, space)
        # receive buffers, one per port
        flit_l = data.StructLayout({"data": 8 * W, "space": 1})
        head_ok, head = Signal(), Signal(flit_l)
        for p in range(cfg.links if self.idle else 0):
            m.d.comb += self.rx[p].credit.eq(0)     # (head_ok stays 0: nothing is taken)
        for p in range(0 if self.idle else cfg.links):
            rx = self.rx[p]
            arr = Signal(flit_l, name=f"arr{p}")
            arr_v = _delay(m, rx.valid, cfg.link_latency - WIRE_AFTER_SEND - 1, f"rxv{p}_")
            m.d.comb += [arr.data.eq(rx.data), arr.space.eq(rx.space)]
            arr_d = _delay(m, arr, cfg.link_latency - WIRE_AFTER_SEND - 1, f"rxd{p}_")
            mem = memory.Memory(shape=flit_l, depth=D, init=[])
            m.submodules[f"rxbuf{p}"] = mem
            wp, rp = mem.write_port(), mem.read_port(domain="comb")
            hd, tl, lvl = Signal(range(D)), Signal(range(D)), Signal(range(D + 1))
            pop = Signal(name=f"pop{p}")
            m.d.comb += [wp.addr.eq(tl), wp.data.eq(arr_d), wp.en.eq(arr_v), rp.addr.eq(hd),
                         pop.eq(working & ~empty & (cur["port"] == p) & (lvl != 0))]
            with m.If(cur["port"] == p):
                m.d.comb += [head_ok.eq(lvl != 0), head.eq(rp.data)]
            with m.If(arr_v):
                m.d.sync += tl.eq(Mux(tl == D - 1, 0, tl + 1))
            with m.If(pop):
                m.d.sync += hd.eq(Mux(hd == D - 1, 0, hd + 1))
            m.d.sync += lvl.eq(lvl + arr_v - pop)
            m.d.comb += rx.credit.eq(pop)
        take = working & ~empty & head_ok
        last = empty | (take & eor & row_last)
        C = cfg.cols
        buf = Signal(ACC_BITS * C)
        merged = Signal(ACC_BITS * C)
        for j in range(SPACE_BYTES[Space.ACC] * C):          # byte j of the row image comes from flit j // W
            src = head.data[8 * (j % W):8 * (j % W) + 8]
            m.d.comb += merged[8 * j:8 * j + 8].eq(Mux(cur["f"] == j // W, src, buf[8 * j:8 * j + 8]))
        m.d.comb += [self.spm_wr.addr.eq(cur["addr"]), self.spm_wr.data.eq(merged[:SPM_BITS * C]),
                     self.acc_wr.addr.eq(cur["addr"]), self.acc_wr.data.eq(merged)]
        with m.If(take):
            m.d.sync += buf.eq(Mux(eor, 0, merged))
            with m.If(eor):
                with m.If(cur["space"] == Space.ACC):
                    m.d.comb += self.acc_wr.en.eq((1 << C) - 1)
                with m.Else():
                    m.d.comb += self.spm_wr.en.eq((1 << C) - 1)
        with m.If(working):
            m.d.sync += active.eq(~last)
            with m.If(take):
                with m.If(eor):
                    m.d.sync += [f.eq(0), i.eq(cur["i"] + 1), addr.eq(cur["addr"] + 1)]
                with m.Else():
                    m.d.sync += [f.eq(cur["f"] + 1), i.eq(cur["i"]), addr.eq(cur["addr"])]
            with m.Elif(go):
                m.d.sync += [f.eq(0), i.eq(0), addr.eq(q.addr[0])]
        self.late_errors = [(take & (head.space != cur["space"]), ErrorCode.LINK_MISMATCH)]
        limit = Mux(v.space == Space.ACC, cfg.acc_rows, cfg.spm_rows)
        errors = [(~in_range(q.addr[0], v.n, limit), ErrorCode.ADDRESS_RANGE)]
        return ~active, [(working & last, cur["mask"])], errors

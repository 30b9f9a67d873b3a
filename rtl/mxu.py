"""The MXU unit: weight loads (``mxu.lw``) and matmuls (``mxu.mm``/``mxu.mma``) on the systolic array.

Timing (contract section 3, MXU):

* ``lw`` of k rows reads SPM rows ``src..src+k-1`` at ``s..s+L-1`` (L = max(1, k)) on its own
  read port; row j reaches the shadow buffer at ``s+j+1`` (rows k.. are cleared at ``s``). It
  retires at ``s+L-1``; its weights are *pending* and usable by an mm starting at ``s+L``. It
  may start once the previous lw's port is free and ``rows+cols`` cycles after the start of the
  most recent mm that swapped.
* ``mm`` streams row i at ``s+i`` (SPM read), the row enters the array at ``s+i+1`` (with the swap
  bit on its first row if weights are pending), leaves it ``rows+cols-1`` cycles later, passes
  two stages (ACC read for ``mma``, then the write) and is written at ``s+i+mxu_pipe``; the
  instance retires with its last row's write (``n = 0``: a bubble that writes nothing).
"""

from __future__ import annotations

from amaranth import Mux, Signal, signed, unsigned
from amaranth.lib import data
from amaranth.lib.wiring import Out

from isa.errors import ErrorCode
from isa.ints import clog2
from isa.table import BY_MNEMONIC, Unit
from isa.timing import mxu_pipe, mxu_swap_delay

from .queue import event_width
from .systolic import SystolicArray
from .unit import ACC_BITS, SPM_BITS, RowReadSignature, RowWriteSignature, UnitBase, in_range

__all__ = ["MxuUnit"]

def _tag(cfg):
    """What a streamed row carries beside the array to its ACC write (``dst``: the row port's bits)."""
    return data.StructLayout({"valid": 1, "write": 1, "acc": 1, "dst": unsigned(clog2(max(cfg.spm_rows, cfg.acc_rows))),
                              "retire": 1, "mask": event_width(cfg)})


class MxuUnit(UnitBase):
    """Ports: push, tok (UnitBase);
    spm_w Out(RowReadSignature(laddr, 8*cols))   weight-load read port (sync, data next cycle)
    spm_x Out(RowReadSignature(laddr, 8*cols))   input-stream read port (sync)
    acc_rd Out(RowReadSignature(laddr, 32*cols)) accumulate read port (sync, transparent to acc_wr)
    acc_wr Out(RowWriteSignature(laddr, 32*cols, cols))
    """

    unit = Unit.MXU

    def __init__(self, cfg, mac: str = "dsp", pipe: int | None = None):
        # mac: how the array multiplies (``rtl/mac.py``); pipe: cycles from a row's SPM read to its
        # ACC write, the contract's ``isa.timing.mxu_pipe(cfg)`` unless given (a shorter one shows
        # which arrays do not fit)
        self.mac = mac
        self.pipe = mxu_pipe(cfg) if pipe is None else pipe
        super().__init__(cfg)

    def extra_ports(self, cfg):
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        return {"spm_w": Out(RowReadSignature(aw, SPM_BITS * cfg.cols)),
                "spm_x": Out(RowReadSignature(aw, SPM_BITS * cfg.cols)),
                "acc_rd": Out(RowReadSignature(aw, ACC_BITS * cfg.cols)),
                "acc_wr": Out(RowWriteSignature(aw, ACC_BITS * cfg.cols, cfg.cols))}

    def datapath(self, m, q, go):
        cfg = self.cfg
        R, C = cfg.rows, cfg.cols
        PIPE = self.pipe
        m.submodules.array = arr = SystolicArray(R, C, mac=self.mac)
        op = q.word.opcode
        is_lw = op == BY_MNEMONIC["mxu.lw"].opcode
        is_mma = op == BY_MNEMONIC["mxu.mma"].opcode
        lw, mm = q.word.lw, q.word.mm

        # ---- weight load -------------------------------------------------------------------
        lw_active = Signal()          # cycles s+1 .. s+L-1 of a lw
        lw_row = Signal(range(R + 1))
        lw_k = Signal(range(R + 1))
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))     # row addresses: the ports' bits (checked at start)
        lw_addr = Signal(aw)
        pending = Signal()
        swap_timer = Signal(range(R + C + 1))
        lw_go = go & is_lw
        cur_row = Mux(lw_go, 0, lw_row)
        cur_k = Mux(lw_go, lw.k, lw_k)
        m.d.comb += self.spm_w.addr.eq(Mux(lw_go, q.addr[0], lw_addr))
        lw_beat = lw_go | lw_active
        lw_last = (cur_k == 0) | (cur_row + 1 >= cur_k)     # k = 0: one cycle
        with m.If(lw_beat):
            m.d.sync += [lw_row.eq(cur_row + 1), lw_addr.eq(self.spm_w.addr + 1), lw_active.eq(~lw_last)]
            with m.If(lw_go):
                m.d.sync += lw_k.eq(lw.k)
        # SPM data of row j arrives next cycle: write it into the shadow buffer
        we, wrow = Signal(), Signal(range(R + 1))
        m.d.sync += [we.eq(lw_beat & (cur_row < cur_k)), wrow.eq(cur_row)]
        # a new lw's clear drops the previous lw's last row, which would land in the same cycle
        m.d.comb += [arr.w_clear.eq(lw_go), arr.w_we.eq(we & ~lw_go), arr.w_row.eq(wrow),
                     arr.w_data.eq(self.spm_w.data)]

        # ---- matmul streaming ----------------------------------------------------------------
        mm_active = Signal()
        mm_i, mm_n = Signal.like(mm.n), Signal.like(mm.n)
        mm_src, mm_dst = Signal(aw), Signal(aw)
        mm_acc, mm_mask = Signal(), Signal(event_width(cfg))
        mm_go = go & ~is_lw
        swap = mm_go & pending
        cur_i = Mux(mm_go, 0, mm_i)
        cur_n = Mux(mm_go, mm.n, mm_n)
        cur_src = Mux(mm_go, q.addr[1], mm_src)
        cur_dst = Mux(mm_go, q.addr[0], mm_dst)
        cur_acc = Mux(mm_go, is_mma, mm_acc)
        cur_mask = Mux(mm_go, q.event, mm_mask)
        mm_beat = mm_go | mm_active
        mm_last = (cur_n == 0) | (cur_i + 1 == cur_n)
        with m.If(mm_beat):
            m.d.sync += [mm_i.eq(cur_i + 1), mm_src.eq(cur_src + 1), mm_dst.eq(cur_dst + 1),
                         mm_active.eq(~mm_last)]
            with m.If(mm_go):
                m.d.sync += [mm_n.eq(mm.n), mm_acc.eq(is_mma), mm_mask.eq(q.event)]
        m.d.comb += self.spm_x.addr.eq(cur_src)
        # the row (and swap bit) enters the array one cycle later
        x_valid, x_swap = Signal(), Signal()
        m.d.sync += [x_valid.eq(mm_beat & (cur_n != 0)), x_swap.eq(swap)]
        m.d.comb += [arr.x.eq(Mux(x_valid, self.spm_x.data[:SPM_BITS * R], 0)), arr.swap.eq(x_swap)]

        # pending weights / swap wavefront bookkeeping
        with m.If(lw_go):
            m.d.sync += pending.eq(1)
        with m.Elif(swap):
            m.d.sync += pending.eq(0)
        with m.If(swap):
            m.d.sync += swap_timer.eq(mxu_swap_delay(cfg) - 1)
        with m.Elif(swap_timer != 0):
            m.d.sync += swap_timer.eq(swap_timer - 1)

        # ---- the row's tag travels beside the array to the ACC write stage --------------------
        tag = Signal(_tag(cfg))
        m.d.comb += [tag.valid.eq(mm_beat), tag.write.eq(cur_n != 0), tag.acc.eq(cur_acc), tag.dst.eq(cur_dst),
                     tag.retire.eq(mm_last), tag.mask.eq(cur_mask)]
        stages = [tag]
        for i in range(PIPE):
            nt = Signal(_tag(cfg), name=f"mxtag{i}")
            m.d.sync += nt.eq(stages[-1])
            stages.append(nt)
        t_rd, t_wr = stages[PIPE - 1], stages[PIPE]
        # array output (valid LATENCY after entering at s+i+1) delayed to s+i+PIPE
        y = arr.y.as_value()
        lag = PIPE - (1 + arr.LATENCY)          # alignment stages left (product registers use them)
        if lag < 0:
            raise ValueError(f"the array's latency {arr.LATENCY} does not fit the MXU pipeline "
                             f"(isa.timing.mxu_pipe = {PIPE}): at most {PIPE - 1 - (R + C - 1)} extra array stages")
        for i in range(lag):
            ny = Signal(ACC_BITS * C, name=f"mxy{i}")
            m.d.sync += ny.eq(y)
            y = ny
        m.d.comb += self.acc_rd.addr.eq(t_rd.dst)
        acc_old = data.View(data.ArrayLayout(signed(ACC_BITS), C), self.acc_rd.data)
        y_v = data.View(data.ArrayLayout(signed(ACC_BITS), C), y)
        out = Signal(data.ArrayLayout(signed(ACC_BITS), C))
        for n in range(C):
            m.d.comb += out[n].eq(y_v[n] + Mux(t_wr.acc, acc_old[n], 0))
        m.d.comb += [self.acc_wr.addr.eq(t_wr.dst), self.acc_wr.data.eq(out)]
        with m.If(t_wr.valid & t_wr.write):
            m.d.comb += self.acc_wr.en.eq((1 << C) - 1)
        lw_retire = lw_beat & lw_last
        lw_mask = Signal(event_width(cfg))
        with m.If(lw_go):
            m.d.sync += lw_mask.eq(q.event)
        events = [(lw_retire, Mux(lw_go, q.event, lw_mask)), (t_wr.valid & t_wr.retire, t_wr.mask)]

        # ---- start rules ---------------------------------------------------------------------
        ready_lw = ~lw_active & (swap_timer == 0)
        ready_mm = ~mm_active & ~(pending & lw_active)
        ready = Mux(is_lw, ready_lw, ready_mm)
        k_eff = Mux(lw.k != 0, lw.k, 0)
        errors = [(Mux(is_lw, ~in_range(q.addr[0], k_eff, cfg.spm_rows),
                       ~in_range(q.addr[1], mm.n, cfg.spm_rows) | ~in_range(q.addr[0], mm.n, cfg.acc_rows)),
                   ErrorCode.ADDRESS_RANGE)]
        return ready, events, errors

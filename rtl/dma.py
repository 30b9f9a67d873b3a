"""DMA load (DRAM -> SPM/ACC) and DMA store (SPM/ACC -> DRAM) on the chip's DRAM port.

Both walk an instance's beats one per cycle from its start cycle ``s`` (contract section 3):
a contiguous row (``estride`` = element size) moves ``ceil(len*e / beat)`` beats of
``dma_beat_bytes`` bytes, any other row one element per beat. Each beat's description (its row,
byte offset, whether it ends the row or the instance) travels down a ``dram_latency``-stage delay
line beside the DRAM request, so the response of a read beat sent at cycle ``c`` is merged at
``c + dram_latency`` (the last beat of a row writes the row), and the instance retires in the
cycle its last beat's response returns: ``r = s + O - 1 + dram_latency``.
"""

from __future__ import annotations

from amaranth import Cat, Const, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.errors import ErrorCode
from isa.ints import clog2
from isa.table import BY_MNEMONIC, SPACE_BYTES, Space, Unit, derived_widths

from .queue import WINDOW_BITS, event_width
from .unit import ACC_BITS, SPM_BITS, RowReadSignature, RowWriteSignature, UnitBase, in_range

__all__ = ["DramSignature", "DmaLoad", "DmaStore", "dram_window", "WINDOW_BITS"]

#: Element bytes of SPM and ACC (``isa.table.SPACE_BYTES``): an ACC row, ``_EB_ACC * cols`` bytes, is
#: the widest row image, and ``len * _EB_ACC`` is a shift by ``_ACC_SHIFT``.
_EB_SPM, _EB_ACC = SPACE_BYTES[Space.SPM], SPACE_BYTES[Space.ACC]
_ACC_SHIFT = clog2(_EB_ACC)
assert 1 << _ACC_SHIFT == _EB_ACC


def DramSignature(cfg) -> wiring.Signature:
    """Chip -> DRAM (initiator's side). Read and write channels are independent.

    rd_valid Out(1), rd_addr Out(32)        read request of one beat (byte address, any alignment)
    rd_resp_valid In(1), rd_resp_data In(8*beat)  the beat's bytes, exactly ``dram_latency`` cycles later
    wr_valid Out(1), wr_addr Out(32), wr_data Out(8*beat), wr_strb Out(beat)  write request of one beat
    wr_resp_valid In(1)                     write response, exactly ``dram_latency`` cycles after the request

    There is no back-pressure: the DRAM of the timing contract (section 6) accepts one beat per
    cycle per channel and answers every beat after the fixed latency. A memory system that can
    stall must sit behind an adapter that keeps that promise (or stall the chip's clock).
    """
    B = cfg.dma_beat_bytes
    return wiring.Signature({
        "rd_valid": Out(1), "rd_addr": Out(32),
        "rd_resp_valid": In(1), "rd_resp_data": In(8 * B),
        "wr_valid": Out(1), "wr_addr": Out(32), "wr_data": Out(8 * B), "wr_strb": Out(B),
        "wr_resp_valid": In(1),
    })




def dram_window(m, cfg, v, stage=None, v_next=None):
    """``(lo, hi)``, signed ``WINDOW_BITS``: a DMA instance of the instruction ``v`` (the ``dma``
    format's view) that moves something and whose DRAM operand is ``dram`` keeps every byte of
    its bounding range inside DRAM exactly when ``dram + lo >= 0`` and ``dram + hi < 0``.

    The range's corners are ``dram + {0, r1} + {0, e1}`` with ``r1 = (rows-1)*rstride`` and
    ``e1 = (len-1)*estride``: the lowest must be ``>= 0``, so ``lo = min(0, r1) + min(0, e1)``; the
    highest plus the element's bytes must be ``<= dram_bytes``, so ``hi = max(0, r1) + max(0, e1)
    + eb - dram_bytes - 1``. Only the instruction's fields enter: the issue stage computes the
    window once per instruction (one multiplier for both DMA units) and the unit adds each
    instance's 32-bit address to it. A bound whose sum with any 32-bit address fails anyway is
    saturated to ``WINDOW_BITS`` (the answer is the same).

    ``stage``: the products ``r1``, ``e1`` go through ``stage(r1, e1) -> (r1, e1)`` (pipeline
    registers: the multipliers in one stage, the adds in the next, which reads the instruction's
    other fields from ``v_next``, its view in that stage).
    """
    limit = cfg.dram_bytes
    rm1, lm1 = Signal(len(v.rows), name="win_rows1"), Signal(len(v.len), name="win_len1")
    m.d.comb += [rm1.eq(v.rows - 1), lm1.eq(v.len - 1)]        # (rows or len 0: nothing moves)
    r1 = Signal(signed(len(rm1) + len(v.rstride) + 1), name="win_r1")
    e1 = Signal(signed(len(lm1) + len(v.estride) + 1), name="win_e1")
    m.d.comb += [r1.eq(rm1 * v.rstride), e1.eq(lm1 * v.estride)]
    if stage is not None:
        r1, e1 = stage(r1, e1)
        v = v_next
    rneg, eneg = r1[-1], e1[-1]
    lo_full = Signal(signed(len(r1) + 1), name="win_lo_full")
    hi_full = Signal(signed(len(r1) + 2), name="win_hi_full")
    end = {s: SPACE_BYTES[s] - 1 - limit for s in Space}        # an element's last byte, less the DRAM size
    m.d.comb += [lo_full.eq(Mux(rneg, r1, 0) + Mux(eneg, e1, 0)),
                 hi_full.eq(Mux(rneg, 0, r1) + Mux(eneg, 0, e1) + Mux(v.space == Space.ACC, end[Space.ACC],
                                                                      end[Space.SPM]))]
    W = WINDOW_BITS
    lo_fits = ~lo_full[-1] | (lo_full[W - 1:] == (1 << (len(lo_full) - W + 1)) - 1)   # (lo <= 0)
    hi_fits = hi_full[-1] | (hi_full[W - 1:] == 0)                # (hi >= -dram_bytes >= -2**(W-1))
    lo, hi = Signal(signed(W), name="win_lo"), Signal(signed(W), name="win_hi")
    m.d.comb += [lo.eq(Mux(lo_fits, lo_full[:W], -(1 << (W - 1)))),
                 hi.eq(Mux(hi_fits, hi_full[:W], (1 << (W - 1)) - 1))]
    return lo, hi


def _byte(row, i):
    """Byte ``i`` of ``row`` (a list of 8-bit values), 0 past its end."""
    return row[i] if i < len(row) else Const(0, 8)


def _shift_down_bytes(m, data, amount, nout):
    """Bytes ``amount .. amount+nout-1`` of ``data`` (a list of 8-bit values; 0 past its end): a
    logarithmic shifter that only builds the bytes later stages still need (each stage named: an
    unnamed expression is rebuilt for every use)."""
    cur = list(data)
    for s in reversed(range(len(amount))):
        d = 1 << s
        need = nout + d - 1
        nxt = [Signal(8, name=f"shift{s}_{i}") for i in range(min(need, len(cur)))]
        m.d.comb += [b.eq(Mux(amount[s], _byte(cur, i + d), _byte(cur, i))) for i, b in enumerate(nxt)]
        cur = nxt
    return [cur[k] if k < len(cur) else Const(0, 8) for k in range(nout)]


class _DmaBase(UnitBase):
    """The beat walker shared by load and store. ``slots``: (local slot, dram slot)."""

    uses_dram = True

    mnemonic: str

    def walker(self, m, q, go):
        cfg = self.cfg
        B = cfg.dma_beat_bytes
        lb = clog2(B) if B > 1 else 0
        slots = BY_MNEMONIC[self.mnemonic].slots
        v = q.word.dma
        # the instance being started this cycle
        s_space = v.space
        s_eb = Mux(s_space == Space.ACC, _EB_ACC, _EB_SPM)
        s_contig = v.estride == s_eb
        s_rbytes = Mux(s_space == Space.ACC, v.len << _ACC_SHIFT, v.len)       # len * element bytes
        s_rbeats = Mux(s_contig, (s_rbytes + (B - 1)) >> lb, v.len)
        s_real = (v.rows != 0) & (v.len != 0)
        s_local = q.addr[slots.index("local")]
        s_dram = q.addr[slots.index("dram")]
        # latched state for beats after the first
        active = Signal()
        space, contig, real = Signal(), Signal(), Signal()
        rows, length = Signal.like(v.rows), Signal.like(v.len)
        rbeats = Signal(range(_EB_ACC * cfg.cols + 2))
        rstride, estride = Signal(signed(32)), Signal(signed(16))
        r, b = Signal.like(v.rows), Signal(range(_EB_ACC * cfg.cols + 2))
        row_addr, beat_addr = Signal(signed(32)), Signal(signed(32))
        local = Signal(clog2(max(cfg.spm_rows, cfg.acc_rows)))      # the row port's address bits
        off = Signal(range(8 * cfg.cols + 8))
        mask = Signal(event_width(cfg))
        # the current beat: from the starting instance, or from the latched walk
        c = {}
        for name, sv, rv in (("space", s_space, space), ("contig", s_contig, contig), ("real", s_real, real),
                             ("rows", v.rows, rows), ("len", v.len, length), ("rbeats", s_rbeats, rbeats),
                             ("rstride", v.rstride, rstride), ("estride", v.estride, estride),
                             ("r", 0, r), ("b", 0, b), ("row_addr", s_dram, row_addr),
                             ("beat_addr", s_dram, beat_addr), ("local", s_local, local), ("off", 0, off),
                             ("mask", q.event, mask)):
            sig = Signal.like(rv, name="cur_" + name)
            m.d.comb += sig.eq(Mux(go, sv, rv))
            c[name] = sig
        eb = Mux(c["space"] == Space.ACC, _EB_ACC, _EB_SPM)
        # (the starting instance's and the latched walk's, chosen by ``go`` last: the start
        # decision then reaches the walk's registers through one multiplexer, not the compares)
        s_last_in_row, l_last_in_row = s_rbeats == 1, b + 1 == rbeats
        s_last = ~s_real | (s_last_in_row & (v.rows == 1))
        l_last = ~real | (l_last_in_row & (r + 1 == rows))
        last_in_row, last = Signal(), Signal()
        m.d.comb += [last_in_row.eq(Mux(go, s_last_in_row, l_last_in_row)), last.eq(Mux(go, s_last, l_last))]
        # checks at start: an instance that fails them stops the chip and never starts, so it sends
        # no beat, not even its first (contract section 5; the simulator moves nothing either)
        limit_rows = Mux(s_space == Space.ACC, cfg.acc_rows, cfg.spm_rows)
        lo_sum, hi_sum = Signal(signed(WINDOW_BITS + 1)), Signal(signed(WINDOW_BITS + 1))
        m.d.comb += [lo_sum.eq(s_dram + q.dram_lo), hi_sum.eq(s_dram + q.dram_hi)]   # (dram_window)
        ok = Signal(name="start_ok")
        m.d.comb += ok.eq(in_range(s_local, Mux(s_real, v.rows, 0), limit_rows)
                          & (~s_real | (~lo_sum[-1] & hi_sum[-1])))
        beat = (go & ok) | active
        with m.If(beat):
            with m.If(last):
                m.d.sync += active.eq(0)
            with m.Else():
                m.d.sync += active.eq(1)
                with m.If(go):
                    m.d.sync += [space.eq(s_space), contig.eq(s_contig), real.eq(s_real), rows.eq(v.rows),
                                 length.eq(v.len), rbeats.eq(s_rbeats), rstride.eq(v.rstride),
                                 estride.eq(v.estride), mask.eq(q.event)]
                with m.If(last_in_row):
                    m.d.sync += [r.eq(c["r"] + 1), b.eq(0), row_addr.eq(c["row_addr"] + c["rstride"]),
                                 beat_addr.eq(c["row_addr"] + c["rstride"]), local.eq(c["local"] + 1),
                                 off.eq(0)]
                with m.Else():
                    m.d.sync += [r.eq(c["r"]), b.eq(c["b"] + 1), row_addr.eq(c["row_addr"]),
                                 beat_addr.eq(c["beat_addr"] + Mux(c["contig"], B, c["estride"])),
                                 local.eq(c["local"]), off.eq(c["off"] + Mux(c["contig"], B, eb))]
        nbytes = Mux(c["contig"], B, eb)
        errors = [(~ok, ErrorCode.ADDRESS_RANGE)]
        return dict(beat=beat, last=last, last_in_row=last_in_row, cur=c, nbytes=nbytes, eb=eb,
                    ready=~active, errors=errors, active=active, space=space, local=local, s_space=s_space,
                    s_local=s_local, s_real=s_real)

    @staticmethod
    def delay(m, sig, stages, name):
        """``sig`` delayed by ``stages`` register stages (a view of the same layout)."""
        v = sig
        for i in range(stages):
            nv = Signal.like(sig, name=f"{name}{i}")
            m.d.sync += nv.eq(v)
            v = nv
        return v


def _tag(cfg):
    """What a load beat carries down the ``dram_latency`` delay line to its response."""
    return data.StructLayout({"beat": 1, "real": 1, "space": 1, "contig": 1,
                              "local": clog2(max(cfg.spm_rows, cfg.acc_rows)), "off": range(8 * cfg.cols + 8),
                              "nbytes": range(max(cfg.dma_beat_bytes, _EB_ACC) + 1), "eol": 1,
                              "len": derived_widths(cfg)["lane"], "retire": 1, "mask": event_width(cfg)})


class DmaLoad(_DmaBase):
    """``dma.ld``: DRAM -> SPM/ACC.

    Ports: push, tok (UnitBase); dram Out(DramSignature) read channel only;
    spm_wr Out(RowWriteSignature(laddr, 8*cols, cols)), acc_wr Out(RowWriteSignature(laddr, 32*cols, cols)).
    """

    unit = Unit.LOAD
    mnemonic = "dma.ld"

    def extra_ports(self, cfg):
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        return {"dram": Out(DramSignature(cfg)),
                "spm_wr": Out(RowWriteSignature(aw, SPM_BITS * cfg.cols, cfg.cols)),
                "acc_wr": Out(RowWriteSignature(aw, ACC_BITS * cfg.cols, cfg.cols))}

    def datapath(self, m, q, go):
        cfg = self.cfg
        w = self.walker(m, q, go)
        c = w["cur"]
        m.d.comb += [self.dram.rd_valid.eq(w["beat"] & c["real"]), self.dram.rd_addr.eq(c["beat_addr"])]
        tag = Signal(_tag(cfg))
        m.d.comb += [tag.beat.eq(w["beat"]), tag.real.eq(c["real"]), tag.space.eq(c["space"]),
                     tag.contig.eq(c["contig"]), tag.local.eq(c["local"]), tag.off.eq(c["off"]),
                     tag.nbytes.eq(w["nbytes"]), tag.eol.eq(w["last_in_row"]), tag.len.eq(c["len"]),
                     tag.retire.eq(w["last"]), tag.mask.eq(c["mask"])]
        t = self.delay(m, tag, cfg.dram_latency, "ldtag")
        t = data.View(_tag(cfg), t)
        # merge the returning beat into the row buffer
        nb = _EB_ACC * cfg.cols          # bytes of the widest row
        buf = Signal(8 * nb)
        B = cfg.dma_beat_bytes
        resp = [self.dram.rd_resp_data[8 * k:8 * k + 8] for k in range(B)]
        # named once: an expression used in every byte's logic would be built once per use
        row_end, off_end = Signal(range(_EB_ACC * (1 << 16))), Signal(17)
        m.d.comb += [row_end.eq(Mux(t.space == Space.ACC, t.len << _ACC_SHIFT, t.len)), off_end.eq(t.off + t.nbytes)]
        merged = Signal(8 * nb)
        for j in range(nb):             # byte j of the row is byte j - off of the beat
            sel = (j >= t.off) & (j < off_end) & (j < row_end)
            # off is a multiple of the beat (contiguous rows) or of the element (one element per
            # beat, which then starts the beat), so (j - off) mod B needs no subtraction
            src = Mux(t.contig, resp[j % B], Mux(t.space == Space.ACC, resp[j % min(_EB_ACC, B)], resp[0]))
            m.d.comb += merged[8 * j:8 * j + 8].eq(Mux(sel, src, buf[8 * j:8 * j + 8]))
        write = t.beat & t.real
        with m.If(write):
            m.d.sync += buf.eq(Mux(t.eol, 0, merged))
        lanes = (1 << cfg.cols) - 1
        m.d.comb += [self.spm_wr.addr.eq(t.local), self.spm_wr.data.eq(merged[:SPM_BITS * cfg.cols]),
                     self.acc_wr.addr.eq(t.local), self.acc_wr.data.eq(merged)]
        with m.If(write & t.eol):
            with m.If(t.space == Space.ACC):
                m.d.comb += self.acc_wr.en.eq(lanes)
            with m.Else():
                m.d.comb += self.spm_wr.en.eq(lanes)
        return w["ready"], [(t.beat & t.retire, t.mask)], w["errors"]


class DmaStore(_DmaBase):
    """``dma.st``: SPM/ACC -> DRAM.

    Ports: push, tok (UnitBase); dram Out(DramSignature) write channel only;
    spm_rd Out(RowReadSignature(laddr, 8*cols)), acc_rd Out(RowReadSignature(laddr, 32*cols)):
    registered read ports (data the next cycle), which the scalar unit's ``sld`` shares;
    sld_row In(laddr): the row an ``sld`` reads.

    A memory's port reads the store's row in every cycle the store reads that memory (an instance of
    it with rows and elements starting, or in flight), else ``sld_row``: the contract makes an
    ``sld`` and a ``dma.st`` with rows of the same memory in flight at once a race
    (docs/microarchitecture.md section 4), so an ``sld`` always finds the port free. The choice adds
    no logic level after the start decision: the starting instance's row against the rest, as
    before, with the rest already chosen.

    A beat of cycle ``s`` reads its row at ``s`` (what the row held before ``s``'s writes, as the
    contract's read at ``s``) and puts its write request on the DRAM channel at ``s + 1``, from the
    read port's register. The instance still retires at ``dma_retire`` counted from ``s``: the write
    lands in DRAM at ``s + 1``, before any load a token can order after the store requests it
    (``r + TOKEN_LATENCY`` at the earliest, ``r >= s + dram_latency``).
    """

    unit = Unit.STORE
    mnemonic = "dma.st"

    def extra_ports(self, cfg):
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        return {"dram": Out(DramSignature(cfg)),
                "spm_rd": Out(RowReadSignature(aw, SPM_BITS * cfg.cols)),
                "acc_rd": Out(RowReadSignature(aw, ACC_BITS * cfg.cols)), "sld_row": In(aw)}

    def datapath(self, m, q, go):
        cfg = self.cfg
        B = cfg.dma_beat_bytes
        w = self.walker(m, q, go)
        c = w["cur"]
        for sp, port in ((Space.SPM, self.spm_rd), (Space.ACC, self.acc_rd)):
            # (an instance without rows or elements reads nothing and holds no port: the contract's)
            mine = Signal(name=f"st_reads_{Space(sp).name.lower()}")
            m.d.comb += mine.eq(w["s_real"] & (w["s_space"] == sp))
            rest = Mux(w["active"] & (w["space"] == sp), w["local"], self.sld_row)
            m.d.comb += port.addr.eq(Mux(go & mine, w["s_local"], rest))
        # the beat, one cycle later, beside its row from the registered read ports
        beat_l = data.StructLayout({"valid": 1, "space": 1, "addr": 32, "off": len(c["off"]),
                                    "len": len(c["len"]), "nbytes": range(max(B, _EB_ACC) + 1)})
        now, bt = Signal(beat_l), Signal(beat_l, name="st_beat")
        m.d.comb += [now.valid.eq(w["beat"] & c["real"]), now.space.eq(c["space"]), now.addr.eq(c["beat_addr"]),
                     now.off.eq(c["off"]), now.len.eq(c["len"]), now.nbytes.eq(w["nbytes"])]
        m.d.sync += bt.eq(now)
        nb = _EB_ACC * cfg.cols          # bytes of the widest row
        image = Signal(8 * nb)
        m.d.comb += image.eq(Mux(bt.space == Space.ACC, self.acc_rd.data, self.spm_rd.data))
        shifted = Signal(8 * B)         # byte k of the beat is byte off + k of the row image
        img = [image[8 * j:8 * j + 8] for j in range(nb)]
        m.d.comb += shifted.eq(Cat(*_shift_down_bytes(m, img, bt.off, B)))
        row_end = Signal(range(_EB_ACC * (1 << 16)))
        m.d.comb += row_end.eq(Mux(bt.space == Space.ACC, bt.len << _ACC_SHIFT, bt.len))
        strb = Signal(B)
        for j in range(B):
            m.d.comb += strb[j].eq((bt.off + j < row_end) & (j < bt.nbytes))
        m.d.comb += [self.dram.wr_valid.eq(bt.valid), self.dram.wr_addr.eq(bt.addr),
                     self.dram.wr_data.eq(shifted[:8 * B]), self.dram.wr_strb.eq(strb)]
        tag = Signal(event_width(cfg) + 1)
        m.d.comb += tag.eq(Cat(w["beat"] & w["last"], c["mask"]))
        t = self.delay(m, tag, cfg.dram_latency, "sttag")
        return w["ready"], [(t[0], t[1:])], w["errors"]

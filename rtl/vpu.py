"""The vector unit: lane-wise ops on SPM/ACC rows, requantization, lookup table, lane reductions.

``VpuAlu`` is the datapath of one row, a three-stage pipeline (tested alone against
``isa.semantics``); ``VpuUnit`` runs one instance at a time (contract section 3, VPU): row i is read
at ``s+i``, its operands arrive from the memory ports at ``s+i+1`` and are registered (the operand
stage: a memory read and the ALU's first stage are never in one cycle), are worked on at ``s+i+2``
and ``s+i+3`` (ALU stages 1 and 2) and its result is written at ``s+i+VPU_LATENCY`` (4, ALU stage 3);
the next instance starts after the previous one retired.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from isa.errors import ErrorCode
from isa.ints import cdiv
from isa.table import (layout, BY_MNEMONIC, LUT_ENTRIES, QCFG_RESET, VPU_BINARY, VPU_UNARY, Round, ScaleMode, Space,
                       SrcMode, Unit, clog2)
from isa.timing import VPU_LATENCY, lut_rows

from .mem import LUTRAM_DEPTH
from .queue import event_width
from .unit import ACC_BITS, SPM_BITS, RowReadSignature, RowWriteSignature, UnitBase

__all__ = ["VpuAlu", "VpuUnit", "ALU_OPS"]

#: the operations of ``VpuAlu``: its ``op`` port has one bit per name (the table's op groups, then vreq)
ALU_OPS = VPU_BINARY + VPU_UNARY + ("vreq",)
OP = {n: BY_MNEMONIC[n].opcode for n in ALU_OPS + ("vlutld", "vqcfg")}


def _lanes(cols, shape):
    return data.ArrayLayout(shape, cols)


def _any(bits):
    """OR of a list of 1-bit values (0 when empty)."""
    out = Const(0, 1)
    for b in bits:
        out = out | b
    return out


class VpuAlu(wiring.Component):
    """One row of VPU arithmetic: a three-stage pipeline taking one row per cycle.

    The operands presented in cycle ``t`` (stage 1) give ``y`` in cycle ``t+2`` (stage 3, from
    registers through a little logic: ``VpuUnit`` writes it to memory in that cycle).

    Ports (stage 1):
      op     In(StructLayout({name: 1 for name in ALU_OPS}))  the operation, one-hot (none: a bubble)
      a      In(ArrayLayout(signed(32), cols))  operand a (SPM lanes already sign-extended)
      b      In(ArrayLayout(signed(32), cols))  operand b (row, or a broadcast scalar); vreq: its scale,
                                                the low 16 bits of each lane (register or ACC row)
      dspace In(1)                              destination memory: SPM results saturate to int8
      lut_we In(1), lut_addr In(clog2(lut_rows)), lut_data In(8*cols)
                                                vlutld: write table entries ``lut_addr*cols ..`` (one
                                                SPM row); no vlut row may be in stage 1 meanwhile
    Requantizer configuration (steady from the cycle before a vreq row enters until it leaves):
      shift In(6), zp In(signed(8)), lo In(signed(8)), hi In(signed(8)), rnd In(2)
    Result (stage 3):
      y      Out(ArrayLayout(signed(32), cols)) the row written: int32 lanes for ACC; for SPM only bits
                                                0..7 of each lane are defined (the saturated int8)

    Where the work goes (per lane; the reductions are shared):

    * stage 1: one add/subtract (``vadd``, ``vsub``, the ``vmin``/``vmax`` comparison); the
      first half of the reduction trees' levels; one multiplier of three 18x18 DSPs computing ``a * m`` (48 bits; its
      three partial products are added in stage 2), which serves ``vmul``, ``vreq`` and, with
      ``m`` a power of two, 1, 0 or ``-2**15``, ``vshl``, ``vsra``, ``vmov``, ``vrelu`` and
      ``vabs`` (``_product``); the lookup table read (one ``Memory`` copy per lane, read
      synchronously: block RAM or LUT RAM on an FPGA).
    * stage 2: the product's partial products added; the reduction trees' other levels; the
      result of every op but ``vreq`` selected from the registered adder result, the reduction,
      three bit windows of the product and the table entry; ``vreq``'s right shift, kept to the
      bits an int8 result depends on (``_requant``).
    * stage 3: ``vreq``'s rounding, zero point and clamp; saturation of SPM results.

    The table reads as zeros until the first ``vlutld`` after reset (as the simulator's).
    """

    def __init__(self, cols: int):
        self.cols = cols
        self.lut_rows = cdiv(LUT_ENTRIES, cols)
        L = lambda s: _lanes(cols, s)
        super().__init__({"op": In(data.StructLayout({k: 1 for k in ALU_OPS})), "a": In(L(signed(32))),
                          "b": In(L(signed(32))), "dspace": In(1), "lut_we": In(1),
                          "lut_addr": In(max(1, clog2(self.lut_rows))), "lut_data": In(SPM_BITS * cols),
                          "shift": In(6), "zp": In(signed(8)), "lo": In(signed(8)), "hi": In(signed(8)),
                          "rnd": In(2), "y": Out(L(signed(32)))})

    def elaborate(self, platform):
        m = Module()
        C = self.cols
        a, b = self.a, self.b
        op = {k: self.op[k] for k in ALU_OPS}
        qc = self._qcfg(m)

        # controls of stages 2 and 3
        s2 = {k: Signal(name=f"s2_{k}") for k in ("r1", "red", "lut", "req", "spm")}
        m.d.sync += [s2["r1"].eq(op["vadd"] | op["vsub"] | op["vmin"] | op["vmax"]),
                     s2["red"].eq(op["vrsum"] | op["vrmax"] | op["vrmin"]),
                     s2["lut"].eq(op["vlut"]), s2["req"].eq(op["vreq"]), s2["spm"].eq(self.dspace == Space.SPM)]
        req3, spm3 = Signal(), Signal()
        m.d.sync += [req3.eq(s2["req"]), spm3.eq(s2["spm"])]

        red = self._reductions(m, op)       # (stage 2)
        loaded = Signal()              # a vlutld wrote the table since reset
        with m.If(self.lut_we):
            m.d.sync += loaded.eq(1)

        for n in range(C):
            an, bn = a[n], b[n]
            # --- stage 1: add/subtract (vadd, vsub, the vmin/vmax comparison) ---
            sub = ~op["vadd"]
            bx = Signal(signed(32), name=f"bx{n}")
            d = Signal(signed(33), name=f"d{n}")
            m.d.comb += [bx.eq(bn ^ sub.replicate(32)), d.eq(an + bx + sub)]
            pick_a = Mux(op["vmax"], ~d[32], d[32])
            r1 = Signal(signed(32), name=f"r1_{n}")
            m.d.sync += r1.eq(Mux(op["vadd"] | op["vsub"], d[:32], Mux(pick_a, an, bn)))

            # --- stage 1: the product, and which of its bits the result is ---
            p2 = self._product(m, op, an, bn, n)       # (stage 2: from the partial products' registers)
            w0, w15, w31 = Signal(name=f"w0_{n}"), Signal(name=f"w15_{n}"), Signal(name=f"w31_{n}")
            m.d.sync += [w0.eq(op["vmul"] | op["vshl"] | op["vmov"] | op["vrelu"] | (op["vabs"] & ~an[31])),
                         w15.eq((op["vsra"] & ~bn[4]) | (op["vabs"] & an[31])), w31.eq(op["vsra"] & bn[4])]
            # --- stage 1 -> 2: the lookup table ---
            lut8 = self._lut(m, an, loaded, n)

            # --- stage 2: the result of every op but vreq; vreq's shift ---
            r = Signal(signed(32), name=f"r{n}")
            m.d.comb += r.eq((r1 & s2["r1"].replicate(32)) | (red & s2["red"].replicate(32))
                             | (p2[:32] & w0.replicate(32))
                             | (p2[15:47] & w15.replicate(32)) | (p2[31:47].as_signed() & w31.replicate(32))
                             | (lut8 & s2["lut"].replicate(32)))
            r3 = Signal(signed(32), name=f"r3_{n}")
            m.d.sync += r3.eq(r)
            rq = self._requant(m, qc, p2, n)

            # --- stage 3: vreq's rounding and clamp; saturation for SPM (only the low byte is written there) ---
            over = r3[7:] != r3[31].replicate(25)
            sat = Mux(over, Mux(r3[31], 0x80, 0x7F), r3[:8])
            m.d.comb += self.y[n].eq(Cat(Mux(req3, rq, Mux(spm3, sat, r3[:8]))[:8], r3[8:32]))
        return m

    def _qcfg(self, m):
        """Registered copies of the requantizer configuration and values derived from it."""
        qc = SimpleNamespace(
            shift=Signal(6, name="q_shift"), zp=Signal(signed(8), name="q_zp"),
            lo=Signal(signed(8), name="q_lo"), hi=Signal(signed(8), name="q_hi"),
            up=Signal(2, name="q_up"),              # rounding: [half up, half to even]
            nlo=Signal(signed(10), name="q_nlo"),   # zp - lo: q + up < lo - zp   <=>  q + up + nlo < 0
            nhi=Signal(signed(10), name="q_nhi"),   # zp - hi: q + up >= hi - zp  <=>  q + up + nhi >= 0
            empty=Signal(name="q_empty"))           # lo > hi: every value clamps to hi
        m.d.sync += [qc.shift.eq(self.shift), qc.zp.eq(self.zp), qc.lo.eq(self.lo), qc.hi.eq(self.hi),
                     qc.up.eq(Cat(self.rnd == Round.HALF_UP, self.rnd == Round.HALF_EVEN)),
                     qc.nlo.eq(self.zp - self.lo), qc.nhi.eq(self.zp - self.hi), qc.empty.eq(self.lo > self.hi)]
        return qc

    def _reductions(self, m, op):
        """``vrsum``/``vrmax``/``vrmin`` of the lanes of ``a``: trees of named stages, the first half
        of the tree's levels in stage 1 (into registers), the rest in stage 2 beside the product's
        adders (the stage from the memories' read registers then ends after half the tree)."""
        def tree(vals, fn, name, levels, first=0):
            level = first
            while len(vals) > 1 and level < first + levels:
                nxt = []
                for i in range(0, len(vals) - 1, 2):
                    v = Signal(signed(32), name=f"{name}{level}_{i // 2}")
                    m.d.comb += v.eq(fn(vals[i], vals[i + 1]))
                    nxt.append(v)
                if len(vals) % 2:
                    nxt.append(vals[-1])
                vals, level = nxt, level + 1
            return vals

        lanes = [self.a[n] for n in range(self.cols)]
        depth = (self.cols - 1).bit_length()            # the tree's levels
        in1 = depth // 2                                # of them in stage 1
        want_min, is_sum = Signal(name="red_min"), Signal(name="red_sum")
        m.d.sync += [want_min.eq(op["vrmin"]), is_sum.eq(op["vrsum"])]
        # each partial sum's bit 0 is also used on its own (bit 0 of a sum is the XOR of the bits 0):
        # a partial sum used only by the next adder would let Yosys' alumacc merge the whole tree into
        # one multi-operand sum built from LUT full adders, about twice the LUTs of the adder tree
        def add(x, y):
            return Cat(x[0] ^ y[0], (x + y)[1:32]).as_signed()

        def ext(want):
            return lambda x, y: Mux((y - x)[32] ^ want, x, y)

        def regs(vals, name):
            out = [Signal(signed(32), name=f"{name}_r{i}") for i in range(len(vals))]
            m.d.sync += [o.eq(v) for o, v in zip(out, vals)]
            return out

        sums = regs(tree(lanes, add, "rsum", in1), "rsum")
        exts = regs(tree(lanes, ext(op["vrmin"]), "rext", in1), "rext")
        rsum, rext, red = Signal(signed(32)), Signal(signed(32)), Signal(signed(32))
        m.d.comb += [rsum.eq(tree(sums, add, "rsum", depth, in1)[0]),
                     rext.eq(tree(exts, ext(want_min), "rext", depth, in1)[0]),
                     red.eq(Mux(is_sum, rsum, rext))]
        return red

    def _product(self, m, op, an, bn, n):
        """``a * m`` as 48 bits in stage 2: three 18x18 multipliers ``aL*mL``, ``aH*mL``, ``aL*mH`` in
        stage 1 (into registers), added in stage 2, with
        ``m = {mh, ml}`` (``ml`` 18-bit signed, ``mh`` 16 bits, used by vmul and vshl only).

        ``m``: vmul ``b``; vreq ``b``'s low 16 bits, signed; vshl ``2**sh``; vsra ``2**(15 - sh%16)``;
        vmov 1; vrelu 1 or 0; vabs 1 or ``-2**15``. The powers of two are one-hot decodes of
        ``e = sh%16`` (vsra: ``15 - sh%16``, the same bits inverted) from two 2-bit predecodes.
        """
        sh, sign = bn[:5], an[31]
        mr = op["vmul"] | op["vreq"]
        neg = op["vabs"] & sign
        e = Signal(4, name=f"e{n}")
        m.d.comb += e.eq(sh[:4] ^ op["vsra"].replicate(4))
        en_l = (op["vshl"] & ~sh[4]) | op["vsra"]     # 2**e in ml
        en_h = op["vshl"] & sh[4]                      # 2**e in mh
        lo = [Signal(name=f"e_lo{n}_{i}") for i in range(4)]
        hl = [Signal(name=f"e_hl{n}_{i}") for i in range(4)]
        hh = [Signal(name=f"e_hh{n}_{i}") for i in range(4)]
        for i in range(4):
            m.d.comb += [lo[i].eq(e[:2] == i), hl[i].eq(en_l & (e[2:] == i)), hh[i].eq(en_h & (e[2:] == i))]
        ml = Signal(signed(18), name=f"ml{n}")
        mh = Signal(16, name=f"mh{n}")
        bits = [(mr & bn[j]) | (lo[j % 4] & hl[j // 4]) for j in range(16)]
        bits[0] = bits[0] | op["vmov"] | ((op["vrelu"] | op["vabs"]) & ~sign)
        bits[15] = bits[15] | neg
        ext = (op["vreq"] & bn[15]) | neg
        m.d.comb += [ml.eq(Cat(*bits, ext, ext)),
                     mh.eq(Cat(*[(op["vmul"] & bn[16 + j]) | (lo[j % 4] & hh[j // 4]) for j in range(16)]))]
        al, ah = an[:16], an[16:32].as_signed()
        # the three partial products end stage 1 in registers; they are added in stage 2, so the
        # stage that starts at the memories' read registers ends at the multipliers
        p1 = Signal(signed(34), name=f"p1_{n}")
        p2 = Signal(signed(34), name=f"p2_{n}")
        p3 = Signal(16, name=f"p3_{n}")
        m.d.sync += [p1.eq(al * ml), p2.eq(ah * ml), p3.eq(al * mh)]
        s = Signal(signed(32), name=f"s{n}")
        m.d.comb += s.eq(Cat((p2[:16] + p3)[:16], p2[16:32]))
        hi32 = Signal(signed(32), name=f"ph{n}")
        m.d.comb += hi32.eq(p1[16:].as_signed() + s)
        p = Signal(signed(48), name=f"p{n}")
        m.d.comb += p.eq(Cat(p1[:16], hi32))
        return p

    def _requant(self, m, qc, p, n):
        """``clamp(round_shift(p, shift) + zp, lo, hi)`` for the 48-bit product ``p`` of stage 2: the
        shift in stage 2, the rest in stage 3 (returns the stage-3 int8).

        ``v = 2*p`` is shifted right by ``shift`` keeping only the bits an int8 result depends on:
        ``v >> shift`` is ``(p >> shift) * 2 + guard``, and ``p >> shift`` matters only in 9 bits
        (``q + zp + up`` outside -128..127 clamps whatever ``zp``). First a 25-bit window at
        ``16 * (shift // 16)``, then steps of 8, 4, 2, 1. The bits shifted out at the bottom form
        the sticky bit (half to even); those cut at the top must all equal the sign, else the
        shifted value is out of 9-bit range and the result is ``hi`` or the clamped ``lo``.
        """
        sign = p[47]
        v = Cat(Const(0, 1), p)                  # 49 bits
        ext = lambda j: v[j] if j < len(v) else sign
        # the 25-bit window at 16 * shift[4:6]
        c = qc.shift[4:6]
        W = 25
        x = Signal(W, name=f"rq_win{n}")
        m.d.comb += x.eq(Cat(*[Mux(c[1], Mux(c[0], ext(i + 48), ext(i + 32)), Mux(c[0], ext(i + 16), v[i]))
                               for i in range(W)]))
        or16 = [Signal(name=f"rq_or{k}_{n}") for k in range(3)]
        for k in range(3):
            m.d.comb += or16[k].eq(v[16 * k:16 * k + 16] != 0)
        sticky = [Mux(c[1], or16[0] | or16[1] | (c[0] & or16[2]), c[0] & or16[0])]
        ovf = [~c[1] & Mux(c[0], (v[W + 16:] ^ sign.replicate(len(v) - W - 16)) != 0,
                           (v[W:] ^ sign.replicate(len(v) - W)) != 0)]
        steps = [8, 4, 2, 1]
        widths, w = [], 10                       # output widths, from the last step back
        for k in reversed(steps):
            widths.append(w)
            w = w + k
        widths.reverse()
        for k, wout in zip(steps, widths):
            sel = qc.shift[k.bit_length() - 1]
            win = len(x)
            y = Signal(wout, name=f"rq_sh{k}_{n}")
            m.d.comb += y.eq(Cat(*[Mux(sel, x[i + k] if i + k < win else sign, x[i]) for i in range(wout)]))
            sticky.append(sel & (x[:k] != 0))
            if wout < win:
                ovf.append(~sel & ((x[wout:win] ^ sign.replicate(win - wout)) != 0))
            x = y
        guard, q = x[0], x[1:10].as_signed()     # q: (p >> shift), 9 bits when it fits
        ovf.append(x[9] ^ sign)
        up = guard & (qc.up[0] | (qc.up[1] & (_any(sticky) | q[0])))
        # stage 3
        q3, up3, of3, sg3 = (Signal(signed(9), name=f"rq_q{n}"), Signal(name=f"rq_up{n}"),
                             Signal(name=f"rq_of{n}"), Signal(name=f"rq_sg{n}"))
        m.d.sync += [q3.eq(q), up3.eq(up), of3.eq(_any(ovf)), sg3.eq(sign)]
        y = Signal(signed(10), name=f"rq_y{n}")
        below, above = Signal(name=f"rq_below{n}"), Signal(name=f"rq_above{n}")
        m.d.comb += [y.eq(q3 + qc.zp + up3),
                     below.eq(Mux(of3, sg3, (q3 + qc.nlo + up3)[10])),
                     above.eq(qc.empty | Mux(of3, ~sg3, ~(q3 + qc.nhi + up3)[10]))]
        return Mux(above, qc.hi, Mux(below, qc.lo, y[:8]))[:8]

    def _lut(self, m, an, loaded, n):
        """The lookup table entry ``a & 0xff`` (addressed in stage 1, an int8 in stage 2): this lane's
        copy of the table, row ``r`` holding entries ``r*cols ..``."""
        C = self.cols
        # deeper than a LUT RAM cell: block RAM (a row of LUT RAM cells per 16 rows and 4 bits takes
        # logic slices); reads and writes never meet (one instruction per stage), so the read is
        # transparent only where that is cheaper (LUT RAM: a registered address, not data)
        block = self.lut_rows > LUTRAM_DEPTH
        mem = memory.Memory(shape=unsigned(SPM_BITS * C), depth=self.lut_rows, init=[],
                            attrs={"ram_style": "block"} if block else None)
        m.submodules[f"lut{n}"] = mem
        wp = mem.write_port()
        rp = mem.read_port(domain="sync", transparent_for=() if block else (wp,))
        entry = an[:8]
        pow2 = (C & (C - 1)) == 0 and C <= LUT_ENTRIES
        lb = C.bit_length() - 1
        m.d.comb += [wp.addr.eq(self.lut_addr), wp.data.eq(self.lut_data), wp.en.eq(self.lut_we),
                     rp.addr.eq(entry[lb:] if pow2 else entry // C)]
        # the entry's byte in the row read, one-hot (none before the first vlutld)
        byte = entry[:lb] if pow2 else entry % C
        pick = Signal(C, name=f"lut_pick{n}")
        m.d.sync += pick.eq(Cat(*[loaded & (byte == k) for k in range(C)]))
        v = Const(0, 8)
        for k in range(C):
            v = v | (rp.data[8 * k:8 * k + 8] & pick[k].replicate(8))
        return v.as_signed()


def _tag(cfg):
    aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
    return data.StructLayout({"valid": 1, "write": 1, "dspace": 1, "dst": aw, "retire": 1, "mask": event_width(cfg),
                              "op": 8, "ops": data.StructLayout({k: 1 for k in ALU_OPS}), "aspace": 1, "bmode": 2,
                              "sval": signed(32), "row": unsigned(16)})


class VpuUnit(UnitBase):
    """Ports: push, tok (UnitBase);
    spm_a, spm_b Out(RowReadSignature(laddr, 8*cols)); acc_a, acc_b Out(RowReadSignature(laddr, 32*cols))
    (sync read ports: data the next cycle); spm_wr Out(RowWriteSignature(laddr, 8*cols, cols)),
    acc_wr Out(RowWriteSignature(laddr, 32*cols, cols)).
    """

    unit = Unit.VPU
    uses_sval = True

    def extra_ports(self, cfg):
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        C = cfg.cols
        return {"spm_a": Out(RowReadSignature(aw, SPM_BITS * C)), "spm_b": Out(RowReadSignature(aw, SPM_BITS * C)),
                "acc_a": Out(RowReadSignature(aw, ACC_BITS * C)), "acc_b": Out(RowReadSignature(aw, ACC_BITS * C)),
                "spm_wr": Out(RowWriteSignature(aw, SPM_BITS * C, C)),
                "acc_wr": Out(RowWriteSignature(aw, ACC_BITS * C, C))}

    def datapath(self, m, q, go):
        cfg = self.cfg
        C = cfg.cols
        op = q.word.opcode
        vb, vu, vr = q.word.vbin, q.word.vun, q.word.vreq
        is_bin = (op >= OP["vadd"]) & (op <= OP["vsra"])
        is_un = (op >= OP["vmov"]) & (op <= OP["vlut"])
        is_req, is_ld, is_cfg = op == OP["vreq"], op == OP["vlutld"], op == OP["vqcfg"]
        # rows of the starting instance, and its operands' memories
        n0 = Mux(is_bin, vb.n, Mux(is_un, vu.n, Mux(is_req, vr.n, Mux(is_ld, lut_rows(cfg), 1))))
        aspace0 = Mux(is_req, Space.ACC, Mux(is_ld, Space.SPM, vb.aspace))     # vbin/vun share offsets
        dspace0 = Mux(is_req, Space.SPM, vb.dspace)
        a0 = Mux(is_ld, q.addr[0], q.addr[1])
        writes0 = is_bin | is_un | is_req
        assert [s.lo for s in layout(cfg).formats["vbin"][:8]] == [s.lo for s in layout(cfg).formats["vun"][:8]]

        # streaming state (one instance at a time)
        active = Signal()
        i, n = Signal(16), Signal(16)
        aw = len(self.spm_a.addr)     # row addresses: only the memory ports' bits are used
        dst, aad, bad = Signal(aw), Signal(aw), Signal(aw)
        st = Signal(_tag(cfg))
        cur_i = Mux(go, 0, i)
        cur_n = Mux(go, n0, n)
        cur_dst = Mux(go, q.addr[0], dst)
        cur_a = Mux(go, a0, aad)
        cur_b = Mux(go, q.addr[2], bad)
        last = (cur_n == 0) | (cur_i + 1 == cur_n)
        beat = go | active
        tag0 = Signal(_tag(cfg))
        m.d.comb += [tag0.eq(st), tag0.valid.eq(beat), tag0.dst.eq(cur_dst), tag0.retire.eq(last),
                     tag0.row.eq(cur_i), tag0.write.eq(Mux(go, writes0 & (n0 != 0), st.write))]
        # vreq's scale comes in as operand b: the scale row (ACC) or the scalar
        bmode0 = Mux(is_req, Mux(vr.smode == ScaleMode.ROW, SrcMode.ACC, SrcMode.IMM), vb.bmode)
        with m.If(go):
            m.d.comb += [tag0.dspace.eq(dspace0), tag0.mask.eq(q.event), tag0.op.eq(op),
                         tag0.ops.eq(Cat(*[op == OP[k] for k in ALU_OPS])),
                         tag0.aspace.eq(aspace0), tag0.bmode.eq(bmode0), tag0.sval.eq(q.sval)]
            m.d.sync += st.eq(tag0)
        with m.If(beat):
            m.d.sync += [i.eq(cur_i + 1), dst.eq(cur_dst + 1), aad.eq(cur_a + 1),
                         bad.eq(cur_b + Mux(tag0.op == OP["vreq"], 0, 1)), active.eq(~last)]
            with m.If(go):
                m.d.sync += n.eq(n0)
        m.d.comb += [self.spm_a.addr.eq(cur_a), self.acc_a.addr.eq(cur_a),
                     self.spm_b.addr.eq(cur_b), self.acc_b.addr.eq(cur_b)]

        # requantizer configuration and lookup table
        shift, rnd = Signal(6, init=QCFG_RESET["shift"]), Signal(2, init=QCFG_RESET["round"])
        zp = Signal(signed(8), init=QCFG_RESET["zp"])
        lo, hi = Signal(signed(8), init=QCFG_RESET["lo"]), Signal(signed(8), init=QCFG_RESET["hi"])
        with m.If(go & is_cfg):
            c = q.word.vqcfg
            m.d.sync += [shift.eq(c.shift), zp.eq(c.zp), lo.eq(c.lo), hi.eq(c.hi), rnd.eq(c.round)]

        # operand stage (s+i+1): the memory ports' data, each operand chosen from its memory (or the
        # scalar) and registered
        t1 = Signal(_tag(cfg))
        m.d.sync += t1.eq(tag0)
        spm_a = data.View(_lanes(C, signed(SPM_BITS)), self.spm_a.data)
        spm_b = data.View(_lanes(C, signed(SPM_BITS)), self.spm_b.data)
        acc_a = data.View(_lanes(C, signed(ACC_BITS)), self.acc_a.data)
        acc_b = data.View(_lanes(C, signed(ACC_BITS)), self.acc_b.data)
        opa, opb = Signal(_lanes(C, signed(32))), Signal(_lanes(C, signed(32)))
        row_b = (t1.bmode == SrcMode.SPM) | (t1.bmode == SrcMode.ACC)
        for lane in range(C):
            m.d.sync += [opa[lane].eq(Mux(t1.aspace == Space.ACC, acc_a[lane], spm_a[lane])),
                         opb[lane].eq(Mux(row_b, Mux(t1.bmode == SrcMode.ACC, acc_b[lane], spm_b[lane]), t1.sval))]
        # ALU stage 1 (s+i+2): operands, lookup-table write (vlutld reads SPM: a's low bytes are the
        # row's) and read address
        ta = Signal(_tag(cfg))
        m.d.sync += ta.eq(t1)
        m.submodules.alu = alu = VpuAlu(C)
        assert alu.lut_rows == lut_rows(cfg)
        m.d.comb += [alu.op.eq(ta.ops), alu.shift.eq(shift), alu.zp.eq(zp), alu.lo.eq(lo), alu.hi.eq(hi),
                     alu.rnd.eq(rnd), alu.dspace.eq(ta.dspace),
                     alu.lut_we.eq(ta.valid & (ta.op == OP["vlutld"])), alu.lut_addr.eq(ta.row),
                     alu.lut_data.eq(Cat(*[opa[lane][:SPM_BITS] for lane in range(C)])),
                     alu.a.eq(opa), alu.b.eq(opb)]
        # ALU stage 2; ALU stage 3: write the ALU's result
        t2, t3 = Signal(_tag(cfg)), Signal(_tag(cfg))
        m.d.sync += [t2.eq(ta), t3.eq(t2)]
        assert VPU_LATENCY == 4
        y3 = alu.y.as_value()
        y3v = data.View(_lanes(C, signed(32)), y3)
        m.d.comb += [self.acc_wr.addr.eq(t3.dst), self.acc_wr.data.eq(y3), self.spm_wr.addr.eq(t3.dst),
                     self.spm_wr.data.eq(Cat(*[y3v[lane][:8] for lane in range(C)]))]
        with m.If(t3.valid & t3.write):
            with m.If(t3.dspace == Space.ACC):
                m.d.comb += self.acc_wr.en.eq((1 << C) - 1)
            with m.Else():
                m.d.comb += self.spm_wr.en.eq((1 << C) - 1)
        ready = ~active & ~t1.valid & ~ta.valid & ~t2.valid & ~t3.valid
        events = [(t3.valid & t3.retire, t3.mask)]

        # checks at start: rows inside their memories, no partial overlap of destination and a source
        nn = Mux(is_cfg, 0, n0)
        none = nn == 0
        wmax = max(cfg.spm_rows, cfg.acc_rows).bit_length()

        def fits(k):
            """{limit: rows addr[k] .. addr[k]+nn-1 lie in 0 .. limit-1} for both memories (nn > 0)."""
            lo = q.addr[k]
            end = Signal(max(wmax, len(nn)) + 1, name=f"end{k}")
            m.d.comb += end.eq(lo[:wmax] + nn)
            return {lim: (lo[lim.bit_length():] == 0) & (end <= lim) for lim in (cfg.spm_rows, cfg.acc_rows)}

        def space(ok, sp):
            return Mux(sp == Space.ACC, ok[cfg.acc_rows], ok[cfg.spm_rows])

        f0, f1, f2 = fits(0), fits(1), fits(2)
        d0, b0 = q.addr[0], q.addr[2]
        brow = is_bin & ((vb.bmode == SrcMode.SPM) | (vb.bmode == SrcMode.ACC))
        bspace = vb.bmode[0]
        scale_ok = (b0[cfg.acc_rows.bit_length():] == 0) & (b0[:wmax] < cfg.acc_rows)
        ok = Mux(is_ld, none | f0[cfg.spm_rows],
                 (~writes0 | none | (space(f0, dspace0) & space(f1, aspace0)))
                 & (~brow | none | space(f2, bspace))
                 & (~(is_req & (vr.smode == ScaleMode.ROW)) | scale_ok))

        # (only looked at when every row is inside its memory: ADDRESS_RANGE takes precedence)
        w = wmax + 1
        dn, nw = d0[:w], nn[:w]

        def partial(x0, xspace):
            xn = x0[:w]
            over = (xn < dn + nw) & (dn < xn + nw) & ~none
            return (xspace == dspace0) & over & (xn != dn)

        overlap = (is_bin | is_un) & partial(q.addr[1], aspace0) | brow & partial(b0, bspace)
        errors = [(overlap, ErrorCode.OVERLAP), (~ok, ErrorCode.ADDRESS_RANGE)]
        return ready, events, errors

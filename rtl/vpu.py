"""The vector unit: lane-wise ops on SPM/ACC rows, requantization, lookup table, lane reductions.

``VpuAlu`` is the combinational datapath of one row (tested alone against ``isa.semantics``);
``VpuUnit`` runs one instance at a time (contract section 3, VPU): row i is read at ``s+i``,
computed at ``s+i+1``, held at ``s+i+2`` and written at ``s+i+VPU_LATENCY`` (3); the next instance
starts after the previous one retired.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.errors import ErrorCode
from isa.table import layout, BY_MNEMONIC, LUT_ENTRIES, Round, ScaleMode, Space, SrcMode, Unit, clog2
from isa.timing import VPU_LATENCY, lut_rows

from .queue import UNITS, event_width
from .unit import RowReadSignature, RowWriteSignature, UnitBase, in_range

__all__ = ["VpuAlu", "VpuUnit", "QCFG_RESET"]

#: requantizer registers at reset: shift, zero point, lo, hi, rounding (docs/isa.md)
QCFG_RESET = dict(shift=0, zp=0, lo=-128, hi=127, rnd=int(Round.FLOOR))
OP = {n: BY_MNEMONIC[n].opcode for n in ("vadd", "vsub", "vmul", "vmin", "vmax", "vshl", "vsra", "vmov", "vrelu",
                                         "vabs", "vrsum", "vrmax", "vrmin", "vlut", "vlutld", "vqcfg", "vreq")}


def _lanes(cols, shape):
    return data.ArrayLayout(shape, cols)


class VpuAlu(wiring.Component):
    """One row of VPU arithmetic, combinational.

    Ports:
      op     In(8)                          opcode of a vbin, vun or vreq instruction
      a      In(ArrayLayout(signed(32), cols))  operand a (SPM lanes already sign-extended)
      b      In(ArrayLayout(signed(32), cols))  operand b (row, or a broadcast scalar)
      scale  In(ArrayLayout(signed(16), cols))  vreq scale per lane
      shift  In(6), zp In(signed(8)), lo In(signed(8)), hi In(signed(8)), rnd In(2)  requantizer
      lut    In(ArrayLayout(signed(8), 256))    lookup table
      dspace In(1)                          destination memory: SPM results saturate to int8
      y      Out(ArrayLayout(signed(32), cols)) the row written
    """

    def __init__(self, cols: int):
        self.cols = cols
        L = lambda s: _lanes(cols, s)
        super().__init__({"op": In(8), "a": In(L(signed(32))), "b": In(L(signed(32))), "scale": In(L(signed(16))),
                          "shift": In(6), "zp": In(signed(8)), "lo": In(signed(8)), "hi": In(signed(8)),
                          "rnd": In(2), "lut": In(data.ArrayLayout(signed(8), LUT_ENTRIES)), "dspace": In(1),
                          "y": Out(L(signed(32)))})

    def elaborate(self, platform):
        m = Module()
        C = self.cols
        # the requantizer's shift masks, shared by every lane
        low, half = Signal(64, name="rq_low"), Signal(64, name="rq_half")
        m.d.comb += [low.eq((Const(1, 64) << self.shift) - 1), half.eq((Const(1, 65) << self.shift) >> 1)]
        a, b = self.a, self.b
        # lane reductions: trees of named stages (an expression reused unnamed is elaborated twice)
        def tree(vals, fn, name):
            level = 0
            while len(vals) > 1:
                nxt = []
                for i in range(0, len(vals) - 1, 2):
                    v = Signal(signed(32), name=f"{name}{level}_{i // 2}")
                    m.d.comb += v.eq(fn(vals[i], vals[i + 1]))
                    nxt.append(v)
                if len(vals) % 2:
                    nxt.append(vals[-1])
                vals, level = nxt, level + 1
            return vals[0]

        lanes = [a[n] for n in range(C)]
        rsum, rmax, rmin = Signal(signed(32)), Signal(signed(32)), Signal(signed(32))
        m.d.comb += [rsum.eq(tree(lanes, lambda x, y: (x + y)[:32].as_signed(), "rsum")),
                     rmax.eq(tree(lanes, lambda x, y: Mux(x > y, x, y), "rmax")),
                     rmin.eq(tree(lanes, lambda x, y: Mux(x < y, x, y), "rmin"))]
        for n in range(C):
            r = Signal(signed(32), name=f"r{n}")
            an, bn = a[n], b[n]
            sh = bn[:5]
            table = {"vadd": an + bn, "vsub": an - bn, "vmul": an * bn, "vmin": Mux(an < bn, an, bn),
                     "vmax": Mux(an > bn, an, bn), "vshl": an.as_unsigned() << sh, "vsra": an >> sh,
                     "vmov": an, "vrelu": Mux(an < 0, 0, an), "vabs": Mux(an < 0, -an, an), "vrsum": rsum,
                     "vrmax": rmax, "vrmin": rmin, "vlut": self.lut[an[:8]],
                     "vreq": self._requant(m, an, self.scale[n], n, low, half)}
            val = an
            for name, expr in table.items():     # a mux chain (no case statement in the Verilog)
                val = Mux(self.op == OP[name], expr, val)
            m.d.comb += r.eq(val)
            sat = Mux(r > 127, 127, Mux(r < -128, -128, r))
            is_req = self.op == OP["vreq"]
            m.d.comb += self.y[n].eq(Mux((self.dspace == Space.SPM) & ~is_req, sat, r))
        return m

    def _requant(self, m, x, scale, n, low, half):
        """clamp(round_shift(x * scale, shift) + zp, lo, hi): an int8 value."""
        p = Signal(signed(64), name=f"rq_p{n}")
        m.d.comb += p.eq(x * scale)
        q = Signal(signed(64), name=f"rq_q{n}")
        m.d.comb += q.eq(p >> self.shift)
        rem = Signal(64, name=f"rq_rem{n}")
        m.d.comb += rem.eq(p.as_unsigned() & low)
        up = Signal(name=f"rq_up{n}")
        m.d.comb += up.eq((self.shift != 0) & Mux(self.rnd == Round.HALF_UP, rem >= half,
                                                  (self.rnd == Round.HALF_EVEN) & ((rem > half) | ((rem == half) & q[0]))))
        y = Signal(signed(66), name=f"rq_y{n}")
        m.d.comb += y.eq(q + up + self.zp)
        lo_c = Mux(y < self.lo, self.lo, y)
        return Mux(lo_c > self.hi, self.hi, lo_c)


def _tag(cfg):
    return data.StructLayout({"valid": 1, "write": 1, "dspace": 1, "dst": unsigned(32), "retire": 1, "mask": event_width(cfg),
                              "op": 8, "aspace": 1, "bmode": 2, "smode": 2, "sval": signed(32), "row": unsigned(16)})


class VpuUnit(UnitBase):
    """Ports: push, tok (UnitBase);
    spm_a, spm_b Out(RowReadSignature(laddr, 8*cols)); acc_a, acc_b Out(RowReadSignature(laddr, 32*cols))
    (sync read ports: data the next cycle); spm_wr Out(RowWriteSignature(laddr, 8*cols, cols)),
    acc_wr Out(RowWriteSignature(laddr, 32*cols, cols)).
    """

    unit = Unit.VPU

    def extra_ports(self, cfg):
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        C = cfg.cols
        return {"spm_a": Out(RowReadSignature(aw, 8 * C)), "spm_b": Out(RowReadSignature(aw, 8 * C)),
                "acc_a": Out(RowReadSignature(aw, 32 * C)), "acc_b": Out(RowReadSignature(aw, 32 * C)),
                "spm_wr": Out(RowWriteSignature(aw, 8 * C, C)), "acc_wr": Out(RowWriteSignature(aw, 32 * C, C))}

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
        dst, aad, bad = Signal(signed(32)), Signal(signed(32)), Signal(signed(32))
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
        with m.If(go):
            m.d.comb += [tag0.dspace.eq(dspace0), tag0.mask.eq(q.event), tag0.op.eq(op),
                         tag0.aspace.eq(aspace0), tag0.bmode.eq(vb.bmode), tag0.smode.eq(vr.smode),
                         tag0.sval.eq(q.sval)]
            m.d.sync += st.eq(tag0)
        with m.If(beat):
            m.d.sync += [i.eq(cur_i + 1), dst.eq(cur_dst + 1), aad.eq(cur_a + 1),
                         bad.eq(cur_b + Mux(tag0.op == OP["vreq"], 0, 1)), active.eq(~last)]
            with m.If(go):
                m.d.sync += n.eq(n0)
        m.d.comb += [self.spm_a.addr.eq(cur_a), self.acc_a.addr.eq(cur_a),
                     self.spm_b.addr.eq(cur_b), self.acc_b.addr.eq(cur_b)]

        # requantizer configuration and lookup table
        shift, rnd = Signal(6, init=QCFG_RESET["shift"]), Signal(2, init=QCFG_RESET["rnd"])
        zp = Signal(signed(8), init=QCFG_RESET["zp"])
        lo, hi = Signal(signed(8), init=QCFG_RESET["lo"]), Signal(signed(8), init=QCFG_RESET["hi"])
        with m.If(go & is_cfg):
            c = q.word.vqcfg
            m.d.sync += [shift.eq(c.shift), zp.eq(c.zp), lo.eq(c.lo), hi.eq(c.hi), rnd.eq(c.round)]
        lut = Signal(data.ArrayLayout(signed(8), 256))

        # stage 1: operands arrive; compute
        t1 = Signal(_tag(cfg))
        m.d.sync += t1.eq(tag0)
        spm_a = data.View(_lanes(C, signed(8)), self.spm_a.data)
        spm_b = data.View(_lanes(C, signed(8)), self.spm_b.data)
        acc_a = data.View(_lanes(C, signed(32)), self.acc_a.data)
        acc_b = data.View(_lanes(C, signed(32)), self.acc_b.data)
        m.submodules.alu = alu = VpuAlu(C)
        m.d.comb += [alu.op.eq(t1.op), alu.shift.eq(shift), alu.zp.eq(zp), alu.lo.eq(lo), alu.hi.eq(hi),
                     alu.rnd.eq(rnd), alu.lut.eq(lut), alu.dspace.eq(t1.dspace)]
        row_b = (t1.bmode == SrcMode.SPM) | (t1.bmode == SrcMode.ACC)
        for l in range(C):
            m.d.comb += [alu.a[l].eq(Mux(t1.aspace == Space.ACC, acc_a[l], spm_a[l])),
                         alu.b[l].eq(Mux(row_b, Mux(t1.bmode == SrcMode.ACC, acc_b[l], spm_b[l]), t1.sval)),
                         alu.scale[l].eq(Mux(t1.smode == ScaleMode.ROW, acc_b[l][:16], t1.sval[:16]))]
        with m.If(t1.valid & (t1.op == OP["vlutld"])):
            for j in range(256):
                r, l = divmod(j, C)
                with m.If(t1.row == r):
                    m.d.sync += lut[j].eq(spm_a[l])
        # stage 2, 3: hold, write
        t2, t3 = Signal(_tag(cfg)), Signal(_tag(cfg))
        y2, y3 = Signal(32 * C), Signal(32 * C)
        m.d.sync += [t2.eq(t1), t3.eq(t2), y2.eq(alu.y.as_value()), y3.eq(y2)]
        assert VPU_LATENCY == 3
        y3v = data.View(_lanes(C, signed(32)), y3)
        m.d.comb += [self.acc_wr.addr.eq(t3.dst), self.acc_wr.data.eq(y3), self.spm_wr.addr.eq(t3.dst),
                     self.spm_wr.data.eq(Cat(*[y3v[l][:8] for l in range(C)]))]
        with m.If(t3.valid & t3.write):
            with m.If(t3.dspace == Space.ACC):
                m.d.comb += self.acc_wr.en.eq((1 << C) - 1)
            with m.Else():
                m.d.comb += self.spm_wr.en.eq((1 << C) - 1)
        ready = ~active & ~t1.valid & ~t2.valid & ~t3.valid
        events = [(t3.valid & t3.retire, t3.mask)]

        # checks at start: rows inside their memories, no partial overlap of destination and a source
        def lim(space):
            return Mux(space == Space.ACC, cfg.acc_rows, cfg.spm_rows)

        nn = Mux(is_cfg, 0, n0)
        d0, b0 = q.addr[0], q.addr[2]
        brow = is_bin & ((vb.bmode == SrcMode.SPM) | (vb.bmode == SrcMode.ACC))
        bspace = vb.bmode[0]
        ok = Mux(is_ld, in_range(q.addr[0], nn, cfg.spm_rows),
                 (~writes0 | in_range(d0, nn, lim(dspace0))) & (~writes0 | in_range(a0, nn, lim(aspace0)))
                 & (~brow | in_range(b0, nn, lim(bspace)))
                 & (~(is_req & (vr.smode == ScaleMode.ROW)) | in_range(b0, 1, cfg.acc_rows)))

        def partial(x0, xspace):
            over = (x0 < d0 + nn) & (d0 < x0 + nn) & (nn != 0)
            return (xspace == dspace0) & over & (x0 != d0)

        overlap = (is_bin | is_un) & partial(a0, aspace0) | brow & partial(b0, bspace)
        errors = [(overlap, ErrorCode.OVERLAP), (~ok, ErrorCode.ADDRESS_RANGE)]
        return ready, events, errors

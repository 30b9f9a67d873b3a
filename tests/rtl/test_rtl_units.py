"""Components alone with random stimuli: decoder vs isa.encoding (random and limit values), the DMA
DRAM window vs isa.semantics.dma_footprint, repeat queue vs
isa.semantics.expand_nest, VPU datapath vs isa.semantics (binary, unary, requantize, LUT)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from amaranth import Module, Signal, signed

from isa import ChipConfig, Instruction, encode
from isa import semantics as sem
from isa.encoding import decode
from isa.errors import DecodeError
from isa.semantics import wrap32_int
from isa.table import (BY_MNEMONIC, INSTRUCTIONS, MAX_REPEAT_DEPTH, STRIDE_SLOTS, VPU_BINARY, VPU_UNARY, WORD_BITS,
                       Space, derived_widths, layout)
from isa.timing import QUEUE_DEPTH
from rtl.decode import Decoder
from rtl.dma import dram_window
from rtl.queue import RepeatQueue, narrow_bits, narrow_fields, nest_jumps, sentinel, unit_reads
from rtl.vpu import ALU_OPS, VpuAlu
from tests.rtl.rtl_helpers import pack, run, unpack

TINY = ChipConfig.preset("tiny")


def _random_word(rng, cfg):
    """A legal instruction most of the time, else random garbage in some field."""
    ins = INSTRUCTIONS[rng.integers(len(INSTRUCTIONS))]
    word = ins.opcode
    for s in layout(cfg).formats[ins.format]:
        word |= int(rng.integers(0, 1 << min(s.width, 62))) << s.lo
    if rng.random() < 0.2:
        word |= int(rng.integers(0, 256))           # maybe an unknown opcode
    if rng.random() < 0.1:
        word |= 1 << 191                            # a reserved bit
    return word


def _edge_word(rng, cfg):
    """An instruction whose fields sit at or next to the limits the decoder checks (a register
    count, the rows, +-2**15, a field's top value), sometimes with a reserved bit set."""
    ins = INSTRUCTIONS[rng.integers(len(INSTRUCTIONS))]
    lay = layout(cfg)
    word = ins.opcode
    for s in lay.formats[ins.format]:
        mx = s.field.max_value(cfg)
        edges = [0, 1, (1 << s.width) - 1, 1 << (s.width - 1), (1 << (s.width - 1)) - 1]
        for lim in (cfg.scalar_regs, max(cfg.spm_rows, cfg.acc_rows), 1 << 15, mx or 0):
            edges += [(v + d) & ((1 << s.width) - 1) for v in (lim, -lim) for d in (-1, 0, 1)]
        word |= int(edges[rng.integers(len(edges))]) << s.lo
    used = lay.used_bits(ins.format)
    if used < WORD_BITS and rng.random() < 0.1:
        word |= 1 << int(rng.integers(used, WORD_BITS))
    return word


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_decoder_matches_isa_decode(name):
    cfg = ChipConfig.preset(name)
    rng = np.random.default_rng(7)
    dut = Decoder(cfg)
    words = [_random_word(rng, cfg) for _ in range(400)] + [_edge_word(rng, cfg) for _ in range(1500)]
    for ins in INSTRUCTIONS:
        words.append(encode(Instruction.make(ins.mnemonic), cfg))

    async def bench(ctx):
        n_legal = 0
        for w in words:
            ctx.set(dut.word, w)
            try:
                ref = decode(w, cfg)
            except DecodeError:
                ref = None
            assert ctx.get(dut.legal) == (ref is not None), hex(w)
            if ref is None:
                continue
            n_legal += 1
            spec = ref.spec
            assert ctx.get(dut.unit) == spec.unit
            assert ctx.get(dut.is_(spec.mnemonic)) == 1
            view = getattr(dut.view, spec.format)
            for fname, value in ref.args:
                assert ctx.get(getattr(view, fname)) == value, (spec.mnemonic, fname)
        return n_legal

    assert run(dut, bench, clock=False) > 100


def _narrow(x: int, w: int) -> tuple[int, int]:
    """A narrow slot's (value, big) of a 32-bit base or jump, as the module docstring of rtl/queue.py
    states it (the reference for ``narrow_fields``)."""
    big = not -(1 << (w - 2)) <= wrap32_int(x) < (1 << (w - 2))
    return (sentinel(w) if big else wrap32_int(x)), int(big)


def set_nest(ctx, e, counts, strides, bases):
    """Push-side nest fields of entry ``e`` for a nest of ``counts`` and ``strides`` (level 0
    outermost) and ``bases``: its depth and zero-trip flag, counts, jumps and bases, and the narrow
    forms of the jumps and bases."""
    depth, w = len(counts), narrow_bits(TINY)
    jumps = nest_jumps(counts, strides)
    ctx.set(e.depth, depth)
    ctx.set(e.zero, int(0 in counts))
    for j in range(MAX_REPEAT_DEPTH):
        ctx.set(e.cnt_m2[j], (counts[j] - 2) % (1 << 32) if j < depth else 0)
    ctx.set(e.cnt_one, sum(1 << j for j in range(depth) if counts[j] == 1))
    jbig = [0] * MAX_REPEAT_DEPTH
    for j in range(MAX_REPEAT_DEPTH):
        for k in range(STRIDE_SLOTS):
            jk = jumps[j][k] if j < depth else 0
            ctx.set(e.jump[j][k], jk)
            jbig[j] |= _narrow(jk, w)[1] << k
        ctx.set(e.jbig[j], jbig[j])
    for k in range(STRIDE_SLOTS):
        ctx.set(e.base[k], bases[k])
        ctx.set(e.nbase[k], _narrow(bases[k], w)[0])


@pytest.mark.parametrize("pruned,pace", [(False, "full"), (True, "full"), (False, "sparse")])
def test_repeat_queue_matches_expand_nest(pruned, pace):
    """The full queue, and one that stores only what the MXU reads (its 2 stride slots, the mm/lw
    formats' word bits, no scalar operand or DRAM window): the kept slots walk the nest, the others
    read 0. ``full``: pushes whenever there is room, starts every other cycle (the queue mostly
    full); ``sparse``: random pushes and starts, so entries are also pushed into an empty queue and
    in the cycle the last one pops (the head register loaded from the push)."""
    rng = np.random.default_rng(3)
    reads = unit_reads(TINY, BY_MNEMONIC["mxu.mm"].unit)
    assert reads["slots"] == 2 and reads["word_bits"] < WORD_BITS
    dut = RepeatQueue(TINY, sval=False, dram=False, **reads) if pruned else RepeatQueue(TINY)
    kept = 2 if pruned else 3
    entries = []
    for _ in range(12 if pace == "full" else 60):
        depth = int(rng.integers(0, 5 if pace == "full" else 3))     # (sparse: short nests, the queue drains)
        counts = [int(rng.integers(0, 4)) if rng.random() < 0.15 else int(rng.integers(1, 4)) for _ in range(depth)]
        strides = [[int(rng.integers(-50, 50)) for _ in range(STRIDE_SLOTS)] for _ in range(depth)]
        bases = [int(rng.integers(-1000, 1000)) for _ in range(STRIDE_SLOTS)]
        sync = int(rng.integers(0, 2))
        entries.append((depth, counts, strides, bases, sync))

    async def bench(ctx):
        got = [[] for _ in entries]
        pushed = 0
        head = 0
        for cycle in range(900):
            # the unit starts whatever is at the head every other cycle (or at random)
            now = cycle % 2 == 0 if pace == "full" else rng.random() < 0.6
            start = now and (ctx.get(dut.valid) or ctx.get(dut.zero))
            if start:
                assert ctx.get(dut.sval) == (0 if pruned else -5)
                if ctx.get(dut.valid):
                    got[head].append(([ctx.get(dut.addr[k]) for k in range(STRIDE_SLOTS)], ctx.get(dut.first),
                                      ctx.get(dut.last), ctx.get(dut.wait_now), ctx.get(dut.signal_now)))
                if ctx.get(dut.zero) or ctx.get(dut.last):
                    head += 1
            ctx.set(dut.start, start)
            if pushed < len(entries) and ctx.get(dut.push.ready) and (pace == "full" or rng.random() < 0.3):
                depth, counts, strides, bases, sync = entries[pushed]
                word = encode(Instruction.make("mxu.mm", rep_base=0, rep_depth=0, sync=sync, wait=0b10,
                                               signal=0b100), TINY)
                ctx.set(dut.push.valid, 1)
                e = dut.push.entry
                ctx.set(e.word.as_value(), word | (depth << layout(TINY).formats["mm"][1].lo))
                ctx.set(e.sval, -5)
                set_nest(ctx, e, counts, strides, bases)
                pushed += 1
            else:
                ctx.set(dut.push.valid, 0)
            assert ctx.get(dut.level) <= QUEUE_DEPTH
            await ctx.tick()
        return got

    got = run(dut, bench)
    for (_, counts, strides, bases, sync), g in zip(entries, got):
        want = sem.expand_nest(counts, strides, bases)
        assert [x[0] for x in g] == [row[:kept] + [0] * (3 - kept) for row in want.tolist()]
        T = len(want)
        for i, (_, first, last, wait, sig) in enumerate(g):
            assert first == (i == 0) and last == (i == T - 1)
            assert wait == (0b10 if sync == 0 or i == 0 else 0)
            assert sig == (0b100 if sync == 0 or i == T - 1 else 0)


@pytest.mark.parametrize("name", ["tiny", "small", "base"])
def test_narrow_fields_match_the_rule(name):
    """The issue stage's ``narrow_fields`` against ``_narrow`` over values at and around the
    narrow bounds and anywhere in 32 bits."""
    cfg = ChipConfig.preset(name)
    w = narrow_bits(cfg)
    edges = [b + d for b in (0, 1 << (w - 2), -(1 << (w - 2)), 1 << (w - 1), -(1 << (w - 1)), 1 << 31)
             for d in (-1, 0, 1)]
    rng = np.random.default_rng(5)
    values = edges + [int(v) for v in rng.integers(-(1 << 31), 1 << 31, 60)] \
        + [int(v) for v in rng.integers(-(1 << w), 1 << w, 60)]
    m = Module()
    base = [Signal(signed(32), name=f"base{k}") for k in range(STRIDE_SLOTS)]
    jump = [[Signal(signed(32), name=f"jump{j}_{k}") for k in range(STRIDE_SLOTS)] for j in range(MAX_REPEAT_DEPTH)]
    f = narrow_fields(cfg, base, jump)
    nbase = [Signal(signed(w), name=f"nbase{k}") for k in range(STRIDE_SLOTS)]
    jbig = [Signal(STRIDE_SLOTS, name=f"jbig{j}") for j in range(MAX_REPEAT_DEPTH)]
    m.d.comb += [nbase[k].eq(f["nbase"][k]) for k in range(STRIDE_SLOTS)]
    m.d.comb += [jbig[j].eq(f["jbig"][j]) for j in range(MAX_REPEAT_DEPTH)]

    async def bench(ctx):
        n = 0
        for i in range(0, len(values), STRIDE_SLOTS):
            vs = [wrap32_int(v) for v in (values[i:i + STRIDE_SLOTS] + [0] * STRIDE_SLOTS)[:STRIDE_SLOTS]]
            j = i % MAX_REPEAT_DEPTH
            for k in range(STRIDE_SLOTS):
                ctx.set(base[k], vs[k])
                ctx.set(jump[j][k], vs[k])
            for k in range(STRIDE_SLOTS):
                assert ctx.get(nbase[k]) == _narrow(vs[k], w)[0], (vs[k], w)
                assert (ctx.get(jbig[j]) >> k) & 1 == _narrow(vs[k], w)[1], (vs[k], w)
                n += 1
        return n

    assert run(m, bench, clock=False) == len(range(0, len(values), STRIDE_SLOTS)) * STRIDE_SLOTS


def test_narrow_slots_give_the_address_up_to_the_first_outside_the_memories():
    """A unit's row slots (``narrow``, here all three) in ``narrow_bits`` bits: over nests whose
    bases and strides run from inside the memories to far outside them and wrap around 2**32,
    every instance up to the first whose 32-bit address leaves ``[0, rows)`` (rows: the deeper
    memory's; the unit's range check stops the chip there) gets that exact address, and that
    first one an address outside ``[0, rows)`` too. The entries' narrow fields come from
    ``_narrow``, the docstring's rule."""
    rng = np.random.default_rng(21)
    rows = max(TINY.spm_rows, TINY.acc_rows)
    w = narrow_bits(TINY)
    assert w < 32 and (1 << (w - 2)) >= rows
    dut = RepeatQueue(TINY, narrow=(0, 1, 2))

    def value(scale):
        kind = rng.integers(0, 5)
        if kind == 0:                               # anywhere in 32 bits
            return int(rng.integers(-(1 << 31), 1 << 31))
        if kind == 1:                               # just past a narrow bound or the memories'
            return int(rng.choice([-1, 1])) * int(rng.choice([rows, 1 << (w - 2), 1 << (w - 1), 1 << w])) \
                + int(rng.integers(-3, 3))
        if kind == 2:                               # a wrap: about 2**32 away from inside
            return int(rng.integers(0, rows)) + int(rng.choice([-1, 1])) * (1 << 31) * 2 - int(rng.integers(0, 4))
        return int(rng.integers(-scale, scale))     # small

    entries = []
    for _ in range(300):
        depth = int(rng.integers(0, 4))
        counts = [int(rng.integers(1, 4)) for _ in range(depth)]
        strides = [[wrap32_int(value(rows // 4) if rng.random() < 0.3 else int(rng.integers(-rows // 8, rows // 8)))
                     for _ in range(STRIDE_SLOTS)] for _ in range(depth)]
        bases = [wrap32_int(value(rows) if rng.random() < 0.4 else int(rng.integers(0, rows)))
                 for _ in range(STRIDE_SLOTS)]
        entries.append((depth, counts, strides, bases))

    async def bench(ctx):
        got = [[] for _ in entries]
        pushed = head = 0
        for _ in range(6000):
            start = ctx.get(dut.valid) or ctx.get(dut.zero)
            if start:
                got[head].append([ctx.get(dut.addr[k]) for k in range(STRIDE_SLOTS)])
                if ctx.get(dut.last):
                    head += 1
            ctx.set(dut.start, start)
            ready = pushed < len(entries) and ctx.get(dut.push.ready)
            ctx.set(dut.push.valid, ready)
            if ready:
                depth, counts, strides, bases = entries[pushed]
                e = dut.push.entry
                ctx.set(e.word.as_value(), encode(Instruction.make("mxu.mm", rep_base=0, rep_depth=0), TINY)
                        | (depth << layout(TINY).formats["mm"][1].lo))
                set_nest(ctx, e, counts, strides, bases)
                pushed += 1
            await ctx.tick()
            if head == len(entries):
                break
        return got

    got = run(dut, bench)
    inside = outside = 0
    for (_, counts, strides, bases), g in zip(entries, got):
        want = sem.expand_nest(counts, strides, bases).tolist()
        assert len(g) == len(want)
        for k in range(STRIDE_SLOTS):
            for gi, wi in zip(g, want):
                if 0 <= wi[k] < rows:
                    assert gi[k] == wi[k]
                    inside += 1
                else:
                    assert not 0 <= gi[k] < rows, (gi[k], wi[k])
                    outside += 1
                    break                           # the chip stops here
    assert inside > 1000 and outside > 150, (inside, outside)


@pytest.mark.parametrize("name", ["tiny", "small", "tpu"])
def test_dram_window_matches_dma_footprint(name):
    """The DMA range check (an instance's address against the window the issue stage derives from
    rows, len and the strides) agrees with ``isa.semantics.dma_footprint`` inside DRAM or not,
    including ranges that just fit, just miss, and strides beyond DRAM."""
    cfg = ChipConfig.preset(name)
    dw = derived_widths(cfg)
    rng = np.random.default_rng(11)
    K = cfg.dram_bytes
    m = Module()
    dram, rows, ln = Signal(signed(32)), Signal(dw["count"]), Signal(dw["lane"])
    rs, es, acc, ok = Signal(signed(32)), Signal(signed(16)), Signal(), Signal()
    lo, hi = dram_window(m, cfg, SimpleNamespace(rows=rows, len=ln, rstride=rs, estride=es, space=acc))
    m.d.comb += ok.eq((rows == 0) | (ln == 0) | ((dram + lo >= 0) & (dram + hi < 0)))

    def s32(v):
        return ((int(v) + (1 << 31)) % (1 << 32)) - (1 << 31)

    def pick(*vals):
        return int(vals[rng.integers(len(vals))])

    async def bench(ctx):
        n_out = 0
        for _ in range(1500):
            sp = int(rng.integers(2))
            R = pick(0, 1, 2, 3, rng.integers(1 << dw["count"]))
            L = pick(0, 1, 2, cfg.cols, rng.integers(cfg.cols + 1))
            RS = s32(pick(0, 1, -1, 4, K, -K, K + 1, K - 1, K // 3, -(K // 3), rng.integers(-K, K),
                          rng.integers(-(1 << 31), 1 << 31), (1 << 31) - 1, -(1 << 31)))
            ES = pick(0, 1, -1, 4, -4, rng.integers(-(1 << 15), 1 << 15), (1 << 15) - 1, -(1 << 15))
            D = s32(pick(0, 1, -1, K - 1, K, rng.integers(0, K), rng.integers(-(1 << 31), 1 << 31)))
            if R and L and rng.random() < 0.5:      # just inside or just outside either end
                r1, e1 = (R - 1) * RS, (L - 1) * ES
                low, high = min(0, r1) + min(0, e1), max(0, r1) + max(0, e1) + (4 if sp else 1)
                D = s32(pick(-low, -low - 1, K - high, K - high + 1))
            for sig, v in ((dram, D), (rows, R), (ln, L), (rs, RS), (es, ES), (acc, sp)):
                ctx.set(sig, v)
            a, b = sem.dma_footprint(D, R, L, RS, ES, sp)
            want = not (b > a and (a < 0 or b > K))
            n_out += not want
            assert ctx.get(ok) == want, (D, R, L, RS, ES, sp)
        return n_out

    assert run(m, bench, clock=False) > 300


class _AluStream:
    """Feeds ``VpuAlu`` one row per cycle and checks each row's result when it leaves stage 3, two
    cycles later (SPM: bits 0..7 of each lane, as int8, the byte written; ACC: int32)."""

    def __init__(self, ctx, dut):
        self.ctx, self.dut = ctx, dut
        self.flight = [None]

    async def row(self, op, a, b, dspace, want=None, what=""):
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.op.as_value(), 1 << ALU_OPS.index(op) if op else 0)
        ctx.set(dut.a.as_value(), pack(a, 32))
        ctx.set(dut.b.as_value(), pack(b, 32))
        ctx.set(dut.dspace, dspace)
        self.flight.append(None if want is None else (np.asarray(want), dspace, what or op))
        await ctx.tick()
        done = self.flight.pop(0)
        if done is not None:
            want, ds, what = done
            y = unpack(ctx.get(dut.y.as_value()), 32, dut.cols)
            got = y.astype(np.int32).astype(np.int8) if ds == Space.SPM else y
            np.testing.assert_array_equal(got, want, err_msg=what)

    async def drain(self):
        zeros = [0] * self.dut.cols
        for _ in range(2):
            await self.row(None, zeros, zeros, 0)

    async def qcfg(self, shift, zp, lo, hi, rnd):
        """Like ``vqcfg``: new requantizer registers once the pipeline is empty."""
        await self.drain()
        dut = self.dut
        for port, v in zip((dut.shift, dut.zp, dut.lo, dut.hi, dut.rnd), (shift, zp, lo, hi, rnd)):
            self.ctx.set(port, v)
        await self.drain()

    async def load_lut(self, table):
        """Like ``vlutld``: the table written one SPM row (cols entries) per cycle."""
        ctx, dut, C = self.ctx, self.dut, self.dut.cols
        await self.drain()
        flat = np.zeros(dut.lut_rows * C, np.int64)
        flat[:len(table)] = table
        ctx.set(dut.lut_we, 1)
        for r in range(dut.lut_rows):
            ctx.set(dut.lut_addr, r)
            ctx.set(dut.lut_data, pack(flat[r * C:(r + 1) * C], 8))
            await self.row(None, [0] * C, [0] * C, 0)
        ctx.set(dut.lut_we, 0)


@pytest.mark.parametrize("C,rounds", [(4, 300), (3, 40)])
def test_vpu_alu_matches_semantics(C, rounds):
    """Every vbin/vun op and vreq against isa.semantics, rows streamed one per cycle."""
    rng = np.random.default_rng(11 + C)
    dut = VpuAlu(C)

    def rand_row():
        kind = rng.integers(3)
        if kind == 0:
            return rng.integers(-128, 128, C)
        if kind == 1:
            return rng.integers(-2**31, 2**31, C)
        return rng.choice([0, 1, -1, 2**31 - 1, -2**31, 127, -128, 31, 32, 15, 16, 17], C)

    async def bench(ctx):
        st = _AluStream(ctx, dut)
        lut = np.zeros(256, np.int64)           # the table reads as zeros before the first vlutld
        for k in range(rounds):
            a, b = rand_row(), rand_row()
            ds = int(rng.integers(2))
            if k == 0:
                await st.row("vlut", a, b, ds, sem.vpu_unary("vlut", a.reshape(1, -1), ds, lut_table=lut)[0])
            if k % 10 == 0:
                lut = rng.integers(-128, 128, 256)
                await st.load_lut(lut)
            for op in VPU_BINARY:
                await st.row(op, a, b, ds, sem.vpu_binary(op, a, b, ds))
            for op in VPU_UNARY:
                await st.row(op, a, b, ds, sem.vpu_unary(op, a.reshape(1, -1), ds, lut_table=lut)[0])
            sh = int(rng.choice([0, 1, 2, 7, 15, 16, 17, 30, 31, 32, 40, 46, 47, 48, 49, 63]))
            zp, lo, hi = (int(x) for x in rng.integers(-128, 128, 3))
            rnd = int(rng.integers(3))
            await st.qcfg(sh, zp, lo, hi, rnd)
            for _ in range(3):
                scale = rng.integers(-2**15, 2**15, C)
                if rng.random() < 0.2:
                    scale = rng.choice([-2**15, 2**15 - 1, -1, 1, 0], C)
                x = rand_row()
                if rng.random() < 0.4 and 1 <= sh <= 30:  # rounding ties (or one bit off) near the clamp bounds
                    scale = rng.choice([1, -1], C)
                    off = np.array([0 if sh < 2 or rng.random() < 0.4
                                    else int(rng.choice([1, -1])) << int(rng.integers(sh - 1)) for _ in range(C)])
                    x = np.clip((rng.integers(-300, 300, C) << sh) + (1 << (sh - 1)) + off, -2**31, 2**31 - 1)
                # the scale is b's low 16 bits (upper bits random: they must not matter)
                bs = (scale & 0xFFFF) | (rng.integers(0, 2**16, C) << 16)
                bs = np.where(bs >= 2**31, bs - 2**32, bs)
                want = sem.requantize(x.reshape(1, -1), sem.scale16(bs), sh, zp, lo, hi, rnd)[0]
                await st.row("vreq", x, bs, Space.SPM, want, f"vreq shift={sh} rnd={rnd}")
        await st.drain()

    run(dut, bench)

"""A unit's instruction queue and its repeat sequencer (docs/microarchitecture.md sections 1-2).

The issue stage pushes an *entry*: the instruction word plus what it snapshots at issue (the
resolved base address of every stride slot, a scalar operand, and the trip counts of its loop
nest, level 0 outermost, as count - 2 and a flag count == 1 (what a level's end flag is set
from), with the nest's *jumps*, see below). The queue holds ``QUEUE_DEPTH``
entries; an entry leaves the queue in the cycle its last instance starts (so it occupies the
queue from its issue cycle to that start cycle, as the contract counts). The sequencer walks the
head entry's nest, innermost index fastest, one instance per ``start``.

Addresses without a multiplier or a sum over the levels: when level j advances, every level
inside it is at its last iteration and restarts, so the instance's address moves by
``jump_{j,k} = stride_{j,k} - sum over levels l > j of (count_l - 1) * stride_{l,k}`` whatever the
other indices are (levels outside the nest count 1 and add nothing). The issue stage computes the
jumps (``nest_jumps`` is the same in Python); the sequencer keeps each slot's current address in
a register, ``base_k`` when the entry becomes the head, and adds the advancing level's jump to it
(all modulo 2**32, as the addresses are).

Row addresses in fewer bits (``narrow`` slots: a slot no instruction of the unit uses for a DRAM
address): an SPM/ACC row address matters only while it lies inside its memory, since the first
instance whose address falls outside stops the chip with ``ADDRESS_RANGE`` (an entry whose rows
are not checked, n = 0, uses no row either). Such a slot keeps its base and jumps in
``W = narrow_bits(cfg)`` bits and its current address in a W-bit register. A value is *big* when
its 32 bits lie outside ``[-2**(W-2), 2**(W-2))`` (``2**(W-2)`` is at least the deeper memory's
rows): a big base is stored as ``sentinel(W)`` (``-2**(W-1)``, outside every memory), a jump as
its low W bits and the flag big. From an address inside the memories a jump that is not big lands
on the exact address (no W-bit overflow), and a big one outside them whatever the 32-bit wrap:
the sequencer then gives ``sentinel``. So up to the first instance whose address lies outside the
memories the unit sees the 32-bit address, and at that instance an address outside them too:
what its range checks and row ports see is the same (after it the chip has stopped, or the slot
is not used). The issue stage computes the narrow bases and the flags once for every queue
(``narrow_fields``); on an FPGA a row slot's entry then takes ``W + 4 (W + 1)`` bits of LUT RAM
instead of 160, and its running address a W-bit adder.

The head entry is held in a register (``hreg``), loaded ahead from the queue's memory: nothing a
unit reads of its head entry passes through the memory's read or an adder in the cycle it starts.
The register holds only that; the jumps and trip counts the sequencer steps with are read from a
second memory (``smem``) at the head's slot, as they feed registers a start enables, not the start.
"""

from __future__ import annotations

import os

from amaranth import Array, Cat, Const, Module, Mux, Shape, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from isa.semantics import wrap32_int
from isa.ints import clog2
from isa.table import INSTRUCTIONS, MAX_REPEAT_DEPTH, STRIDE_SLOTS, WORD_BITS, Sync, Unit
from isa.table import layout as isa_layout
from isa.timing import QUEUE_DEPTH

from .decode import word_layout

__all__ = ["entry_layout", "RepeatQueue", "EntrySignature", "UNITS", "INDEX_BITS", "event_width", "nest_jumps", "pack",
           "unit_reads", "narrow_bits", "narrow_fields", "sentinel"]

UNITS = len(Unit)
#: width of an instance index on the trace port (wraps modulo 2**32)
INDEX_BITS = 32


def event_width(cfg) -> int:
    """Bits a unit carries from an instance's start to its retire: the signal mask, pc and index."""
    return UNITS + clog2(cfg.imem_words) + INDEX_BITS


def nest_jumps(counts, strides) -> list[list[int]]:
    """``jump[j][k]`` (signed 32-bit) of a nest given its levels' trip counts and strides (level 0
    outermost): how far slot k's address moves when level j advances (see the module docstring)."""
    out = []
    for j in range(len(counts)):
        out.append([wrap32_int(strides[j][k] - sum((counts[i] - 1) * strides[i][k] for i in range(j + 1, len(counts))))
                    for k in range(STRIDE_SLOTS)])
    return out


def unit_reads(cfg, unit: Unit) -> dict:
    """What a unit's instructions use of a queue entry, from the ISA table: ``slots`` (stride slots)
    and ``word_bits`` (the low bits of the word its formats occupy)."""
    mine = [i for i in INSTRUCTIONS if i.unit == unit]
    formats = isa_layout(cfg).formats
    slots = max(len(i.slots) for i in mine)
    dram = {k for i in mine for k, name in enumerate(i.slots) if name == "dram"}
    return {"slots": slots, "word_bits": max(s.lo + s.width for i in mine for s in formats[i.format]),
            "narrow": tuple(k for k in range(slots) if k not in dram)}


def narrow_bits(cfg) -> int:
    """W: the bits of a row slot's base, jumps and running address (the module docstring): the
    least with ``2**(W-2) >= max(spm_rows, acc_rows)``; 32 (nothing narrowed) if that is more."""
    return min(clog2(max(cfg.spm_rows, cfg.acc_rows)) + 2, 32)


def sentinel(w: int) -> int:
    """A narrow slot's address for a big base or jump: outside every memory (``-2**(w-1)``)."""
    return -(1 << (w - 1))


def _big(x, w):
    """``x`` (32 bits) lies outside ``[-2**(w-2), 2**(w-2))``: its bits from ``w - 2`` up differ."""
    top = x.as_unsigned()[w - 2:]
    return ~((top == 0) | (top == (1 << len(top)) - 1))


def narrow_fields(cfg, base, jump) -> dict:
    """The entry's narrow fields (``entry_layout``) of its slots' 32-bit ``base[k]`` and
    ``jump[j][k]``: ``nbase`` (the low W bits, or ``sentinel`` when big) and ``jbig``."""
    w = narrow_bits(cfg)
    return {"nbase": [Mux(_big(base[k], w), sentinel(w), base[k][:w]) for k in range(STRIDE_SLOTS)],
            "jbig": [Cat(*[_big(jump[j][k], w) for k in range(STRIDE_SLOTS)]) for j in range(MAX_REPEAT_DEPTH)]}


#: bits of a DMA entry's DRAM window bounds (``rtl.dma.dram_window``)
WINDOW_BITS = 33


def entry_layout(cfg) -> data.StructLayout:
    """``cnt_m2[j]`` (level j's trip count - 2, mod 2**32), bit j of ``cnt_one`` (it counts 1) and
    ``jump[j]`` mean something for the levels of the nest only (j < depth); ``zero``:
    some level of the nest counts 0 (the entry has no instance); ``dram_lo``/``dram_hi``: a DMA
    instruction's DRAM window (``rtl.dma.dram_window``); ``nbase``, ``jbig``: the narrow
    slots' bases and jumps' flags (``narrow_fields``)."""
    return data.StructLayout({
        "word": word_layout(cfg),
        "pc": unsigned(clog2(cfg.imem_words)),
        "q": unsigned(32),
        "base": data.ArrayLayout(signed(32), STRIDE_SLOTS),
        "sval": signed(32),
        "depth": unsigned(3),
        "zero": unsigned(1),
        "dram_lo": signed(WINDOW_BITS), "dram_hi": signed(WINDOW_BITS),
        "cnt_m2": data.ArrayLayout(unsigned(32), MAX_REPEAT_DEPTH),
        "cnt_one": unsigned(MAX_REPEAT_DEPTH),
        "jump": data.ArrayLayout(data.ArrayLayout(signed(32), STRIDE_SLOTS), MAX_REPEAT_DEPTH),
        "nbase": data.ArrayLayout(signed(narrow_bits(cfg)), STRIDE_SLOTS),
        "jbig": data.ArrayLayout(unsigned(STRIDE_SLOTS), MAX_REPEAT_DEPTH),
    })


def pack(m, layout, values, name="part"):
    """A value of ``layout`` (a ``StructLayout``: a dict of its fields; an ``ArrayLayout``: a list)
    put together by one assignment, fields in offset order. (Assigned field by field, a wide signal
    becomes a net with one driver per field in Verilog, which Icarus resolves bit by bit whenever
    any field changes: the issue stage's queue entry made co-simulation under Icarus 40 times
    slower.)"""
    def size(shape):
        return shape.size if isinstance(shape, data.Layout) else Shape.cast(shape).width

    parts = []
    if isinstance(layout, data.ArrayLayout):
        items = [(i * size(layout.elem_shape), layout.elem_shape, values[i]) for i in range(layout.length)]
    else:
        items = [(f.offset, f.shape, values[k]) for k, f in layout]
    pos = 0
    for off, shape, v in sorted(items, key=lambda x: x[0]):
        assert off == pos, (name, off, pos)
        if isinstance(shape, (data.StructLayout, data.ArrayLayout)) and isinstance(v, (dict, list)):
            piece = pack(m, shape, v, name)
        else:
            piece = Signal(shape, name=name)
            m.d.comb += piece.eq(v)
            piece = Value.cast(piece)
        parts.append(piece)
        pos += len(piece)
    assert pos == size(layout)
    return Cat(*parts)


def EntrySignature(cfg) -> wiring.Signature:
    """Issue stage -> queue (initiator's side): ``valid`` pushes ``entry``; ``ready`` = a free slot."""
    return wiring.Signature({"valid": Out(1), "entry": Out(entry_layout(cfg)), "ready": In(1)})


class RepeatQueue(wiring.Component):
    """QUEUE_DEPTH-entry queue plus repeat-nest sequencer.

    Ports:
      push      In(EntrySignature)     valid/entry from issue, ready when fewer than QUEUE_DEPTH entries
      valid     Out(1)                 the head entry has an instance to start (T > 0)
      zero      Out(1)                 the head entry has no instance (T = 0): ``start`` pops it
      word      Out(word_layout)       the head entry's instruction
      addr      Out(ArrayLayout(signed(32), 3))  the current instance's slot addresses (a ``narrow``
                                       slot's: the 32-bit address up to the first instance outside
                                       the memories, the module docstring)
      sval      Out(signed(32))        the scalar operand snapshotted at issue
      dram_lo, dram_hi Out(signed(33)) a DMA entry's DRAM window (``rtl.dma.dram_window``)
      first     Out(1)                 current instance is the first of its nest
      last      Out(1)                 current instance is the last (its start pops the entry)
      wait_now  Out(7)                 tokens this instance (or zero entry) consumes at start
      signal_now Out(7)                tokens it sends at retire
      pc        Out(pc)                the head entry's instruction address
      index     Out(32)                the current instance's index in its nest (0 .. T-1)
      issued_at Out(32)                the head entry's issue cycle (for the trace port)
      event     Out(event_width)       ``Cat(signal_now, pc, index)``: what a unit carries to the
                                       instance's retire (token signals and the trace port)
      start     In(1)                  the unit starts the current instance (or pops a zero entry)
      level     Out(3)                 entries held
    """

    def __init__(self, cfg, slots: int = STRIDE_SLOTS, sval: bool = True, dram: bool = True,
                 word_bits: int = WORD_BITS, narrow: tuple[int, ...] = ()):
        # what the unit reads of an entry: its first ``slots`` stride slots (``addr[k]`` of the
        # others is 0), ``sval``, the DRAM window, the low ``word_bits`` of the instruction word
        # (its formats' fields; the reserved bits above are 0 in an issued word); the rest is not
        # stored (on an FPGA each entry bit costs LUT RAM, and each slot a running offset and adder).
        # ``narrow``: the slots that hold SPM/ACC row addresses only, kept in ``narrow_bits(cfg)``
        # bits (the module docstring; none when that is 32)
        assert 0 <= slots <= STRIDE_SLOTS and 0 < word_bits <= WORD_BITS
        assert all(0 <= k < slots for k in narrow), (narrow, slots)
        self.cfg, self.slots, self.has_sval, self.has_dram = cfg, slots, sval, dram
        self.word_bits = word_bits
        self.w = narrow_bits(cfg)
        self.narrow = frozenset(narrow) if self.w < 32 else frozenset()
        super().__init__({
            "push": In(EntrySignature(cfg)),
            "valid": Out(1), "zero": Out(1), "word": Out(word_layout(cfg)),
            "addr": Out(data.ArrayLayout(signed(32), STRIDE_SLOTS)), "sval": Out(signed(32)),
            "dram_lo": Out(signed(WINDOW_BITS)), "dram_hi": Out(signed(WINDOW_BITS)),
            "first": Out(1), "last": Out(1), "wait_now": Out(UNITS), "signal_now": Out(UNITS),
            "pc": Out(clog2(cfg.imem_words)), "index": Out(INDEX_BITS), "issued_at": Out(32),
            "event": Out(event_width(cfg)),
            "start": In(1), "level": Out(range(QUEUE_DEPTH + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        lay = entry_layout(self.cfg)
        S = self.slots
        # the stored part of an entry (pushed -> stored -> the head entry ``e``, the rest 0)
        pe = self.push.entry
        e = Signal(lay, name="head")
        nw = self.word_bits
        kept = [(Value.cast(pe.word)[:nw], Value.cast(e.word)[:nw]), (pe.pc, e.pc), (pe.q, e.q)]
        i_base = len(kept)          # (fields[i_base + k]: base[k]; fields[i_one] below: cnt_one)
        # (``None``: stored, read ahead when the entry becomes the head, not held in ``hreg``)
        W, narrow = self.w, self.narrow
        kept += [(pe.nbase[k] if k in narrow else pe.base[k], None) for k in range(S)]
        if self.has_sval:
            kept.append((pe.sval, e.sval))
        if self.has_dram:
            kept += [(pe.dram_lo, e.dram_lo), (pe.dram_hi, e.dram_hi)]
        # what decides the head's start, its tokens and its pop (the nest's trip counts, ``zero``,
        # the header's sync/wait/signal), with the rest of the entry
        phdr = pe.word.dma      # every queued format starts with the same header (rep_base .. signal)
        ctrl = [(pe.zero, Signal(name="h_zero")), (pe.depth, Signal(3, name="h_depth"))]
        i_one = len(kept) + len(ctrl)       # (fields[i_one]: cnt_one)
        ctrl += [(pe.cnt_one, None)]
        ctrl += [(phdr.sync, Signal(len(phdr.sync), name="h_sync")), (phdr.wait, Signal(UNITS, name="h_wait")),
                 (phdr.signal, Signal(UNITS, name="h_signal"))]
        # The head entry is held in a register, not read from the queue's LUT RAM in the cycle a
        # unit uses it: the entry after the head is read ahead (at ``head_nxt``) into the register
        # when the head pops, or the pushed entry goes there when it becomes the head. The register
        # holds only what the unit and its start decision read (a pop loads every bit of it: the
        # fewer, the shorter that net): the slots' bases and the trip counts are read ahead into
        # the running addresses and end flags below, and the jumps and trip counts the sequencer
        # steps with are read from a second memory at the head's slot (``smem``).
        fields = kept + ctrl
        pushed = Cat(*[src for src, _ in fields])
        m.submodules.mem = mem = memory.Memory(shape=unsigned(len(pushed)), depth=QUEUE_DEPTH, init=[])
        wp, rp = mem.write_port(), mem.read_port(domain="comb")
        at = [0]                    # each field's first bit
        for src, _ in fields:
            at.append(at[-1] + len(Value.cast(src)))

        def field(src, i):
            """Field ``i`` of a packed entry ``src`` (``pushed``, the memory's read)."""
            return src[at[i]:at[i + 1]]

        def held(src):
            """The fields ``hreg`` holds, of a packed entry."""
            return Cat(*[field(src, i) for i, (_, dst) in enumerate(fields) if dst is not None])

        hreg = Signal(len(held(pushed)), name="hreg")
        pos = 0
        for _, dst in fields:
            if dst is not None:
                w = len(Value.cast(dst))
                m.d.comb += dst.eq(hreg[pos:pos + w])
                pos += w
        # (the head entry's slot is not read again once it is in ``hreg``: only the next one's is)
        head_nxt = Signal(range(QUEUE_DEPTH), init=1 % QUEUE_DEPTH)     # the entry after the head
        tail = Signal(range(QUEUE_DEPTH))
        level = self.level
        m.d.comb += [rp.addr.eq(head_nxt), wp.addr.eq(tail), wp.data.eq(pushed),
                     self.push.ready.eq(level < QUEUE_DEPTH)]
        push = self.push.valid & self.push.ready
        # The memory is written at ``tail`` in every cycle, pushed or not: the slot at ``tail`` is
        # free (or, in a full queue, the head's, whose entry is in ``hreg``), and a push moves
        # ``tail`` past what it wrote. So the write enable is a constant: the issue decision does
        # not fan out to every LUT RAM cell of a queue.
        m.d.comb += wp.en.eq(1)
        pop = Signal()
        # (the slots' current addresses, ``cur`` below, load with the register)
        load_pushed = (level == 0) | (pop & (level == 1))
        load_next = pop
        with m.If(load_pushed):
            m.d.sync += hreg.eq(held(pushed))
        with m.Elif(load_next):
            m.d.sync += hreg.eq(held(rp.data))
        h_zero, h_depth, *_, h_sync, h_wait, h_signal = (dst for _, dst in ctrl)
        # the head's jumps and trip counts, from its slot in ``smem``: they feed the running
        # addresses' adders and the end flags, which a start enables, not the start itself. Written
        # at ``tail`` in every cycle the queue is not full (a full queue's ``tail`` is the head's slot).
        D = MAX_REPEAT_DEPTH
        # (a narrow slot's jump: its low W bits and its flag ``big``)
        jfields, jvals = {}, {}
        for j in range(D):
            for k in range(S):
                jfields[f"jump{j}_{k}"] = signed(W) if k in narrow else signed(32)
                jvals[f"jump{j}_{k}"] = pe.jump[j][k][:W] if k in narrow else pe.jump[j][k]
                if k in narrow:
                    jfields[f"big{j}_{k}"], jvals[f"big{j}_{k}"] = unsigned(1), pe.jbig[j][k]
        slow = data.StructLayout({**jfields, "cnt_m2": lay["cnt_m2"].shape, "cnt_one": lay["cnt_one"].shape})
        m.submodules.smem = smem = memory.Memory(shape=slow, depth=QUEUE_DEPTH, init=[])
        swp, srp = smem.write_port(), smem.read_port(domain="comb")
        head = Signal(range(QUEUE_DEPTH))       # the head entry's slot
        m.d.comb += [swp.addr.eq(tail), swp.en.eq(self.push.ready), srp.addr.eq(head),
                     swp.data.eq(pack(m, slow, {**jvals, "cnt_m2": [pe.cnt_m2[j] for j in range(D)],
                                                "cnt_one": pe.cnt_one}, name="slow_part"))]
        h_m2, h_one = srp.data.cnt_m2, srp.data.cnt_one

        def jump(j, k):
            return srp.data[f"jump{j}_{k}"]

        # nest state of the head entry: every level's index, every slot's current address
        idx = [Signal(32, name=f"idx{j}") for j in range(D)]
        # slot k's address: base + offset (a narrow slot's in W bits)
        cur = [Signal(signed(W if k in narrow else 32), name=f"cur{k}") for k in range(S)]
        first = Signal(init=1)      # no instance of the head entry has started yet
        # a level outside the nest (j >= depth) has one iteration: it is always at its end and its
        # index stays 0
        used = [h_depth > j for j in range(D)]
        nonempty = level != 0
        zero_trip = h_zero
        at_end = [Signal(name=f"at_end{j}") for j in range(D)]     # (named: each is used often)
        # ``idx[j] + 1 == count_j``, kept in a register beside ``idx[j]`` (set wherever idx[j]
        # changes, below): no adder or 32-bit compare between a start and the next decision; a step
        # reaches the last iteration from ``idx[j] == count_j - 2`` (the entry's ``cnt_m2``: no
        # adder on the index either), a restart from ``count_j == 1`` (``cnt_one``)
        end_r = [Signal(name=f"end_r{j}") for j in range(D)]
        m.d.comb += [at_end[j].eq(~used[j] | end_r[j]) for j in range(D)]
        if os.environ.get("TETRACHIP_RTL_BUG") == "repeat":
            # injected fault for co-simulation (docs/cosim.md), off by default: the outermost
            # level of a nest of depth >= 2 ends one iteration early when its trip count is >= 3
            early = Signal()
            # (idx + 2 == count with count >= 3: idx == count - 2 with idx >= 1)
            m.d.comb += early.eq(at_end[0] | ((h_depth >= 2) & (idx[0] != 0) & (idx[0] == h_m2[0])))
            at_end[0] = early
        last = Const(1)
        for j in range(D):
            last = last & at_end[j]
        each = h_sync == Sync.EACH
        m.d.comb += [
            self.valid.eq(nonempty & ~zero_trip), self.zero.eq(nonempty & zero_trip),
            self.word.eq(e.word), self.sval.eq(e.sval), self.first.eq(first), self.last.eq(last),
            self.dram_lo.eq(e.dram_lo), self.dram_hi.eq(e.dram_hi),
            self.wait_now.eq(Mux(zero_trip, Mux(each, 0, h_wait), Mux(each | first, h_wait, 0))),
            self.signal_now.eq(Mux(zero_trip, Mux(each, 0, h_signal), Mux(each | last, h_signal, 0))),
        ]
        for k in range(S):
            m.d.comb += self.addr[k].eq(cur[k])

        m.d.comb += pop.eq(nonempty & self.start & (zero_trip | last))
        index = self.index
        m.d.comb += [self.pc.eq(e.pc), self.issued_at.eq(e.q), self.event.eq(Cat(self.signal_now, e.pc, index))]
        with m.If(pop):
            m.d.sync += index.eq(0)
        with m.Elif(self.start & nonempty):
            m.d.sync += index.eq(index + 1)
        # the level that advances: the innermost one not at its end (levels inside it restart)
        step = [Signal(name=f"step{j}") for j in range(D)]
        lvl = Signal(range(D))      # its number
        carry = Const(1)
        for j in reversed(range(D)):
            m.d.comb += step[j].eq(carry & ~at_end[j])
            with m.If(step[j]):
                m.d.comb += lvl.eq(j)
            carry = carry & at_end[j]
        # (written as a reset and an enable per register, which flip-flops have: nested
        # conditions here became a multiplexer per bit)
        moves = self.start & nonempty & ~pop
        with m.If(pop):
            m.d.sync += first.eq(1)
        with m.Elif(moves):
            m.d.sync += first.eq(0)
        # a slot's address: the entry's base when it becomes the head, then each step's jump added
        # (a narrow slot: its base in W bits; a big jump gives ``sentinel``)
        for k in range(S):
            moved = cur[k] + Array(jump(j, k) for j in range(D))[lvl]
            if k in narrow:
                moved = Mux(Array(srp.data[f"big{j}_{k}"] for j in range(D))[lvl], sentinel(W), moved)
            with m.If(load_pushed):
                m.d.sync += cur[k].eq(pe.nbase[k] if k in narrow else pe.base[k])
            with m.Elif(load_next):
                m.d.sync += cur[k].eq(field(rp.data, i_base + k))
            with m.Elif(moves):
                m.d.sync += cur[k].eq(moved)
        outer = Const(0)            # a level outside this one advances: this one restarts
        for j in range(D):
            with m.If(pop | (moves & outer)):
                m.d.sync += idx[j].eq(0)
            with m.Elif(moves & step[j]):
                m.d.sync += idx[j].eq(idx[j] + 1)
            with m.If(load_pushed):
                m.d.sync += end_r[j].eq(pe.cnt_one[j])
            with m.Elif(load_next):
                m.d.sync += end_r[j].eq(field(rp.data, i_one)[j])
            with m.Elif(moves & outer):
                m.d.sync += end_r[j].eq(h_one[j])
            with m.Elif(moves & step[j]):
                m.d.sync += end_r[j].eq(idx[j] == h_m2[j])
            outer = outer | step[j]
        def after(ptr):
            return Mux(ptr == QUEUE_DEPTH - 1, 0, ptr + 1)
        with m.If(pop):
            m.d.sync += [head_nxt.eq(after(head_nxt)), head.eq(after(head))]
        with m.If(push):
            m.d.sync += tail.eq(after(tail))
        m.d.sync += level.eq(level + push - pop)
        return m

"""The parts of the issue stage (``rtl/issue.py``), each a component with its own unit test
(``tests/rtl/test_rtl_issue_parts.py``):

``ScalarAlu``      the scalar ALU: one adder/subtractor (add, sub, slt and the branch compare), one
                   shifter (sll through bit reversal, srl, sra), one multiplier, the equality test
``LoopRegisters``  the loop registers: a memory (LUT RAM on an FPGA) with one write port (``loop``)
                   and one read port per nest level; a queued instruction's counts and jumps
``TokenCounters``  the token counters (P, C): one adder each, a bit above TOKEN_MAX's for the overflow
``IssueCheck``     may the head instruction issue now: its queue has a free entry, its tokens are
                   there (``sld``/``sst``), the units it drains are idle (``fence``/``halt``)

All four are combinational except the loop registers' memory and written flags and the counters.
The issue stage (``IssueStage``) decodes, reads the scalar registers, adds the base addresses,
finds errors and composes these parts; it owns every choice of operand (which register port feeds
the ALU, the ``loop`` count) so that each part is built once and has no copy.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from isa.ints import clog2
from isa.table import MAX_REPEAT_DEPTH, QUEUED_UNITS, SCALAR_ALU, STRIDE_SLOTS, Unit
from isa.timing import TOKEN_MAX

from .decode import format_layout
from .queue import UNITS
from .unit import TokenSignature
from .logic import any_of

__all__ = ["ScalarAlu", "LoopRegisters", "TokenCounters", "IssueCheck", "QUEUED", "TOK_BITS", "one_of"]

QUEUED = list(QUEUED_UNITS)
#: bits of TOKEN_MAX, a token counter's largest value (a counter has one more: its overflow)
TOK_BITS = TOKEN_MAX.bit_length()
assert TOKEN_MAX == (1 << TOK_BITS) - 1


def one_of(cases, width, shape=None):
    """OR of ``Mux(cond, value, 0)`` over ``cases`` [(cond, value)] whose conditions exclude each
    other (at most one instruction decodes): a flat AND-OR, cheaper than a priority chain."""
    zero = Const(0, shape if shape is not None else width)
    return any_of([zero] + [Mux(cond, val, 0) for cond, val in cases])


class ScalarAlu(wiring.Component):
    """The scalar ALU (combinational).

    Ports:
      a, b     In(signed(32))        the operands (register ports 0 and 1)
      op       In(len(SCALAR_ALU))   one-hot (at most one bit): bit i selects ``isa.table.SCALAR_ALU[i]``
      compare  In(1)                 a branch compares ``a < b`` (``blt``/``bge``): subtract
      result   Out(32)               the selected op's result (``isa.semantics.scalar_alu``); 0 without one
      lt       Out(1)                ``a < b`` signed, while subtracting (``sub``, ``slt`` or ``compare``)
      eq       Out(1)                ``a == b`` (``beq``/``bne``)
    """

    def __init__(self):
        super().__init__({"a": In(signed(32)), "b": In(signed(32)), "op": In(len(SCALAR_ALU)), "compare": In(1),
                          "result": Out(32), "lt": Out(1), "eq": Out(1)})

    def is_(self, name: str):
        return self.op[SCALAR_ALU.index(name)]

    def elaborate(self, platform):
        m = Module()
        A, B, is_ = self.a, self.b, self.is_
        # one adder/subtractor: add, sub, slt and the branch compares (a - b, 33 bits: exact sign)
        subtract = is_("sub") | is_("slt") | self.compare
        diff = Signal(signed(33))
        m.d.comb += diff.eq(A + Mux(subtract, ~B, B) + subtract)
        lt = diff[32]
        # one shifter: right shifts fill with 0 (srl) or the sign (sra); sll reverses in and out
        left, arith = is_("sll"), is_("sra")
        fill = Signal()
        shv = Signal(32, name="shift_in")
        m.d.comb += [fill.eq(arith & A[31]), shv.eq(Mux(left, A.as_unsigned()[::-1], A.as_unsigned()))]
        for s in range(5):          # (each stage named: an unnamed one is rebuilt for every use)
            nxt = Signal(32, name=f"shift{s}")
            m.d.comb += nxt.eq(Mux(B[s], Cat(shv[1 << s:], fill.replicate(1 << s)), shv))
            shv = nxt
        shifted = Signal(32)
        m.d.comb += shifted.eq(Mux(left, shv[::-1], shv))
        product = Signal(32)
        m.d.comb += product.eq(A.as_unsigned() * B.as_unsigned())
        addsub = diff[:32]
        results = {"add": addsub, "sub": addsub, "slt": lt, "and": A & B, "or": A | B, "xor": A ^ B,
                   "sll": shifted, "srl": shifted, "sra": shifted, "mul": product}
        assert sorted(results) == sorted(SCALAR_ALU), "an ALU op of the table without its datapath"
        groups = {}                 # ops sharing a datapath share one AND-OR term
        for name, val in results.items():
            key = id(val)
            groups[key] = (groups[key][0] | is_(name), val) if key in groups else (is_(name), val)
        m.d.comb += [self.result.eq(one_of([(c, v.as_unsigned()) for c, v in groups.values()], 32)),
                     self.lt.eq(lt), self.eq.eq(A == B)]
        return m


class LoopRegisters(wiring.Component):
    """The loop registers. Each holds its count, its strides and its *rewinds* (count - 1) *
    stride, taken when the ``loop`` instruction issues; a queued instruction turns its nest into
    jumps, ``jump_j = stride_j - sum of the rewinds of the levels inside j`` (mod 2**32), which
    its unit's sequencer adds when level j advances (``rtl/queue.py``). A register counts 0 until
    written in this run. One memory word more than registers is never written: a level outside the
    nest reads it (strides and rewinds 0).

    The nest's read addresses are found in the decode stage (D) and registered when the
    instruction moves into I (``load``); I reads the memory at them (combinational reads, LUT RAM
    on an FPGA). So a ``loop`` issuing in I is seen by the instruction after it, as when the
    addresses were found in I: its write lands at the edge that moves that instruction into I,
    and no register is written while an instruction waits in I but by that instruction.

    Ports:
      running  In(1)                      the chip runs; while 0 every register reads as unwritten
      we       In(1), lr In(lr)           write register ``lr`` (the ``loop`` issues)
      count    In(32), stride In(ArrayLayout(s, STRIDE_SLOTS))   its count and strides
      base     In(rep_base), depth In(rep_depth)   the nest of the instruction in D, taken when
      load     In(1)                      it moves into I (the outputs below are of the nest taken)
      cnt_m2   Out(ArrayLayout(unsigned(32), MAX_REPEAT_DEPTH))  level j's count - 2 (mod 2**32): the
                                          index at which its next step reaches its last iteration
      cnt_one  Out(MAX_REPEAT_DEPTH)      bit j: level j counts 1
      jump     Out(ArrayLayout(ArrayLayout(signed(32), STRIDE_SLOTS), MAX_REPEAT_DEPTH))  level j's jumps
      zero     Out(1)                     the nest runs no iteration: a level counts 0 or its
                                          register was not written in this run
    """

    def __init__(self, cfg):
        self.cfg = cfg
        lp, hdr = format_layout(cfg, "loop"), format_layout(cfg, "dma")
        strides = {lp[f"s{k}"].shape for k in range(STRIDE_SLOTS)}
        assert len(strides) == 1, strides
        super().__init__({
            "running": In(1), "we": In(1), "lr": In(lp["lr"].shape), "count": In(32),
            "stride": In(data.ArrayLayout(strides.pop(), STRIDE_SLOTS)),
            "base": In(hdr["rep_base"].shape), "depth": In(hdr["rep_depth"].shape), "load": In(1),
            "cnt_m2": Out(data.ArrayLayout(unsigned(32), MAX_REPEAT_DEPTH)), "cnt_one": Out(MAX_REPEAT_DEPTH),
            "jump": Out(data.ArrayLayout(data.ArrayLayout(signed(32), STRIDE_SLOTS), MAX_REPEAT_DEPTH)),
            "zero": Out(1)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        # a count is kept as what the sequencers compare with (``rtl/queue.py``): count - 2 and the
        # flags count == 1 and count != 0, found once when the ``loop`` issues, not by every queue
        lrec = data.StructLayout({"cnt_m2": unsigned(32), "one": 1, "nz": 1,
                                  "stride": data.ArrayLayout(signed(32), STRIDE_SLOTS),
                                  "rew": data.ArrayLayout(signed(32), STRIDE_SLOTS)})
        m.submodules.mem = lmem = memory.Memory(shape=lrec, depth=cfg.loop_regs + 1, init=[],
                                                attrs={"ram_style": "distributed"})
        lwp = lmem.write_port()
        lvalid = Signal(cfg.loop_regs)
        m.d.comb += [lwp.addr.eq(self.lr), lwp.en.eq(self.we), lwp.data.cnt_m2.eq(self.count - 2),
                     lwp.data.one.eq(self.count == 1), lwp.data.nz.eq(self.count != 0)]
        for k in range(STRIDE_SLOTS):
            sk = self.stride[k]
            m.d.comb += [lwp.data.stride[k].eq(sk), lwp.data.rew[k].eq((self.count - 1)[:32] * sk)]
        for i in range(cfg.loop_regs):
            with m.If(self.we & (self.lr == i)):
                m.d.sync += lvalid[i].eq(1)
        with m.If(~self.running):
            m.d.sync += lvalid.eq(0)

        nest = []
        zero = []
        for j in range(MAX_REPEAT_DEPTH):
            rp = lmem.read_port(domain="comb")
            # the address in D (this level's register, or the unwritten word outside the nest),
            # registered with the instruction
            addr = Signal(max(len(self.base) + 2, clog2(cfg.loop_regs + 1)), name=f"nest_addr{j}")
            used = Signal(name=f"nest_used{j}")
            with m.If(self.load):
                m.d.sync += [addr.eq(Mux(self.depth > j, self.base + j, cfg.loop_regs)), used.eq(self.depth > j)]
            li = addr
            m.d.comb += rp.addr.eq(addr)
            # a register not written in this run counts 0: the nest is empty (and its other
            # counts, strides and jumps are not looked at)
            zero.append(used & (~lvalid.bit_select(li, 1) | ~rp.data.nz))
            nest.append(rp.data)
            m.d.comb += [self.cnt_m2[j].eq(rp.data.cnt_m2), self.cnt_one[j].eq(rp.data.one)]
        m.d.comb += self.zero.eq(any_of(zero))
        # jump_j = stride_j - (the rewinds of the levels inside j)
        for k in range(STRIDE_SLOTS):
            inside = Const(0, signed(32))
            for j in reversed(range(MAX_REPEAT_DEPTH)):
                jump = Signal(signed(32), name=f"jump{j}_{k}")
                m.d.comb += [jump.eq(nest[j].stride[k] - inside), self.jump[j][k].eq(jump)]
                if j:
                    acc = Signal(signed(32), name=f"inside{j}_{k}")
                    m.d.comb += acc.eq(inside + nest[j].rew[k])
                    inside = acc
        return m


class TokenCounters(wiring.Component):
    """The token counters (P, C), one per producer P and consumer C (``isa.table.Unit``), 0 ..
    ``TOKEN_MAX``. A counter adds its signals of this cycle (a queued producer's retire events, up
    to three; the scalar unit's ``sld``/``sst`` mask) and subtracts 1 when C's head instance starts
    waiting on P, in one adder: the counter never goes below 0 (a wait needs a token), so the
    result is 0 .. TOKEN_MAX + 3. A counter has one bit more than ``TOKEN_MAX`` needs: the cycle
    after one passes ``TOKEN_MAX``, its top bit is set and ``overflow`` (an OR of the counters' top
    bits, read from their flip-flops, so no adder feeds it) says so; the run stops then, and in
    that cycle the counter may grow by 3 more, which the extra bit holds. Cleared while not
    running.

    Ports:
      running        In(1)               the chip runs (``en`` of every unit)
      t_<unit>       In(TokenSignature)  each queued unit's token port (waits, take, signal masks in;
                                         ``ok`` and ``en`` out)
      scalar_wait    In(UNITS)           the ``sld``/``sst`` at the head waits on these producers
      scalar_take    In(1)               ... and issues now (the counters it waits on drop by 1)
      scalar_signal  In(UNITS)           the consumers an issuing ``sld``/``sst`` signals (0 otherwise)
      scalar_ok      Out(1)              every counter (P, scalar) that ``scalar_wait`` names is >= 1
      overflow       Out(1)              a counter holds more than ``TOKEN_MAX`` (it passed it in the
                                         previous cycle)

    ``silent``: producers that never signal (the link units of a chip without link ports, whose
    token ports send no event): their counters are the constant 0 (a wait on them is never met),
    not flip-flops and adders.
    """

    def __init__(self, silent: tuple = ()):
        self.silent = frozenset(Unit(u) for u in silent)
        sig = {"running": In(1), "scalar_wait": In(UNITS), "scalar_take": In(1), "scalar_signal": In(UNITS),
               "scalar_ok": Out(1), "overflow": Out(1)}
        for u in QUEUED:
            sig[f"t_{u.name.lower()}"] = In(TokenSignature())
        super().__init__(sig)

    def elaborate(self, platform):
        m = Module()
        running = self.running
        toks = {u: getattr(self, f"t_{u.name.lower()}") for u in QUEUED}
        tok = [[Signal(TOK_BITS + 1, name=f"tok_{Unit(p).name}_{Unit(c).name}") for c in range(UNITS)]
               for p in range(UNITS)]
        nz = [[Signal(name=f"toknz_{Unit(p).name}_{Unit(c).name}") for c in range(UNITS)] for p in range(UNITS)]
        for c in range(UNITS):
            for p in range(UNITS):
                if p in self.silent:
                    m.d.comb += [tok[p][c].eq(0), nz[p][c].eq(0)]
                    continue
                inc = Const(0, 3)
                if p == Unit.SCALAR:
                    inc = inc + self.scalar_signal[c]
                else:
                    t = toks[Unit(p)]
                    for e in range(3):              # (a slot without an event has a zero mask)
                        inc = inc + t.sig_mask[e][c]
                if c == Unit.SCALAR:
                    dec_ = self.scalar_take & self.scalar_wait[p]
                else:
                    t = toks[Unit(c)]
                    dec_ = t.take & t.wait[p]
                delta = Signal(signed(3), name=f"tokdelta_{p}_{c}")
                nxt = Signal(TOK_BITS + 1, name=f"toknext_{p}_{c}")
                m.d.comb += [delta.eq(inc - dec_), nxt.eq(tok[p][c] + delta)]
                # ``nxt != 0`` without the adder: the take (``dec_``, from the consumer's start
                # decision, late in the cycle) empties the counter only when it holds 1 and gets no
                # signal (a take needs a token, so the counter is never below 0)
                some = Signal(name=f"toksig_{p}_{c}")
                last = Signal(name=f"toklast_{p}_{c}")
                m.d.comb += [some.eq(inc != 0), last.eq(tok[p][c] == 1)]
                # cleared while not running (nothing reads them then): a start begins at 0
                m.d.sync += [tok[p][c].eq(Mux(running, nxt, 0)),
                             nz[p][c].eq(running & (some | (nz[p][c] & ~(dec_ & last))))]
        # (one OR of every top bit: an ``If`` per counter became a chain of LUTs as long as the
        # counters are many)
        m.d.comb += self.overflow.eq(Cat(*[tok[p][c][TOK_BITS] for p in range(UNITS) for c in range(UNITS)]).any())

        def tokens_ok(c, wait):
            # (from the counters' ``!= 0`` flags, registered with them: no compare before a start)
            return Cat(*[~wait[p] | nz[p][c] for p in range(UNITS)]).all()

        for u in QUEUED:
            m.d.comb += [toks[u].ok.eq(tokens_ok(u, toks[u].wait)), toks[u].en.eq(running)]
        m.d.comb += self.scalar_ok.eq(tokens_ok(Unit.SCALAR, self.scalar_wait))
        return m


class IssueCheck(wiring.Component):
    """May the head instruction issue now (contract section 1; combinational). ``sld``/``sst`` wait
    for their tokens, ``fence`` for the units it names to be idle, ``halt`` for every unit, a
    queued instruction for a free entry in its unit's queue; any other instruction issues.

    What the head instruction is comes as flags the issue stage decodes in D and registers with
    the instruction (at most one is set), so ``can`` is a flat AND-OR of them with the units'
    states, not a decode and a choice by unit number after the pipeline register.

    Ports:
      smem, fence, halt  In(1)             the head instruction is an ``sld``/``sst``, ``fence``, ``halt``
      q_unit       In(UNITS)               bit u: it is queued to unit u (bit 0, the scalar unit, unused)
      fence_units  In(UNITS)               the units a ``fence`` names
      scalar_ok    In(1)                   the tokens an ``sld``/``sst`` waits on are there
      busy         In(UNITS)               unit u's queue holds an entry or an instance is in flight
      ready        In(UNITS)               unit u's queue has a free entry
      can          Out(1)                  it may issue (errors aside)
    Bit 0 (the scalar unit) of ``q_unit``, ``busy`` and ``ready`` is not looked at.
    """

    def __init__(self):
        super().__init__({"smem": In(1), "fence": In(1), "halt": In(1), "q_unit": In(UNITS),
                          "fence_units": In(UNITS), "scalar_ok": In(1), "busy": In(UNITS), "ready": In(UNITS),
                          "can": Out(1)})

    def elaborate(self, platform):
        m = Module()
        busy = self.busy
        fence_ok = Cat(*[~self.fence_units[int(u)] | ~busy[u] for u in QUEUED]).all()
        all_idle = Cat(*[~busy[u] for u in QUEUED]).all()
        q_any = Cat(*[self.q_unit[u] for u in QUEUED]).any()
        q_ready = Cat(*[self.q_unit[u] & self.ready[u] for u in QUEUED]).any()
        other = ~(self.smem | self.fence | self.halt | q_any)
        m.d.comb += self.can.eq((self.smem & self.scalar_ok) | (self.fence & fence_ok) | (self.halt & all_idle)
                                | q_ready | other)
        return m

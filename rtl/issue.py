"""The issue stage: fetch, decode, register reads, base addresses, errors, run control.

One instruction issues per cycle (contract section 1). Scalar instructions take effect at the end
of their issue cycle; a taken branch leaves one bubble (``BRANCH_PENALTY``), so does an ``sld``
(``SLD_PENALTY``: its row comes from a registered read port); ``sld``/``sst`` wait for their
tokens and signal in their issue cycle; ``fence``/``halt`` wait for the named units to
be idle; a queued instruction issues when its unit's queue has a free entry and snapshots its
loop nest, its slot base addresses (immediate + index register) and its scalar operand.

The front end is a pipeline of three stages, which the contract does not see:

* **F** (fetch): instruction memory is read synchronously at ``fetch_addr``; the word arrives in
  the next cycle. While I stalls the read is not enabled and the word stays at the port.
* **D** (decode, register read): the word at the memory port is decoded far enough to choose the
  register read ports, the registers are read, and the result the instruction in I writes in
  this cycle is forwarded (so is a host write while idle); each stride slot's base address
  (immediate + index register) is added; the word, its pc, its legality, the pc's check against
  the program's length, the kind of instruction the issue decision asks about, the three
  register values and the three sums go into the pipeline register, and the loop registers
  take the nest's addresses.
* **I** (issue): everything else, from the pipeline register: the range checks, tokens, the
  scalar ALU, ``sld``/``sst``, queue entries, branches. An ``sld`` leaves I empty for one cycle,
  in which its lane is written and forwarded into D.

Why the contract holds unchanged: a taken branch issued at ``t`` fetches its target at ``t``,
which is decoded at ``t + 1`` and issues at ``t + 2`` (the one bubble of ``BRANCH_PENALTY``);
registers are forwarded into D, so no instruction sees a stale value (no hazard, no stall but
the ``sld``'s);
the stage keeps a copy of instruction 0 from the host's writes, which D decodes while the chip
is idle, so the start cycle moves it into I and it issues at cycle 0.

Cycle 0 is the first cycle after ``start``; the run ends at the halt's issue cycle ``t_h`` (or an
error's detection cycle) and ``cycles`` then reads ``t_h + 1``.

``IssueStage`` composes four parts (``rtl/issue_parts.py``, each with its own unit test): the
scalar ALU (``ScalarAlu``), the loop registers (``LoopRegisters``), the token counters
(``TokenCounters``) and the check whether the head instruction may issue now (``IssueCheck``).
It chooses their operands (which register port feeds the ALU, the ``loop`` count), so each part
exists once.

Area (an FPGA has to hold it): only one instruction issues per cycle, so the scalar register
file has three read ports (``READ_PORTS``), each fed by the register field that the instruction
at the head uses in that role (selected by opcode, before the read); each stride slot's base
address is one adder on its port. The ALU has one adder/subtractor (add, sub, slt and the
branch compare) and one shifter (sll through bit reversal, srl, sra). The loop registers are
small memories (LUT RAM on an FPGA) with one read port per nest level.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from isa.errors import ErrorCode
from isa.table import (INSTRUCTIONS, LINK_UNITS, MAX_REPEAT_DEPTH, SCALAR_ALU, STRIDE_SLOTS, WORD_BITS, CountMode,
                       ScaleMode, Space, SrcMode, clog2, layout)
from isa.timing import BRANCH_PENALTY, SLD_PENALTY

from .decode import Decoder
from .dma import dram_window
from .issue_parts import QUEUED, IssueCheck, LoopRegisters, ScalarAlu, TokenCounters, one_of
from .queue import UNITS, EntrySignature, entry_layout, narrow_fields, pack
from .unit import ACC_BITS, ERR_BITS, SPM_BITS, RowWriteSignature, TokenSignature
from .logic import any_of

__all__ = ["IssueStage", "QUEUED", "READ_PORTS"]

assert BRANCH_PENALTY == 1 and SLD_PENALTY == 1

#: Register operands of the scalar formats, by read port: (format, field). A queued instruction
#: reads the index register of its stride slot k on port k (``Instr.slots``); its scalar operand
#: (``_SVAL``) replaces slot 2's index register on port 2 when its mode names a register.
_SCALAR_READS = (
    (("alu", "rs1"), ("alui", "rs1"), ("branch", "rs1"), ("smem", "xaddr"), ("loop", "count")),
    (("alu", "rs2"), ("branch", "rs2"), ("smem", "rd")),
    (),
)
READ_PORTS = len(_SCALAR_READS)
assert READ_PORTS == STRIDE_SLOTS
#: format -> (mode field, the mode that names a register, value field): the scalar operand a
#: queued instruction snapshots (``vbin`` b, ``vreq`` scale); the value field is also a stride slot
_SVAL = {"vbin": ("bmode", SrcMode.REG, "b"), "vreq": ("smode", ScaleMode.REG, "scale")}


class IssueStage(wiring.Component):
    """Ports:
      fetch_addr Out(pc)                instruction memory read address (sync port: word next cycle)
      fetch_en  Out(1)                  ... read it (else the port keeps its word)
      word      In(WORD_BITS)           the word at ``pc``
      prog_len  In(pc+1)                program length (fetching at or past it: PC_RANGE)
      start     In(1)                   begin a run at pc 0 (pulse while not running)
      word0_we In(1), word0_data In(WORD_BITS)  the host writes instruction 0 (the stage keeps a copy)
      running   Out(1), done Out(1)     run state (done stays set until the next start)
      error     Out(4)                  ``ErrorCode`` of the stopped run (0: OK)
      cycles    Out(32)                 cycles of the current/last run
      pc        Out(pc)                 program counter; ``issued`` Out(1): an instruction issues now
      issued_scalar Out(1)              ... and it is a scalar-unit instruction (its start and retire)
      reg_we In(1), reg_addr In(sreg), reg_wdata In(32), reg_rdata Out(32)  host access to scalar registers
      q_<unit>  Out(EntrySignature)     entry pushed to each unit queue
      t_<unit>  In(TokenSignature)      each unit's token/busy/error port
      sld_row Out(laddr), sld_spm In(8*cols), sld_acc In(32*cols)  ``sld``: its row, and that row of each
                                        memory a cycle later (``rtl.chip``: the store unit's registered ports)
      spm_wr Out(RowWriteSignature(laddr, 8*cols, cols)), acc_wr Out(RowWriteSignature(laddr, 32*cols, cols))  ``sst``
    """

    def __init__(self, cfg):
        self.cfg = cfg
        pcw = clog2(cfg.imem_words)
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        C = cfg.cols
        sig = {"fetch_addr": Out(pcw), "fetch_en": Out(1), "word": In(WORD_BITS), "prog_len": In(pcw + 1),
               "start": In(1), "word0_we": In(1), "word0_data": In(WORD_BITS),
               "running": Out(1), "done": Out(1), "error": Out(ERR_BITS), "cycles": Out(32),
               "pc": Out(pcw), "issued": Out(1), "issued_scalar": Out(1),
               "reg_we": In(1), "reg_addr": In(clog2(cfg.scalar_regs)), "reg_wdata": In(32), "reg_rdata": Out(32),
               "sld_row": Out(aw), "sld_spm": In(SPM_BITS * C), "sld_acc": In(ACC_BITS * C),
               "spm_wr": Out(RowWriteSignature(aw, SPM_BITS * C, C)),
               "acc_wr": Out(RowWriteSignature(aw, ACC_BITS * C, C))}
        for u in QUEUED:
            sig[f"q_{u.name.lower()}"] = Out(EntrySignature(cfg))
            sig[f"t_{u.name.lower()}"] = In(TokenSignature())
        super().__init__(sig)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        C = cfg.cols
        sw = clog2(cfg.scalar_regs)
        pcw = len(self.pc)
        # ---- the pipeline register between decode (D) and issue (I) ----------------------------
        # D decodes the word at the imem port (the one at ``pc_f``) and reads its registers; I
        # issues the instruction in the register. ``p_valid`` is low for the cycle after a taken
        # branch (the target's word is then in D: ``BRANCH_PENALTY``).
        p_valid = Signal()
        p_word = Signal(WORD_BITS)
        p_legal = Signal()
        pc_f = Signal(pcw + 1)              # D's pc; one bit more than imem's address: PC_RANGE past the end
        p_pc = Signal(pcw + 1)              # I's pc
        p_reg = [Signal(signed(32), name=f"p_r{k}") for k in range(READ_PORTS)]
        # what I's issue decision asks of its instruction, decoded in D and registered with it: the
        # kind of instruction for ``IssueCheck`` (one-hot), the pc inside the program; so the
        # decision is a flat AND-OR of these flags and the units' states, not a decode and a
        # choice by unit number after the pipeline register
        p_smem, p_fence, p_halt, p_other, p_pc_ok = (Signal(name=n) for n in
                                                     ("p_smem", "p_fence", "p_halt", "p_other", "p_pc_ok"))
        p_qunit = Signal(UNITS)
        m.submodules.dec_d = dec_d = Decoder(cfg)
        # instruction 0, kept from the host's writes: while idle D decodes it, so the start cycle
        # moves it into I whatever the memory port holds (the word fetched when the last run stopped)
        word0 = Signal(WORD_BITS, reset_less=True)
        with m.If(self.word0_we):
            m.d.sync += word0.eq(self.word0_data)
        word_d = Signal(WORD_BITS)
        pc_d = Signal(pcw + 1)
        m.d.comb += [word_d.eq(Mux(self.running, self.word, word0)), pc_d.eq(Mux(self.running, pc_f, 0)),
                     dec_d.word.eq(word_d)]
        m.submodules.dec = dec = Decoder(cfg)
        m.d.comb += dec.word.eq(p_word)
        w = dec.view
        is_ = dec.is_
        # scalar registers: a memory (LUT RAM on an FPGA) with one read port per use; r0 is never
        # written, so it reads 0
        m.submodules.regs = regs = memory.Memory(shape=signed(32), depth=cfg.scalar_regs, init=[],
                                                 attrs={"ram_style": "distributed"})

        pow2 = cfg.scalar_regs == 1 << sw      # else register numbers past the last read 0

        def reg(idx):
            rp = regs.read_port(domain="comb")
            m.d.comb += rp.addr.eq(idx)
            return rp.data if pow2 else Mux(idx < cfg.scalar_regs, rp.data, 0)

        pc = p_pc
        load = Signal()                    # the pipeline register takes D's instruction
        running, done = self.running, self.done
        error = Signal(ERR_BITS, name="error_r")     # the stopped run's error code (``self.error`` below)
        m.d.comb += self.reg_rdata.eq(reg(self.reg_addr))
        # one write port: the host's while idle, the issuing instruction's rd while running
        rf_we, rf_addr, rf_data = Signal(), Signal(sw), Signal(32)
        regno_ok = (rf_addr != 0) & (rf_addr < cfg.scalar_regs)      # a register the write port writes
        rf_wp = regs.write_port()
        m.d.comb += [rf_wp.addr.eq(rf_addr), rf_wp.data.eq(rf_data),
                     rf_wp.en.eq(rf_we & regno_ok)]

        # ---- the register read ports: field chosen by opcode, then one read each ---------------
        lay = layout(cfg)

        def fld(fmt, name, d=dec):
            return getattr(getattr(d.view, fmt), name)

        def slice_of(fmt, name):
            for s in lay.formats[fmt]:
                if s.field.name == name:
                    return s
            raise KeyError((fmt, name))

        def fmt_is(fmt, d=dec):
            return any_of([d.is_(ins.mnemonic) for ins in INSTRUCTIONS if ins.format == fmt])

        def grouped(cases, d=dec):
            """[(cond, fmt, field)] -> [(cond, value)], one case per distinct bit slice of the word."""
            by_pos = {}
            for cond, fmt, name in cases:
                s = slice_of(fmt, name)
                key = (s.lo, s.width, s.field.signed)
                if key in by_pos:
                    by_pos[key] = (by_pos[key][0] | cond, by_pos[key][1])
                else:
                    by_pos[key] = (cond, fld(fmt, name, d))
            return list(by_pos.values())

        def sval_from_reg(d):
            """The instruction's scalar operand comes from a register (its mode says so)."""
            return any_of([fmt_is(fmt, d) & (fld(fmt, mode, d) == regmode)
                           for fmt, (mode, regmode, _) in _SVAL.items()])

        sval_reg = sval_from_reg(dec)       # the instruction in I
        # D reads its registers; a result written in this cycle (by the instruction in I, or by
        # the host while idle) is forwarded, so the registered value is the register file as it
        # stands when the instruction reaches I. (The instruction in I writes only if it issues;
        # if it does not, the pipeline register keeps its contents and the forwarded value is
        # not taken.)
        fwd_we = Signal()                   # the write port writes in this cycle if the instruction in I issues
        sval_reg_d = sval_from_reg(dec_d)
        # base addresses: one adder per slot on its read port (slot 0's also serves sld/sst and
        # addi), in D after the forwarding, so I takes them from the pipeline register
        imm_cases = [[] for _ in range(READ_PORTS)]
        for ins in INSTRUCTIONS:
            if ins.queued:
                for k, name in enumerate(ins.slots):
                    imm_cases[k].append((dec_d.is_(ins.mnemonic), ins.format, name))
        imm_cases[0] += [(fmt_is("smem", dec_d), "smem", "addr"), (dec_d.is_("addi"), "alui", "imm")]
        sums = [Signal(signed(33), name=f"p_sum{k}") for k in range(READ_PORTS)]
        for k in range(READ_PORTS):
            cases = [(fmt_is(fmt, dec_d), fmt, name) for fmt, name in _SCALAR_READS[k]]
            cases += [(dec_d.is_(ins.mnemonic), ins.format, "x" + ins.slots[k])
                      for ins in INSTRUCTIONS if ins.queued and k < len(ins.slots)]
            sel = one_of([(c, v[:sw]) for c, v in grouped(cases, dec_d)], sw)
            if k == READ_PORTS - 1:        # the scalar operand's register, when its mode says so
                svc = [(fmt_is(fmt, dec_d), fmt, val) for fmt, (_, _, val) in _SVAL.items()]
                sel = Mux(sval_reg_d, one_of([(c, v[:sw]) for c, v in grouped(svc, dec_d)], sw), sel)
            idx = Signal(sw, name=f"rp{k}_idx")
            m.d.comb += idx.eq(sel)
            data_ = Signal(signed(32), name=f"rp{k}")
            m.d.comb += data_.eq(Mux(fwd_we & (rf_addr == idx), rf_data, reg(idx)))
            imm = Signal(signed(33), name=f"imm{k}")
            m.d.comb += imm.eq(one_of(grouped(imm_cases[k], dec_d), 33, signed(33)))
            r = data_ if k < READ_PORTS - 1 else Mux(sval_reg_d, 0, data_)
            with m.If(load):
                m.d.sync += [p_reg[k].eq(data_), sums[k].eq(imm + r)]
        rport = p_reg
        A, B = rport[0], rport[1]

        # ---- token counters (P, C) -----------------------------------------------------------
        issue = Signal()
        smem = w.smem
        # (a chip without link ports: its link units never signal, ``rtl.chip.Chip``)
        m.submodules.tokens = tc = TokenCounters(silent=() if cfg.links else LINK_UNITS)
        for u in QUEUED:
            name = f"t_{u.name.lower()}"
            connect(m, flipped(getattr(self, name)), getattr(tc, name))
        smem_go = Signal()                  # an sld/sst issues (below)
        m.d.comb += [tc.running.eq(running), tc.scalar_wait.eq(smem.wait), tc.scalar_take.eq(smem_go),
                     tc.scalar_signal.eq(Mux(smem_go, smem.signal, 0))]

        # ---- what the head instruction needs ---------------------------------------------------
        toks = {u: getattr(self, f"t_{u.name.lower()}") for u in QUEUED}
        queues = {u: getattr(self, f"q_{u.name.lower()}") for u in QUEUED}
        srow = sums[0]                      # smem.addr + its index register, exact (33 bits)
        s_lim = Mux(smem.space == Space.ACC, cfg.acc_rows, cfg.spm_rows)
        smem_ok = (srow >= 0) & (srow < s_lim)
        m.d.comb += self.sld_row.eq(srow)
        m.submodules.check = chk = IssueCheck()
        m.d.comb += [chk.smem.eq(p_smem), chk.fence.eq(p_fence), chk.halt.eq(p_halt), chk.q_unit.eq(p_qunit),
                     chk.fence_units.eq(w.fence.units), chk.scalar_ok.eq(tc.scalar_ok)]
        for u in QUEUED:
            m.d.comb += [chk.busy[int(u)].eq(toks[u].busy), chk.ready[int(u)].eq(queues[u].ready)]
        can = chk.can

        # ---- errors, in the cycle they are detected --------------------------------------------
        # The head instruction's own errors keep it from issuing; a unit's start-time error stops
        # the run at the same cycle but does not hold back the instruction issuing then (nothing
        # it does in that cycle reaches DRAM, the one memory a stopped run is compared on), so the
        # units' queue heads stay out of the issue decision.
        own_err, err = Signal(ERR_BITS), Signal(ERR_BITS)
        pc_ok = p_pc_ok
        head_valid = running & p_valid
        # the head instruction may go as far as its pc and legality say (``go``); it issues if
        # ``IssueCheck`` says it can and, an ``sld``/``sst``, its row lies inside its memory
        go = Signal()
        m.d.comb += go.eq(head_valid & pc_ok & p_legal)
        # ``issue`` for one kind of instruction (the kinds exclude each other, which synthesis
        # cannot see): what only an sld/sst or only an always-issuing instruction does waits on
        # that kind's rule alone, not on the queues' and units' states the others wait for
        other_go = Signal()
        m.d.comb += [smem_go.eq(go & p_smem & tc.scalar_ok & smem_ok), other_go.eq(go & p_other)]
        with m.If(head_valid):
            with m.If(~pc_ok):
                m.d.comb += own_err.eq(ErrorCode.PC_RANGE)
            with m.Elif(~p_legal):
                m.d.comb += own_err.eq(ErrorCode.ILLEGAL_INSTRUCTION)
            with m.Elif(p_smem & tc.scalar_ok & ~smem_ok):
                m.d.comb += own_err.eq(ErrorCode.ADDRESS_RANGE)
        # the first unit in QUEUED order with an error gives the code, else the instruction's own
        # (an OR of one-hot selected codes: a chain of ``If``s became a chain of LUTs)
        codes, before = [], Const(0)
        for u in QUEUED:
            h = running & toks[u].err
            codes.append(Mux(h & ~before, toks[u].err_code, 0))
            before = before | h
        m.d.comb += err.eq(any_of(codes + [Mux(before, 0, own_err)]))
        m.d.comb += [issue.eq(go & can & (~p_smem | smem_ok)), self.issued.eq(issue),
                     self.issued_scalar.eq(issue & ~p_qunit.any())]
        # A token overflow in this cycle's signals (which an issuing sld/sst adds to) shows in the
        # next cycle, in the counters' top bits (``tc.overflow``): it then stops the run as if it
        # had stopped in the cycle of the overflow (the cycle count holds), or, when the run
        # stopped in that cycle for another reason, it replaces the error code. Nothing the chip
        # does in that extra cycle is part of the result of a run stopped by TOKEN_OVERFLOW (its
        # error and cycle count; contract section 5), and no counter's adder feeds the run's stop.
        ovf_now = tc.overflow
        stop = running & ((err != 0) | (issue & p_halt))

        # ---- scalar execution ------------------------------------------------------------------
        m.submodules.alu = alu = ScalarAlu()
        m.d.comb += [alu.a.eq(A), alu.b.eq(B), alu.op.eq(Cat(*[is_(name) for name in SCALAR_ALU])),
                     alu.compare.eq(is_("blt") | is_("bge"))]
        # sld: its row is read at its issue cycle t from a registered port; in t + 1, when nothing
        # issues (``SLD_PENALTY``), its lane is written to rd and forwarded into D
        lane = smem.lane
        is_sld = is_("sld")
        ld_pend, ld_space = Signal(), Signal()
        ld_lane, ld_rd = Signal.like(lane), Signal(sw)
        m.d.sync += [ld_pend.eq(smem_go & is_sld), ld_space.eq(smem.space), ld_lane.eq(lane), ld_rd.eq(w.smem.rd)]
        spm_l = data.View(data.ArrayLayout(signed(SPM_BITS), C), self.sld_spm)
        acc_l = data.View(data.ArrayLayout(signed(ACC_BITS), C), self.sld_acc)
        loaded = Signal(signed(32))
        m.d.comb += loaded.eq(Mux(ld_space == Space.ACC, acc_l[ld_lane], spm_l[ld_lane]))
        results = {"seti": w.seti.imm, "addi": sums[0][:32]}    # and the ALU's
        res = Signal(32)
        m.d.comb += res.eq(alu.result | one_of([(is_(name), v.as_unsigned()) for name, v in results.items()], 32))
        writes_rd = any_of([is_(name) for name in (*SCALAR_ALU, *results)])
        # (the instructions whose effects wait on ``other_go``: none is sld/sst, fence, halt or queued)
        always = {*SCALAR_ALU, *results, "loop", *(i.mnemonic for i in INSTRUCTIONS if i.format in ("branch", "jump"))}
        assert all(not i.queued and i.mnemonic not in ("sld", "sst", "fence", "halt")
                   for i in INSTRUCTIONS if i.mnemonic in always)
        assert always <= {i.mnemonic for i in INSTRUCTIONS}
        for fmt in ("seti", "alui", "smem"):          # rd sits at the same bits in every format
            assert slice_of(fmt, "rd").lo == slice_of("alu", "rd").lo
        # the write port: an sld's load in the cycle after it (even if the run has stopped then),
        # else the issuing instruction's result, else (idle) the host's write
        m.d.comb += fwd_we.eq(Mux(ld_pend, 1, Mux(running, p_valid & writes_rd, self.reg_we)) & regno_ok)
        m.d.comb += [rf_we.eq(Mux(ld_pend, 1, Mux(running, other_go & writes_rd, self.reg_we))),
                     rf_addr.eq(Mux(ld_pend, ld_rd, Mux(running, w.alu.rd, self.reg_addr))),
                     rf_data.eq(Mux(ld_pend, loaded, Mux(running, res, self.reg_wdata)))]
        # sst: saturate to int8 for SPM
        v = B
        sat = Mux(v > 127, 127, Mux(v < -128, -128, v))
        m.d.comb += [self.spm_wr.addr.eq(srow), self.acc_wr.addr.eq(srow),
                     self.spm_wr.data.eq(Cat(*[sat[:8]] * C)), self.acc_wr.data.eq(Cat(*[v] * C))]
        with m.If(smem_go & is_("sst")):
            with m.If(smem.space == Space.ACC):
                m.d.comb += self.acc_wr.en.eq(1 << lane)
            with m.Else():
                m.d.comb += self.spm_wr.en.eq(1 << lane)

        # ---- loop registers: taken when the ``loop`` issues, read by a queued instruction's nest ----
        lp, hdr = w.loop, w.dma
        m.submodules.loops = loops = LoopRegisters(cfg)
        m.d.comb += [loops.running.eq(running), loops.we.eq(other_go & is_("loop")), loops.lr.eq(lp.lr),
                     loops.count.eq(Mux(lp.cmode == CountMode.REG, A, lp.count)),
                     *[loops.stride[k].eq(sk) for k, sk in enumerate((lp.s0, lp.s1, lp.s2))],
                     loops.base.eq(dec_d.view.dma.rep_base), loops.depth.eq(dec_d.view.dma.rep_depth),
                     loops.load.eq(load)]
        # branches
        br = w.branch
        taken = is_("jmp") | (is_("beq") & alu.eq) | (is_("bne") & ~alu.eq) | \
            (is_("blt") & alu.lt) | (is_("bge") & ~alu.lt)
        target = Mux(is_("jmp"), w.jump.target, br.target)

        # ---- queue entries -----------------------------------------------------------------------
        # (used by the DMA units only) its two products found from the word in the D stage and
        # registered with it, the adds in the I stage: neither the multipliers after the
        # instruction memory's read nor the adders too lie on one path to a queue's head register
        def d_to_i(*vals):
            out = [Signal.like(v, name=f"p_{v.name}") for v in vals]
            with m.If(load):
                m.d.sync += [o.eq(v) for o, v in zip(out, vals)]
            return out

        lo, hi = dram_window(m, cfg, dec_d.view.dma, stage=d_to_i, v_next=w.dma)
        svals = [(fmt_is(fmt), fmt, val) for fmt, (_, _, val) in _SVAL.items()]
        entry = Signal(entry_layout(cfg))
        bases = [sums[k][:32] for k in range(STRIDE_SLOTS)]
        jumps = [[loops.jump[j][k] for k in range(STRIDE_SLOTS)] for j in range(MAX_REPEAT_DEPTH)]
        m.d.comb += entry.eq(pack(m, entry_layout(cfg), {
            "word": p_word, "pc": pc[:pcw], "q": self.cycles, "depth": hdr.rep_depth, "zero": loops.zero,
            "dram_lo": lo, "dram_hi": hi, "cnt_m2": [loops.cnt_m2[j] for j in range(MAX_REPEAT_DEPTH)],
            "cnt_one": loops.cnt_one,
            "jump": jumps, "base": bases, **narrow_fields(cfg, bases, jumps),
            "sval": Mux(sval_reg, rport[READ_PORTS - 1], one_of([(c, v) for c, v in grouped(svals)], 32))},
            name="entry_part"))
        # a queued instruction is not sld/sst: of its own errors only the pc and legality checks
        # apply, so its push does not wait for the sld/sst row's range check (the same ``issue``)
        for u in QUEUED:
            m.d.comb += [queues[u].entry.eq(entry), queues[u].valid.eq(go & p_qunit[u] & queues[u].ready)]

        # ---- fetch, the pipeline register, run control ---------------------------------------
        # The start cycle moves instruction 0 (``word0``) into I and fetches instruction 1; while
        # running, F fetches the next word when I takes D's or a taken branch's target; while I
        # stalls, F's read is not enabled (``fetch_en``), so the word at the port stays. Nothing
        # here depends on why a run stops.
        # (a branch is neither ``sld``/``sst`` nor queued, fenced or a halt: ``IssueCheck`` lets it
        # go, so it issues whenever ``go``; the address is chosen without the units' states, which
        # reach only the read's enable)
        fetch = Signal.like(pc_f)
        m.d.comb += [self.pc.eq(pc[:pcw]), self.fetch_addr.eq(fetch[:pcw]),
                     load.eq(Mux(running, ~p_valid | (issue & ~is_sld), self.start)),
                     self.fetch_en.eq(~running | load)]
        with m.If(~running):
            m.d.comb += fetch.eq(1)
        with m.Elif(go & taken):
            m.d.comb += fetch.eq(target)
        with m.Else():
            m.d.comb += fetch.eq(pc_f + 1)
        with m.If(self.fetch_en):
            m.d.sync += pc_f.eq(fetch)
        # the kind of D's instruction (at most one holds; ``other``: none of them)
        kinds = [(p_smem, dec_d.is_("sld") | dec_d.is_("sst")), (p_fence, dec_d.is_("fence")),
                 (p_halt, dec_d.is_("halt"))]
        with m.If(load):
            m.d.sync += [p_word.eq(word_d), p_legal.eq(dec_d.legal), p_pc.eq(pc_d), p_valid.eq(1),
                         p_pc_ok.eq(pc_d < self.prog_len), *[r.eq(v) for r, v in kinds],
                         p_other.eq(~(any_of([v for _, v in kinds]) | dec_d.queued)),
                         p_qunit.eq(Cat(*[dec_d.queued & (dec_d.unit == u) for u in range(UNITS)]))]
        with m.If((go & taken) | (smem_go & is_sld)):
            m.d.sync += p_valid.eq(0)
        with m.If(running & ovf_now):
            m.d.sync += [running.eq(0), done.eq(1), error.eq(ErrorCode.TOKEN_OVERFLOW)]
        with m.Elif(running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            with m.If(stop):
                m.d.sync += [running.eq(0), done.eq(1), error.eq(err)]
        with m.Elif(ovf_now):       # the run stopped in the previous cycle, which overflowed a counter
            m.d.sync += error.eq(ErrorCode.TOKEN_OVERFLOW)
        # (the error port shows it in that first cycle after the stop already)
        m.d.comb += self.error.eq(Mux(ovf_now & ~running, ErrorCode.TOKEN_OVERFLOW, error))
        with m.If(self.start & ~running):
            m.d.sync += [running.eq(1), done.eq(0), error.eq(0), self.cycles.eq(0)]
        return m

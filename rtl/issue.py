"""The issue stage: fetch, decode, the scalar unit, loop registers, token counters, run control.

One instruction issues per cycle (contract section 1). Scalar instructions take effect at the end
of their issue cycle; a taken branch leaves one bubble (``BRANCH_PENALTY``); ``sld``/``sst`` wait
for their tokens and signal in their issue cycle; ``fence``/``halt`` wait for the named units to
be idle; a queued instruction issues when its unit's queue has a free entry and snapshots its
loop nest, its slot base addresses (immediate + index register) and its scalar operand.

Instruction memory is read synchronously at ``pc_next``, so the word of ``pc`` is present in the
cycle it may issue. Cycle 0 is the first cycle after ``start``; the run ends at the halt's issue
cycle ``t_h`` (or an error's detection cycle) and ``cycles`` then reads ``t_h + 1``.

Area (an FPGA has to hold it): only one instruction issues per cycle, so the scalar register
file has three read ports (``READ_PORTS``), each fed by the register field that the instruction
at the head uses in that role (selected by opcode, before the read); each stride slot's base
address is one adder on its port. The ALU has one adder/subtractor (add, sub, slt and the
branch compare) and one shifter (sll through bit reversal, srl, sra). The loop registers are
small memories (LUT RAM on an FPGA) with one read port per nest level.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from isa.errors import ErrorCode
from isa.table import (INSTRUCTIONS, MAX_REPEAT_DEPTH, STRIDE_SLOTS, WORD_BITS, CountMode, ScaleMode,
                       Space, SrcMode, Unit, clog2, layout)
from isa.timing import BRANCH_PENALTY, TOKEN_MAX

from .decode import Decoder
from .dma import dram_window
from .queue import UNITS, EntrySignature, entry_layout, pack
from .unit import ACC_BITS, ERR_BITS, SPM_BITS, RowReadSignature, RowWriteSignature, TokenSignature

__all__ = ["IssueStage", "QUEUED", "READ_PORTS"]

QUEUED = [u for u in Unit if u is not Unit.SCALAR]
#: a token counter's bits; TOKEN_MAX is its largest value, so an overflow is the carry out
TOK_BITS = TOKEN_MAX.bit_length()
assert TOKEN_MAX == (1 << TOK_BITS) - 1
assert BRANCH_PENALTY == 1

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


def _one_of(cases, width, shape=None):
    """OR of ``Mux(cond, value, 0)`` over ``cases`` [(cond, value)] whose conditions exclude each
    other (at most one instruction decodes): a flat AND-OR, cheaper than a priority chain."""
    out = Const(0, shape if shape is not None else width)
    for cond, val in cases:
        out = out | Mux(cond, val, 0)
    return out


class IssueStage(wiring.Component):
    """Ports:
      fetch_addr Out(pc)                instruction memory read address (sync port: word next cycle)
      word      In(WORD_BITS)           the word at ``pc``
      prog_len  In(pc+1)                program length (fetching at or past it: PC_RANGE)
      start     In(1)                   begin a run at pc 0 (pulse while not running)
      running   Out(1), done Out(1)     run state (done stays set until the next start)
      error     Out(4)                  ``ErrorCode`` of the stopped run (0: OK)
      cycles    Out(32)                 cycles of the current/last run
      pc        Out(pc)                 program counter; ``issued`` Out(1): an instruction issues now
      issued_scalar Out(1)              ... and it is a scalar-unit instruction (its start and retire)
      reg_we In(1), reg_addr In(sreg), reg_wdata In(32), reg_rdata Out(32)  host access to scalar registers
      q_<unit>  Out(EntrySignature)     entry pushed to each unit queue
      t_<unit>  In(TokenSignature)      each unit's token/busy/error port
      spm_rd Out(RowReadSignature(laddr, 8*cols)), acc_rd Out(RowReadSignature(laddr, 32*cols))  ``sld`` (combinational)
      spm_wr Out(RowWriteSignature(laddr, 8*cols, cols)), acc_wr Out(RowWriteSignature(laddr, 32*cols, cols))  ``sst``
    """

    def __init__(self, cfg):
        self.cfg = cfg
        pcw = clog2(cfg.imem_words)
        aw = clog2(max(cfg.spm_rows, cfg.acc_rows))
        C = cfg.cols
        sig = {"fetch_addr": Out(pcw), "word": In(WORD_BITS), "prog_len": In(pcw + 1), "start": In(1),
               "running": Out(1), "done": Out(1), "error": Out(ERR_BITS), "cycles": Out(32),
               "pc": Out(pcw), "issued": Out(1), "issued_scalar": Out(1),
               "reg_we": In(1), "reg_addr": In(clog2(cfg.scalar_regs)), "reg_wdata": In(32), "reg_rdata": Out(32),
               "spm_rd": Out(RowReadSignature(aw, SPM_BITS * C)), "acc_rd": Out(RowReadSignature(aw, ACC_BITS * C)),
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
        m.submodules.dec = dec = Decoder(cfg)
        m.d.comb += dec.word.eq(self.word)
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

        pc = self.pc
        bubble = Signal()
        running, done, error = self.running, self.done, self.error
        m.d.comb += self.reg_rdata.eq(reg(self.reg_addr))
        # one write port: the host's while idle, the issuing instruction's rd while running
        rf_we, rf_addr, rf_data = Signal(), Signal(sw), Signal(32)
        rf_wp = regs.write_port()
        m.d.comb += [rf_wp.addr.eq(rf_addr), rf_wp.data.eq(rf_data),
                     rf_wp.en.eq(rf_we & (rf_addr != 0) & (rf_addr < cfg.scalar_regs))]

        # ---- the register read ports: field chosen by opcode, then one read each ---------------
        lay = layout(cfg)

        def fld(fmt, name):
            return getattr(getattr(w, fmt), name)

        def slice_of(fmt, name):
            for s in lay.formats[fmt]:
                if s.field.name == name:
                    return s
            raise KeyError((fmt, name))

        def fmt_is(fmt):
            hit = Const(0)
            for ins in INSTRUCTIONS:
                if ins.format == fmt:
                    hit = hit | is_(ins.mnemonic)
            return hit

        def grouped(cases):
            """[(cond, fmt, field)] -> [(cond, value)], one case per distinct bit slice of the word."""
            by_pos = {}
            for cond, fmt, name in cases:
                s = slice_of(fmt, name)
                key = (s.lo, s.width, s.field.signed)
                if key in by_pos:
                    by_pos[key] = (by_pos[key][0] | cond, by_pos[key][1])
                else:
                    by_pos[key] = (cond, fld(fmt, name))
            return list(by_pos.values())

        sval_reg = Const(0)          # the head instruction's scalar operand comes from a register
        for fmt, (mode, regmode, _) in _SVAL.items():
            sval_reg = sval_reg | (fmt_is(fmt) & (fld(fmt, mode) == regmode))
        rport = []
        for k in range(READ_PORTS):
            cases = [(fmt_is(fmt), fmt, name) for fmt, name in _SCALAR_READS[k]]
            cases += [(is_(ins.mnemonic), ins.format, "x" + ins.slots[k])
                      for ins in INSTRUCTIONS if ins.queued and k < len(ins.slots)]
            sel = _one_of([(c, v[:sw]) for c, v in grouped(cases)], sw)
            if k == READ_PORTS - 1:        # the scalar operand's register, when its mode says so
                svc = [(fmt_is(fmt), fmt, val) for fmt, (_, _, val) in _SVAL.items()]
                sel = Mux(sval_reg, _one_of([(c, v[:sw]) for c, v in grouped(svc)], sw), sel)
            idx = Signal(sw, name=f"rp{k}_idx")
            m.d.comb += idx.eq(sel)
            data_ = Signal(signed(32), name=f"rp{k}")
            m.d.comb += data_.eq(reg(idx))
            rport.append(data_)
        A, B = rport[0], rport[1]

        # ---- token counters (P, C) -----------------------------------------------------------
        toks = {u: getattr(self, f"t_{u.name.lower()}") for u in QUEUED}
        tok = [[Signal(range(TOKEN_MAX + 1), name=f"tok_{Unit(p).name}_{Unit(c).name}") for c in range(UNITS)]
               for p in range(UNITS)]
        scalar_take = Signal()
        scalar_sig = Signal(UNITS)          # sld/sst signal mask at issue
        scalar_wait = Signal(UNITS)
        overflow = Signal()
        for c in range(UNITS):
            for p in range(UNITS):
                inc = Const(0, 3)
                if p == Unit.SCALAR:
                    inc = inc + scalar_sig[c]
                else:
                    t = toks[Unit(p)]
                    for e in range(3):              # (a slot without an event has a zero mask)
                        inc = inc + t.sig_mask[e][c]
                if c == Unit.SCALAR:
                    dec_ = scalar_take & scalar_wait[p]
                else:
                    t = toks[Unit(c)]
                    dec_ = t.take & t.wait[p]
                # tok + (inc - dec) in one adder: the counter never goes below 0 (a wait needs a
                # token), so the result is 0 .. TOKEN_MAX + 3 and its top bit is the overflow
                delta = Signal(signed(3), name=f"tokdelta_{p}_{c}")
                nxt = Signal(TOK_BITS + 1, name=f"toknext_{p}_{c}")
                m.d.comb += [delta.eq(inc - dec_), nxt.eq(tok[p][c] + delta)]
                with m.If(nxt[TOK_BITS]):
                    m.d.comb += overflow.eq(1)
                # cleared while not running (nothing reads them then): a start begins at 0
                m.d.sync += tok[p][c].eq(Mux(running, nxt, 0))

        def tokens_ok(c, wait):
            ok = Const(1)
            for p in range(UNITS):
                ok = ok & (~wait[p] | (tok[p][c] != 0))
            return ok

        for u in QUEUED:
            m.d.comb += [toks[u].ok.eq(tokens_ok(u, toks[u].wait)), toks[u].en.eq(running)]

        # ---- base addresses: one adder per slot (slot 0's also serves sld/sst and addi) -------------
        imm_cases = [[] for _ in range(READ_PORTS)]
        for ins in INSTRUCTIONS:
            if ins.queued:
                for k, name in enumerate(ins.slots):
                    imm_cases[k].append((is_(ins.mnemonic), ins.format, name))
        smem = w.smem
        imm_cases[0] += [(fmt_is("smem"), "smem", "addr"), (is_("addi"), "alui", "imm")]
        sums = []
        for k in range(READ_PORTS):
            imm = Signal(signed(33), name=f"imm{k}")
            m.d.comb += imm.eq(_one_of(grouped(imm_cases[k]), 33, signed(33)))
            r = rport[k] if k < READ_PORTS - 1 else Mux(sval_reg, 0, rport[k])
            s = Signal(signed(33), name=f"sum{k}")
            m.d.comb += s.eq(imm + r)
            sums.append(s)

        # ---- what the head instruction needs ---------------------------------------------------
        busy = {u: toks[u].busy for u in QUEUED}
        queues = {u: getattr(self, f"q_{u.name.lower()}") for u in QUEUED}
        srow = sums[0]                      # smem.addr + its index register, exact (33 bits)
        s_lim = Mux(smem.space == Space.ACC, cfg.acc_rows, cfg.spm_rows)
        smem_ok = (srow >= 0) & (srow < s_lim)
        m.d.comb += [self.spm_rd.addr.eq(srow), self.acc_rd.addr.eq(srow), scalar_wait.eq(smem.wait)]
        fence_ok = Const(1)
        for u in QUEUED:
            fence_ok = fence_ok & (~w.fence.units[int(u)] | ~busy[u])
        all_idle = Const(1)
        for u in QUEUED:
            all_idle = all_idle & ~busy[u]
        q_ready = Signal()
        for u in QUEUED:
            with m.If(dec.unit == u):
                m.d.comb += q_ready.eq(queues[u].ready)

        can = Signal()
        is_smem = is_("sld") | is_("sst")
        with m.If(is_smem):
            m.d.comb += can.eq(tokens_ok(Unit.SCALAR, smem.wait))
        with m.Elif(is_("fence")):
            m.d.comb += can.eq(fence_ok)
        with m.Elif(is_("halt")):
            m.d.comb += can.eq(all_idle)
        with m.Elif(dec.queued):
            m.d.comb += can.eq(q_ready)
        with m.Else():
            m.d.comb += can.eq(1)

        # ---- errors, in the cycle they are detected --------------------------------------------
        err = Signal(ERR_BITS)
        head_valid = running & ~bubble
        with m.If(head_valid):
            with m.If(pc >= self.prog_len):
                m.d.comb += err.eq(ErrorCode.PC_RANGE)
            with m.Elif(~dec.legal):
                m.d.comb += err.eq(ErrorCode.ILLEGAL_INSTRUCTION)
            with m.Elif(is_smem & can & ~smem_ok):
                m.d.comb += err.eq(ErrorCode.ADDRESS_RANGE)
        for u in reversed(QUEUED):
            with m.If(running & toks[u].err):
                m.d.comb += err.eq(toks[u].err_code)
        issue = Signal()
        m.d.comb += [issue.eq(head_valid & can & (err == 0)), self.issued.eq(issue),
                     self.issued_scalar.eq(issue & ~dec.queued)]
        # a token overflow is found from this cycle's signals (which an issuing sld/sst adds to)
        err_all = Signal(ERR_BITS)
        m.d.comb += err_all.eq(Mux(running & overflow, ErrorCode.TOKEN_OVERFLOW, err))
        stop = running & ((err_all != 0) | (issue & is_("halt")))

        # ---- scalar execution ------------------------------------------------------------------
        # one adder/subtractor: add, sub, slt and the branch compares (a - b, 33 bits: exact sign)
        subtract = is_("sub") | is_("slt") | is_("blt") | is_("bge")
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
        # sld: a lane of the row, read combinationally
        lane = smem.lane
        spm_l = data.View(data.ArrayLayout(signed(SPM_BITS), C), self.spm_rd.data)
        acc_l = data.View(data.ArrayLayout(signed(ACC_BITS), C), self.acc_rd.data)
        loaded = Signal(signed(32))
        m.d.comb += loaded.eq(Mux(smem.space == Space.ACC, acc_l[lane], spm_l[lane]))
        addsub = diff[:32]
        results = {"add": addsub, "sub": addsub, "slt": lt, "and": A & B, "or": A | B, "xor": A ^ B,
                   "sll": shifted, "srl": shifted, "sra": shifted, "mul": product,
                   "seti": w.seti.imm, "addi": sums[0][:32], "sld": loaded}
        groups = {}
        for name, val in results.items():
            key = id(val)
            groups[key] = (groups[key][0] | is_(name), val) if key in groups else (is_(name), val)
        res = Signal(32)
        m.d.comb += res.eq(_one_of([(c, v.as_unsigned()) for c, v in groups.values()], 32))
        writes_rd = Const(0)
        for name in results:
            writes_rd = writes_rd | is_(name)
        for fmt in ("seti", "alui", "smem"):          # rd sits at the same bits in every format
            assert slice_of(fmt, "rd").lo == slice_of("alu", "rd").lo
        m.d.comb += [rf_we.eq(Mux(running, issue & writes_rd, self.reg_we)),
                     rf_addr.eq(Mux(running, w.alu.rd, self.reg_addr)),
                     rf_data.eq(Mux(running, res, self.reg_wdata))]
        # sst: saturate to int8 for SPM
        v = B
        sat = Mux(v > 127, 127, Mux(v < -128, -128, v))
        m.d.comb += [self.spm_wr.addr.eq(srow), self.acc_wr.addr.eq(srow),
                     self.spm_wr.data.eq(Cat(*[sat[:8]] * C)), self.acc_wr.data.eq(Cat(*[v] * C))]
        with m.If(issue & is_("sst")):
            with m.If(smem.space == Space.ACC):
                m.d.comb += self.acc_wr.en.eq(1 << lane)
            with m.Else():
                m.d.comb += self.spm_wr.en.eq(1 << lane)
        m.d.comb += [scalar_take.eq(issue & is_smem), scalar_sig.eq(Mux(issue & is_smem, smem.signal, 0))]

        # ---- loop registers: a memory with one read port per nest level ----------------------------
        # Each holds its count, its strides and its *rewinds* (count - 1) * stride, taken when the
        # ``loop`` instruction issues; a queued instruction turns them into its nest's jumps
        # (rtl/queue.py). A register counts 0 until written in this run (``lvalid``). Word
        # ``loop_regs`` is never written: a level outside the nest reads it (strides and rewinds 0).
        lp = w.loop
        lrec = data.StructLayout({"cnt": unsigned(32), "stride": data.ArrayLayout(signed(32), STRIDE_SLOTS),
                                  "rew": data.ArrayLayout(signed(32), STRIDE_SLOTS)})
        m.submodules.loops = lmem = memory.Memory(shape=lrec, depth=cfg.loop_regs + 1, init=[],
                                                  attrs={"ram_style": "distributed"})
        lwp = lmem.write_port()
        lvalid = Signal(cfg.loop_regs)
        lwrite = issue & is_("loop")
        lcount = Signal(32)
        m.d.comb += lcount.eq(Mux(lp.cmode == CountMode.REG, A, lp.count))
        m.d.comb += [lwp.addr.eq(lp.lr), lwp.en.eq(lwrite), lwp.data.cnt.eq(lcount)]
        for k, sk in enumerate((lp.s0, lp.s1, lp.s2)):
            m.d.comb += [lwp.data.stride[k].eq(sk), lwp.data.rew[k].eq((lcount - 1)[:32] * sk)]
        for i in range(cfg.loop_regs):
            with m.If(lwrite & (lp.lr == i)):
                m.d.sync += lvalid[i].eq(1)
        with m.If(~running):
            m.d.sync += lvalid.eq(0)
        # branches
        br = w.branch
        taken = is_("jmp") | (is_("beq") & (A == B)) | (is_("bne") & (A != B)) | \
            (is_("blt") & lt) | (is_("bge") & ~lt)
        target = Mux(is_("jmp"), w.jump.target, br.target)

        # ---- queue entries -----------------------------------------------------------------------
        hdr = w.dma
        nest, cnts = [], []
        zero = Const(0)
        for j in range(MAX_REPEAT_DEPTH):
            rp = lmem.read_port(domain="comb")
            used = hdr.rep_depth > j
            li = hdr.rep_base + j
            m.d.comb += rp.addr.eq(Mux(used, li, cfg.loop_regs))
            # a register not written in this run counts 0: the nest is empty (and its other
            # counts, strides and jumps are not looked at)
            zero = zero | (used & (~lvalid.bit_select(li, 1) | (rp.data.cnt == 0)))
            nest.append(rp.data)
            cnts.append(rp.data.cnt)
        lo, hi = dram_window(m, cfg, w.dma)        # (used by the DMA units only)
        # jump_j = stride_j - (the rewinds of the levels inside j)
        jumps = [[None] * STRIDE_SLOTS for _ in range(MAX_REPEAT_DEPTH)]
        for k in range(STRIDE_SLOTS):
            inside = Const(0, signed(32))
            for j in reversed(range(MAX_REPEAT_DEPTH)):
                jump = Signal(signed(32), name=f"jump{j}_{k}")
                m.d.comb += jump.eq(nest[j].stride[k] - inside)
                jumps[j][k] = jump
                if j:
                    acc = Signal(signed(32), name=f"inside{j}_{k}")
                    m.d.comb += acc.eq(inside + nest[j].rew[k])
                    inside = acc
        svals = [(fmt_is(fmt), fmt, val) for fmt, (_, _, val) in _SVAL.items()]
        entry = Signal(entry_layout(cfg))
        m.d.comb += entry.eq(pack(m, entry_layout(cfg), {
            "word": self.word, "pc": pc, "q": self.cycles, "depth": hdr.rep_depth, "zero": zero,
            "dram_lo": lo, "dram_hi": hi, "cnt": cnts, "jump": jumps,
            "base": [sums[k][:32] for k in range(STRIDE_SLOTS)],
            "sval": Mux(sval_reg, rport[READ_PORTS - 1], _one_of([(c, v) for c, v in grouped(svals)], 32))},
            name="entry_part"))
        for u in QUEUED:
            m.d.comb += [queues[u].entry.eq(entry),
                         queues[u].valid.eq(issue & dec.queued & (dec.unit == u))]

        # ---- pc, run control -----------------------------------------------------------------
        pc_next = Signal.like(pc)
        m.d.comb += pc_next.eq(pc)
        with m.If(~running):
            m.d.comb += pc_next.eq(0)
        with m.Elif(issue & ~is_("halt")):
            m.d.comb += pc_next.eq(Mux(taken, target, pc + 1))
        m.d.comb += self.fetch_addr.eq(pc_next)
        m.d.sync += [pc.eq(pc_next), bubble.eq(issue & taken)]
        with m.If(running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
        with m.If(stop):
            m.d.sync += [running.eq(0), done.eq(1), error.eq(err_all)]
        with m.If(self.start & ~running):
            m.d.sync += [running.eq(1), done.eq(0), error.eq(0), self.cycles.eq(0), pc.eq(0), bubble.eq(0)]
        return m

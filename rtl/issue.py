"""The issue stage: fetch, decode, the scalar unit, loop registers, token counters, run control.

One instruction issues per cycle (contract section 1). Scalar instructions take effect at the end
of their issue cycle; a taken branch leaves one bubble (``BRANCH_PENALTY``); ``sld``/``sst`` wait
for their tokens and signal in their issue cycle; ``fence``/``halt`` wait for the named units to
be idle; a queued instruction issues when its unit's queue has a free entry and snapshots its
loop nest, its slot base addresses (immediate + index register) and its scalar operand.

Instruction memory is read synchronously at ``pc_next``, so the word of ``pc`` is present in the
cycle it may issue. Cycle 0 is the first cycle after ``start``; the run ends at the halt's issue
cycle ``t_h`` (or an error's detection cycle) and ``cycles`` then reads ``t_h + 1``.
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa.errors import ErrorCode
from isa.table import (BY_MNEMONIC, INSTRUCTIONS, MAX_REPEAT_DEPTH, STRIDE_SLOTS, WORD_BITS, CountMode,
                       ScaleMode, Space, SrcMode, Unit, clog2)
from isa.timing import BRANCH_PENALTY, TOKEN_MAX

from .decode import Decoder
from .queue import UNITS, EntrySignature, entry_layout
from .unit import ERR_BITS, RowReadSignature, RowWriteSignature, TokenSignature

__all__ = ["IssueStage", "QUEUED"]

QUEUED = [u for u in Unit if u is not Unit.SCALAR]
assert BRANCH_PENALTY == 1


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
               "spm_rd": Out(RowReadSignature(aw, 8 * C)), "acc_rd": Out(RowReadSignature(aw, 32 * C)),
               "spm_wr": Out(RowWriteSignature(aw, 8 * C, C)), "acc_wr": Out(RowWriteSignature(aw, 32 * C, C))}
        for u in QUEUED:
            sig[f"q_{u.name.lower()}"] = Out(EntrySignature(cfg))
            sig[f"t_{u.name.lower()}"] = In(TokenSignature())
        super().__init__(sig)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        C = cfg.cols
        m.submodules.dec = dec = Decoder(cfg)
        m.d.comb += dec.word.eq(self.word)
        w = dec.view
        regs = Array([Signal(signed(32), name=f"r{i}") for i in range(cfg.scalar_regs)])

        def reg(idx):
            return Mux(idx == 0, 0, regs[idx])

        lcnt = Array([Signal(32, name=f"lcnt{i}") for i in range(cfg.loop_regs)])
        lstr = Array([Signal(data.ArrayLayout(signed(32), STRIDE_SLOTS), name=f"lstr{i}")
                      for i in range(cfg.loop_regs)])

        pc = self.pc
        bubble = Signal()
        running, done, error = self.running, self.done, self.error
        m.d.comb += self.reg_rdata.eq(reg(self.reg_addr))
        for i in range(1, cfg.scalar_regs):   # explicit decoders, not an indexed assignment
            with m.If(self.reg_we & ~running & (self.reg_addr == i)):
                m.d.sync += regs[i].eq(self.reg_wdata)

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
                    for e in range(3):
                        inc = inc + (t.sig_valid[e] & t.sig_mask[e][c])
                if c == Unit.SCALAR:
                    dec_ = scalar_take & scalar_wait[p]
                else:
                    t = toks[Unit(c)]
                    dec_ = t.take & t.wait[p]
                nxt = Signal(range(TOKEN_MAX + 8), name=f"toknext_{p}_{c}")
                m.d.comb += nxt.eq(tok[p][c] + inc - dec_)
                with m.If(nxt > TOKEN_MAX):
                    m.d.comb += overflow.eq(1)
                with m.If(running):
                    m.d.sync += tok[p][c].eq(nxt)

        def tokens_ok(c, wait):
            ok = Const(1)
            for p in range(UNITS):
                ok = ok & (~wait[p] | (tok[p][c] != 0))
            return ok

        for u in QUEUED:
            m.d.comb += [toks[u].ok.eq(tokens_ok(u, toks[u].wait)), toks[u].en.eq(running)]

        # ---- what the head instruction needs ---------------------------------------------------
        busy = {u: toks[u].busy for u in QUEUED}
        queues = {u: getattr(self, f"q_{u.name.lower()}") for u in QUEUED}
        is_ = dec.is_
        smem = w.smem
        srow = Signal(signed(33))
        m.d.comb += srow.eq(smem.addr + reg(smem.xaddr))
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
        alu = w.alu
        a, b = reg(alu.rs1), reg(alu.rs2)
        res = Signal(signed(32))
        sh = b[:5]
        ops = {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b, "or": a | b, "xor": a ^ b,
               "sll": a.as_unsigned() << sh, "srl": a.as_unsigned() >> sh, "sra": a >> sh, "slt": a < b}
        for name, val in ops.items():
            with m.If(is_(name)):
                m.d.comb += res.eq(val)
        with m.If(is_("seti")):
            m.d.comb += res.eq(w.seti.imm)
        with m.If(is_("addi")):
            m.d.comb += res.eq(reg(w.alui.rs1) + w.alui.imm)
        # sld: a lane of the row, read combinationally
        lane = smem.lane
        spm_l = data.View(data.ArrayLayout(signed(8), C), self.spm_rd.data)
        acc_l = data.View(data.ArrayLayout(signed(32), C), self.acc_rd.data)
        with m.If(is_("sld")):
            m.d.comb += res.eq(Mux(smem.space == Space.ACC, acc_l[lane], spm_l[lane]))
        writes_rd = is_("seti") | is_("addi") | is_("sld") | Const(0)
        for name in ops:
            writes_rd = writes_rd | is_(name)
        rd = Mux(is_("addi"), w.alui.rd, Mux(is_("sld"), smem.rd, w.alu.rd))   # rd sits at the same bits
        for i in range(1, cfg.scalar_regs):
            with m.If(issue & writes_rd & (rd == i)):
                m.d.sync += regs[i].eq(res)
        # sst: saturate to int8 for SPM
        v = reg(smem.rd)
        sat = Mux(v > 127, 127, Mux(v < -128, -128, v))
        m.d.comb += [self.spm_wr.addr.eq(srow), self.acc_wr.addr.eq(srow),
                     self.spm_wr.data.eq(Cat(*[sat[:8]] * C)), self.acc_wr.data.eq(Cat(*[v] * C))]
        with m.If(issue & is_("sst")):
            with m.If(smem.space == Space.ACC):
                m.d.comb += self.acc_wr.en.eq(1 << lane)
            with m.Else():
                m.d.comb += self.spm_wr.en.eq(1 << lane)
        m.d.comb += [scalar_take.eq(issue & is_smem), scalar_sig.eq(Mux(issue & is_smem, smem.signal, 0))]
        # loop registers
        lp = w.loop
        for i in range(cfg.loop_regs):
            with m.If(issue & is_("loop") & (lp.lr == i)):
                m.d.sync += [lcnt[i].eq(Mux(lp.cmode == CountMode.REG, reg(lp.count[:clog2(cfg.scalar_regs)]),
                                            lp.count)),
                             lstr[i][0].eq(lp.s0), lstr[i][1].eq(lp.s1), lstr[i][2].eq(lp.s2)]
        # branches
        br = w.branch
        ra, rb = reg(br.rs1), reg(br.rs2)
        taken = is_("jmp") | (is_("beq") & (ra == rb)) | (is_("bne") & (ra != rb)) | \
            (is_("blt") & (ra < rb)) | (is_("bge") & (ra >= rb))
        target = Mux(is_("jmp"), w.jump.target, br.target)

        # ---- queue entries -----------------------------------------------------------------------
        entry = Signal(entry_layout(cfg))
        hdr = w.dma
        m.d.comb += [entry.word.eq(self.word), entry.pc.eq(pc), entry.q.eq(self.cycles), entry.depth.eq(hdr.rep_depth)]
        for j in range(MAX_REPEAT_DEPTH):
            li = (hdr.rep_base + j)[:clog2(cfg.loop_regs)]
            m.d.comb += entry.cnt[j].eq(lcnt[li])
            for k in range(STRIDE_SLOTS):
                m.d.comb += entry.stride[j][k].eq(lstr[li][k])
        for ins in INSTRUCTIONS:
            if not ins.queued:
                continue
            with m.If(dec.opcode == ins.opcode):
                f = getattr(w, ins.format)
                for k, name in enumerate(ins.slots):
                    m.d.comb += entry.base[k].eq(getattr(f, name) + reg(getattr(f, "x" + name)))
                if ins.format == "vbin":
                    m.d.comb += entry.sval.eq(Mux(f.bmode == SrcMode.REG, reg(f.b[:clog2(cfg.scalar_regs)]), f.b))
                if ins.format == "vreq":
                    m.d.comb += entry.sval.eq(Mux(f.smode == ScaleMode.REG,
                                                  reg(f.scale[:clog2(cfg.scalar_regs)]), f.scale))
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
            for p in range(UNITS):
                for c in range(UNITS):
                    m.d.sync += tok[p][c].eq(0)
            for i in range(cfg.loop_regs):
                m.d.sync += [lcnt[i].eq(0), lstr[i].eq(0)]
        return m

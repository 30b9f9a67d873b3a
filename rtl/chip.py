"""Tops: ``Chip(cfg)`` (issue stage, six units, SPM/ACC/instruction memories, host and DRAM ports,
link ports) and ``Ring(cfg, n)`` (n chips, port 0 of chip i joined to port 1 of chip i+1 mod n)."""

from __future__ import annotations

from amaranth import Module, ResetInserter, Signal, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from isa.ints import clog2
from isa.table import LINK_UNITS, WORD_BITS, Unit

from .dma import DmaLoad, DmaStore, DramSignature
from .issue import IssueStage
from .link import LinkRx, LinkSignature, LinkTx
from .mem import RowMemory
from .mxu import MxuUnit
from .queue import INDEX_BITS
from .unit import ACC_BITS, ERR_BITS, RETIRE_SLOTS, SPM_BITS
from .vpu import VpuUnit

__all__ = ["HostSignature", "TraceSignature", "Chip", "Ring", "TRACE_LANES", "RETIRE_LANES", "MEMORY_PORTS",
           "memory_ports"]

#: start lanes of the trace port: one per unit (``isa.table.Unit``)
TRACE_LANES = len(Unit)
#: retire lanes: one per unit, plus lane 7 for the MXU's second retire slot (mm/mma; lane 3 is lw)
RETIRE_LANES = len(Unit) + 1
#: (write ports, registered read ports, combinational read ports) of SPM and ACC (``Chip.elaborate``
#: checks that it builds these; ``memory_ports`` those of a chip with idle links)
MEMORY_PORTS = {"spm": (4, 6, 0), "acc": (5, 5, 0)}
#: the link receiver's write port and the link transmitter's read port of each memory, which a
#: chip with idle links does not build
LINK_PORTS = (1, 1, 0)


def memory_ports(idle_links: bool = False) -> dict[str, tuple[int, int, int]]:
    """``MEMORY_PORTS`` of ``Chip(..., idle_links=idle_links)`` (the FPGA fit model counts with them)."""
    if not idle_links:
        return dict(MEMORY_PORTS)
    return {k: tuple(n - d for n, d in zip(v, LINK_PORTS)) for k, v in MEMORY_PORTS.items()}


def HostSignature(cfg) -> wiring.Signature:
    """Host -> chip control and status (host's side).

    start Out(1)                        pulse: run the loaded program from pc 0
    busy In(1), done In(1)              running; finished (halt or error) since the last start
    error In(4)                         ``isa.errors.ErrorCode`` of the finished run
    cycles In(32)                       cycles of the run (halt issue cycle + 1)
    prog_len Out(pc+1)                  instructions loaded
    imem_we Out(1), imem_addr Out(pc), imem_data Out(192)     program load, one word per cycle
    reg_we Out(1), reg_addr Out(sreg), reg_wdata Out(32)      scalar argument registers (while idle)
    reg_rdata In(32)                    scalar register ``reg_addr``
    """
    pcw = clog2(cfg.imem_words)
    return wiring.Signature({
        "start": Out(1), "busy": In(1), "done": In(1), "error": In(ERR_BITS), "cycles": In(32),
        "prog_len": Out(pcw + 1), "imem_we": Out(1), "imem_addr": Out(pcw), "imem_data": Out(WORD_BITS),
        "reg_we": Out(1), "reg_addr": Out(clog2(cfg.scalar_regs)), "reg_wdata": Out(32), "reg_rdata": In(32)})


def TraceSignature(cfg) -> wiring.Signature:
    """Chip -> monitor: what happens in this cycle, for a per-instruction trace (chip's side).

    Every field is 0 while the chip is not running.

    cycle        Out(32)                       the current cycle t (0 = first cycle after start)
    issue        Out(1), issue_pc Out(pc)      an instruction issues at t (any unit)
    start        Out(7)                        bit u: an instance of unit u starts at t (scalar
                                               instructions: bit 0, at their issue cycle)
    start_pc     Out(ArrayLayout(pc, 7)), start_index Out(ArrayLayout(32, 7))
                                               its pc and index in its loop nest (0 .. T-1)
    start_issue  Out(ArrayLayout(32, 7))       the cycle its instruction issued
    retire       Out(8)                        lane l: an instance retires at t (its cycle ``r``);
                                               lane u < 7 is unit u, lane 7 the MXU's mm/mma
                                               (lane 3 its lw): both may retire in one cycle
    retire_pc    Out(ArrayLayout(pc, 8)), retire_index Out(ArrayLayout(32, 8))
    Zero-trip entries (no instance) appear on neither start nor retire, as in the simulator's trace.
    """
    pcw = clog2(cfg.imem_words)
    return wiring.Signature({
        "cycle": Out(32), "issue": Out(1), "issue_pc": Out(pcw),
        "start": Out(TRACE_LANES), "start_pc": Out(data.ArrayLayout(pcw, TRACE_LANES)),
        "start_index": Out(data.ArrayLayout(INDEX_BITS, TRACE_LANES)),
        "start_issue": Out(data.ArrayLayout(32, TRACE_LANES)),
        "retire": Out(RETIRE_LANES), "retire_pc": Out(data.ArrayLayout(pcw, RETIRE_LANES)),
        "retire_index": Out(data.ArrayLayout(INDEX_BITS, RETIRE_LANES))})


class Chip(wiring.Component):
    """One tetrachip.

    Ports:
      host  In(HostSignature(cfg))                  control/status registers, program load
      dram  Out(DramSignature(cfg))                 DRAM read and write channels
      ltx   Out(LinkSignature(cfg)).array(links)    link transmit channel of each port
      lrx   In(LinkSignature(cfg)).array(links)     link receive channel of each port
      trace Out(TraceSignature(cfg))                instances issuing, starting and retiring (co-simulation)
    Memories (for test benches): ``spm``, ``acc`` (``rtl.mem.RowMemory``: ``peek``/``poke`` a row),
    ``imem`` (``amaranth.lib.memory.Memory``).
    ``mac``: how the array's products are built, "dsp" | "lut" | "dsp:N" (``rtl/mac.py``); ``mem``:
    how SPM and ACC are built, "flat" (one memory with every port), "lvt" (banks of one write and
    one read port and a live-value table, which FPGAs can map to RAM) or "banked" (the config's
    banks of rows, a copy per read port, one writer per bank at a time): ``rtl/mem.py``. They are
    build options: cycles and results are the same for every value (for "banked", in programs that
    do not race at the config's banks, ``cfg.spm_bank_rows``/``cfg.acc_bank_rows``).
    ``idle_links``: the link ports lead nowhere (the FPGA top: ``lrx`` never valid, no ``ltx``
    credit returned, ``ltx`` data unread). The receiver then never takes a flit, so it is built
    without its receive buffers and its SPM/ACC write ports, and the transmitter without its
    SPM/ACC read ports (its flits carry 0): the same cycles, memories and errors as the chip with
    those ports held idle, in fewer cells (``memory_ports``). A config with ``links = 0`` has no
    link ports and is built without the link units and their queues (the issue stage meets
    link.send/link.recv as illegal instructions, as the simulator does).
    """

    def __init__(self, cfg, mac: str = "dsp", mem: str = "flat", idle_links: bool = False):
        self.cfg, self.mac, self.mem = cfg, mac, mem      # mac: how the array multiplies (rtl/mac.py)
        self.idle_links = idle_links
        super().__init__({"host": In(HostSignature(cfg)), "dram": Out(DramSignature(cfg)),
                          "ltx": Out(LinkSignature(cfg)).array(cfg.links),
                          "lrx": In(LinkSignature(cfg)).array(cfg.links),
                          "trace": Out(TraceSignature(cfg))})
        C = cfg.cols
        self.spm = RowMemory("spm", SPM_BITS, C, cfg.spm_rows, impl=mem, bank_rows=cfg.spm_bank_rows)
        self.acc = RowMemory("acc", ACC_BITS, C, cfg.acc_rows, impl=mem, bank_rows=cfg.acc_bank_rows)
        self.imem = memory.Memory(shape=unsigned(WORD_BITS), depth=cfg.imem_words, init=[])

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.spm, m.submodules.acc, m.submodules.imem = self.spm, self.acc, self.imem
        m.submodules.issue = iss = IssueStage(cfg)
        h = self.host
        start = Signal()
        m.d.comb += start.eq(h.start & ~iss.running)
        units = {Unit.LOAD: DmaLoad(cfg), Unit.STORE: DmaStore(cfg), Unit.MXU: MxuUnit(cfg, mac=self.mac),
                 Unit.VPU: VpuUnit(cfg)}
        if cfg.links:
            units.update({Unit.LTX: LinkTx(cfg), Unit.LRX: LinkRx(cfg, idle=self.idle_links)})
        else:
            # no link ports (``cfg.links == 0``): link.send/link.recv are illegal (their port field
            # has no legal value), so the issue stage pushes nothing to these queues and no token,
            # error or busy unit comes from them
            for u in LINK_UNITS:
                q, t = getattr(iss, f"q_{u.name.lower()}"), getattr(iss, f"t_{u.name.lower()}")
                m.d.comb += [q.ready.eq(1), t.wait.eq(0), t.take.eq(0), t.sig_valid.eq(0), t.sig_mask.eq(0),
                             t.busy.eq(0), t.err.eq(0), t.err_code.eq(0)]
        for u, unit in units.items():
            # every unit starts a run from reset (queues, pipelines, weights, LUT, credits)
            m.submodules[u.name.lower()] = ResetInserter({"sync": start})(unit)
            wiring.connect(m, getattr(iss, f"q_{u.name.lower()}"),
                           unit.push)
            wiring.connect(m, getattr(iss, f"t_{u.name.lower()}"), unit.tok)
        # trace port
        tr, run = self.trace, iss.running
        m.d.comb += [tr.cycle.eq(iss.cycles), tr.issue.eq(run & iss.issued), tr.issue_pc.eq(iss.pc),
                     tr.start[0].eq(run & iss.issued_scalar), tr.start_pc[0].eq(iss.pc),
                     tr.start_issue[0].eq(iss.cycles),
                     tr.retire[0].eq(run & iss.issued_scalar), tr.retire_pc[0].eq(iss.pc)]
        for u, unit in units.items():
            ut = unit.trace
            m.d.comb += [tr.start[u].eq(run & ut.start), tr.start_pc[u].eq(ut.start_pc),
                         tr.start_index[u].eq(ut.start_index), tr.start_issue[u].eq(ut.start_issue)]
            for j in range(RETIRE_SLOTS):
                lane = u if j == 0 else (TRACE_LANES if u == Unit.MXU else None)
                if lane is None:
                    continue
                m.d.comb += [tr.retire[lane].eq(run & ut.retire[j]), tr.retire_pc[lane].eq(ut.retire_pc[j]),
                             tr.retire_index[lane].eq(ut.retire_index[j])]
        # host
        imem_w = self.imem.write_port()
        imem_r = self.imem.read_port()
        m.d.comb += [imem_w.en.eq(h.imem_we), imem_w.addr.eq(h.imem_addr), imem_w.data.eq(h.imem_data),
                     imem_r.addr.eq(iss.fetch_addr), imem_r.en.eq(iss.fetch_en), iss.word.eq(imem_r.data),
                     iss.prog_len.eq(h.prog_len), iss.start.eq(h.start),
                     iss.word0_we.eq(h.imem_we & (h.imem_addr == 0)), iss.word0_data.eq(h.imem_data),
                     iss.reg_we.eq(h.reg_we), iss.reg_addr.eq(h.reg_addr), iss.reg_wdata.eq(h.reg_wdata),
                     h.reg_rdata.eq(iss.reg_rdata), h.busy.eq(iss.running), h.done.eq(iss.done),
                     h.error.eq(iss.error), h.cycles.eq(iss.cycles)]
        # DRAM: the load unit owns the read channel, the store unit the write channel
        ld, st = units[Unit.LOAD], units[Unit.STORE]
        d = self.dram
        m.d.comb += [d.rd_valid.eq(ld.dram.rd_valid), d.rd_addr.eq(ld.dram.rd_addr),
                     ld.dram.rd_resp_valid.eq(d.rd_resp_valid), ld.dram.rd_resp_data.eq(d.rd_resp_data),
                     d.wr_valid.eq(st.dram.wr_valid), d.wr_addr.eq(st.dram.wr_addr), d.wr_data.eq(st.dram.wr_data),
                     d.wr_strb.eq(st.dram.wr_strb), st.dram.wr_resp_valid.eq(d.wr_resp_valid)]
        # links
        for p in range(cfg.links):
            wiring.connect(m, wiring.flipped(self.ltx[p]), units[Unit.LTX].tx[p])
            wiring.connect(m, wiring.flipped(self.lrx[p]), units[Unit.LRX].rx[p])
        # memory ports: every read is registered (data the next cycle); the scalar unit's sst
        # writes one lane
        mx, vp = units[Unit.MXU], units[Unit.VPU]
        lt, lr = units.get(Unit.LTX), units.get(Unit.LRX)
        # (with idle links: no transmitter reads, no receiver writes; the ports stay, unconnected;
        # without link ports, no link units)
        def linked(unit, port):
            return () if self.idle_links or unit is None else (getattr(unit, port),)

        for rd in (mx.spm_w, mx.spm_x, vp.spm_a, vp.spm_b, st.spm_rd, *linked(lt, "spm_rd")):
            self._read(m, self.spm, rd, "sync")
        # sld reads through the store unit's ports (DmaStore: the contract's shared read port)
        m.d.comb += [st.sld_row.eq(iss.sld_row), iss.sld_spm.eq(st.spm_rd.data), iss.sld_acc.eq(st.acc_rd.data)]
        # (sst's enables come from the issue decision, late in the cycle: a fallback port, rtl/mem.py)
        for wr in (ld.spm_wr, vp.spm_wr, *linked(lr, "spm_wr"), iss.spm_wr):
            self._write(m, self.spm, wr, fallback=wr is iss.spm_wr)
        acc_mxu_w = self._write(m, self.acc, mx.acc_wr)
        self._read(m, self.acc, mx.acc_rd, "sync", transparent_for=(acc_mxu_w,))
        for rd in (vp.acc_a, vp.acc_b, st.acc_rd, *linked(lt, "acc_rd")):
            self._read(m, self.acc, rd, "sync")
        for wr in (ld.acc_wr, vp.acc_wr, *linked(lr, "acc_wr"), iss.acc_wr):
            self._write(m, self.acc, wr, fallback=wr is iss.acc_wr)
        ports = memory_ports(self.idle_links or not cfg.links)
        for name, mem in (("spm", self.spm), ("acc", self.acc)):
            built = (len(mem.writes), sum(r.domain == "sync" for r in mem.reads),
                     sum(r.domain == "comb" for r in mem.reads))
            assert built == ports[name], f"{name} ports {built} != memory_ports {ports[name]}"
        return m

    @staticmethod
    def _write(m, mem, port, fallback=False):
        wp = mem.write_port(fallback=fallback)
        aw = len(wp.addr)
        m.d.comb += [wp.addr.eq(port.addr[:aw]), wp.data.eq(port.data), wp.en.eq(port.en)]
        return wp

    @staticmethod
    def _read(m, mem, port, domain, transparent_for=()):
        rp = mem.read_port(domain=domain, transparent_for=transparent_for)
        aw = len(rp.addr)
        m.d.comb += [rp.addr.eq(port.addr[:aw]), port.data.eq(rp.data)]
        return rp


class Ring(wiring.Component):
    """``n`` chips in a ring: port 0 of chip i is wired to port 1 of chip (i+1) mod n.

    Ports: ``host{i}`` In(HostSignature), ``dram{i}`` Out(DramSignature), ``trace{i}``
    Out(TraceSignature) for each chip i.
    Chips: ``self.chips``, each ``Chip(cfg, mac, mem)``.
    """

    def __init__(self, cfg, n: int, mac: str = "dsp", mem: str = "flat"):
        if cfg.links < 2 and n > 1:
            raise ValueError(f"a ring needs 2 link ports per chip; config {cfg.name!r} has {cfg.links}")
        self.cfg, self.n = cfg, n
        sig = {}
        for i in range(n):
            sig[f"host{i}"] = In(HostSignature(cfg))
            sig[f"dram{i}"] = Out(DramSignature(cfg))
            sig[f"trace{i}"] = Out(TraceSignature(cfg))
        super().__init__(sig)
        self.chips = [Chip(cfg, mac=mac, mem=mem) for _ in range(n)]

    def elaborate(self, platform):
        m = Module()
        for i, chip in enumerate(self.chips):
            m.submodules[f"chip{i}"] = chip
            wiring.connect(m, wiring.flipped(getattr(self, f"host{i}")), chip.host)
            wiring.connect(m, wiring.flipped(getattr(self, f"dram{i}")), chip.dram)
            wiring.connect(m, wiring.flipped(getattr(self, f"trace{i}")), chip.trace)
        n = self.n
        for i, chip in enumerate(self.chips):
            nxt = self.chips[(i + 1) % n]
            if n == 1:
                # one chip: its ports loop back to each other
                wiring.connect(m, chip.ltx[0], chip.lrx[1])
                wiring.connect(m, chip.ltx[1], chip.lrx[0])
                break
            wiring.connect(m, chip.ltx[0], nxt.lrx[1])
            wiring.connect(m, nxt.ltx[1], chip.lrx[0])
        for chip in self.chips:
            for p in range(2, self.cfg.links):       # ports a ring does not use: idle
                m.d.comb += [chip.lrx[p].valid.eq(0), chip.ltx[p].credit.eq(0)]
        return m

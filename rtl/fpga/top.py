"""The FPGA top: one ``Chip``, its DRAM in block RAM, and a UART host link.

``FpgaTop(cfg, ...)`` has two pins besides the clock domain ``sync``: ``rx`` (In) and ``tx`` (Out),
8N1 at ``baud``. The byte protocol (``docs/fpga.md``; little-endian fields) drives the chip's host
interface and the DRAM while the chip is idle:

=========  ======================  ===============  ===================================================
command    arguments               reply            effect
=========  ======================  ===============  ===================================================
``W``      addr u32, n u16, n B    ``K``            write n DRAM bytes from addr
``R``      addr u32, n u16         n bytes          read n DRAM bytes from addr
``I``      index u16, word 24 B    ``K``            write instruction word ``index`` (bit 0 first)
``L``      len u16                 ``K``            set the program length (instructions)
``A``      reg u8, value u32       ``K``            write scalar register ``reg``
``Q``      reg u8                  u32              read scalar register ``reg``
``G``      --                      ``K``            start the program at pc 0
``S``      --                      status u8,       status: bit 0 busy, bit 1 done, bits 4-7 error
                                   cycles u32       code; cycles of the last run
=========  ======================  ===============  ===================================================

An unknown command byte is ignored. DRAM is ``dram_bytes`` of block RAM (a power of two, at most
the config's ``dram_bytes``); the chip's addresses wrap at that size. It keeps the contract's
promise: one beat per cycle per channel, responses ``dram_latency`` cycles after the request.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from isa.ints import clog2
from isa.table import WORD_BITS

from ..chip import Chip

__all__ = ["FpgaTop", "HostCore", "UartRx", "UartTx", "BramDram", "HostLink", "COMMANDS"]

#: command byte -> argument bytes before the command runs
COMMANDS = {ord("W"): 6, ord("R"): 6, ord("I"): 26, ord("L"): 2, ord("A"): 5, ord("Q"): 1,
            ord("G"): 0, ord("S"): 0}
ARG_BYTES = max(COMMANDS.values())
ACK = ord("K")


class UartRx(wiring.Component):
    """8N1 receiver. rx In(1); data Out(8), valid Out(1) (one-cycle pulse per byte)."""

    def __init__(self, divisor: int):
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "data": Out(8), "valid": Out(1)})

    def elaborate(self, platform):
        m = Module()
        D = self.divisor
        rx = Signal(init=1)
        rx0 = Signal(init=1)
        m.d.sync += [rx0.eq(self.rx), rx.eq(rx0)]          # synchronizer
        timer = Signal(range(2 * D + 1))
        bit = Signal(range(10))
        sh = Signal(8)
        m.d.sync += self.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    m.d.sync += [timer.eq(D + D // 2 - 1), bit.eq(0)]
                    m.next = "BITS"
            with m.State("BITS"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [sh.eq(Cat(sh[1:], rx)), bit.eq(bit + 1), timer.eq(D - 1)]
                    with m.If(bit == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [self.data.eq(sh), self.valid.eq(rx)]
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """8N1 transmitter. data In(8), valid In(1) (taken when ready), ready Out(1); tx Out(1)."""

    def __init__(self, divisor: int):
        self.divisor = divisor
        super().__init__({"data": In(8), "valid": In(1), "ready": Out(1), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        D = self.divisor
        sh = Signal(10, init=0x3FF)
        left = Signal(range(11))
        timer = Signal(range(D))
        m.d.comb += [self.ready.eq(left == 0), self.tx.eq(sh[0])]
        with m.If(left == 0):
            with m.If(self.valid):
                m.d.sync += [sh.eq(Cat(Const(0, 1), self.data, Const(1, 1))), left.eq(10), timer.eq(D - 1)]
        with m.Elif(timer != 0):
            m.d.sync += timer.eq(timer - 1)
        with m.Else():
            m.d.sync += [sh.eq(Cat(sh[1:], Const(1, 1))), left.eq(left - 1), timer.eq(D - 1)]
        return m


class BramDram(wiring.Component):
    """DRAM of ``size`` bytes in ``B`` byte-wide banks (byte a in bank a % B), one beat per cycle.

    dram  In(DramSignature(cfg))  the chip's port (any byte alignment)
    h_addr In(32), h_we In(1), h_wdata In(8), h_rdata Out(8) (next cycle)   host byte port, used
    while ``host`` is 1 (the chip idle)
    host In(1)
    """

    def __init__(self, cfg, size: int):
        from ..dma import DramSignature
        self.cfg, self.size = cfg, size
        super().__init__({"dram": In(DramSignature(cfg)), "host": In(1), "h_addr": In(32), "h_we": In(1),
                          "h_wdata": In(8), "h_rdata": Out(8)})

    def elaborate(self, platform):
        m = Module()
        cfg, B = self.cfg, self.cfg.dma_beat_bytes
        depth = self.size // B
        rw = clog2(depth)
        lb = clog2(B)
        d = self.dram

        def split(addr):
            return addr[:lb] if lb else Const(0, 1), addr[lb:lb + rw]

        r_lo, r_hi = split(d.rd_addr)
        w_lo, w_hi = split(d.wr_addr)
        h_lo, h_hi = split(self.h_addr)
        r_lo1 = Signal.like(r_lo)
        h_lo1 = Signal.like(h_lo)
        m.d.sync += [r_lo1.eq(r_lo), h_lo1.eq(h_lo)]
        banks = []
        for b in range(B):
            mem = memory.Memory(shape=8, depth=depth, init=[])
            m.submodules[f"bank{b}"] = mem
            rp, wp = mem.read_port(), mem.write_port()
            lane_w = (b + B - w_lo)[:lb] if lb else Const(0, 1)     # the write lane this bank takes
            m.d.comb += [
                rp.addr.eq(Mux(self.host, h_hi + (b < h_lo), r_hi + (b < r_lo))),
                wp.addr.eq(Mux(self.host, h_hi + (b < h_lo), w_hi + (b < w_lo))),
                wp.data.eq(Mux(self.host, self.h_wdata, d.wr_data.word_select(lane_w, 8))),
                wp.en.eq(Mux(self.host, self.h_we & (h_lo == b), d.wr_valid & d.wr_strb.bit_select(lane_w, 1))),
            ]
            banks.append(rp.data)
        bank_data = Cat(*banks)
        beat = Cat(*[bank_data.word_select((r_lo1 + i)[:lb] if lb else Const(0, 1), 8) for i in range(B)])
        m.d.comb += self.h_rdata.eq(bank_data.word_select(h_lo1, 8))
        # the rest of the latency: dram_latency - 1 more stages after the read cycle
        v, data = Signal(), Signal(8 * B)
        m.d.sync += v.eq(d.rd_valid)
        m.d.comb += data.eq(beat)
        for i in range(cfg.dram_latency - 1):
            nv, nd = Signal(name=f"rv{i}"), Signal(8 * B, name=f"rd{i}")
            m.d.sync += [nv.eq(v), nd.eq(data)]
            v, data = nv, nd
        m.d.comb += [d.rd_resp_valid.eq(v), d.rd_resp_data.eq(data)]
        w = d.wr_valid
        for i in range(cfg.dram_latency):
            nw = Signal(name=f"wv{i}")
            m.d.sync += nw.eq(w)
            w = nw
        m.d.comb += d.wr_resp_valid.eq(w)
        return m


class HostLink(wiring.Component):
    """The byte protocol (module docstring) between a byte stream and the chip's host interface.

    rx_data In(8), rx_valid In(1)            bytes from the host
    tx_data Out(8), tx_valid Out(1), tx_ready In(1)   bytes to the host
    host Out(HostSignature(cfg))             the chip's host interface
    m_addr Out(32), m_we Out(1), m_wdata Out(8), m_rdata In(8)   DRAM byte port (data next cycle)
    """

    def __init__(self, cfg):
        from ..chip import HostSignature
        self.cfg = cfg
        super().__init__({"rx_data": In(8), "rx_valid": In(1), "tx_data": Out(8), "tx_valid": Out(1),
                          "tx_ready": In(1), "host": Out(HostSignature(cfg)),
                          "m_addr": Out(32), "m_we": Out(1), "m_wdata": Out(8), "m_rdata": In(8)})

    def elaborate(self, platform):
        m = Module()
        h = self.host
        NB = ARG_BYTES * 8
        cmd = Signal(8)
        args = Signal(NB)
        need = Signal(range(ARG_BYTES + 1))
        addr = Signal(32)
        n = Signal(16)
        out = Signal(40)
        out_n = Signal(range(6))
        prog_len = Signal.like(h.prog_len)

        def arg(k, off, width):         # field at byte ``off`` of a command with k argument bytes
            return args[NB - 8 * k + 8 * off:][:width]

        def reply(value, nbytes):
            return [out.eq(value), out_n.eq(nbytes)]

        m.d.comb += [h.prog_len.eq(prog_len), self.tx_data.eq(out[:8]), self.tx_valid.eq(out_n != 0),
                     self.m_addr.eq(addr)]
        with m.If(self.tx_valid & self.tx_ready):
            m.d.sync += [out.eq(out >> 8), out_n.eq(out_n - 1)]
        with m.FSM():
            with m.State("CMD"):
                with m.If(self.rx_valid & (out_n == 0)):
                    m.d.sync += cmd.eq(self.rx_data)
                    with m.Switch(self.rx_data):
                        for c, k in COMMANDS.items():
                            with m.Case(c):
                                m.d.sync += need.eq(k)
                                m.next = "ARGS" if k else "EXEC"
            with m.State("ARGS"):
                with m.If(self.rx_valid):
                    m.d.sync += [args.eq(Cat(args[8:], self.rx_data)), need.eq(need - 1)]
                    with m.If(need == 1):
                        m.next = "EXEC"
            with m.State("EXEC"):
                m.next = "CMD"
                with m.Switch(cmd):
                    with m.Case(ord("W")):
                        m.d.sync += [addr.eq(arg(6, 0, 32)), n.eq(arg(6, 4, 16))]
                        m.next = "WDATA"
                    with m.Case(ord("R")):
                        m.d.sync += [addr.eq(arg(6, 0, 32)), n.eq(arg(6, 4, 16))]
                        m.next = "RADDR"
                    with m.Case(ord("I")):
                        m.d.comb += [h.imem_we.eq(1), h.imem_addr.eq(arg(26, 0, 16)),
                                     h.imem_data.eq(arg(26, 2, WORD_BITS))]
                        m.d.sync += reply(ACK, 1)
                    with m.Case(ord("L")):
                        m.d.sync += [prog_len.eq(arg(2, 0, 16)), *reply(ACK, 1)]
                    with m.Case(ord("A")):
                        m.d.comb += [h.reg_we.eq(1), h.reg_addr.eq(arg(5, 0, 8)), h.reg_wdata.eq(arg(5, 1, 32))]
                        m.d.sync += reply(ACK, 1)
                    with m.Case(ord("Q")):
                        m.d.comb += h.reg_addr.eq(arg(1, 0, 8))
                        m.d.sync += reply(h.reg_rdata, 4)
                    with m.Case(ord("G")):
                        m.d.comb += h.start.eq(1)
                        m.d.sync += reply(ACK, 1)
                    with m.Case(ord("S")):
                        m.d.sync += reply(Cat(h.busy, h.done, Const(0, 2), h.error, h.cycles), 5)
            with m.State("WDATA"):
                with m.If(n == 0):
                    m.d.sync += reply(ACK, 1)
                    m.next = "CMD"
                with m.Elif(self.rx_valid):
                    m.d.comb += [self.m_we.eq(1), self.m_wdata.eq(self.rx_data)]
                    m.d.sync += [addr.eq(addr + 1), n.eq(n - 1)]
            with m.State("RADDR"):          # the byte at addr is read this cycle
                with m.If(n == 0):
                    m.next = "CMD"
                with m.Elif(out_n == 0):
                    m.next = "RDATA"
            with m.State("RDATA"):
                m.d.sync += [*reply(self.m_rdata, 1), addr.eq(addr + 1), n.eq(n - 1)]
                m.next = "RADDR"
        return m


class HostCore(wiring.Component):
    """Chip + BramDram + HostLink, with the host link's byte stream as ports.

    rx_data In(8), rx_valid In(1); tx_data Out(8), tx_valid Out(1), tx_ready In(1); busy, done Out(1)
    """

    def __init__(self, cfg, *, mac: str = "dsp", mem: str = "lvt", dram_bytes: int = 1 << 14):
        if dram_bytes & (dram_bytes - 1) or dram_bytes < cfg.dma_beat_bytes:
            raise ValueError(f"dram_bytes must be a power of two >= the DMA beat, got {dram_bytes}")
        self.cfg, self.mac, self.mem, self.dram_bytes = cfg, mac, mem, min(dram_bytes, cfg.dram_bytes)
        super().__init__({"rx_data": In(8), "rx_valid": In(1), "tx_data": Out(8), "tx_valid": Out(1),
                          "tx_ready": In(1), "busy": Out(1), "done": Out(1)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        # (its links lead nowhere, below: the chip is built without what they would feed)
        m.submodules.chip = chip = Chip(cfg, mac=self.mac, mem=self.mem, idle_links=True)
        m.submodules.dram = dram = BramDram(cfg, self.dram_bytes)
        m.submodules.link = link = HostLink(cfg)
        wiring.connect(m, link.host, chip.host)
        wiring.connect(m, chip.dram, dram.dram)
        for p in range(cfg.links):        # links idle: nothing received, no credits returned
            m.d.comb += [chip.lrx[p].valid.eq(0), chip.ltx[p].credit.eq(0)]
        m.d.comb += [link.rx_data.eq(self.rx_data), link.rx_valid.eq(self.rx_valid),
                     self.tx_data.eq(link.tx_data), self.tx_valid.eq(link.tx_valid), link.tx_ready.eq(self.tx_ready),
                     dram.host.eq(~chip.host.busy), dram.h_addr.eq(link.m_addr), dram.h_we.eq(link.m_we),
                     dram.h_wdata.eq(link.m_wdata), link.m_rdata.eq(dram.h_rdata),
                     self.busy.eq(chip.host.busy), self.done.eq(chip.host.done)]
        return m


class FpgaTop(wiring.Component):
    """HostCore + UART. rx In(1), tx Out(1); ``busy`` Out(1), ``done`` Out(1) for LEDs.

    ``mac``: the array's multipliers (``rtl/mac.py``); ``mem``: how SPM and ACC are built
    (``rtl/mem.py``: "lvt", block and LUT RAM banks, by default); ``dram_bytes``: DRAM in block RAM
    (capped at the config's); ``clk_hz``/``baud``: the UART divisor.
    """

    def __init__(self, cfg, *, mac: str = "dsp", mem: str = "lvt", dram_bytes: int = 1 << 14, clk_hz: float = 25e6,
                 baud: int = 115200):
        self.core = HostCore(cfg, mac=mac, mem=mem, dram_bytes=dram_bytes)
        self.cfg, self.mac, self.mem, self.dram_bytes = cfg, mac, mem, self.core.dram_bytes
        self.divisor = max(2, round(clk_hz / baud))
        super().__init__({"rx": In(1, init=1), "tx": Out(1), "busy": Out(1), "done": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.urx = urx = UartRx(self.divisor)
        m.submodules.utx = utx = UartTx(self.divisor)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx),
                     core.rx_data.eq(urx.data), core.rx_valid.eq(urx.valid),
                     utx.data.eq(core.tx_data), utx.valid.eq(core.tx_valid), core.tx_ready.eq(utx.ready),
                     self.busy.eq(core.busy), self.done.eq(core.done)]
        return m

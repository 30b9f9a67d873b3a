"""The FPGA top's host link: the byte protocol (rtl/fpga/protocol.py) loads examples/gemm_tiled.s and
its operands into HostCore(tiny) (chip + DRAM in block RAM), runs it, and reads C back; the block-RAM
DRAM alone against a byte model (beats at any alignment, strobes, reads right after a write's
response, the host port); the UART pair loops bytes back; the fit model refuses configs too big for
a device."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isa import ChipConfig, assemble_file
from isa import semantics as sem
from rtl.fpga import protocol as P
from rtl.fpga.devices import DEVICES
from rtl.fpga.fit import FitError, check, estimate
from rtl.fpga.top import BramDram, HostCore, UartRx, UartTx
from tests.rtl.rtl_helpers import run

ROOT = Path(__file__).resolve().parents[2]
TINY = ChipConfig.preset("tiny")


class _Host:
    """Sends bytes one every ``gap`` cycles and collects the replies (tx_ready held at 1)."""

    def __init__(self, ctx, dut, gap=4):
        self.ctx, self.dut, self.gap, self.got = ctx, dut, gap, []

    async def tick(self):
        if self.ctx.get(self.dut.tx_valid):
            self.got.append(self.ctx.get(self.dut.tx_data))
        await self.ctx.tick()

    async def send(self, data: bytes, replies: int, limit=100000):
        self.got = []
        for b in data:
            self.ctx.set(self.dut.rx_data, b)
            self.ctx.set(self.dut.rx_valid, 1)
            await self.tick()
            self.ctx.set(self.dut.rx_valid, 0)
            for _ in range(self.gap - 1):
                await self.tick()
        for _ in range(limit):
            if len(self.got) >= replies:
                return bytes(self.got)
            await self.tick()
        raise AssertionError(f"{len(self.got)} of {replies} reply bytes")


def test_host_link_runs_gemm_tiled():
    _gemm_tiled(HostCore(TINY, dram_bytes=1 << 12))


def test_default_board_build_runs_gemm_tiled():
    """The chip ``tetrachip fpga build --config tiny --fpga-mem`` builds: SPM and ACC as banks
    (``rtl.mem.FPGA_IMPL``, no live-value table) at the banked ``--fpga-mem`` depths, and the
    products as ECP5 MULT18X18D blocks with their registers (``--mac auto`` gives every product of
    tiny on the 85k a hard multiplier, ``dsp+reg2``; the blocks as their simulation model)."""
    from rtl.fpga.fit import fpga_build_config
    from rtl.mac import fpga_primitives
    from rtl.mem import FPGA_IMPL
    cfg = fpga_build_config(TINY, FPGA_IMPL)
    assert cfg.spm_bank_rows > 1 and cfg.acc_bank_rows > 1
    with fpga_primitives("ecp5", model=True):
        _gemm_tiled(HostCore(cfg, mac="dsp+reg2", mem=FPGA_IMPL, dram_bytes=1 << 12))


def test_board_build_without_links_runs_gemm_tiled():
    """``tetrachip fpga build --config tiny --fpga-mem --no-links``: the chip without link ports
    (``links = 0``, no link units) behind the same host link."""
    from rtl.fpga.fit import fpga_build_config
    from rtl.mem import FPGA_IMPL
    cfg = fpga_build_config(TINY, FPGA_IMPL, links=False)
    assert cfg.links == 0
    _gemm_tiled(HostCore(cfg, mem=FPGA_IMPL, dram_bytes=1 << 12))


def test_bram_dram_against_a_byte_model():
    """Bursts of write beats (one a cycle, any alignment, random strobes, overlapping), then, from
    the cycle after the last write's response (the earliest a read ordered after it by a token can
    be requested), a burst of reads of the same bytes, each checked ``dram_latency`` cycles later;
    a write beat in the last cycle before ``host`` rises; then the host port reads every byte."""
    cfg, size = TINY, 1 << 9
    B, L = cfg.dma_beat_bytes, cfg.dram_latency
    dut = BramDram(cfg, size)
    d = dut.dram
    rng = np.random.default_rng(11)
    model = bytearray(size)

    async def bench(ctx):
        checked = 0
        for _round in range(12):
            writes = [(int(rng.integers(0, 48)), bytes(rng.integers(0, 256, B, dtype=np.uint8)),
                       int(rng.integers(0, 1 << B))) for _ in range(int(rng.integers(1, 6)))]
            for addr, data, strb in writes:
                ctx.set(d.wr_valid, 1)
                ctx.set(d.wr_addr, addr)
                ctx.set(d.wr_data, int.from_bytes(data, "little"))
                ctx.set(d.wr_strb, strb)
                await ctx.tick()
                for i in range(B):
                    if strb >> i & 1:
                        model[addr + i] = data[i]
            ctx.set(d.wr_valid, 0)
            for _ in range(L - 1):
                await ctx.tick()
            assert ctx.get(d.wr_resp_valid)           # the last write's response
            await ctx.tick()
            reads = [writes[-1][0]] + [int(rng.integers(0, 52)) for _ in range(5)]
            pending = []
            for cycle in range(len(reads) + L + 1):
                if ctx.get(d.rd_resp_valid):
                    addr = pending.pop(0)
                    got = ctx.get(d.rd_resp_data).to_bytes(B, "little")
                    assert got == bytes(model[addr:addr + B]), (addr, got, bytes(model[addr:addr + B]))
                    checked += 1
                if cycle < len(reads):
                    ctx.set(d.rd_valid, 1)
                    ctx.set(d.rd_addr, reads[cycle])
                    pending.append(reads[cycle])
                else:
                    ctx.set(d.rd_valid, 0)
                await ctx.tick()
            assert not pending
        # a beat requested in the chip's last busy cycle, then the host port
        ctx.set(d.wr_valid, 1)
        ctx.set(d.wr_addr, 60)
        ctx.set(d.wr_data, 0xA1B2C3D4)
        ctx.set(d.wr_strb, (1 << B) - 1)
        await ctx.tick()
        model[60:60 + B] = (0xA1B2C3D4).to_bytes(B, "little")
        ctx.set(d.wr_valid, 0)
        ctx.set(dut.host, 1)
        for a in range(64):
            ctx.set(dut.h_addr, a)
            await ctx.tick()
            assert ctx.get(dut.h_rdata) == model[a], a
        return checked

    assert run(dut, bench) == 12 * 6


def _gemm_tiled(dut):
    prog = assemble_file(ROOT / "examples/gemm_tiled.s", dut.cfg)
    rng = np.random.default_rng(5)
    A = rng.integers(-128, 128, (8, 8)).astype(np.int8)
    B = rng.integers(-128, 128, (8, 8)).astype(np.int8)

    async def bench(ctx):
        ctx.set(dut.tx_ready, 1)
        h = _Host(ctx, dut)
        data, acks = P.load_program(prog.words())
        for i in range(0, len(data), 27):        # one command at a time: wait for each reply
            chunk = data[i:i + 27] if data[i] == ord("I") else data[i:]
            if data[i] != ord("I"):
                assert await h.send(chunk, acks - i // 27) == b"K" * (acks - i // 27)
                break
            assert await h.send(chunk, 1) == b"K"
        assert await h.send(P.write_dram(0, A.tobytes()), 1) == b"K"
        assert await h.send(P.write_dram(0x400, B.tobytes()), 1) == b"K"
        assert await h.send(P.write_reg(3, 0x1234), 1) == b"K"
        assert int.from_bytes(await h.send(P.read_reg(3), 4), "little") == 0x1234
        assert await h.send(P.start(), 1) == b"K"
        for _ in range(200):
            st = P.parse_status(await h.send(P.status(), 5))
            if st["done"] and not st["busy"]:
                break
        assert st["error"] == 0 and st["cycles"] > 0, st
        c = await h.send(P.read_dram(0x800, 8 * 8 * 4), 256)
        return np.frombuffer(c, "<i4").reshape(8, 8)

    C = run(dut, bench)
    np.testing.assert_array_equal(C, sem.wrap32(A.astype(np.int64) @ B.astype(np.int64)))


def test_uart_loopback():
    from amaranth import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    class Loop(wiring.Component):
        def __init__(self):
            super().__init__({"data": In(8), "valid": In(1), "ready": Out(1), "out": Out(8), "out_valid": Out(1)})

        def elaborate(self, platform):
            m = Module()
            m.submodules.tx, m.submodules.rx = tx, rx = UartTx(5), UartRx(5)
            m.d.comb += [tx.data.eq(self.data), tx.valid.eq(self.valid), self.ready.eq(tx.ready),
                         rx.rx.eq(tx.tx), self.out.eq(rx.data), self.out_valid.eq(rx.valid)]
            return m

    dut = Loop()
    sent = [0x00, 0xFF, 0x55, 0xA3, 0x4B]

    async def bench(ctx):
        got, todo = [], list(sent)
        for _ in range(600):
            if todo and ctx.get(dut.ready):
                ctx.set(dut.data, todo.pop(0))
                ctx.set(dut.valid, 1)
            else:
                ctx.set(dut.valid, 0)
            if ctx.get(dut.out_valid):
                got.append(ctx.get(dut.out))
            await ctx.tick()
        return got

    assert run(dut, bench) == sent


def test_fit_check_names_resources():
    base = ChipConfig.preset("base")
    with pytest.raises(FitError, match=r"does not fit ecp5-25k: .*BRAM|FF") as e:
        check(base, DEVICES["ecp5-25k"])
    assert "needed >" in str(e.value) and "available" in str(e.value)
    assert estimate(TINY, DEVICES["ecp5-85k"]).dsps > 0

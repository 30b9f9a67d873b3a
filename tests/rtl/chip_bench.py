"""Whole-chip testbench: the host loads a Program and arguments, DRAM is played with the
contract's model (fixed ``dram_latency`` per beat, one beat per cycle per channel)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from amaranth.sim import Simulator

from isa import ChipConfig, Program
from rtl.chip import Chip, Ring
from rtl_helpers import unpack


@dataclass
class RunResult:
    cycles: int
    error: int
    dram: np.ndarray
    spm: np.ndarray
    acc: np.ndarray
    regs: list[int]
    sim_cycles: int
    issue_cycles: list = field(default_factory=list)


class DramModel:
    """Byte-addressed DRAM; read and write channels each answer ``latency`` cycles after the request."""

    def __init__(self, image: np.ndarray, beat: int, latency: int):
        self.mem = np.array(image, dtype=np.uint8, copy=True)
        self.beat, self.lat = beat, latency
        self.reads: dict[int, int] = {}
        self.acks: set[int] = set()

    def read_bytes(self, addr):
        out = 0
        for j in range(self.beat):
            a = addr + j
            if 0 <= a < len(self.mem):
                out |= int(self.mem[a]) << (8 * j)
        return out

    def step(self, ctx, d, cycle):
        """Drive this cycle's responses, then take this cycle's requests."""
        if cycle in self.reads:
            ctx.set(d.rd_resp_valid, 1)
            ctx.set(d.rd_resp_data, self.reads.pop(cycle))
        else:
            ctx.set(d.rd_resp_valid, 0)
        ctx.set(d.wr_resp_valid, int(cycle in self.acks))
        self.acks.discard(cycle)
        if ctx.get(d.rd_valid):
            self.reads[cycle + self.lat] = self.read_bytes(ctx.get(d.rd_addr))
        if ctx.get(d.wr_valid):
            addr, data, strb = ctx.get(d.wr_addr), ctx.get(d.wr_data), ctx.get(d.wr_strb)
            for j in range(self.beat):
                if strb >> j & 1 and 0 <= addr + j < len(self.mem):
                    self.mem[addr + j] = (data >> (8 * j)) & 0xFF
            self.acks.add(cycle + self.lat)


def run_chip(prog: Program, dram: np.ndarray | None = None, regs: dict[int, int] | None = None,
             *, max_cycles: int = 20000, spm_init: dict | None = None, vcd: str | None = None,
             loopback: bool = False) -> RunResult:
    """``loopback``: run inside ``Ring(cfg, 1)``, whose link port 0 transmits into port 1."""
    cfg = prog.config
    top = Ring(cfg, 1) if loopback else Chip(cfg)
    chip = top.chips[0] if loopback else top
    host, dport = (top.host0, top.dram0) if loopback else (chip.host, chip.dram)
    words = prog.words()
    if dram is None:
        dram = np.zeros(cfg.dram_bytes, np.uint8)
    dm = DramModel(dram, cfg.dma_beat_bytes, cfg.dram_latency)
    box = {}

    async def bench(ctx):
        h, d = host, dport
        ctx.set(d.rd_ready, 1)
        ctx.set(d.wr_ready, 1)
        for i, w in enumerate(words):          # program load through the host port
            ctx.set(h.imem_we, 1)
            ctx.set(h.imem_addr, i)
            ctx.set(h.imem_data, w)
            await ctx.tick()
        ctx.set(h.imem_we, 0)
        ctx.set(h.prog_len, len(words))
        for r, v in (regs or {}).items():
            ctx.set(h.reg_we, 1)
            ctx.set(h.reg_addr, r)
            ctx.set(h.reg_wdata, v & 0xFFFFFFFF)
            await ctx.tick()
        ctx.set(h.reg_we, 0)
        for row, v in (spm_init or {}).items():
            ctx.set(chip.spm.data[row], v)
        ctx.set(h.start, 1)
        await ctx.tick()
        ctx.set(h.start, 0)
        cycle = 0
        issued = []
        while cycle < max_cycles:
            dm.step(ctx, d, cycle)
            await ctx.tick()
            cycle += 1
            if ctx.get(h.done):
                break
        box["sim_cycles"] = cycle
        box["cycles"] = ctx.get(h.cycles)
        box["error"] = ctx.get(h.error)
        box["spm"] = np.array([unpack(ctx.get(chip.spm.data[i]), 8, cfg.cols) for i in range(cfg.spm_rows)])
        box["acc"] = np.array([unpack(ctx.get(chip.acc.data[i]), 32, cfg.cols) for i in range(cfg.acc_rows)])
        rr = []
        for r in range(cfg.scalar_regs):
            ctx.set(h.reg_addr, r)
            v = ctx.get(h.reg_rdata)
            rr.append(v - (1 << 32) if v >> 31 else v)
        box["regs"] = rr

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    return RunResult(box["cycles"], box["error"], dm.mem, box["spm"].astype(np.int8),
                     box["acc"].astype(np.int32), box["regs"], box["sim_cycles"])

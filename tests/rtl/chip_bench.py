"""Whole-chip testbench: the host loads a Program and arguments, DRAM is played with the
contract's model (fixed ``dram_latency`` per beat, one beat per cycle per channel), and a monitor
on the trace port rebuilds the simulator's per-instance records (``sim.stats.Record``), so a run's
line trace can be diffed against the simulator's."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np
from amaranth.sim import Simulator

from rtl.chip import RETIRE_LANES, TRACE_LANES, Chip, Ring
from tests.rtl.rtl_helpers import unpack


@dataclass
class RunResult:
    cycles: int
    error: int
    dram: np.ndarray
    spm: np.ndarray
    acc: np.ndarray
    regs: list[int]
    sim_cycles: int
    done: int = 0
    #: (chip, unit, pc, index, issue, start, retire) of every retired instance, in retire order
    records: list = field(default_factory=list)

    def as_cosim(self) -> dict:
        """This chip's result in ``verify.cosim``'s form (``Cosim.run``), which ``verify.cosim.compare``
        and ``verify.cases`` check: the run starts from zeroed SPM and ACC."""
        return {"cycles": self.cycles, "error": self.error, "done": self.done, "dram": self.dram, "spm": self.spm,
                "acc": self.acc, "pre_spm": np.zeros_like(self.spm), "pre_acc": np.zeros_like(self.acc),
                "records": [r[1:] for r in self.records], "regs": self.regs}


def as_cosim(results: list[RunResult]) -> dict:
    """A run of every chip in ``verify.cosim``'s form."""
    return {"chips": [r.as_cosim() for r in results], "bench_cycles": max(r.sim_cycles for r in results)}


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


class TraceMonitor:
    """Pairs each instance's start (pc, index, issue and start cycles) with its retire."""

    def __init__(self, chip_index: int):
        self.chip = chip_index
        self.open: dict = defaultdict(deque)     # (unit, pc, index) -> [(issue, start)]
        self.records: list = []

    def sample(self, ctx, tr):
        starts, retires = ctx.get(tr.start), ctx.get(tr.retire)
        if not (starts or retires):
            return
        t = ctx.get(tr.cycle)
        for u in range(TRACE_LANES):
            if starts >> u & 1:
                key = (u, ctx.get(tr.start_pc[u]), ctx.get(tr.start_index[u]))
                self.open[key].append((ctx.get(tr.start_issue[u]), t))
        done = []
        for lane in range(RETIRE_LANES):
            if retires >> lane & 1:
                u = lane if lane < TRACE_LANES else 3     # lane 7: the MXU's mm/mma slot
                key = (u, ctx.get(tr.retire_pc[lane]), ctx.get(tr.retire_index[lane]))
                issue, start = self.open[key].popleft()
                done.append((self.chip, u, key[1], key[2], issue, start, t))
        self.records += sorted(done)


def _load_host(ctx, h, words, regs):
    for i, w in enumerate(words):          # program load through the host port
        ctx.set(h.imem_we, 1)
        ctx.set(h.imem_addr, i)
        ctx.set(h.imem_data, w)
        yield
    ctx.set(h.imem_we, 0)
    ctx.set(h.prog_len, len(words))
    for r, v in (regs or {}).items():
        ctx.set(h.reg_we, 1)
        ctx.set(h.reg_addr, r)
        ctx.set(h.reg_wdata, v & 0xFFFFFFFF)
        yield
    ctx.set(h.reg_we, 0)


def _words(prog) -> list[int]:
    return list(prog) if isinstance(prog, (list, tuple)) else prog.words()


class _Bench:
    """One elaborated top and its simulator, kept for every run on the same build (elaborating
    ``Chip(tiny)`` takes about a second, a short program a fraction of that): each run resets the
    simulation (signals, memories, the clock and the testbench) and plays the next job."""

    def __init__(self, cfg, n: int, ring: bool, mac: str, mem: str, idle_links: bool = False):
        self.cfg, self.n, self.ring = cfg, n, ring
        self.top = Ring(cfg, n, mac=mac, mem=mem) if ring else Chip(cfg, mac=mac, mem=mem, idle_links=idle_links)
        self.job: dict = {}
        self.sim = Simulator(self.top)
        self.sim.add_clock(1e-6)
        self.sim.add_testbench(self.bench)
        self.used = False

    async def bench(self, ctx):
        job, top, cfg, n, ring = self.job, self.top, self.cfg, self.n, self.ring
        chips = top.chips if ring else [top]
        hosts = [getattr(top, f"host{i}") for i in range(n)] if ring else [top.host]
        dports = [getattr(top, f"dram{i}") for i in range(n)] if ring else [top.dram]
        traces = [getattr(top, f"trace{i}") for i in range(n)] if ring else [top.trace]
        dms = [DramModel(d if d is not None else np.zeros(cfg.dram_bytes, np.uint8), cfg.dma_beat_bytes,
                         cfg.dram_latency) for d in job["drams"]]
        mons = [TraceMonitor(i if ring and n > 1 else 0) for i in range(n)]
        for i in range(n):
            for _ in _load_host(ctx, hosts[i], job["words"][i], job["regs"][i]):
                await ctx.tick()
            for row, v in (job["spm_init"][i] or {}).items():
                chips[i].spm.poke(ctx, row, v)
        for h in hosts:
            ctx.set(h.start, 1)
        await ctx.tick()
        for h in hosts:
            ctx.set(h.start, 0)
        cycle = 0
        while cycle < job["max_cycles"]:
            for i in range(n):
                dms[i].step(ctx, dports[i], cycle)
                mons[i].sample(ctx, traces[i])
            await ctx.tick()
            cycle += 1
            if all(ctx.get(h.done) for h in hosts):
                break
        out = []
        for i, (h, chip) in enumerate(zip(hosts, chips)):
            spm = np.array([unpack(chip.spm.peek(ctx, k), 8, cfg.cols) for k in range(cfg.spm_rows)])
            acc = np.array([unpack(chip.acc.peek(ctx, k), 32, cfg.cols) for k in range(cfg.acc_rows)])
            rr = []
            for r in range(cfg.scalar_regs):
                ctx.set(h.reg_addr, r)
                v = ctx.get(h.reg_rdata)
                rr.append(v - (1 << 32) if v >> 31 else v)
            out.append(RunResult(ctx.get(h.cycles), ctx.get(h.error), dms[i].mem, spm.astype(np.int8),
                                 acc.astype(np.int32), rr, cycle, ctx.get(h.done), mons[i].records))
        job["out"] = out

    def run(self, job: dict, vcd: str | None = None) -> list:
        self.job = job
        if self.used:
            self.sim.reset()
        self.used = True
        if vcd:
            with self.sim.write_vcd(vcd):
                self.sim.run()
        else:
            self.sim.run()
        return job["out"]


_BENCHES: dict = {}


def bench(cfg, n: int = 1, *, ring: bool = False, mac: str = "dsp", mem: str = "flat",
          idle_links: bool = False) -> _Bench:
    """The bench of ``Ring(cfg, n, mac, mem)`` (``ring``) or ``Chip(cfg, mac, mem, idle_links)``, built
    once per process; ``bench(...).top`` is the elaborated design. (A lone chip's link ports are
    held idle either way: nothing drives its ``lrx`` valid or ``ltx`` credit.)"""
    assert not (ring and idle_links), "a ring's chips use their links"
    key = (cfg, n, ring, mac, mem, idle_links)
    if key not in _BENCHES:
        _BENCHES[key] = _Bench(cfg, n, ring, mac, mem, idle_links)
    return _BENCHES[key]


def run_ring(progs: list, drams: list | None = None, regs: list | None = None, *, cfg=None, max_cycles: int = 20000,
             spm_init: list | None = None, vcd: str | None = None, ring: bool = True, mac: str = "dsp",
             mem: str = "flat", idle_links: bool = False) -> list[RunResult]:
    """Run one program (a Program, or raw words with ``cfg``) per chip: ``Ring(cfg, len(progs))``
    (``ring``), else one ``Chip``; ``mac``, ``mem``, ``idle_links``: the build options (``rtl.chip.Chip``).

    Every chip is loaded, then all start in the same cycle; the run ends when every chip is done
    (halted or stopped by an error) or after ``max_cycles``.
    """
    cfg = cfg or progs[0].config
    n = len(progs)
    job = {"words": [_words(p) for p in progs], "drams": list(drams or [None] * n), "regs": list(regs or [None] * n),
           "spm_init": list(spm_init or [None] * n), "max_cycles": max_cycles}
    return bench(cfg, n, ring=ring, mac=mac, mem=mem, idle_links=idle_links).run(job, vcd)


def run_chip(prog, dram: np.ndarray | None = None, regs: dict[int, int] | None = None, *, cfg=None,
             max_cycles: int = 20000, spm_init: dict | None = None, vcd: str | None = None,
             loopback: bool = False, mac: str = "dsp", mem: str = "flat", idle_links: bool = False) -> RunResult:
    """One chip; ``loopback``: inside ``Ring(cfg, 1)``, whose link port 0 transmits into port 1."""
    return run_ring([prog], [dram], [regs], cfg=cfg, max_cycles=max_cycles, spm_init=[spm_init], vcd=vcd,
                    ring=loopback, mac=mac, mem=mem, idle_links=idle_links)[0]

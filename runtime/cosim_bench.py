"""cocotb testbench of the Verilog ``Chip(cfg)`` / ``Ring(cfg, n)`` (runs inside the HDL simulator).

Driver -> monitor -> (model and checker in ``runtime.cosim``): the host driver loads each job's
program words and scalar registers through the host port, DRAM is played with the contract's
model (every request beat answered exactly ``dram_latency`` cycles later, one beat per cycle per
channel), a monitor on the trace port rebuilds every instance's (issue, start, retire) cycles, and
after done the final DRAM, SPM and ACC are read back. Many jobs run in one simulator process: the
chip is reset through ``rst`` between jobs (SPM/ACC keep their contents; the model starts from
the same contents, read here before each job).

Jobs come from the pickle named by ``TETRACHIP_COSIM_JOBS``; results go to
``TETRACHIP_COSIM_RESULTS``.
"""

from __future__ import annotations

import os
import pickle
import time
from collections import defaultdict, deque

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

N_UNITS = 7          # trace start lanes (isa.table.Unit)
N_RETIRE = 8         # retire lanes: one per unit, lane 7 the MXU's mm/mma slot


def _int(h) -> int:
    v = h.value
    try:
        return int(v)
    except ValueError:      # X/Z bits (Icarus; Verilator has none): read as 0, as Verilator does
        return int(str(v).translate(_XZ), 2)


_XZ = str.maketrans("xXzZuUwWlLhH-", "0000000000110")


class Port:
    """The signals of one chip, from the top's flat port names (``host__start`` / ``host0__start``)."""

    def __init__(self, dut, i: int | None, mem_scope):
        sfx = "" if i is None else str(i)
        g = lambda name: getattr(dut, name.replace("@", sfx))   # noqa: E731
        self.h = {k: g(f"host@__{k}") for k in ("start", "done", "busy", "error", "cycles", "prog_len", "imem_we",
                                                 "imem_addr", "imem_data", "reg_we", "reg_addr", "reg_wdata")}
        self.d = {k: g(f"dram@__{k}") for k in ("rd_valid", "rd_addr", "rd_resp_valid", "rd_resp_data",
                                                 "wr_valid", "wr_addr", "wr_data", "wr_strb", "wr_resp_valid")}
        self.t = {k: g(f"trace@__{k}") for k in ("cycle", "start", "start_pc", "start_index", "start_issue",
                                                  "retire", "retire_pc", "retire_index")}
        self.spm, self.acc = mem_scope.spm, mem_scope.acc


class Dram:
    """Byte-addressed DRAM; each channel answers a request beat ``latency`` cycles later."""

    def __init__(self, port: Port, image: np.ndarray, beat: int, latency: int):
        self.p, self.mem = port.d, np.array(image, dtype=np.uint8, copy=True)
        self.beat, self.lat = beat, latency
        self.reads: dict[int, int] = {}
        self.acks: set[int] = set()
        self.rv = self.wv = False          # both valids are 0 after the reset sequence

    def drive(self, cycle: int) -> None:
        rv = cycle in self.reads
        if rv:
            self.p["rd_resp_data"].value = self.reads.pop(cycle)
        if rv != self.rv:                      # write a valid only when it changes
            self.p["rd_resp_valid"].value = int(rv)
            self.rv = rv
        wv = cycle in self.acks
        if wv != self.wv:
            self.p["wr_resp_valid"].value = int(wv)
            self.wv = wv
        self.acks.discard(cycle)

    def sample(self, cycle: int) -> None:
        p, n = self.p, len(self.mem)
        if _int(p["rd_valid"]):
            a = _int(p["rd_addr"])
            lo, hi = max(a, 0), min(a + self.beat, n)
            v = int.from_bytes(self.mem[lo:hi].tobytes(), "little") << (8 * (lo - a)) if lo < hi else 0
            self.reads[cycle + self.lat] = v
        if _int(p["wr_valid"]):
            a, data, strb = _int(p["wr_addr"]), _int(p["wr_data"]), _int(p["wr_strb"])
            for j in range(self.beat):
                if strb >> j & 1 and 0 <= a + j < n:
                    self.mem[a + j] = (data >> (8 * j)) & 0xFF
            self.acks.add(cycle + self.lat)


class Monitor:
    """Pairs each instance's start with its retire: (unit, pc, index, issue, start, retire)."""

    def __init__(self, port: Port, pcw: int):
        self.t, self.pcw = port.t, pcw
        self.open: dict = defaultdict(deque)
        self.records: list = []

    def sample(self, cyc: int) -> None:
        t = self.t
        starts, retires = _int(t["start"]), _int(t["retire"])
        if not (starts or retires):
            return
        pm = (1 << self.pcw) - 1
        if starts:
            spc, sidx, siss = _int(t["start_pc"]), _int(t["start_index"]), _int(t["start_issue"])
            for u in range(N_UNITS):
                if starts >> u & 1:
                    key = (u, spc >> (u * self.pcw) & pm, sidx >> (32 * u) & 0xFFFFFFFF)
                    self.open[key].append((siss >> (32 * u) & 0xFFFFFFFF, cyc))
        if retires:
            rpc, ridx = _int(t["retire_pc"]), _int(t["retire_index"])
            done = []
            for lane in range(N_RETIRE):
                if retires >> lane & 1:
                    u = lane if lane < N_UNITS else 3
                    key = (u, rpc >> (lane * self.pcw) & pm, ridx >> (32 * lane) & 0xFFFFFFFF)
                    q = self.open.get(key)
                    issue, start = q.popleft() if q else (-1, -1)      # a retire without a start
                    done.append((u, key[1], key[2], issue, start, cyc))
            self.records += sorted(done)


def _unpack(word: int, bits: int, n: int) -> list[int]:
    m = (1 << bits) - 1
    out = []
    for i in range(n):
        v = (word >> (i * bits)) & m
        out.append(v - (1 << bits) if v >> (bits - 1) else v)
    return out


def read_mems(port: Port, cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    spm = np.array([_unpack(_int(port.spm[k]), 8, cfg["cols"]) for k in range(cfg["spm_rows"])], np.int8)
    acc = np.array([_unpack(_int(port.acc[k]), 32, cfg["cols"]) for k in range(cfg["acc_rows"])], np.int64)
    return spm, acc.astype(np.int32)


async def run_job(dut, ports: list[Port], cfg: dict, job: dict) -> dict:
    n = len(ports)
    pcw = max(1, (cfg["imem_words"] - 1).bit_length())
    # reset: every register state back to its reset value; SPM/ACC/imem keep their contents
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    for p in ports:
        p.h["start"].value = 0
        p.h["imem_we"].value = 0
        p.h["reg_we"].value = 0
        p.d["rd_resp_valid"].value = 0
        p.d["wr_resp_valid"].value = 0
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    # SPM/ACC before the job: the previous job's final contents (reset keeps memories), else read
    pre = [p.last if getattr(p, "last", None) is not None else read_mems(p, cfg) for p in ports]
    # driver: program words, then every scalar register r1.. (0 unless the job names a value)
    for i, p in enumerate(ports):
        words = job["words"][i]
        for a, w in enumerate(words):
            p.h["imem_we"].value = 1
            p.h["imem_addr"].value = a
            p.h["imem_data"].value = w
            await FallingEdge(dut.clk)
        p.h["imem_we"].value = 0
        p.h["prog_len"].value = len(words)
        regs = job["regs"][i] or {}
        for r in range(1, cfg["scalar_regs"]):
            p.h["reg_we"].value = 1
            p.h["reg_addr"].value = r
            p.h["reg_wdata"].value = int(regs.get(r, 0)) & 0xFFFFFFFF
            await FallingEdge(dut.clk)
        p.h["reg_we"].value = 0
    drams = [Dram(p, job["drams"][i], cfg["dma_beat_bytes"], cfg["dram_latency"]) for i, p in enumerate(ports)]
    mons = [Monitor(p, pcw) for p in ports]
    for p in ports:
        p.h["start"].value = 1
    await FallingEdge(dut.clk)
    for p in ports:
        p.h["start"].value = 0
    cycle, limit = 0, job["max_cycles"]
    t0 = time.perf_counter()
    while cycle < limit:
        for d in drams:
            d.drive(cycle)
        await ReadOnly()
        for d, m in zip(drams, mons):
            d.sample(cycle)
            m.sample(cycle)
        await FallingEdge(dut.clk)
        cycle += 1
        if all(_int(p.h["done"]) for p in ports):
            break
    wall = time.perf_counter() - t0
    out = []
    for i, p in enumerate(ports):
        spm, acc = read_mems(p, cfg)
        p.last = (spm, acc)
        out.append({"cycles": _int(p.h["cycles"]), "error": _int(p.h["error"]), "done": _int(p.h["done"]),
                    "dram": drams[i].mem, "spm": spm, "acc": acc, "pre_spm": pre[i][0], "pre_acc": pre[i][1],
                    "records": mons[i].records})
    return {"chips": out, "bench_cycles": cycle, "wall_s": wall}


@cocotb.test()
async def run_jobs(dut):
    """Run every job of the jobs file and write the results file."""
    with open(os.environ["TETRACHIP_COSIM_JOBS"], "rb") as f:
        spec = pickle.load(f)
    cfg, chips = spec["config"], spec["chips"]
    dut.rst.value = 0
    if chips == 1 and not spec.get("ring"):
        ports = [Port(dut, None, dut)]
        for p in range(spec["config"]["links"]):       # one chip: its link ports stay idle
            for name in (f"lrx__{p}__valid", f"lrx__{p}__data", f"lrx__{p}__space", f"ltx__{p}__credit"):
                getattr(dut, name).value = 0
    else:
        ports = [Port(dut, i, getattr(dut, f"chip{i}")) for i in range(chips)]
    Clock(dut.clk, 10, unit="ns").start()
    results = []
    for job in spec["jobs"]:
        results.append(await run_job(dut, ports, cfg, job))
    with open(os.environ["TETRACHIP_COSIM_RESULTS"], "wb") as f:
        pickle.dump(results, f)

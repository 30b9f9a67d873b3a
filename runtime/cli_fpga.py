"""``tetrachip fpga``: bitstreams for boards and resource/Fmax estimates for devices (open tools)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from isa import ChipConfig
from isa.outputs import write_atomic
from runtime.cli_args import CONFIG, OUTPUT_FILE, PositiveFloat, check_output, usage_error

#: ``--freq`` through the board's PLL: refused when the closest PLL output is further than this from it
PLL_TOLERANCE = 0.05

CONFIG_HELP = "config preset (tiny, small, base, large, tpu) or a .toml/.json file"
MAC_HELP = ("array multipliers: dsp (hard multipliers), lut, dsp:N (N in DSPs, the rest in LUTs), each with an "
            "optional +reg or +reg2 (product register stages: faster, same cycles); auto = dsp:N+reg2 filling "
            "the device's DSPs after the VPU's (auto-noreg: without the registers)")


def _check_mac(ctx, param, value: str) -> str:
    """``--mac``: auto, auto-noreg, or what ``rtl.mac`` parses (dsp, lut, dsp:N, each +reg/+reg2)."""
    if value in ("auto", "auto-noreg"):
        return value
    from rtl.mac import parse_mac, split_reg
    try:
        split_reg(value)
        parse_mac(value)
    except ValueError as e:
        raise click.BadParameter(f"{e} (or auto, auto-noreg)") from None
    return value


def _check_pow2(ctx, param, value):
    if value is not None and value & (value - 1):
        raise click.BadParameter(f"{value} is not a power of two")
    return value


def _check_out_dir(out: Path) -> None:
    """The output folder: a folder or creatable in a writable folder, checked before any tool runs."""
    import os
    p = out
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        raise usage_error(f"{out}: {p} is a file, not a folder", "--output")
    if p.exists() and not os.access(p, os.W_OK):
        raise usage_error(f"{out}: {p} is not writable", "--output")


def _check_shrink(cfg, **sizes: int | None) -> None:
    """--spm-rows, --acc-rows, --imem-words only make a memory smaller than the config's: a larger one is refused,
    not silently ignored."""
    for field, v in sizes.items():
        if v is not None and v > getattr(cfg, field):
            raise usage_error(f"{v} is more than config {cfg.name}'s {field} ({getattr(cfg, field)}); this option "
                              f"only makes the memory smaller", "--" + field.replace("_", "-"))


def _check_fpga_options(cfg, dram_kib: int, json_path: Path | None, out: Path, sources) -> None:
    if dram_kib * 1024 < cfg.dma_beat_bytes:
        raise usage_error(f"{dram_kib} KiB is less than one DMA beat of config {cfg.name} "
                          f"({cfg.dma_beat_bytes} bytes)", "--dram-kib")
    _check_out_dir(out)
    if json_path is not None and json_path.parent.resolve() == out.resolve() and not out.exists():
        return                                          # a report beside the outputs: the flow makes the folder
    check_output(json_path, "--json", inputs=sources)


def _mac(mac: str, cfg, dev) -> str:
    if mac not in ("auto", "auto-noreg"):
        return mac
    from rtl.fpga.fit import DSP_BASE, DSP_PER_LANE
    free = max(0, dev.dsps - DSP_BASE - DSP_PER_LANE[dev.family] * cfg.cols)
    kind = "dsp" if free >= cfg.rows * cfg.cols else f"dsp:{free}"
    return kind + ("+reg2" if mac == "auto" else "")


def _mem(cfg, fpga_mem: bool, spm_rows, acc_rows, imem_words, mem_impl: str,
         banks: tuple[int, int] | None = None, links: bool = True):
    from rtl.fpga.fit import fpga_build_config
    from rtl.mem import BANKED
    if banks is not None and mem_impl not in BANKED:
        raise usage_error(f"--banks is for --mem {' or '.join(BANKED)}, not {mem_impl}", "--banks")
    try:
        return fpga_build_config(cfg, mem_impl, fpga_mem=fpga_mem, banks=banks, links=links,
                                 depths={"spm_rows": spm_rows, "acc_rows": acc_rows, "imem_words": imem_words})
    except ValueError as e:
        raise usage_error(str(e), "--banks") from None


def _dsp_regs_option(f):
    return click.option("--dsp-regs/--no-dsp-regs", default=True, show_default=True,
                        help="two-stage hard products (mac ...+reg2) as ECP5 MULT18X18D with their own registers; "
                             "--no-dsp-regs: in fabric flip-flops (see docs/fpga.md)")(f)


class _Banks(click.ParamType):
    """``N`` or ``S,A``: bank counts of SPM and ACC (``rtl.fpga.fit.parse_banks``)."""
    name = "N|S,A"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from rtl.fpga.fit import parse_banks
        try:
            return parse_banks(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


BANKS = _Banks()


def _mem_options(f):
    from rtl.mem import FPGA_IMPL, IMPLS  # noqa: PLC0415
    f = click.option("--mem", "mem_impl", type=click.Choice(IMPLS), default=FPGA_IMPL, show_default=True,
                     help="SPM/ACC: banked = SPM in 4 banks, ACC in banks of 16 rows, at least 4 (the config's "
                          "own if it has them; else --banks), a copy per read port, one writer per bank at a time "
                          "(programs must not have two units write one bank at once; the simulator stops them "
                          "with RACE on the same config); banked-bram = the same in block RAM; lvt = a bank of "
                          "block or LUT RAM per write/read port pair and a live-value table (any program); "
                          "lvt-bram = the same with every registered-read bank in block RAM (frees logic slices "
                          "on a full device); flat = one memory with every port (flip-flops on an FPGA; see "
                          "docs/fpga.md)")(f)
    f = click.option("--banks", type=BANKS, default=None,
                     help="--mem banked/banked-bram: SPM and ACC each in N banks, or S,A: S SPM banks and A ACC "
                          "banks (powers of two; banks deeper than 16 rows are block RAM; docs/fpga.md)")(f)
    f = click.option("--imem-words", type=click.IntRange(min=1), default=None, help="smaller instruction memory")(f)
    f = click.option("--acc-rows", type=click.IntRange(min=1), default=None, help="smaller ACC (rows)")(f)
    f = click.option("--spm-rows", type=click.IntRange(min=1), default=None, help="smaller SPM (rows)")(f)
    f = click.option("--links/--no-links", default=True, show_default=True,
                     help="--no-links: a chip without link ports (config links = 0; the board has none): built "
                          "without the link units, link.send/link.recv are illegal instructions (docs/fpga.md)")(f)
    f = click.option("--fpga-mem", is_flag=True,
                     help="smaller memories (fit every ECP5; see docs/fpga.md): with --mem banked/banked-bram SPM 256 "
                          "rows in 4 block RAM banks and ACC 64 in 4 LUT RAM banks; with lvt/lvt-bram/flat SPM 64 "
                          "rows and ACC 16; imem 1024 words")(f)
    return f


def _check_seeds(seeds: tuple[int, ...]) -> None:
    """``--seed``'s values are distinct (a usage error before any tool runs)."""
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise usage_error(f"seed {dup[0]} given more than once", "--seed")


def _done(rep, json_path: Path | None) -> None:
    click.echo(rep.table())
    if rep.critical_path:
        click.echo("  critical path (nextpnr):\n    " + "\n    ".join(rep.critical_path))
    if json_path:
        write_atomic(json_path, json.dumps(rep.to_dict(), indent=1))


@click.group("fpga")
def fpga_cmd() -> None:
    """FPGA flow: Yosys + nextpnr + ecppack from PyPI (YoWASP). See docs/fpga.md."""


@fpga_cmd.command("build")
@click.option("--config", "config", type=CONFIG, default="tiny", show_default=True, help=CONFIG_HELP)
@click.option("--board", required=True,
              type=click.Choice(sorted(__import__("rtl.fpga.devices", fromlist=["BOARDS"]).BOARDS)))
@click.option("--freq", "freq", type=PositiveFloat(), default=None,
              help="clock in MHz (default: the board's oscillator; else a PLL)")
@click.option("--mac", default="auto", show_default=True, callback=_check_mac, help=MAC_HELP)
@click.option("--dram-kib", default=16, show_default=True, type=click.IntRange(min=1), callback=_check_pow2,
              help="DRAM in block RAM (power of two)")
@click.option("--baud", default=115200, show_default=True, type=click.IntRange(min=1200))
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("build/fpga"),
              show_default=True)
@click.option("--no-fit-check", is_flag=True, help="build even when the estimate exceeds the device")
@click.option("--json", "json_path", type=OUTPUT_FILE, default=None,
              help="write the report here too")
@click.option("--seed", "seeds", multiple=True, type=click.IntRange(1, 2**31 - 1),
              help="nextpnr's placement seed (default 1; a full device may route with one seed and not another, "
                   "docs/fpga.md); given more than once, the seeds are tried in turn on the one netlist until "
                   "one meets the clock, and the bitstream is that seed's (else the fastest's)")
@click.option("--timeout", type=PositiveFloat(), default=None,
              help="seconds for each seed's tools (the first seed's with Yosys); past it they are stopped")
@_mem_options
@_dsp_regs_option
def build_cmd(config, board, freq, mac, dram_kib, baud, out, no_fit_check, json_path, seeds, timeout, fpga_mem,
              spm_rows, acc_rows, imem_words, banks, mem_impl, links, dsp_regs) -> None:
    """Bitstream of a config for a board (OUT/top.bit) and its report (OUT/report.json)."""
    from rtl.fpga.board import build, pll_params
    from rtl.fpga.devices import BOARDS, device

    base = ChipConfig.load(config)
    _check_shrink(base, spm_rows=spm_rows, acc_rows=acc_rows, imem_words=imem_words)
    cfg = _mem(base, fpga_mem, spm_rows, acc_rows, imem_words, mem_impl, banks, links)
    dev = device(BOARDS[board].device)
    sources = [config] if Path(config).is_file() else []
    _check_fpga_options(cfg, dram_kib, json_path, out, sources)
    clk = BOARDS[board].clk_mhz
    if freq is not None and abs(freq - clk) >= 1e-6:
        try:
            got = pll_params(clk, freq)["fout"]
        except ValueError as e:
            raise usage_error(str(e), "--freq") from None
        if abs(got - freq) > PLL_TOLERANCE * freq:
            raise usage_error(f"{freq:g} MHz: the PLL of {board} ({clk:g} MHz in) gets no closer than {got:g} MHz",
                              "--freq")
    _check_seeds(seeds)
    if 2 * baud > (freq or clk) * 1e6:
        raise usage_error(f"{baud} baud needs a clock of at least twice that; the clock is {freq or clk:g} MHz",
                          "--baud")
    rep = build(cfg, board, mac=_mac(mac, cfg, dev), mem=mem_impl, freq_mhz=freq, out=out, dram_bytes=dram_kib * 1024,
                baud=baud, check_fit=not no_fit_check, dsp_regs=dsp_regs, seed=seeds or (1,), timeout=timeout,
                progress=lambda line: click.echo(line, err=True))
    _done(rep, json_path)


@fpga_cmd.command("synth")
@click.option("--config", "config", type=CONFIG, default="tiny", show_default=True, help=CONFIG_HELP)
@click.option("--device", "device_name", default="ecp5-85k", show_default=True,
              type=click.Choice(sorted(__import__("rtl.fpga.devices", fromlist=["DEVICES"]).DEVICES)))
@click.option("--freq", "freq", type=PositiveFloat(), default=100.0, show_default=True, help="nextpnr's target in MHz")
@click.option("--mac", default="auto", show_default=True, callback=_check_mac, help=MAC_HELP)
@click.option("--dram-kib", default=16, show_default=True, type=click.IntRange(min=1), callback=_check_pow2,
              help="DRAM in block RAM (power of two)")
@click.option("--no-pnr", is_flag=True, help="Yosys only (resources, no Fmax)")
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("build/fpga-synth"), show_default=True)
@click.option("--no-fit-check", is_flag=True, help="run even when the estimate exceeds the device")
@click.option("--timeout", type=PositiveFloat(), default=None, help="seconds per tool")
@click.option("--json", "json_path", type=OUTPUT_FILE, default=None, help="write the report here too")
@click.option("--seed", "seeds", multiple=True, type=click.IntRange(1, 2**31 - 1),
              help="nextpnr's placement seed (default 1); given more than once, the same netlist is placed and "
                   "routed with each and the report has Fmax by seed")
@click.option("--jobs", "jobs", type=click.IntRange(min=1), default=None,
              help="seeds placed and routed at once (default: one per CPU core)")
@_mem_options
@_dsp_regs_option
def synth_cmd(config, device_name, freq, mac, dram_kib, no_pnr, out, no_fit_check, timeout, json_path, seeds, jobs,
              fpga_mem, spm_rows, acc_rows, imem_words, banks, mem_impl, links, dsp_regs) -> None:
    """Resources and Fmax of a config on a device, without a board (nextpnr out of context)."""
    from rtl.fpga.devices import device
    from rtl.fpga.flow import synth

    base = ChipConfig.load(config)
    _check_shrink(base, spm_rows=spm_rows, acc_rows=acc_rows, imem_words=imem_words)
    cfg = _mem(base, fpga_mem, spm_rows, acc_rows, imem_words, mem_impl, banks, links)
    dev = device(device_name)
    _check_fpga_options(cfg, dram_kib, json_path, out, [config] if Path(config).is_file() else [])
    _check_seeds(seeds)
    if seeds and no_pnr:
        raise usage_error("a placement seed needs nextpnr; drop --no-pnr", "--seed")
    rep = synth(cfg, dev.name, mac=_mac(mac, cfg, dev), mem=mem_impl, out=out, pnr=not no_pnr, freq_mhz=freq,
                dram_bytes=dram_kib * 1024, timeout=timeout, check_fit=not no_fit_check, dsp_regs=dsp_regs,
                seeds=seeds or (1,), jobs=jobs)
    _done(rep, json_path)


@fpga_cmd.command("depth")
@click.argument("netlist", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-n", "n", default=20, show_default=True, type=click.IntRange(min=1), help="registers to list")
@click.option("--paths", default=3, show_default=True, type=click.IntRange(min=0),
              help="deepest paths to print cell by cell")
def depth_cmd(netlist, n, paths) -> None:
    """Logic depth of a synthesised ECP5 netlist (top.json of `fpga synth`): routed hops per path, in seconds."""
    from rtl.fpga.depth import DepthError, analyse, load, report

    try:
        nl = load(netlist)
    except DepthError as e:
        raise click.ClickException(str(e)) from None
    click.echo(report(analyse(nl), n, paths), nl=False)

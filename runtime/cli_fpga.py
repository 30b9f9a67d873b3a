"""``tetrachip fpga``: bitstreams for boards and resource/Fmax estimates for devices (open tools)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from isa import ChipConfig

CONFIG_HELP = "config preset (tiny, small, base, large, tpu) or a .toml/.json file"
MAC_HELP = ("array multipliers: dsp (hard multipliers), lut, dsp:N (N in DSPs, the rest in LUTs), each with an "
            "optional +reg or +reg2 (product register stages: faster, same cycles); auto = dsp:N+reg2 filling "
            "the device's DSPs after the VPU's (auto-noreg: without the registers)")


def _mac(mac: str, cfg, dev) -> str:
    if mac not in ("auto", "auto-noreg"):
        return mac
    from rtl.fpga.fit import DSP_BASE, DSP_PER_LANE
    free = max(0, dev.dsps - DSP_BASE - DSP_PER_LANE[dev.family] * cfg.cols)
    kind = "dsp" if free >= cfg.rows * cfg.cols else f"dsp:{free}"
    return kind + ("+reg2" if mac == "auto" else "")


def _mem(cfg, fpga_mem: bool, spm_rows, acc_rows, imem_words):
    from rtl.fpga.fit import FPGA_MEMORY, fpga_config
    d = dict(FPGA_MEMORY) if fpga_mem else {}
    d.update({k: v for k, v in (("spm_rows", spm_rows), ("acc_rows", acc_rows), ("imem_words", imem_words)) if v})
    return fpga_config(cfg, **d)


def _dsp_regs_option(f):
    return click.option("--dsp-regs", is_flag=True,
                        help="two-stage hard products (mac ...+reg2) as ECP5 MULT18X18D with their own registers "
                             "(FPGA only: no simulation model; see docs/fpga.md)")(f)


def _mem_options(f):
    from rtl.mem import IMPLS  # noqa: PLC0415
    f = click.option("--mem", "mem_impl", type=click.Choice(IMPLS), default="lvt", show_default=True,
                     help="SPM/ACC: lvt = a bank of block or LUT RAM per write/read port pair and a live-value "
                          "table; lvt-bram = the same with every registered-read bank in block RAM (frees "
                          "logic slices on a full device); flat = one memory with every port (flip-flops on "
                          "an FPGA; see docs/fpga.md)")(f)
    f = click.option("--imem-words", type=click.IntRange(min=1), default=None, help="smaller instruction memory")(f)
    f = click.option("--acc-rows", type=click.IntRange(min=1), default=None, help="smaller ACC (rows)")(f)
    f = click.option("--spm-rows", type=click.IntRange(min=1), default=None, help="smaller SPM (rows)")(f)
    f = click.option("--fpga-mem", is_flag=True,
                     help="SPM 64 rows, ACC 16 rows, imem 1024 words (fits every ECP5; see docs/fpga.md)")(f)
    return f


def _done(rep, json_path: Path | None) -> None:
    click.echo(rep.table())
    if rep.critical_path:
        click.echo("  critical path (nextpnr):\n    " + "\n    ".join(rep.critical_path))
    if json_path:
        json_path.write_text(json.dumps(rep.to_dict(), indent=1))


@click.group("fpga")
def fpga_cmd() -> None:
    """FPGA flow: Yosys + nextpnr + ecppack from PyPI (YoWASP). See docs/fpga.md."""


@fpga_cmd.command("build")
@click.option("--config", "config", default="small", show_default=True, help=CONFIG_HELP)
@click.option("--board", required=True,
              type=click.Choice(sorted(__import__("rtl.fpga.devices", fromlist=["BOARDS"]).BOARDS)))
@click.option("--freq", "freq", type=float, default=None,
              help="clock in MHz (default: the board's oscillator; else a PLL)")
@click.option("--mac", default="auto", show_default=True, help=MAC_HELP)
@click.option("--dram-kib", default=16, show_default=True, type=click.IntRange(min=1),
              help="DRAM in block RAM (power of two)")
@click.option("--baud", default=115200, show_default=True, type=click.IntRange(min=1200))
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("build/fpga"),
              show_default=True)
@click.option("--no-fit-check", is_flag=True, help="build even when the estimate exceeds the device")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the report here too")
@click.option("--seed", default=1, show_default=True, type=click.IntRange(min=1),
              help="nextpnr's placement seed (a full device may route with one seed and not another; docs/fpga.md)")
@_mem_options
@_dsp_regs_option
def build_cmd(config, board, freq, mac, dram_kib, baud, out, no_fit_check, json_path, seed, fpga_mem, spm_rows,
              acc_rows, imem_words, mem_impl, dsp_regs) -> None:
    """Bitstream of a config for a board (OUT/top.bit) and its report (OUT/report.json)."""
    from rtl.fpga.board import build
    from rtl.fpga.devices import BOARDS, device

    cfg = _mem(ChipConfig.load(config), fpga_mem, spm_rows, acc_rows, imem_words)
    dev = device(BOARDS[board].device)
    rep = build(cfg, board, mac=_mac(mac, cfg, dev), mem=mem_impl, freq_mhz=freq, out=out, dram_bytes=dram_kib * 1024,
                baud=baud, check_fit=not no_fit_check, dsp_regs=dsp_regs, seed=seed)
    _done(rep, json_path)


@fpga_cmd.command("synth")
@click.option("--config", "config", default="tiny", show_default=True, help=CONFIG_HELP)
@click.option("--device", "device_name", default="ecp5-85k", show_default=True,
              type=click.Choice(sorted(__import__("rtl.fpga.devices", fromlist=["DEVICES"]).DEVICES)))
@click.option("--freq", "freq", type=float, default=100.0, show_default=True, help="nextpnr's target in MHz")
@click.option("--mac", default="auto", show_default=True, help=MAC_HELP)
@click.option("--dram-kib", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--no-pnr", is_flag=True, help="Yosys only (resources, no Fmax)")
@click.option("-o", "--output", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("build/fpga-synth"), show_default=True)
@click.option("--no-fit-check", is_flag=True, help="run even when the estimate exceeds the device")
@click.option("--timeout", type=float, default=None, help="seconds per tool")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
@_mem_options
@_dsp_regs_option
def synth_cmd(config, device_name, freq, mac, dram_kib, no_pnr, out, no_fit_check, timeout, json_path, fpga_mem,
              spm_rows, acc_rows, imem_words, mem_impl, dsp_regs) -> None:
    """Resources and Fmax of a config on a device, without a board (nextpnr out of context)."""
    from rtl.fpga.devices import device
    from rtl.fpga.flow import synth

    cfg = _mem(ChipConfig.load(config), fpga_mem, spm_rows, acc_rows, imem_words)
    dev = device(device_name)
    rep = synth(cfg, dev.name, mac=_mac(mac, cfg, dev), mem=mem_impl, out=out, pnr=not no_pnr, freq_mhz=freq,
                dram_bytes=dram_kib * 1024, timeout=timeout, check_fit=not no_fit_check, dsp_regs=dsp_regs)
    _done(rep, json_path)

"""``tetrachip fuzz``: constrained-random programs on the RTL (cocotb) against the simulator, or with
``--compiler`` random models through ``tc.compile`` on the simulator (``verify.compiler_fuzz``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from isa import ChipConfig
from isa.errors import TetrachipError
from isa.outputs import write_atomic
from runtime.cli_args import CONFIG, OUTPUT_FILE, check_output, usage_error
from rtl.mem import IMPLS


@click.command("fuzz")
@click.option("--config", "config", type=CONFIG, default=None,
              help="config preset (tiny, small, base, large, tpu) or a .toml/.json file [default: tiny; with "
                   "--compiler each model draws tiny or small]")
@click.option("--seed", default=0, show_default=True, type=int, help="first seed; case i uses seed + i")
@click.option("--count", default=100, show_default=True, type=click.IntRange(min=1), help="programs (models) to run")
@click.option("--sim", "simulator", default=None, type=click.Choice(["verilator", "icarus"]),
              help="HDL simulator (default: $SIM, else verilator)")
@click.option("--json", "json_out", type=OUTPUT_FILE, default=None,
              help="write the figures and coverage as JSON")
@click.option("--show", default=3, show_default=True, help="mismatch reports to print in full")
@click.option("--mem", default=None, type=click.Choice(IMPLS),
              help="SPM/ACC as built: flat (default, or $TETRACHIP_COSIM_MEM), the FPGA builds' "
                   "live-value-table memories, or banked (a config without banks gets the FPGA flow's: "
                   "SPM in 4 banks, ACC in banks of 16 rows, at least 4; docs/fpga.md)")
@click.option("--mac", default="dsp", show_default=True,
              help="the array's products as built (rtl/mac.py): dsp, lut, dsp:N, with +reg or +reg2; "
                   "lut+reg2 co-simulates every product in LUTs")
@click.option("--shrink/--no-shrink", default=True, show_default=True,
              help="shrink the first mismatching program to a minimal one (delta debugging on its lines and numbers)")
@click.option("--waves", "waves_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="run the failing program (shrunk) again with waves on: DIR/fuzz_seed<S>.vcd")
@click.option("--waves-format", type=click.Choice(["vcd", "fst"]), default="vcd", show_default=True,
              help="the --waves file's format")
@click.option("--compiler", is_flag=True,
              help="random models through tc.compile on the simulator instead (verify/compiler_fuzz.py)")
def fuzz_cmd(config: str | None, seed: int, count: int, simulator: str | None, json_out: Path | None, show: int,
             mem: str | None, mac: str, shrink: bool, waves_dir: Path | None, waves_format: str,
             compiler: bool) -> None:
    """Run COUNT random programs on the Verilog of a 2-chip ring (one chip for a config with fewer
    than 2 link ports, its programs without link instructions) and on the simulator; compare
    memories, cycles, error codes and per-instruction retire cycles. Exit 1 on any mismatch or an
    opcode never covered. Prints the coverage per opcode and the functional coverage points not hit
    (queue full, token waits, branches taken / not taken, DMA alignment, memory ports in use at once);
    on a mismatch, the first failing program shrunk to a minimal one (its seed and assembly), and
    with --waves its waveform file.

    With --compiler: COUNT random models (seeds SEED..) compiled with tc.compile and run on the
    simulator, each bit-exact to its integer reference and within the quantization bound of its
    float model, or refused (ChipCompileError); prints ok / refused by op / failures (shrunk, with
    their seeds) and exits 1 on any failure."""
    check_output(json_out, "--json")
    if compiler:
        if waves_dir is not None:
            raise usage_error("--waves is for RTL programs, not --compiler", "--waves")
        if mac != "dsp":
            raise usage_error("--mac is for RTL programs, not --compiler", "--mac")
        _compiler_fuzz(config, seed, count, json_out, show)
        return
    config = config or "tiny"
    from rtl.mac import parse_mac
    try:
        parse_mac(mac)
    except ValueError as e:
        raise usage_error(str(e), "--mac") from None
    from verify.cosim import CosimUnavailable
    from verify.fuzz import run_fuzz
    cfg = ChipConfig.load(config)
    from rtl.fpga.fit import banked_config
    cfg = banked_config(cfg, mem or os.environ.get("TETRACHIP_COSIM_MEM", "flat"))
    if waves_dir is not None:
        from verify.cosim import waves_unavailable
        if not waves_dir.is_dir():
            raise usage_error(f"{waves_dir}: no such folder", "--waves")
        why = waves_unavailable(simulator or os.environ.get("SIM", "verilator"), waves_format)
        if why:
            raise usage_error(f"{waves_format}: {why}", "--waves-format")
        check_output(waves_dir / f"fuzz_seed{seed}.{waves_format}", "--waves", what="--waves file")
    from tqdm import tqdm
    bars: list = []

    def progress(n: int) -> None:          # the bar starts after the model build's own lines
        if not bars:
            bars.append(tqdm(total=count, desc=f"fuzz {cfg.name}", unit="prog", file=sys.stderr))
        bars[0].update(n)
        if bars[0].n >= count:             # closed before any shrinking or waves run
            bars[0].close()
    try:
        rep = run_fuzz(cfg, seed, count, simulator, progress=progress, mem=mem, shrink_first=shrink,
                       waves_dir=waves_dir, waves=waves_format, mac=mac)
    except CosimUnavailable as e:
        raise TetrachipError(f"fuzz: {e}") from None
    for b in bars:
        b.close()
    cov = rep["coverage"]
    banks = f", banks of {cfg.spm_bank_rows}/{cfg.acc_bank_rows} SPM/ACC rows" if cfg.spm_bank_rows > 1 else ""
    macs = f", mac {mac}" if mac != "dsp" else ""
    click.echo(f"config {rep['config']} (mem {rep['mem']}{banks}{macs}), {rep['simulator']}: "
               f"{rep['programs']} programs "
               f"({rep['illegal']} illegal, {rep['raced']} raced: not compared), seeds {seed}..{seed + count - 1}, "
               f"{rep['rtl_cycles']} RTL cycles, {rep['wall_s']} s")
    click.echo(f"mismatches: {rep['mismatches']}")
    click.echo(f"coverage: {len(cov['opcodes'])} opcodes / tokens / faults, {cov['points']} points "
               f"(opcode x repeat depth x operand mode)")
    for mn, e in cov["opcodes"].items():
        click.echo(f"  {mn:<10} depths {','.join(map(str, e['depths'])):<10} modes {len(e['modes']):>3}")
    if cov["missing"]:
        click.echo(f"opcodes never covered: {', '.join(cov['missing'])}")
    fn = rep["functional"]
    click.echo(f"functional coverage: {fn['hit']} of {fn['of']} points hit")
    if fn["missing"]:
        click.echo("  not hit: " + ", ".join(fn["missing"]))
    for r in rep["reports"][:show]:
        click.echo(r)
    if rep["failing_seeds"]:
        click.echo(f"failing seeds: {' '.join(map(str, rep['failing_seeds']))}")
    sh = rep.get("shrunk")
    if sh:
        click.echo(f"shrunk seed {sh['seed']} from {sh['lines_from']} to {sh['lines_to']} instruction lines "
                   f"({sh['rounds']} rounds, {sh['tried']} candidates, {sh['seconds']:.1f} s); "
                   f"replay the original: tetrachip fuzz --config {config} --seed {sh['seed']} --count 1")
        for c, src in enumerate(sh["sources"]):
            click.echo(f"--- shrunk program, chip {c}")
            click.echo(src.rstrip())
        regs = sh.get("regs") or {}
        click.echo("--- host registers of chip 0 (shrunk): "
                   + (", ".join(f"r{r}={v}" for r, v in sorted(regs.items())) or "none (all 0)"))
        if sh["report"]:
            click.echo(sh["report"].splitlines()[0] + " (shrunk): " + "; ".join(sh["report"].splitlines()[1:3]))
    if rep.get("waves"):
        click.echo(f"waves: {rep['waves']}" + ("" if rep["waves_mismatch"] else
                                               " (the mismatch did not show in this fresh run)"))
    if json_out:
        write_atomic(json_out, json.dumps(rep, indent=1, default=list))
    if not rep["ok"]:
        sys.exit(1)


def _compiler_fuzz(config: str | None, seed: int, count: int, json_out: Path | None, show: int) -> None:
    from runtime.device import Device
    from verify.compiler_fuzz import run_fuzz
    devices: dict = {}
    device_for = lambda name: devices.setdefault(name, Device("sim", config=name))
    if config is not None:
        ChipConfig.load(config)             # an unknown config is a one-line error before any model
    try:
        from tqdm import tqdm
        bar = tqdm(total=count, desc="fuzz --compiler", unit="model", file=sys.stderr)
        rep = run_fuzz(device_for, seed, count, config, progress=bar.update)
        bar.close()
    except ImportError:
        rep = run_fuzz(device_for, seed, count, config)
    fails = rep["failures"]
    click.echo(f"compiler fuzz, config {config or 'tiny/small'}: {rep['graphs']} models, "
               f"seeds {seed}..{seed + count - 1}, {rep['seconds']} s")
    click.echo(f"  ok        {rep['ok']:>6}  (largest |chip - float| / bound {rep['worst_ratio']:.3f})")
    click.echo(f"  refused   {rep['refused']:>6}")
    for what, n in rep["refused_by"].items():
        click.echo(f"    {what:<34} {n:>6}")
    click.echo("  refused, by the model's layer that brought it (layer: the op the compiler named):")
    for what, n in rep["refused_by_layer"].items():
        click.echo(f"    {what:<34} {n:>6}")
    click.echo(f"  failures  {len(fails):>6}")
    click.echo(f"  {'op':<12} {'in models':>9} {'compiled':>9}")
    for op, n in sorted(rep["ops"].items(), key=lambda kv: -kv[1]):
        click.echo(f"  {op:<12} {n:>9} {rep['ops_ok'].get(op, 0):>9}")
    for f in fails[:show]:
        click.echo(f"\nseed {f['seed']} ({f['config']}): {f['kind']}: {f['message'].splitlines()[0]}")
        click.echo(f"replay: {f['replay']}")
        click.echo(f"shrunk from {f['layers']} to {f['shrunk_layers']} layers: {f['shrunk_message'].splitlines()[0]}")
        click.echo(f["shrunk"])
    if fails:
        click.echo(f"failing seeds: {' '.join(str(f['seed']) for f in fails)}")
    if json_out:
        write_atomic(json_out, json.dumps(rep, indent=1))
    if fails:
        sys.exit(1)

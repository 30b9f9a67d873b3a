"""``tetrachip fuzz``: constrained-random programs on the RTL (cocotb) against the simulator."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from isa import ChipConfig
from isa.errors import TetrachipError
from rtl.mem import IMPLS


@click.command("fuzz")
@click.option("--config", "config", default="tiny", show_default=True,
              help="config preset (tiny, small, base, large, tpu) or a .toml/.json file")
@click.option("--seed", default=0, show_default=True, type=int, help="first seed; case i uses seed + i")
@click.option("--count", default=100, show_default=True, type=click.IntRange(min=1), help="programs to run")
@click.option("--sim", "simulator", default=None, type=click.Choice(["verilator", "icarus"]),
              help="HDL simulator (default: $SIM, else verilator)")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the figures and coverage as JSON")
@click.option("--show", default=3, show_default=True, help="mismatch reports to print in full")
@click.option("--mem", default=None, type=click.Choice(IMPLS),
              help="SPM/ACC as built: flat (default, or $TETRACHIP_COSIM_MEM) or the FPGA builds' "
                   "live-value-table memories (docs/fpga.md)")
def fuzz_cmd(config: str, seed: int, count: int, simulator: str | None, json_out: Path | None, show: int,
             mem: str | None) -> None:
    """Run COUNT random programs on the Verilog of a 2-chip ring and on the simulator; compare
    memories, cycles, error codes and per-instruction retire cycles. Exit 1 on any mismatch or an
    opcode never covered."""
    from verify.cosim import CosimUnavailable
    from verify.fuzz import run_fuzz
    cfg = ChipConfig.load(config)
    try:
        from tqdm import tqdm
        bar = tqdm(total=count, desc=f"fuzz {cfg.name}", unit="prog", file=sys.stderr)
        rep = run_fuzz(cfg, seed, count, simulator, progress=bar.update, mem=mem)
        bar.close()
    except CosimUnavailable as e:
        raise TetrachipError(f"fuzz: {e}") from None
    cov = rep["coverage"]
    click.echo(f"config {rep['config']} (mem {rep['mem']}), {rep['simulator']}: {rep['programs']} programs "
               f"({rep['illegal']} illegal), seeds {seed}..{seed + count - 1}, {rep['rtl_cycles']} RTL cycles, "
               f"{rep['wall_s']} s")
    click.echo(f"mismatches: {rep['mismatches']}")
    click.echo(f"coverage: {len(cov['opcodes'])} opcodes / tokens / faults, {cov['points']} points "
               f"(opcode x repeat depth x operand mode)")
    for mn, e in cov["opcodes"].items():
        click.echo(f"  {mn:<10} depths {','.join(map(str, e['depths'])):<10} modes {len(e['modes']):>3}")
    if cov["missing"]:
        click.echo(f"opcodes never covered: {', '.join(cov['missing'])}")
    for r in rep["reports"][:show]:
        click.echo(r)
    if json_out:
        try:
            json_out.write_text(json.dumps({k: v for k, v in rep.items()}, indent=1, default=list))
        except OSError as e:
            raise TetrachipError(f"{json_out}: cannot write: {e.strerror}") from None
    if not rep["ok"]:
        sys.exit(1)

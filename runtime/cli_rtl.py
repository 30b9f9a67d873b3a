"""``tetrachip verilog``: write the Verilog of one chip or a ring of chips."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import click

from isa import ChipConfig
from isa.errors import TetrachipError


@click.command("verilog")
@click.option("--config", "config", default="tiny", show_default=True,
              help="config preset (tiny, small, base, large, tpu) or a .toml/.json file")
@click.option("--chips", default=1, show_default=True, type=click.IntRange(min=1),
              help="1: one Chip; N > 1: a Ring of N chips joined by their links")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Verilog file to write")
@click.option("--name", default=None, help="top module name (default tetrachip_CONFIG)")
def verilog_cmd(config: str, chips: int, output: Path, name: str | None) -> None:
    """Generate Verilog of the chip (Amaranth RTL, builtin Yosys)."""
    from rtl.verilog import generate

    cfg = ChipConfig.load(config)
    t, c = time.monotonic(), _cpu()
    text = generate(cfg, chips, name)
    try:
        output.write_text(text)
    except OSError as e:
        raise TetrachipError(f"{output}: cannot write: {e.strerror}") from None
    click.echo(f"{output}: {'ring of %d chips' % chips if chips > 1 else 'chip'} for config {cfg.name}, "
               f"{len(text.splitlines())} lines, {time.monotonic() - t:.1f} s ({_cpu() - c:.1f} CPU-s with Yosys)",
               err=True)


def _cpu() -> float:
    """CPU seconds of this process and its children (the builtin Yosys runs as a child)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

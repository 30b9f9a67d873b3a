"""``tetrachip verilog``: write the Verilog of one chip or a ring of chips."""

from __future__ import annotations

import re
import resource
import time
from pathlib import Path

import click

from isa import ChipConfig
from isa.errors import TetrachipError
from isa.outputs import write_atomic
from runtime.cli_args import CONFIG, OUTPUT_FILE, check_output

#: most chips of a generated ring (Yosys elaborates every chip: a ring of 64 tiny chips takes minutes)
MAX_RING_CHIPS = 64
#: a Verilog simple identifier (IEEE 1364: a letter or _, then letters, digits, _ and $)
VERILOG_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def _check_name(ctx, param, value: str | None) -> str | None:
    if value is not None and not VERILOG_IDENTIFIER.fullmatch(value):
        raise click.BadParameter(f"{value!r} is not a Verilog identifier (a letter or _, then letters, digits, "
                                 f"_ or $)")
    return value


@click.command("verilog")
@click.option("--config", "config", type=CONFIG, default="tiny", show_default=True,
              help="config preset (tiny, small, base, large, tpu) or a .toml/.json file")
@click.option("--chips", default=1, show_default=True, type=click.IntRange(1, MAX_RING_CHIPS),
              help="1: one Chip; N > 1: a Ring of N chips joined by their links")
@click.option("-o", "--output", type=OUTPUT_FILE, required=True,
              help="Verilog file to write")
@click.option("--name", default=None, callback=_check_name,
              help="top module name, a Verilog identifier (default tetrachip_CONFIG)")
def verilog_cmd(config: str, chips: int, output: Path, name: str | None) -> None:
    """Generate Verilog of the chip (Amaranth RTL, builtin Yosys)."""
    from rtl.verilog import generate

    sources = [config] if Path(config).is_file() else []
    check_output(output, "-o", inputs=sources)
    cfg = ChipConfig.load(config)
    t, c = time.monotonic(), _cpu()
    try:
        text = generate(cfg, chips, name)
    except Exception as e:
        if type(e).__name__ != "YosysError":
            raise
        raise TetrachipError(f"verilog: Yosys refused the design{f' named {name!r}' if name else ''}: "
                             f"{str(e).strip().splitlines()[0] if str(e).strip() else e!r}") from None
    write_atomic(output, text, inputs=sources)
    click.echo(f"{output}: {'ring of %d chips' % chips if chips > 1 else 'chip'} for config {cfg.name}, "
               f"{len(text.splitlines())} lines, {time.monotonic() - t:.1f} s ({_cpu() - c:.1f} CPU-s with Yosys)",
               err=True)


def _cpu() -> float:
    """CPU seconds of this process and its children (the builtin Yosys runs as a child)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

"""The ``tetrachip`` command line: one program, a subcommand per job.

Every subcommand turns a user error into one line on stderr and exit status 1 (click's own
usage errors exit 2); no traceback reaches the user.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from isa import ChipConfig, Program, assemble_file
from isa.errors import TetrachipError


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TetrachipError as e:
            click.echo(str(e), err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tetrachip")
def main() -> None:
    """tetrachip: ISA, simulator, RTL and compiler of a small int8 ML accelerator."""


def _config(spec: str | None) -> ChipConfig | None:
    return None if spec is None else ChipConfig.load(spec)


CONFIG_HELP = "config preset (tiny, small, base, large, tpu) or a .toml/.json file"


@main.command()
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="binary to write (default: SOURCE with .bin)")
@click.option("--config", "config", default=None, help=CONFIG_HELP + " (default: the file's .config, else base)")
@click.option("--listing", is_flag=True, help="print pc, word and instruction for every line")
def asm(source: Path, output: Path | None, config: str | None, listing: bool) -> None:
    """Assemble SOURCE (.s) into a program binary."""
    prog = assemble_file(source, _config(config))
    out = output or source.with_suffix(".bin")
    try:
        prog.save(out)
    except OSError as e:
        raise TetrachipError(f"{out}: cannot write: {e.strerror}") from None
    if listing:
        click.echo(prog.listing(), nl=False)
    click.echo(f"{source}: {len(prog)} instructions for config {prog.config.name} -> {out}", err=True)


@main.command()
@click.argument("binary", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--config", "config", default=None, help=CONFIG_HELP + " (default: the one named in the binary)")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="write the text here instead of stdout")
def disasm(binary: Path, config: str | None, output: Path | None) -> None:
    """Disassemble BINARY; the text re-assembles to the same bytes."""
    text = Program.load(binary, _config(config)).disassemble()
    if output:
        output.write_text(text)
    else:
        click.echo(text, nl=False)


if __name__ == "__main__":
    main()

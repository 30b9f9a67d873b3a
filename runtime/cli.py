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


def _parse_args(text: str | None) -> dict[int, int]:
    """``r1=5,r2=-7`` (or ``1=5``) -> {1: 5, 2: -7}; values in any Python integer spelling."""
    out: dict[int, int] = {}
    for item in filter(None, (x.strip() for x in (text or "").split(","))):
        name, eq, value = item.partition("=")
        reg = name.strip().lower().lstrip("r")
        try:
            if not eq:
                raise ValueError
            out[int(reg)] = int(value.strip(), 0)
        except ValueError:
            raise TetrachipError(f"--args: {item!r} is not REG=VALUE (e.g. r1=5,r2=0x10)") from None
    return out


def _load_dram(chip, path: Path) -> None:
    """Write every array of an .npz into DRAM at the address its key names: ``0x100`` or ``name@0x100``."""
    import numpy as np
    try:
        data = np.load(path)
    except (OSError, ValueError) as e:
        raise TetrachipError(f"{path}: cannot read DRAM image: {e}") from None
    for key in data.files:
        addr_text = key.rpartition("@")[2]
        try:
            addr = int(addr_text, 0)
        except ValueError:
            raise TetrachipError(f"{path}: array {key!r}: the key must be ADDRESS or NAME@ADDRESS "
                                 f"(e.g. x@0x100)") from None
        chip.write_dram(addr, np.ascontiguousarray(data[key]))


@main.command()
@click.argument("program", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--config", "config", default=None,
              help=CONFIG_HELP + " (default: the binary's, or the source's .config, else base)")
@click.option("--dram", type=click.Path(dir_okay=False, path_type=Path),
              help=".npz whose arrays are written to DRAM at the address each key names (0x100 or x@0x100)")
@click.option("--args", "args", default=None, help="scalar registers written before launch: r1=5,r2=-7")
@click.option("--trace", "trace", type=click.Path(dir_okay=False, path_type=Path),
              help="write a Chrome/Perfetto trace (JSON) of every instruction instance")
@click.option("--line-trace", "line_trace", type=click.Path(dir_okay=False, path_type=Path),
              help="write the fixed-column line trace (one line per retired instance)")
@click.option("--plot", "plot", type=click.Path(dir_okay=False, path_type=Path),
              help="write a PNG: per-unit timeline and utilization (turns tracing on)")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="write Stats as JSON")
@click.option("--dump", "dump", type=click.Path(dir_okay=False, path_type=Path),
              help="write the final DRAM, SPM and ACC to this .npz")
@click.option("--max-cycles", "max_cycles", type=click.IntRange(min=1), default=None,
              help="stop with CYCLE_LIMIT beyond this many cycles (default: a limit derived from the program, "
                   "docs/simulator.md \"Cycle limit\")")
def sim(program: Path, config: str | None, dram: Path | None, args: str | None, trace: Path | None,
        line_trace: Path | None, plot: Path | None, json_out: Path | None, dump: Path | None,
        max_cycles: int | None) -> None:
    """Run PROGRAM (.s or .bin) on the cycle-level simulator and print its Stats.

    The --trace JSON holds one slice per instruction instance and counter tracks: each unit's queue
    occupancy and DRAM bytes per cycle (docs/simulator.md). When the chip stops with an error, the
    outputs asked for are still written, up to the error (the error line names them)."""
    import json

    from isa.outputs import check_writable, write_atomic
    from sim import Chip, SimError
    inputs = [program] + ([dram] if dram else [])
    outputs = {"--trace": trace, "--line-trace": line_trace, "--plot": plot, "--json": json_out, "--dump": dump}
    for flag, path in outputs.items():          # before the run: every output can be written
        if path is not None:
            check_writable(path, inputs=inputs, what=flag)
    if program.suffix == ".bin":
        prog = Program.load(program, _config(config))
    else:
        prog = assemble_file(program, _config(config))
    if plot:
        from runtime.plots import check_output
        check_output(plot)
    chip = Chip(prog.config, trace=bool(trace or line_trace or plot))
    chip.load(prog)
    if dram:
        _load_dram(chip, dram)
    chip.set_args(_parse_args(args))
    error: SimError | None = None
    try:
        stats = chip.run(max_cycles)
    except SimError as e:
        error, stats = e, chip.stats            # the Stats and trace up to the error
    if error is None:
        click.echo(stats.table())
    written = []
    try:
        if json_out:
            write_atomic(json_out, json.dumps(stats.to_dict(), indent=2) + "\n", inputs=inputs)
            written.append(f"--json {json_out}")
        if trace and chip.trace is not None:
            write_atomic(trace, json.dumps(chip.trace.to_chrome()), inputs=inputs)
            written.append(f"--trace {trace}")
        if line_trace and chip.trace is not None:
            write_atomic(line_trace, chip.trace.line_trace(), inputs=inputs)
            written.append(f"--line-trace {line_trace}")
        if plot:
            from runtime.plots import plot_run
            how = f"{stats.cycles} cycles" if error is None else f"stopped by {error.code.name} at cycle {error.cycle}"
            plot_run(stats, chip.trace, plot, title=f"{program.name} on {stats.config}: {how}")
            written.append(f"--plot {plot}")
            if error is None:
                click.echo(f"plot: {plot}")
        if dump:
            import numpy as np

            def _npz(f):
                np.savez_compressed(f, dram=chip.dram, spm=chip.spm, acc=chip.acc)
            write_atomic(dump, _npz, inputs=inputs)
            written.append(f"--dump {dump}")
    except OSError as e:
        raise TetrachipError(f"cannot write output: {e}") from None
    if error is not None:
        if written:
            raise TetrachipError(f"{error} (written up to the error: {', '.join(written)})")
        raise error


main.add_command(__import__("runtime.cli_rtl", fromlist=["verilog_cmd"]).verilog_cmd)
main.add_command(__import__("runtime.cli_run", fromlist=["run_cmd"]).run_cmd)
main.add_command(__import__("runtime.cli_fpga", fromlist=["fpga_cmd"]).fpga_cmd)
main.add_command(__import__("runtime.cli_fuzz", fromlist=["fuzz_cmd"]).fuzz_cmd)
main.add_command(__import__("runtime.cli_sweep", fromlist=["sweep_cmd"]).sweep_cmd)
main.add_command(__import__("runtime.cli_bench", fromlist=["bench_cmd"]).bench_cmd)

if __name__ == "__main__":
    main()

"""The ``tetrachip`` command line: one program, a subcommand per job.

No traceback reaches the user; every error is one line on stderr, and the exit status says whose it is:

* **0** the job ran and passed;
* **2** a usage error, found before any work starts: an unknown option or a bad option value (a
  negative ``--max-cycles``, ``--freq 0``, an unknown ``--mac``), a missing, unreadable or folder input
  file, an unknown config name, an output that cannot be written (its folder is missing) or that
  would overwrite one of the command's inputs;
* **1** an error in an input's content (a source that does not assemble, a config file with a bad
  value, a model whose shapes do not match, an array of the wrong type) or in the run (the chip stops
  with an error, a compare fails);
* **70** an internal error: a bug in tetrachip (please report it; ``TETRACHIP_TRACEBACK=1`` shows
  its traceback);
* **130** interrupted (Ctrl-C).

Outputs (``-o``, ``--json``, ``--trace``, ``--dump``...) are checked before the work starts and written
atomically (``isa.outputs``): a failure leaves the old file or none, never half a file, and no
output may name one of the command's inputs. Option checks shared by the subcommands live in
``runtime/cli_args.py``.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import click

from isa import ChipConfig, Program, assemble_file
from isa.errors import TetrachipError
from isa.outputs import write_atomic
from runtime.cli_args import CONFIG, INPUT_FILE, OUTPUT_FILE, check_output, check_suffix, usage_error

#: exit status of an internal error (a bug): BSD's EX_SOFTWARE
EXIT_INTERNAL = 70

EPILOG = ("Exit status: 0 done; 1 an error in an input's content or in the run; 2 a usage error (a bad "
          "option value, a missing input file, an output that cannot be written), found before any work; "
          "70 an internal error (a bug; TETRACHIP_TRACEBACK=1 shows it).")


#: click's "no arguments: show the help" (click >= 8.2; never raised by older versions)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


class _Group(click.Group):
    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as e:       # `tetrachip` or `tetrachip fpga` alone: the help, as click shows it
            e.show()
            sys.exit(2)
        except click.UsageError as e:      # also BadParameter, NoSuchOption, MissingParameter
            path = e.ctx.command_path if e.ctx is not None else (prog_name or "tetrachip")
            click.echo(f"{path}: {_one_line(e.format_message())} (see {path} --help)", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"{prog_name or 'tetrachip'}: {_one_line(e.format_message())}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except TetrachipError as e:
            click.echo(_one_line(str(e)), err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except OSError as e:
            if e.errno == errno.EPIPE:                  # output piped into a reader that closed it: click's own case
                raise
            where = f"{e.filename}: " if e.filename else ""
            click.echo(f"{where}{e.strerror or _one_line(str(e))}", err=True)
            sys.exit(1)
        except MemoryError:
            click.echo("out of memory (a config or an input too large for this machine)", err=True)
            sys.exit(1)
        except Exception as e:
            if os.environ.get("TETRACHIP_TRACEBACK"):
                raise
            click.echo(f"internal error (a bug in tetrachip; please report it, with TETRACHIP_TRACEBACK=1 for "
                       f"the traceback): {type(e).__name__}: {_one_line(str(e))[:300]}", err=True)
            sys.exit(EXIT_INTERNAL)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(package_name="tetrachip")
def main() -> None:
    """tetrachip: ISA, simulator, RTL and compiler of a small int8 ML accelerator."""


def _config(spec: str | None) -> ChipConfig | None:
    return None if spec is None else ChipConfig.load(spec)


CONFIG_HELP = "config preset (tiny, small, base, large, tpu) or a .toml/.json file"


@main.command()
@click.argument("source", type=INPUT_FILE)
@click.option("-o", "--output", type=OUTPUT_FILE, help="binary to write (default: SOURCE with .bin)")
@click.option("--config", "config", type=CONFIG, default=None,
              help=CONFIG_HELP + " (default: the file's .config, else base)")
@click.option("--listing", is_flag=True, help="print pc, word and instruction for every line")
def asm(source: Path, output: Path | None, config: str | None, listing: bool) -> None:
    """Assemble SOURCE (.s) into a program binary."""
    out = check_output(output or source.with_suffix(".bin"), "-o", inputs=[source], what="binary")
    prog = assemble_file(source, _config(config))
    write_atomic(out, prog.to_bytes(), inputs=[source], what="binary")
    if listing:
        click.echo(prog.listing(), nl=False)
    click.echo(f"{source}: {len(prog)} instructions for config {prog.config.name} -> {out}", err=True)


@main.command()
@click.argument("binary", type=INPUT_FILE)
@click.option("--config", "config", type=CONFIG, default=None,
              help=CONFIG_HELP + " (default: the one named in the binary)")
@click.option("-o", "--output", type=OUTPUT_FILE, help="write the text here instead of stdout")
def disasm(binary: Path, config: str | None, output: Path | None) -> None:
    """Disassemble BINARY; the text re-assembles to the same bytes."""
    check_output(output, "-o", inputs=[binary], what="text")
    text = Program.load(binary, _config(config)).disassemble()
    if output:
        write_atomic(output, text, inputs=[binary], what="text")
    else:
        click.echo(text, nl=False)


def _parse_args(text: str | None, scalar_regs: int | None = None) -> dict[int, int]:
    """``r1=5,r2=-7`` (or ``1=5``) -> {1: 5, 2: -7}; values in any Python integer spelling, each within a
    scalar register (signed or unsigned 32-bit, ``isa.semantics``) and naming a register r1.. of the config.
    Anything else is a usage error of ``--args``: never a silently truncated value."""
    from isa import semantics as sem
    out: dict[int, int] = {}
    for item in filter(None, (x.strip() for x in (text or "").split(","))):
        name, eq, value = item.partition("=")
        reg = name.strip().lower()
        reg = reg[1:] if reg.startswith("r") else reg
        try:
            if not eq or not reg.isdigit():
                raise ValueError
            r, v = int(reg), int(value.strip(), 0)
        except ValueError:
            raise usage_error(f"{item!r} is not REG=VALUE (e.g. r1=5,r2=0x10; VALUE an integer literal)",
                              "--args") from None
        if sem.wrap32_int(v) != v and sem.u32(v) != v:
            raise usage_error(f"{item!r}: {v} does not fit a 32-bit scalar register "
                              f"({sem.wrap32_int(1 << 31)}..{sem.u32(-1)})", "--args")
        if scalar_regs is not None and not 0 < r < scalar_regs:
            raise usage_error(f"{item!r}: no scalar register r{r} to write (r1..r{scalar_regs - 1}; r0 reads "
                              f"as zero)", "--args")
        if r in out:
            raise usage_error(f"{item!r}: r{r} is given twice", "--args")
        out[r] = v
    return out


def _load_dram(chip, path: Path) -> None:
    """Write every array of an .npz into DRAM at the address its key names: ``0x100`` or ``name@0x100``."""
    import numpy as np
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":                  # an .npz is a zip archive
            raise TetrachipError(f"{path}: a DRAM image is an .npz of arrays keyed by address (np.savez); this "
                                 f"file is not one")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001  (numpy raises OSError, ValueError, zipfile and zlib errors)
        raise TetrachipError(f"{path}: cannot read DRAM image: {_one_line(str(e))}") from None
    with data:
        for key in data.files:
            addr_text = key.rpartition("@")[2]
            try:
                addr = int(addr_text, 0)
            except ValueError:
                raise TetrachipError(f"{path}: array {key!r}: the key must be ADDRESS or NAME@ADDRESS "
                                     f"(e.g. x@0x100)") from None
            try:
                arr = data[key]
            except Exception as e:  # noqa: BLE001  (an object array, a corrupt member)
                raise TetrachipError(f"{path}: array {key!r}: cannot read: {_one_line(str(e))}") from None
            if arr.dtype.kind not in "biuf":
                raise TetrachipError(f"{path}: array {key!r} has dtype {arr.dtype}; DRAM takes numeric arrays "
                                     f"(bool, int, uint, float)")
            chip.write_dram(addr, np.ascontiguousarray(arr))


@main.command()
@click.argument("program", type=INPUT_FILE)
@click.option("--config", "config", type=CONFIG, default=None,
              help=CONFIG_HELP + " (default: the binary's, or the source's .config, else base)")
@click.option("--dram", type=INPUT_FILE,
              help=".npz whose arrays are written to DRAM at the address each key names (0x100 or x@0x100)")
@click.option("--args", "args", default=None, help="scalar registers written before launch: r1=5,r2=-7")
@click.option("--trace", "trace", type=OUTPUT_FILE,
              help="write a Chrome/Perfetto trace (JSON) of every instruction instance")
@click.option("--line-trace", "line_trace", type=OUTPUT_FILE,
              help="write the fixed-column line trace (one line per retired instance)")
@click.option("--plot", "plot", type=OUTPUT_FILE,
              help="write a PNG: per-unit timeline and utilization (turns tracing on)")
@click.option("--json", "json_out", type=OUTPUT_FILE, help="write Stats as JSON")
@click.option("--dump", "dump", type=OUTPUT_FILE,
              help="write the final DRAM, SPM and ACC to this .npz (the name must end in .npz)")
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

    from sim import Chip, SimError
    inputs = [p for p in (program, dram, config) if p is not None and Path(p).is_file()]
    check_suffix(dump, "--dump", (".npz",))
    check_suffix(plot, "--plot", (".png",))
    for path, option in ((json_out, "--json"), (trace, "--trace"), (line_trace, "--line-trace"), (plot, "--plot"),
                         (dump, "--dump")):
        check_output(path, option, inputs=inputs)
    _parse_args(args)                   # its syntax and ranges before any work; its registers once loaded
    if program.suffix == ".bin":
        prog = Program.load(program, _config(config))
    else:
        prog = assemble_file(program, _config(config))
    reg_args = _parse_args(args, prog.config.scalar_regs)
    chip = Chip(prog.config, trace=bool(trace or line_trace or plot))
    chip.load(prog)
    if dram:
        _load_dram(chip, dram)
    chip.set_args(reg_args)
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
            write_atomic(dump, lambda f: np.savez_compressed(f, dram=chip.dram, spm=chip.spm, acc=chip.acc),
                         inputs=inputs)
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

"""Option types and checks shared by the ``tetrachip`` subcommands (``runtime/cli.py`` states the exit-status
rule they serve: a usage error exits 2 with one line, an error in an input's content or in the run exits 1).

Every subcommand validates its options and names its outputs here before its long work starts: an input
file must exist and be a readable file (``INPUT_FILE``), a config must name a preset or a readable file
(``CONFIG``), a number must be finite and in range (``PositiveFloat``), an output path must be writable and
not one of the command's inputs (``check_output``: ``isa.outputs.check_writable``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import click

from isa.errors import TetrachipError
from isa.outputs import check_writable

#: an input file: it must exist, be a file (not a folder) and be readable; else a usage error (exit 2)
INPUT_FILE = click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)
#: an output file: checked by ``check_output`` before the long work
OUTPUT_FILE = click.Path(dir_okay=False, path_type=Path)


def usage_error(message: str, option: str | None = None) -> click.UsageError:
    """A usage error (exit 2, one line) about ``option`` (e.g. ``"--args"``), raised by the caller."""
    ctx = click.get_current_context(silent=True)
    if option:
        return click.BadParameter(message, ctx=ctx, param_hint=f"'{option}'")
    return click.UsageError(message, ctx=ctx)


def check_output(path: Path | None, option: str, *, inputs: Iterable[Path | str | None] = (),
                 what: str | None = None) -> Path | None:
    """``path`` (None passes) if a file can be written there and it is none of ``inputs``; else a usage error
    naming ``option``. Called before the command's long work (``isa.outputs.check_writable``)."""
    if path is None:
        return None
    try:
        return check_writable(path, inputs=[p for p in inputs if p is not None], what=what or f"{option} output")
    except TetrachipError as e:
        raise usage_error(str(e), option) from None


def check_suffix(path: Path | None, option: str, suffixes: tuple[str, ...]) -> None:
    """A usage error unless ``path`` (None passes) ends with one of ``suffixes`` (said, never appended)."""
    if path is not None and path.suffix.lower() not in suffixes:
        raise usage_error(f"{path}: the file must end in {' or '.join(suffixes)} (this option writes that "
                          f"format and does not add the suffix itself)", option)


class PositiveFloat(click.ParamType):
    """A finite number > 0 (a frequency, a time limit): not NaN, not inf, not 0, not negative."""

    name = "float"

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(v) or v <= 0:
            self.fail(f"{value!r} must be a finite number > 0", param, ctx)
        return v


class ConfigSpec(click.ParamType):
    """A config preset name, or a .toml/.json file that exists and is readable; returned as given (the
    command loads it, and an error in the file's content exits 1)."""

    name = "config"

    def convert(self, value, param, ctx):
        from isa.config import PRESETS
        s = str(value)
        if s in PRESETS:
            return s
        p = Path(s)
        try:
            is_file, exists = p.is_file(), p.exists()
        except (OSError, ValueError):
            is_file = exists = False
        if is_file:
            try:
                with open(p, "rb"):
                    pass
            except OSError as e:
                self.fail(f"{s}: cannot read config: {e.strerror}", param, ctx)
            return s
        if exists:
            self.fail(f"{s}: is a folder, not a config file", param, ctx)
        if s.endswith((".toml", ".json")):
            self.fail(f"{s}: no such config file", param, ctx)
        self.fail(f"unknown config {s!r}; presets: {', '.join(PRESETS)}, or a .toml/.json file", param, ctx)


CONFIG = ConfigSpec()

"""Writing output files safely: one place for every tool that writes a file a user named.

``check_writable`` is called before long work starts (a synthesis, a simulation) so a bad path fails
in a second, not after the work; ``write_atomic`` writes through a temporary file in the same folder
and renames it over the target, so a failure leaves the old file (or none), never half of a new one.
Both refuse to write over a file the same command reads (``inputs``)."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from isa.errors import TetrachipError


def check_writable(path: str | Path, *, inputs: Iterable[str | Path] = (), what: str = "output") -> Path:
    """The output path, resolved, or a TetrachipError naming why it cannot be written: its folder is
    missing or not a folder, it is a folder itself, it is not writable, or it is one of ``inputs``."""
    p = Path(path)
    if p.exists() and p.is_dir():
        raise TetrachipError(f"{p}: {what} is a folder, not a file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise TetrachipError(f"{p}: folder {parent} does not exist")
    if not parent.is_dir():
        raise TetrachipError(f"{p}: {parent} is not a folder")
    for src in inputs:
        s = Path(src)
        try:
            same = p.exists() and s.exists() and os.path.samefile(p, s)
        except OSError:
            same = False
        if same or p.resolve() == s.resolve():
            raise TetrachipError(f"{p}: {what} would overwrite the input {s}; name another file")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise TetrachipError(f"{p}: not writable")
    return p


def check_outputs(parser: argparse.ArgumentParser, *paths: str | Path | None) -> None:
    """``check_writable`` for a script's output options, before its work: the first that cannot be
    written ends the script through ``parser.error`` (an ``argparse`` parser: usage and one line, exit 2)."""
    for path in paths:
        if path is not None:
            try:
                check_writable(path)
            except TetrachipError as e:
                parser.error(str(e))


def write_atomic(path: str | Path, data: bytes | str | Callable[[IO[bytes]], None], *,
                 inputs: Iterable[str | Path] = (), what: str = "output") -> Path:
    """Write ``data`` (bytes, text, or a function that writes to a binary file object) to ``path``
    atomically: a temporary file beside it, then a rename. Checks the path first (``check_writable``)."""
    def write_to(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
    return write_atomic_via(path, write_to, inputs=inputs, what=what)


def write_atomic_via(path: str | Path, write_to: Callable[[Path], object], *,
                     inputs: Iterable[str | Path] = (), what: str = "output") -> Path:
    """``write_atomic`` for a writer that takes a path (a library that picks the format by the suffix,
    as a table or a figure writer does): ``write_to`` writes a temporary file with ``path``'s suffix
    beside it, which is then renamed over ``path``."""
    p = check_writable(path, inputs=inputs, what=what)
    parent = p.parent if str(p.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{p.stem}.", suffix=f".tmp{p.suffix}", dir=parent)
    os.close(fd)
    try:
        write_to(Path(tmp))
        os.chmod(tmp, _mode(p))
        os.replace(tmp, p)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise TetrachipError(f"{p}: cannot write: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _mode(p: Path) -> int:
    """The permissions the file gets: an existing file's own, else what a plain open() would give
    (0666 less the umask; mkstemp's temporary files are 0600)."""
    try:
        return p.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask

"""``tetrachip bench [NAME]``: list the benchmark scripts of bench/, or run one with the same Python."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import click

from isa.errors import TetrachipError
from runtime.cli_args import OUTPUT_FILE, check_output, usage_error

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def scripts(bench_dir: Path = BENCH_DIR) -> dict[str, str]:
    """name -> the first line of its docstring, for every bench/*.py."""
    if not bench_dir.is_dir():
        raise TetrachipError(f"bench: no {bench_dir} (the benchmark scripts ship with a source checkout)")
    out = {}
    for p in sorted(bench_dir.glob("*.py")):
        try:
            out[p.stem] = _first_doc_line(p, p.stat().st_mtime_ns)
        except OSError:
            out[p.stem] = ""
    return out


@functools.lru_cache(maxsize=256)
def _first_doc_line(path: Path, mtime_ns: int) -> str:
    """The first line of a script's docstring (parsed once per version of the file)."""
    try:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    except (OSError, SyntaxError, ValueError):
        doc = ""
    return (doc.splitlines() or [""])[0]


@click.command("bench", context_settings={"ignore_unknown_options": True})
@click.argument("name", required=False)
@click.option("--quick", is_flag=True, help="the script's short run")
@click.option("--json", "json_out", type=OUTPUT_FILE, default=None,
              help="the script writes its results here as JSON")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
def bench_cmd(name: str | None, quick: bool, json_out: Path | None, extra: tuple[str, ...]) -> None:
    """Without NAME: list the benchmark scripts. With NAME: run bench/NAME.py (further arguments go to the
    script, e.g. --configs base) and exit with its status."""
    found = scripts()
    if name is None:
        width = max(map(len, found), default=0)
        for n, doc in found.items():
            click.echo(f"{n:<{width}}  {doc}")
        return
    name = name.removesuffix(".py")
    if name not in found:
        raise usage_error(f"no script {name!r}; scripts: {', '.join(found)}", "NAME")
    script = BENCH_DIR / f"{name}.py"
    for flag, wanted in (("--quick", quick), ("--json", json_out)):
        if wanted and f'"{flag}"' not in script.read_text():
            raise usage_error(f"bench {name}: the script takes no {flag}", flag)
    check_output(json_out, "--json", inputs=[script])
    cmd = [sys.executable, str(script), *(["--quick"] if quick else []),
           *(["--json", str(json_out)] if json_out else []), *extra]
    rc = subprocess.call(cmd)
    if rc:
        sys.exit(rc)

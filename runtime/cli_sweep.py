"""``tetrachip sweep SPEC.toml``: ChipConfig fields x workloads on the simulator, run on Dask
(``runtime.sweep``, docs/sweep.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from runtime.sweep import SweepResult

from isa.errors import TetrachipError
from isa.outputs import write_atomic_via
from runtime.cli_args import INPUT_FILE, OUTPUT_FILE, check_output, check_suffix, usage_error

#: most local worker processes per CPU ``--workers`` may start
MAX_WORKERS_PER_CPU = 4


@click.command("sweep")
@click.argument("spec", type=INPUT_FILE)
@click.option("--json", "json_out", type=OUTPUT_FILE, default=None,
              help="write the table as JSON (one object per point x workload)")
@click.option("--csv", "csv_out", type=OUTPUT_FILE, default=None,
              help="write the table as CSV")
@click.option("--parquet", "parquet_out", type=OUTPUT_FILE, default=None,
              help="write the table as Parquet (needs pyarrow)")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="address of a running Dask scheduler (tcp://host:8786) [default: a local cluster]")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="worker processes of the local cluster [default: the CPU count]; 0 runs in this process")
@click.option("--cache", "cache", type=click.Path(file_okay=False, path_type=Path), default=Path(".sweep-cache"),
              show_default=True, help="directory of cached rows (a re-run simulates only new points)")
@click.option("--no-cache", is_flag=True, help="neither read nor write the cache")
@click.option("--show", default=20, show_default=True, type=click.IntRange(min=0), help="rows to print (0: none)")
def sweep_cmd(spec: Path, json_out: Path | None, csv_out: Path | None, parquet_out: Path | None,
              scheduler: str | None, workers: int | None, cache: Path, no_cache: bool, show: int) -> None:
    """Compile every workload of SPEC for every ChipConfig point of its [grid] or [random] section, run it
    on the simulator and tabulate cycles, MXU utilization, DRAM bytes and instructions. A failed point is a
    row with its error; the sweep goes on. Exit 1 on a bad spec."""
    from runtime.sweep import load_spec, run_sweep, write_table
    if workers is not None and workers > MAX_WORKERS_PER_CPU * (os.cpu_count() or 1):
        raise usage_error(f"{workers} worker processes on {os.cpu_count()} CPUs; at most {MAX_WORKERS_PER_CPU} per CPU",
                          "--workers")
    if scheduler is not None and workers is not None:
        raise usage_error("--workers sizes the local cluster; with --scheduler the cluster is yours", "--workers")
    for p, option, suffix in ((json_out, "--json", ".json"), (csv_out, "--csv", ".csv"),
                              (parquet_out, "--parquet", ".parquet")):
        check_suffix(p, option, (suffix,))
        check_output(p, option, inputs=[spec])
    if not no_cache and cache.exists() and not cache.is_dir():
        raise usage_error(f"{cache}: is a file, not a folder", "--cache")
    s = load_spec(spec)
    if parquet_out is not None:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise TetrachipError(f"{parquet_out}: Parquet needs pyarrow, which is not installed "
                                 "(pip install pyarrow); use --json or --csv") from None
    from tqdm import tqdm
    click.echo(f"{spec}: {len(s.points)} points x {len(s.workloads)} workloads on {s.base.name} "
               f"({', '.join(s.fields)})", err=True)
    with tqdm(total=s.size, desc="sweep", unit="run", file=sys.stderr) as bar:
        res = run_sweep(s, cache_dir=None if no_cache else cache, scheduler=scheduler, workers=workers,
                        progress=bar.update)
    if show:
        click.echo(_table(res, show))
    for p in (json_out, csv_out, parquet_out):
        if p is not None:
            write_atomic_via(p, lambda tmp: write_table(res, tmp))
    click.echo(res.summary(), err=True)


def _table(res: SweepResult, limit: int) -> str:
    cols = [c for c in res.columns if c not in ("dram_read", "dram_write")]
    rows = [[_fmt(r[c]) for c in cols] for r in res.rows[:limit]]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    if len(res.rows) > limit:
        lines.append(f"... {len(res.rows) - limit} more rows (--show, --json, --csv)")
    return "\n".join(lines)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."

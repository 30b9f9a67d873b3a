"""PNG plots of runs outside notebooks: a run's per-unit timeline and utilization, and bar charts for benches.

matplotlib (Agg backend, no display needed) is imported only when a plot is drawn. Every writer checks its
output path first (``check_output``: one clear error before any work) and writes atomically (a temporary file
in the same folder, then a rename), so a failed plot never leaves half a PNG behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from isa import TetrachipError
from isa.outputs import check_writable, write_atomic

#: Above this many trace records the timeline is drawn binned (fraction of each bin a unit is busy).
MAX_BARS = 3000
#: Bins of a binned timeline.
TIMELINE_BINS = 800


def check_output(path: str | Path) -> Path:
    """``path`` as a Path if a PNG can be written there, else one TetrachipError naming it."""
    p = Path(path)
    if p.is_dir():
        raise TetrachipError(f"{p}: is a folder; --plot wants a file name such as run.png")
    if p.suffix.lower() != ".png":
        raise TetrachipError(f"{p}: --plot writes PNG; name the file *.png")
    return check_writable(p, what="plot")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def _save(fig: Any, path: Path) -> None:
    try:
        write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"), what="plot")
    finally:
        _pyplot().close(fig)


def _busy_fraction(spans: list[tuple[int, int]], end: int, bins: int):
    """Per bin, the fraction of its cycles in which at least one span [start, last] is active."""
    import numpy as np
    width = max(1, -(-end // bins))
    n = -(-end // width)
    busy = np.zeros(n)
    merged: list[list[int]] = []
    for s, last in sorted(spans):
        if merged and s <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([s, last])
    for s, last in merged:
        for b in range(s // width, min(last // width, n - 1) + 1):
            busy[b] += max(0, min(last + 1, (b + 1) * width) - max(s, b * width))
    return width, busy / width


def utilization_bars(stats: Any) -> tuple[list[str], list[float], list[str], str]:
    """The utilization panel of ``plot_run``: bar names, heights (%), labels and title. A run that does not
    measure unit busy cycles (the RTL's ``RtlStats.NOT_MEASURED``) gets empty bars labelled "not
    measured" for the units, never zeros drawn as if measured; the MXU's MAC utilization is measured
    on both."""
    from sim.stats import UNIT_NAMES
    cyc = max(stats.cycles, 1)
    measured = "busy" not in getattr(stats, "NOT_MEASURED", ())
    vals = [100 * stats.busy[n] / cyc if measured else 0.0 for n in UNIT_NAMES] + [100 * stats.mxu_utilization]
    labels = [f"{v:.1f}%" if measured else "not measured" for v in vals[:-1]] + [f"{vals[-1]:.1f}%"]
    title = ("busy cycles / cycles per unit; MXU: MACs / (rows x cols x cycles)" if measured else
             "MXU: MACs / (rows x cols x cycles); unit busy cycles are not measured on the RTL")
    return list(UNIT_NAMES) + ["mxu MACs"], vals, labels, title


def plot_run(stats: Any, trace: Any, path: str | Path, title: str | None = None) -> Path:
    """Draw ``trace``'s per-unit timeline (one lane per unit of each chip) above ``stats``' per-unit
    utilization (busy cycles / cycles, and MXU MAC utilization) into the PNG ``path``."""
    from sim.stats import UNIT_NAMES
    p = check_output(path)
    plt = _pyplot()
    recs = list(trace.records) if trace is not None else []
    chips = sorted({r.chip for r in recs}) or [0]
    lanes = [(c, u) for c in chips for u in range(len(UNIT_NAMES))]
    end = max([stats.cycles] + [(r.retire if r.retire is not None else r.start) + 1 for r in recs])
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(11, 2.2 + 0.35 * len(lanes) + 2.6),
                                 gridspec_kw={"height_ratios": [max(len(lanes), 3), 4]})
    colors = plt.get_cmap("tab10").colors
    binned = len(recs) > MAX_BARS
    for y, (c, u) in enumerate(lanes):
        spans = [(r.start, r.retire if r.retire is not None else r.start) for r in recs if r.chip == c and r.unit == u]
        if not spans:
            continue
        if binned:
            width, busy = _busy_fraction(spans, end, TIMELINE_BINS)
            xs = [i * width for i in range(len(busy))]
            ax.fill_between(xs, y - 0.4, y - 0.4 + 0.8 * busy, step="post", color=colors[u % 10], lw=0)
        else:
            ax.broken_barh([(s, last - s + 1) for s, last in spans], (y - 0.4, 0.8), color=colors[u % 10],
                          edgecolor="white", linewidth=0.4)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([(f"chip {c} " if len(chips) > 1 else "") + UNIT_NAMES[u] for c, u in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, max(end, 1))
    ax.set_xlabel("cycle")
    how = f"binned, {TIMELINE_BINS} bins: lane height = busy fraction" if binned else "one bar per instance"
    ax.set_title(title or f"{stats.config}: {stats.cycles} cycles ({how})")
    names, vals, labels, subtitle = utilization_bars(stats)
    bars = bx.bar(names, vals, color=[colors[i % 10] for i in range(len(UNIT_NAMES))] + ["black"])
    bx.bar_label(bars, labels=labels, fontsize=8)
    bx.set_ylabel("utilization %")
    bx.set_ylim(0, max(100.0, max(vals) * 1.1))
    bx.set_title(subtitle)
    fig.tight_layout()
    _save(fig, p)
    return p


def plot_bars(path: str | Path, labels: Sequence[str], series: Mapping[str, Sequence[float]],
              title: str = "") -> Path:
    """One bar chart per entry of ``series`` (its name: the y label), stacked vertically, over ``labels``."""
    p = check_output(path)
    if not labels:
        raise TetrachipError(f"{p}: nothing to plot (no rows)")
    plt = _pyplot()
    fig, axes = plt.subplots(len(series), 1, figsize=(max(6.0, 0.5 * len(labels) + 2), 2.8 * len(series)),
                             squeeze=False, sharex=True)
    for ax, (name, vals) in zip(axes[:, 0], series.items()):
        bars = ax.bar(range(len(labels)), list(vals))
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
        ax.set_ylabel(name)
    axes[-1, 0].set_xticks(range(len(labels)))
    axes[-1, 0].set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
    if title:
        axes[0, 0].set_title(title)
    fig.tight_layout()
    _save(fig, p)
    return p

"""PNG plots of runs (tetrachip sim/run --plot) and the Perfetto counter tracks of the simulator's trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from isa import TetrachipError, assemble_file
from isa.timing import QUEUE_DEPTH
from runtime import plots
from runtime.cli import main
from sim import Chip

EX = Path(__file__).resolve().parents[2] / "examples"
PNG = b"\x89PNG\r\n\x1a\n"
MODEL = """
import numpy as np
import tetrachip as tc
w = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
model = lambda x: x @ tc.Tensor(w)
inputs = [np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)]
"""


@pytest.fixture(scope="module")
def gemm_run():
    prog = assemble_file(EX / "gemm_tiled.s", None)
    chip = Chip(prog.config, trace=True)
    chip.load(prog)
    stats = chip.run()
    return stats, chip.trace


def test_plot_run_writes_png_both_ways(gemm_run, tmp_path, monkeypatch):
    stats, trace = gemm_run
    p = plots.plot_run(stats, trace, tmp_path / "a.png")
    assert p.read_bytes()[:8] == PNG
    monkeypatch.setattr(plots, "MAX_BARS", 1)           # the binned timeline of long runs
    plots.plot_run(stats, trace, tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:8] == PNG
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.png", "b.png"]    # no temporary file left


def test_plot_paths_are_checked(tmp_path):
    for bad, word in ((tmp_path / "no" / "x.png", "does not exist"), (tmp_path, "folder"),
                      (tmp_path / "x.jpg", "PNG")):
        with pytest.raises(TetrachipError, match=word):
            plots.check_output(bad)
    with pytest.raises(TetrachipError, match="nothing to plot"):
        plots.plot_bars(tmp_path / "e.png", [], {"cycles": []})
    plots.plot_bars(tmp_path / "c.png", ["a", "b"], {"cycles": [3, 5], "util %": [10.0, 20.0]}, "t")
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG


def test_queue_counter_tracks(gemm_run):
    stats, trace = gemm_run
    ev = trace.to_chrome()["traceEvents"]
    queues = [e for e in ev if e["ph"] == "C" and e["name"].startswith("queue ")]
    assert {e["name"] for e in queues} >= {"queue load", "queue mxu", "queue store"}
    vals = [e["args"]["entries"] for e in queues]
    # an entry holds its slot from issue through its last instance's start; the issue stage admits one
    # only when the oldest of the last QUEUE_DEPTH has left, so QUEUE_DEPTH bounds the occupancy exactly
    assert min(vals) >= 0 and max(vals) <= QUEUE_DEPTH
    assert max(vals) >= 2                                # the tiled GEMM does queue work ahead
    for name in {e["name"] for e in queues}:             # each track returns to empty by the end
        assert [e for e in queues if e["name"] == name][-1]["args"]["entries"] == 0
    # every instance's queue was occupied at its entry's issue cycle
    occ = {u: trace.queue_occupancy(0, u) for u in range(1, 7)}
    for r in trace.records[:50]:
        if r.unit:
            level = [n for t, n in occ[r.unit] if t <= r.issue]
            assert level and level[-1] >= 1


def test_dram_counter_track_sums_to_stats(gemm_run):
    stats, trace = gemm_run
    doc = trace.to_chrome()
    width = doc["otherData"]["dram_bin_cycles"]
    dram = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "dram bytes/cycle"]
    assert dram and all(e["args"]["read"] >= 0 and e["args"]["write"] >= 0 for e in dram)
    # events hold until the next one: integrate value x cycles over the track
    total = sum((b["ts"] - a["ts"]) * (a["args"]["read"] + a["args"]["write"]) for a, b in zip(dram, dram[1:]))
    assert total == pytest.approx(stats.bytes["dram_read"] + stats.bytes["dram_write"], rel=1e-9)
    assert total > 0
    w2, rd, wr = trace.dram_rate(0, max_bins=7)          # coarser bins keep the sum
    assert len(rd) <= 7 and (rd.sum() + wr.sum()) * w2 == pytest.approx(total, rel=1e-9)
    assert width >= 1


def test_cli_sim_plot(tmp_path):
    out = tmp_path / "g.png"
    r = CliRunner().invoke(main, ["sim", str(EX / "gemm_tiled.s"), "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == PNG and f"plot: {out}" in r.output
    r = CliRunner().invoke(main, ["sim", str(EX / "gemm_tiled.s"), "--plot", str(tmp_path / "no" / "g.png")])
    assert r.exit_code != 0 and "does not exist" in r.output
    assert "MXU utilization" not in r.output           # refused before running
    assert "Traceback" not in r.output


def test_cli_run_plot(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(MODEL)
    out = tmp_path / "r.png"
    r = CliRunner().invoke(main, ["run", str(f), "--config", "small", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == PNG
    r = CliRunner().invoke(main, ["run", str(f), "--device", "numpy", "--plot", str(out)])
    assert r.exit_code != 0 and "no timeline" in r.output
    r = CliRunner().invoke(main, ["run", str(f), "--plot", str(tmp_path / "no" / "r.png")])
    assert r.exit_code != 0 and "does not exist" in r.output and "cycles" not in r.output


def test_series_by_hand():
    from isa import Unit
    from sim.stats import Trace
    t = Trace()
    t.add(0, int(Unit.LOAD), 1, 0, "a", 0, 1, 9, 7)      # entry issued at 0, instances start at 1 and 2
    t.add(0, int(Unit.LOAD), 1, 1, "a", 0, 2, 10, 7)
    t.add(0, int(Unit.LOAD), 2, 0, "b", 1, 3, 4, 10)     # entry issued at 1, starts at 3
    assert t.queue_occupancy(0, int(Unit.LOAD)) == [(0, 1), (1, 2), (3, 1), (4, 0)]
    width, rd, wr = t.dram_rate(0, max_bins=4)           # cycles 0..10: width 3, 4 bins
    assert width == 3 and wr.tolist() == [0, 0, 0, 0]
    # 7 bytes over 1..9 (one a cycle, cycles 1..7), 7 over 2..10 (cycles 2..8), 10 over 3..4 (5 a cycle)
    assert (rd * 3).tolist() == [2 + 1, 3 + 3 + 10, 2 + 3, 0 + 0]
    width, busy = plots._busy_fraction([(0, 3), (2, 5), (10, 10)], 12, 3)
    assert width == 4 and busy.tolist() == [1.0, 0.5, 0.25]


def test_rtl_stats_draw_no_unit_bars_as_if_measured(gemm_run, tmp_path):
    """The RTL does not measure unit busy cycles: the plot labels those bars "not measured" (no height),
    keeps the MXU's MAC utilization it does measure, and the simulator's run draws every bar."""
    import dataclasses
    from runtime.sim_backend import RtlStats
    stats, trace = gemm_run
    names, vals, labels, _ = plots.utilization_bars(stats)
    assert any(v > 0 for v in vals[:-1]) and "not measured" not in labels
    rtl = RtlStats(**{f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)})
    names, vals, labels, title = plots.utilization_bars(rtl)
    assert labels[:-1] == ["not measured"] * (len(names) - 1) and vals[:-1] == [0.0] * (len(names) - 1)
    assert stats.mxu_utilization > 0 and vals[-1] == pytest.approx(100 * stats.mxu_utilization)
    assert "not measured on the RTL" in title
    assert plots.plot_run(rtl, None, tmp_path / "rtl.png").read_bytes()[:8] == PNG

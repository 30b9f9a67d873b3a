"""tetrachip sweep (runtime.sweep): spec expansion, the content-hash cache, failed points as rows, the Dask
scheduler path; tetrachip bench lists the bench scripts."""
import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tetrachip as tc
from runtime.cli import main
from runtime.sweep import SweepError, load_spec, run_sweep

TIMES = ("compile_s", "sim_s")


def _figures(rows):
    return [{k: v for k, v in r.items() if k not in TIMES} for r in rows]


def test_grid_is_the_product_in_order():
    s = load_spec({"base": "small", "workloads": ["gemm:8x8x8", "mlp"],
                   "grid": {"rows": [4, 8], "dram_latency": [8, 16, 32]}})
    assert s.fields == ("rows", "dram_latency") and s.base.name == "small"
    assert s.points == tuple({"rows": r, "dram_latency": d} for r in (4, 8) for d in (8, 16, 32))
    assert s.size == 12


def test_random_sample_is_reproducible_by_seed():
    spec = {"workloads": ["mlp"], "random": {"n": 30, "seed": 7, "rows": [4, 8, 16], "dram_latency": [8, 16, 64]}}
    a, b = load_spec(spec), load_spec(spec)
    c = load_spec(spec | {"random": spec["random"] | {"seed": 8}})
    assert a.points == b.points and a.points != c.points and len(a.points) == 30
    assert {p["rows"] for p in a.points} <= {4, 8, 16} and {p["dram_latency"] for p in a.points} <= {8, 16, 64}
    assert len({p["rows"] for p in a.points}) > 1            # it does vary


@pytest.mark.parametrize("spec, match", [
    ({"workloads": ["mlp"], "grid": {"rowz": [4]}}, "'rowz' is not a ChipConfig field"),
    ({"workloads": ["mlp"]}, "exactly one of"),
    ({"workloads": ["mlp"], "grid": {"rows": [4]}, "random": {"n": 2}}, "exactly one of"),
    ({"workloads": ["resnet"], "grid": {"rows": [4]}}, "workload 'resnet': unknown"),
    ({"workloads": ["gemm:8x8"], "grid": {"rows": [4]}}, "expected gemm:MxKxN"),
    ({"workloads": [], "grid": {"rows": [4]}}, "non-empty list"),
    ({"workloads": ["mlp"], "random": {"rows": [4]}}, r"\[random\] n"),
    ({"workloads": ["mlp"], "grid": {"rows": ["x"]}}, "list of numbers"),
    ({"workloads": ["mlp"], "grid": {"rows": [4]}, "extra": 1}, "unknown key"),
    ({"base": 3, "workloads": ["mlp"], "grid": {"rows": [4]}}, "base must be"),
])
def test_bad_specs_name_the_problem(spec, match):
    with pytest.raises(SweepError, match=match):
        load_spec(spec)


def test_rows_match_a_direct_compile_and_the_cache_skips_done_points(tmp_path):
    spec = {"base": "small", "workloads": ["gemm:16x24x8"], "grid": {"dram_latency": [8, 64]}}
    first = run_sweep(load_spec(spec), cache_dir=tmp_path, workers=0)
    assert (first.simulated, first.cached, first.failed) == (2, 0, 0)
    fast, slow = first.rows
    assert slow["cycles"] > fast["cycles"] > 0                       # DRAM latency costs cycles
    assert fast["dram_bytes"] == fast["dram_read"] + fast["dram_write"] > 0
    # the same point through the public API
    import numpy as np
    cfg = dataclasses.replace(tc.ChipConfig.load("small"), dram_latency=8)
    rng = np.random.default_rng(16 + 24 + 8 + len("gemm"))
    w = rng.standard_normal((24, 8)).astype(np.float32)
    x = rng.standard_normal((16, 24)).astype(np.float32)
    cm = tc.compile(lambda a: a @ tc.Tensor(w), [x], config=cfg)
    st = tc.Device("sim", config=cfg).run(cm, x).stats
    assert (fast["cycles"], fast["instructions"], fast["dram_read"]) == (st.cycles, st.instructions,
                                                                         st.bytes["dram_read"])
    # the counters an energy estimate needs: MXU work and on-chip memory traffic
    assert fast["mxu_macs"] == st.mxu_macs >= 16 * 24 * 8
    assert [fast[k] for k in ("spm_read", "spm_write", "acc_read", "acc_write")] == \
        [st.bytes[k] for k in ("spm_read", "spm_write", "acc_read", "acc_write")]
    assert fast["spm_write"] >= 16 * 24 + 24 * 8                     # x and W land in the scratchpad as int8
    # a re-run with one new point simulates only that one
    more = spec | {"grid": {"dram_latency": [8, 64, 32]}}
    again = run_sweep(load_spec(more), cache_dir=tmp_path, workers=0)
    assert (again.simulated, again.cached) == (1, 2)
    assert _figures(again.rows[:2]) == _figures(first.rows)


def test_failed_points_are_rows_and_the_sweep_goes_on(tmp_path):
    spec = {"base": "base", "workloads": ["gemm:64x64x64"],
            "grid": {"rows": [16, 32], "spm_rows": [32768, 16]}}
    res = run_sweep(load_spec(spec), cache_dir=tmp_path, workers=0)
    by = {(r["rows"], r["spm_rows"]): r for r in res.rows}
    assert by[(16, 32768)]["error"] is None and by[(16, 32768)]["cycles"] > 0
    bad = by[(32, 32768)]["error"]
    assert bad.startswith("ConfigError") and "rows (32) must be <= cols" in bad
    assert by[(16, 16)]["error"].startswith("ChipCompileError") and "spm_rows" in by[(16, 16)]["error"]
    assert by[(16, 16)]["cycles"] is None and res.failed == 3
    # deterministic failures are cached too
    assert run_sweep(load_spec(spec), cache_dir=tmp_path, workers=0).simulated == 0


def _dask_cluster(tmp_path):
    """A Dask scheduler and one worker started as separate processes (``dask scheduler`` / ``dask worker``, as
    on a cluster of machines); returns (address, processes)."""
    import subprocess
    import sys
    import time
    root = Path(__file__).resolve().parents[2]
    sfile = tmp_path / "scheduler.json"
    common = dict(cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file",
                               str(sfile), "--port", "0", "--no-dashboard"], **common)]
    deadline = time.monotonic() + 60
    while not sfile.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sfile.exists(), "the dask scheduler did not start"
    procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                   str(sfile), "--nworkers", "1", "--nthreads", "1", "--no-dashboard"], **common))
    return json.loads(sfile.read_text())["address"], procs


def test_scheduler_address_gives_the_default_table(tmp_path):
    distributed = pytest.importorskip("distributed")
    spec = load_spec({"base": "small", "workloads": ["gemm:16x16x16", "mlp"], "grid": {"rows": [4, 8]}})
    local = run_sweep(spec, cache_dir=None, workers=1)                     # the default: a local cluster
    address, procs = _dask_cluster(tmp_path)
    try:
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
        remote = run_sweep(spec, cache_dir=None, scheduler=address)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    inline = run_sweep(spec, cache_dir=None, workers=0)
    assert remote.simulated == local.simulated == 4 and remote.failed == 0
    assert _figures(remote.rows) == _figures(local.rows) == _figures(inline.rows)


def test_cli_writes_json_and_csv_and_reports_bad_specs(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('base = "small"\nworkloads = ["gemm:8x8x8"]\n[grid]\ndram_latency = [8, 16]\n')
    out, csv_out = tmp_path / "t.json", tmp_path / "t.csv"
    r = CliRunner().invoke(main, ["sweep", str(spec), "--workers", "0", "--cache", str(tmp_path / "c"),
                                  "--json", str(out), "--csv", str(csv_out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())
    assert [row["dram_latency"] for row in rows] == [8, 16] and all(row["cycles"] > 0 for row in rows)
    lines = csv_out.read_text().splitlines()
    assert lines[0].startswith("dram_latency,workload,cycles,") and len(lines) == 3
    r = CliRunner().invoke(main, ["sweep", str(spec), "--workers", "0", "--cache", str(tmp_path / "c")])
    assert r.exit_code == 0 and "0 simulated, 2 from the cache" in r.output

    spec.write_text('workloads = ["mlp"]\n[grid]\nrowz = [4]\n')
    r = CliRunner().invoke(main, ["sweep", str(spec), "--workers", "0"])
    assert r.exit_code == 1 and "'rowz' is not a ChipConfig field" in r.output and "Traceback" not in r.output
    spec.write_text("workloads = [\n")
    r = CliRunner().invoke(main, ["sweep", str(spec)])
    assert r.exit_code == 1 and "not valid TOML" in r.output
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "missing.toml")])
    assert r.exit_code == 2 and "does not exist" in r.output             # a usage error (runtime/cli.py)
    r = CliRunner().invoke(main, ["sweep", str(spec), "--workers", "-1"])
    assert r.exit_code == 2


def test_parquet_without_pyarrow_says_so(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "pyarrow", None)                     # import pyarrow -> ImportError
    spec = tmp_path / "s.toml"
    spec.write_text('base = "small"\nworkloads = ["gemm:8x8x8"]\n[grid]\ndram_latency = [8]\n')
    r = CliRunner().invoke(main, ["sweep", str(spec), "--workers", "0", "--parquet", str(tmp_path / "t.parquet")])
    assert r.exit_code == 1 and "Parquet needs pyarrow" in r.output


def test_parquet_table_equals_the_json_table(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    spec = tmp_path / "s.toml"
    spec.write_text('base = "small"\nworkloads = ["gemm:8x8x8", "gemm:16x8x24"]\n[grid]\ndram_latency = [8, 32]\n')
    out = ["--json", str(tmp_path / "t.json"), "--parquet", str(tmp_path / "t.parquet")]
    r = CliRunner().invoke(main, ["sweep", str(spec), "--workers", "0", "--no-cache", *out])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "t.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    table = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert len(table) == len(rows) == 4
    for a, b in zip(table, rows):
        assert a["workload"] == b["workload"] and a["cycles"] == b["cycles"] and a["dram_latency"] == b["dram_latency"]


def test_bench_lists_the_scripts_and_refuses_unknown_names():
    r = CliRunner().invoke(main, ["bench"])
    assert r.exit_code == 0
    names = {line.split()[0] for line in r.output.splitlines()}
    assert {"models", "search", "sim_vs_scalesim"} <= names
    r = CliRunner().invoke(main, ["bench", "nosuch"])
    assert r.exit_code == 2 and "no script 'nosuch'" in r.output
    assert "bench" in CliRunner().invoke(main, ["--help"]).output and \
        "sweep" in CliRunner().invoke(main, ["--help"]).output


def test_a_repeated_point_is_simulated_once():
    spec = load_spec({"base": "small", "workloads": ["gemm:8x8x8"], "grid": {"rows": [4, 4, 8]}})
    seen = []
    res = run_sweep(spec, cache_dir=None, workers=0, progress=seen.append)
    assert res.simulated == 2 and sum(seen) == 3 and len(res.rows) == 3
    assert _figures(res.rows[:1]) == _figures(res.rows[1:2]) != _figures(res.rows[2:])


def test_bench_refuses_a_flag_the_script_does_not_take():
    r = CliRunner().invoke(main, ["bench", "search_control", "--quick"])       # it has --json only
    assert r.exit_code == 2 and "takes no --quick" in r.output


def test_bench_runs_a_script_with_its_json(tmp_path):
    out = tmp_path / "sc.json"
    r = CliRunner().invoke(main, ["bench", "search_control", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())


def test_base_config_file_next_to_the_spec(tmp_path):
    (tmp_path / "chip.toml").write_text('name = "mine"\nrows = 8\ncols = 8\nspm_rows = 2048\n')
    (tmp_path / "s.toml").write_text('base = "chip.toml"\nworkloads = ["mlp"]\n[grid]\ndram_latency = [8]\n')
    s = load_spec(tmp_path / "s.toml")
    assert (s.base.name, s.base.cols, s.base.spm_rows) == ("mine", 8, 2048)


def test_the_example_spec_loads():
    from pathlib import Path
    s = load_spec(Path(__file__).resolve().parents[2] / "examples" / "sweep.toml")
    assert len(s.points) == 200 and len(s.workloads) == 4

"""bench/models.py and bench/sim_vs_scalesim.py --plot: a PNG of the rows, a bad path refused before any run."""

from __future__ import annotations

import pytest

from bench import models, sim_vs_scalesim      # bench/ (no __init__.py) from the rootdir on pytest's pythonpath

PNG = b"\x89PNG\r\n\x1a\n"


def test_models_plot_real_case(tmp_path, capsys):
    out, js = tmp_path / "m.png", tmp_path / "m.json"
    assert models.main(["--quick", "--configs", "small", "--only", "gemm 100x300x77", "--plot", str(out),
                        "--json", str(js)]) == 0
    assert out.read_bytes()[:8] == PNG and f"plot: {out}" in capsys.readouterr().out


def test_models_plot_rows_skips_errors(tmp_path):
    rows = [{"model": "a", "config": "small", "cycles": 100, "mxu_utilization": 0.5},
            {"model": "b", "config": "small", "error": "does not fit"}]
    models.plot_rows(rows, tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG


@pytest.mark.parametrize("mod", [models, sim_vs_scalesim])
def test_bad_plot_path_refused_first(mod, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        mod.main(["--quick", "--no-scalesim" if mod is sim_vs_scalesim else "--configs=small",
                  "--plot", str(tmp_path / "missing" / "p.png")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err


def test_models_plot_refuses_search(tmp_path, capsys):
    with pytest.raises(SystemExit):
        models.main(["--search", "--plot", str(tmp_path / "p.png")])
    assert "--search" in capsys.readouterr().err


def test_scalesim_plot_results(tmp_path):
    results = [{"case": "64x64x64", "array": "16x16", "tetrachip": {"cycles": 1200, "utilization": 0.9},
                "scalesim": {"cycles": 1500, "utilization_macs": 0.6}},
               {"case": "100x300x77", "array": "16x16", "tetrachip": {"cycles": 9000, "utilization": 0.8},
                "scalesim": None}]
    sim_vs_scalesim.plot_results(results, tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:8] == PNG

"""bench/sim_vs_scalesim.py runs our side of every case (SCALE-Sim is left out here) and writes JSON."""

from __future__ import annotations

import json

from bench import sim_vs_scalesim as mod      # bench/ (no __init__.py) from the rootdir on pytest's pythonpath


def test_bench_our_side(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert mod.main(["--no-scalesim", "--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    cases = {c["case"]: c for c in data["cases"]}
    assert set(cases) == {"64x64x64", "256x256x256", "512x512x512", "100x300x77", "1024x1024x1024"}
    for c in cases.values():
        o = c["tetrachip"]
        assert o["correct"] and o["cycles"] > 0 and c["scalesim"] is None
        side = int(c["array"].split("x")[0])
        assert abs(o["utilization"] - c["M"] * c["K"] * c["N"] / (side ** 2 * o["cycles"])) < 1e-12
    # SCALE-Sim's published utilizations for these cases (bench/scalesim_runner.py reports)
    scalesim = {"64x64x64": 0.582, "256x256x256": 0.848, "512x512x512": 0.918, "100x300x77": 0.651,
                "1024x1024x1024": 0.728}
    for k, u in scalesim.items():
        assert cases[k]["tetrachip"]["utilization"] >= u
    assert cases["512x512x512"]["tetrachip"]["utilization"] >= 0.95
    assert "512x512x512" in capsys.readouterr().out

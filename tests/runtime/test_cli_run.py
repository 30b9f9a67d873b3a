"""tetrachip run FILE.py: numpy and sim devices, JSON and trace outputs, one-line errors."""
import json

import numpy as np
from click.testing import CliRunner

from runtime.cli import main

MODEL = """
import numpy as np
import tetrachip as tc
w = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
model = lambda x: x @ tc.Tensor(w)
inputs = [np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)]
labels = np.argmax(inputs[0] @ w, axis=1)
"""


def test_run_sim_and_numpy_agree(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(MODEL)
    r = CliRunner().invoke(main, ["run", str(f), "--device", "sim", "--config", "small",
                                  "--json", str(tmp_path / "o.json"), "--trace", str(tmp_path / "t.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "o.json").read_text())
    assert rep["stats"]["cycles"] > 0 and rep["accuracy"] == 1.0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    r2 = CliRunner().invoke(main, ["run", str(f), "--device", "numpy", "--json", str(tmp_path / "n.json")])
    assert r2.exit_code == 0, r2.output
    rep2 = json.loads((tmp_path / "n.json").read_text())
    assert np.isclose(rep["outputs"][0]["absmax"], rep2["outputs"][0]["absmax"], rtol=0.05)


def test_run_errors_are_one_line(tmp_path, monkeypatch):
    f = tmp_path / "bad.py"
    f.write_text("x = 1\n")
    r = CliRunner().invoke(main, ["run", str(f)])
    assert r.exit_code == 1 and "defines no `model`" in r.output
    g = tmp_path / "prod.py"
    g.write_text(MODEL.replace("model = lambda x: x @ tc.Tensor(w)", "model = lambda x: (x @ tc.Tensor(w)).prod(1)")
                 .replace("labels = np.argmax(inputs[0] @ w, axis=1)", ""))       # a 1-d output has no classes
    r = CliRunner().invoke(main, ["run", str(g), "--device", "sim"])
    assert r.exit_code == 1 and "PROD" in r.output and "Traceback" not in r.output
    monkeypatch.setattr("verify.cosim.available", lambda sim: "not installed")    # no HDL simulator
    r = CliRunner().invoke(main, ["run", str(g), "--device", "rtl"])
    assert r.exit_code == 1 and "co-simulation" in r.output and "Traceback" not in r.output


def test_run_on_several_chips(tmp_path):
    """--chips 2: the model sharded, each chip's stats, the outputs equal to the single chip's reference."""
    f = tmp_path / "m.py"
    f.write_text(MODEL)
    for parallel in ("data", "tensor"):
        out = tmp_path / f"{parallel}.json"
        r = CliRunner().invoke(main, ["run", str(f), "--device", "sim", "--config", "small", "--chips", "2",
                                      "--parallel", parallel, "--json", str(out), "--trace", str(tmp_path / "t.json")])
        assert r.exit_code == 0, r.output
        rep = json.loads(out.read_text())
        assert rep["chips"] == 2 and rep["parallel"] == parallel and len(rep["stats"]) == 2
        assert rep["max_abs_vs_reference"] == 0 and rep["accuracy"] == 1.0
        assert rep["cycles"] == max(s["cycles"] for s in rep["stats"])
        assert "2 chips (" in r.output and "chip 1:" in r.output
    for argv, msg in ((["--chips", "2", "--device", "numpy"], "not --device numpy"),
                      (["--chips", "2", "--plot", str(tmp_path / "p.png")], "--plot"),
                      (["--chips", "0"], "--chips")):
        r = CliRunner().invoke(main, ["run", str(f), *argv])
        assert r.exit_code in (1, 2) and msg in r.output and "Traceback" not in r.output, r.output

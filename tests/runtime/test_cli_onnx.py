"""tetrachip run MODEL.onnx --input FILE.npy: numpy, sim (bit-exact to the compiled reference),
OpenCL; JSON; one-line errors for missing files, unloadable arrays, wrong inputs."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from runtime.cli import main  # noqa: E402

RNG = np.random.default_rng(7)


def _write_model(tmp_path):
    """(a, b) -> relu(a @ W + c) and softmax(b): two inputs, two outputs."""
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    c = RNG.standard_normal(4).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "W"], ["m"]), helper.make_node("Add", ["m", "c"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"]), helper.make_node("Softmax", ["b"], ["z"], axis=-1)],
        "cli",
        [helper.make_tensor_value_info("a", TP.FLOAT, [3, 6]), helper.make_tensor_value_info("b", TP.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [3, 4]), helper.make_tensor_value_info("z", TP.FLOAT, [2, 5])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(c, "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    a, b = RNG.standard_normal((3, 6)).astype(np.float32), RNG.standard_normal((2, 5)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})
    return path, want


def _run(*args):
    return CliRunner().invoke(main, ["run", *map(str, args)])


def test_numpy_device_matches_onnxruntime(tmp_path):
    path, want = _write_model(tmp_path)
    r = _run(path, "--input", tmp_path / "a.npy", "--input", tmp_path / "b.npy", "--device", "numpy",
             "--json", tmp_path / "n.json")
    assert r.exit_code == 0, r.output
    assert "output 0 (y): shape (3, 4)" in r.output and "output 1 (z): shape (2, 5)" in r.output
    rep = json.loads((tmp_path / "n.json").read_text())
    assert [o["shape"] for o in rep["outputs"]] == [[3, 4], [2, 5]]
    for o, w in zip(rep["outputs"], want):
        np.testing.assert_allclose(o["first"], w.reshape(-1)[:6], rtol=1e-4, atol=1e-5)
        assert np.isclose(o["absmax"], np.abs(w).max(), rtol=1e-5)


def test_sim_is_bit_exact_to_the_reference_and_reports_the_chip(tmp_path):
    path, want = _write_model(tmp_path)
    # inputs by name, in the other order
    r = _run(path, "--input", f"b={tmp_path / 'b.npy'}", "--input", f"a={tmp_path / 'a.npy'}", "--device", "sim",
             "--config", "tiny", "--json", tmp_path / "s.json")
    assert r.exit_code == 0, r.output
    assert "max |chip - reference| = 0" in r.output and "MXU utilization" in r.output
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["max_abs_vs_reference"] == 0
    assert rep["stats"]["cycles"] > 0 and rep["stats"]["instructions"] > 0 and rep["stats"]["mxu_macs"] > 0
    for o, w in zip(rep["outputs"], want):                     # int8 chip: close to the float model
        assert np.isclose(o["absmax"], np.abs(w).max(), rtol=0.1)


def test_opencl_device(tmp_path):
    from tests.gpu.gpu_helpers import device_or_skip
    device_or_skip("opencl")
    path, want = _write_model(tmp_path)
    r = _run(path, "--input", tmp_path / "a.npy", "--input", tmp_path / "b.npy", "--device", "opencl",
             "--json", tmp_path / "o.json")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "o.json").read_text())
    for o, w in zip(rep["outputs"], want):
        np.testing.assert_allclose(o["first"], w.reshape(-1)[:6], rtol=1e-4, atol=1e-4)


def test_rtl_without_an_hdl_simulator_is_one_line(tmp_path, monkeypatch):
    path, _ = _write_model(tmp_path)
    monkeypatch.setattr("verify.cosim.available", lambda sim: "not installed")
    r = _run(path, "--input", tmp_path / "a.npy", "--input", tmp_path / "b.npy", "--device", "rtl", "--config", "tiny")
    assert r.exit_code == 1 and "co-simulation" in r.output and "Traceback" not in r.output


def test_bad_input_is_one_line(tmp_path):
    path, _ = _write_model(tmp_path)
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(tmp_path / "wrong.npy", np.zeros((6, 3), np.float32))
    (tmp_path / "junk.npy").write_text("not an array")
    cases = [      # exit 2: a usage error (a missing file, a wrong --input); 1: an input's content (runtime/cli.py)
        ((tmp_path / "none.onnx", "--input", a), "none.onnx' does not exist", 2),
        ((path,), "give one --input FILE.npy for each", 2),
        ((path, "--input", a), "no --input for b", 2),
        ((path, "--input", a, "--input", b, "--input", a), "the model takes 2 input(s) (a, b)", 2),
        ((path, "--input", tmp_path / "wrong.npy", "--input", b), "input 'a': expected shape (3, 6), got (6, 3)", 1),
        ((path, "--input", tmp_path / "junk.npy", "--input", b), "junk.npy: not a loadable .npy array", 1),
        ((path, "--input", tmp_path / "gone.npy", "--input", b), "gone.npy: no such file", 2),
        ((path, "--input", "c=x.npy", "--input", b), "give FILE.npy in that order or NAME=FILE.npy", 2),
    ]
    for args, msg, status in cases:
        r = _run(*args, "--device", "numpy")
        assert r.exit_code == status, (args, r.output)
        assert msg in r.output, (msg, r.output)
        assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x12\xff\x00 definitely not protobuf")
    r = _run(garbage, "--input", a)
    assert r.exit_code == 1 and "not an ONNX model" in r.output and len(r.output.strip().splitlines()) == 1
    f = tmp_path / "m.py"
    f.write_text("model = lambda x: x\ninputs = [[1.0]]\n")
    r = _run(f, "--input", a)
    assert r.exit_code == 2 and "--input is for .onnx models" in r.output

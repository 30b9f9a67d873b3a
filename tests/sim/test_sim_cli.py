"""`tetrachip sim`: runs a program with DRAM inputs and arguments, writes Stats, traces and memories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from runtime.cli import main

EX = Path(__file__).resolve().parents[2] / "examples"


def test_sim_vector_loop(tmp_path):
    n = 9
    x = np.random.default_rng(5).integers(-128, 128, (n, 4), dtype=np.int8)
    np.savez(tmp_path / "in.npz", **{"x@0x0": x})
    out = {k: tmp_path / f"{k}" for k in ("s.json", "t.json", "l.txt", "m.npz")}
    res = CliRunner().invoke(main, ["sim", str(EX / "vector_loop.s"), "--dram", str(tmp_path / "in.npz"),
                                    "--args", "r1=9,r2=-3", "--json", str(out["s.json"]),
                                    "--trace", str(out["t.json"]), "--line-trace", str(out["l.txt"]),
                                    "--dump", str(out["m.npz"])])
    assert res.exit_code == 0, res.output
    assert "MXU utilization" in res.output
    stats = json.loads(out["s.json"].read_text())
    assert stats["instances"]["load"] == n and stats["cycles"] > 0
    assert json.loads(out["t.json"].read_text())["traceEvents"]
    assert out["l.txt"].read_text().startswith("    retire")
    dram = np.load(out["m.npz"])["dram"]
    y = dram[0x800:0x800 + 4 * n].view(np.int8).reshape(n, 4)
    assert (y == np.clip(np.maximum(x.astype(np.int64) * 3 - 3, 0), -128, 127)).all()


def test_sim_binary_and_bad_inputs(tmp_path):
    r = CliRunner()
    binp = tmp_path / "g.bin"
    assert r.invoke(main, ["asm", str(EX / "gemm_tiled.s"), "-o", str(binp)]).exit_code == 0
    res = r.invoke(main, ["sim", str(binp), "--max-cycles", "10"])
    assert res.exit_code == 1 and res.output.strip().startswith("CYCLE_LIMIT: cycle 10")
    res = r.invoke(main, ["sim", str(binp), "--args", "r1"])
    assert res.exit_code == 2 and "--args" in res.output and len(res.output.strip().splitlines()) == 1
    np.savez(tmp_path / "bad.npz", nokey=np.zeros(3))
    res = r.invoke(main, ["sim", str(binp), "--dram", str(tmp_path / "bad.npz")])
    assert res.exit_code == 1 and "NAME@ADDRESS" in res.output

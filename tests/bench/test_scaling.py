"""bench/scaling.py on the MLP, 1 and 2 chips: one row per strategy, bit-exact, the efficiency the cycles give."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import scaling


def test_scaling_mlp_two_chips(tmp_path, capsys):
    js = tmp_path / "s.json"
    assert scaling.main(["--quick", "--only", "MLP", "--chips", "1,2", "--json", str(js)]) == 0
    rows = json.loads(js.read_text())["rows"]
    assert [(r["strategy"], r["chips"]) for r in rows] == [("single", 1), ("data", 2), ("tensor", 2),
                                                           ("pipeline", 2)]
    T1 = rows[0]["cycles"]
    for r in rows:
        assert r["bit_exact"]
        assert r["efficiency"] == pytest.approx(T1 / (r["chips"] * r["cycles"]))
    assert rows[1]["link_util"] == 0 and rows[2]["link_util"] > 0        # data moves nothing, tensor gathers
    pipe = rows[3]                      # the efficiency as the product of its four factors
    assert pipe["efficiency"] == pytest.approx(np.prod(list(pipe["losses"].values())))
    assert pipe["losses"]["bubble"] == pytest.approx(4 / (4 + 2 - 1))        # GPipe, 4 micro-batches, 2 chips
    assert 0 < pipe["losses"]["balance"] <= 1 + 1e-9                          # the fill and drain count once
    assert "| MLP" in capsys.readouterr().out


def test_scaling_bad_arguments_refused_first(tmp_path):
    for argv in (["--chips", "0"], ["--chips", "x"], ["--strategies", "model"],
                 ["--interleave", "0"], ["--interleave", "1,x"], ["--json", str(tmp_path / "missing" / "s.json")]):
        with pytest.raises(SystemExit) as e:
            scaling.main(["--quick", *argv])
        assert e.value.code == 2

"""``tetrachip fuzz``'s report around ``verify.fuzz.run_fuzz`` (replaced here by a stand-in, so no HDL
simulator runs): the functional points not hit, the shrunk program with its seed, the waves file, the
--json file, and its checks before any work."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import verify.cosim
import verify.fuzz
from runtime.cli import main
from verify.fuzz import FUNCTIONAL, coverage_table, functional_table


def _report(mismatch: bool, waves: str | None = None) -> dict:
    hit = set(FUNCTIONAL[::2])
    rep = {"config": "tiny", "simulator": "verilator", "mem": "flat", "seed": 40, "programs": 3, "illegal": 0,
           "raced": 0,
           "mismatches": int(mismatch), "reports": ["MISMATCH fuzz seed 41 seed=41 config=tiny\nchip 0: x"] * mismatch,
           "failing_seeds": [41] * mismatch, "rtl_cycles": 100, "build_s": 0.0, "wall_s": 1.0,
           "coverage": coverage_table({("halt", 0, "")}), "functional": functional_table(hit), "ok": not mismatch}
    if mismatch:
        rep["shrunk"] = {"seed": 41, "lines_from": 60, "lines_to": 2, "rounds": 9, "tried": 30, "seconds": 1.5,
                         "sources": [".config tiny\n        loop l0, 3, s0=1\n        halt\n", ".config tiny\n"],
                         "report": "MISMATCH fuzz seed 41 (shrunk) seed=41 config=tiny\nchip 0: rtl OK after 9"}
    if waves:
        rep["waves"], rep["waves_mismatch"] = waves, True
    return rep


@pytest.fixture
def fake(monkeypatch):
    calls = []

    def install(rep):
        def run_fuzz(cfg, seed, count, simulator=None, **kw):
            calls.append(kw)
            kw["progress"](count)
            return rep
        monkeypatch.setattr(verify.fuzz, "run_fuzz", run_fuzz)
        monkeypatch.setattr(verify.cosim, "available", lambda sim: None)
        return calls
    return install


def test_report_lists_points_not_hit_and_the_shrunk_program(fake, tmp_path):
    calls = fake(_report(True, waves=str(tmp_path / "fuzz_seed41.vcd")))
    out = tmp_path / "f.json"
    r = CliRunner().invoke(main, ["fuzz", "--count", "3", "--seed", "40", "--json", str(out),
                                  "--waves", str(tmp_path)])
    assert r.exit_code == 1, r.output
    missing = [" ".join(map(str, p)) for p in FUNCTIONAL[1::2]]
    assert f"functional coverage: {len(FUNCTIONAL) - len(missing)} of {len(FUNCTIONAL)} points hit" in r.output
    assert "not hit: " + ", ".join(missing) in r.output
    assert "shrunk seed 41 from 60 to 2 instruction lines" in r.output
    assert "--seed 41 --count 1" in r.output and "loop l0, 3, s0=1" in r.output
    assert f"waves: {tmp_path / 'fuzz_seed41.vcd'}" in r.output
    assert calls[0]["waves_dir"] == tmp_path and calls[0]["shrink_first"] is True
    data = json.loads(out.read_text())
    assert data["shrunk"]["lines_to"] == 2 and data["functional"]["missing"] == missing


def test_clean_run_exits_0_and_no_shrink_is_passed_on(fake):
    calls = fake(_report(False))
    r = CliRunner().invoke(main, ["fuzz", "--count", "3", "--no-shrink"])
    assert r.exit_code == 0, r.output
    assert "shrunk" not in r.output and calls[0]["shrink_first"] is False
    assert "(0 illegal, 0 raced: not compared)" in r.output


def test_banked_memories_get_the_fpga_banks_and_say_so(fake, monkeypatch):
    """``--mem banked`` on a config without banks runs the FPGA flow's (``banked_config``), and the
    report names them; the simulator's races (programs not compared) are counted."""
    rep = _report(False) | {"mem": "banked", "raced": 2}
    seen = []

    def run_fuzz(cfg, seed, count, simulator=None, **kw):
        seen.append((cfg.spm_bank_rows, cfg.acc_bank_rows, kw["mem"]))
        kw["progress"](count)
        return rep
    fake(rep)
    monkeypatch.setattr(verify.fuzz, "run_fuzz", run_fuzz)
    r = CliRunner().invoke(main, ["fuzz", "--count", "3", "--mem", "banked"])
    assert r.exit_code == 0, r.output
    assert seen == [(256, 16, "banked")]       # tiny: SPM 1024 rows in 4 banks, ACC 256 in banks of 16
    assert "(mem banked, banks of 256/16 SPM/ACC rows)" in r.output and "2 raced: not compared" in r.output


def test_mac_reaches_the_run_and_the_report(fake):
    calls = fake(dict(_report(False), mac="lut+reg2"))
    r = CliRunner().invoke(main, ["fuzz", "--count", "3", "--mac", "lut+reg2"])
    assert r.exit_code == 0, r.output
    assert calls[0]["mac"] == "lut+reg2" and "(mem flat, mac lut+reg2)" in r.output
    calls = fake(_report(False))
    r = CliRunner().invoke(main, ["fuzz", "--count", "3"])
    assert calls[-1]["mac"] == "dsp" and "mac" not in r.output.splitlines()[0], r.output


@pytest.mark.parametrize("args, msg", [
    (["--json", "/nonexistent-dir/x.json"], "does not exist"),
    (["--waves", "/nonexistent-dir"], "no such folder"),
    (["--mac", "dsp2"], "mac must be 'dsp', 'lut' or 'dsp:N'"),
    (["--mac", "lut+reg3"], "mac suffix must be"),
    (["--compiler", "--mac", "lut"], "--mac is for RTL programs"),
])
def test_bad_outputs_are_one_line_before_any_run(fake, args, msg):
    calls = fake(_report(False))
    r = CliRunner().invoke(main, ["fuzz", "--count", "3", *args])
    assert r.exit_code != 0 and msg in r.output and "Traceback" not in r.output, r.output
    assert calls == []


@pytest.mark.parametrize("waves, msg", [("run.txt", "a .vcd or .fst file name"), (3, "a .vcd or .fst file name"),
                                        ("/nonexistent-dir/run.vcd", "does not exist")])
def test_rtl_device_refuses_a_bad_waves_argument_in_one_line(monkeypatch, waves, msg):
    from isa.errors import TetrachipError
    from runtime.sim_backend import RtlBackend
    monkeypatch.setattr(verify.cosim, "available", lambda sim: None)
    with pytest.raises(TetrachipError, match=msg):
        RtlBackend(config="tiny", waves=waves)


def test_rtl_device_waves_true_names_a_file_after_the_config(monkeypatch, tmp_path):
    import dataclasses

    from isa import ChipConfig
    from runtime.sim_backend import RtlBackend
    pytest.importorskip("cocotb_tools.runner")
    monkeypatch.setattr(verify.cosim, "available", lambda sim: None)
    monkeypatch.chdir(tmp_path)
    b = RtlBackend(config=dataclasses.replace(ChipConfig.preset("tiny"), name="a/b-c"), waves=True)
    assert b.waves.name == "rtl_a_b-c.vcd" and b.cosim.waves == "vcd"
    assert b.cosim.dir.name.endswith("_waves_vcd")


def test_waves_in_a_format_the_machine_cannot_write_is_one_line_before_any_build(fake, monkeypatch, tmp_path):
    from isa.errors import TetrachipError
    from runtime.sim_backend import RtlBackend
    calls = fake(_report(False))
    monkeypatch.setattr(verify.cosim, "waves_unavailable", lambda sim, fmt: "no lz4 here" if fmt == "fst" else None)
    r = CliRunner().invoke(main, ["fuzz", "--count", "3", "--waves", str(tmp_path), "--waves-format", "fst"])
    assert r.exit_code == 2 and "'--waves-format': fst: no lz4 here" in r.output and "Traceback" not in r.output
    assert calls == []
    with pytest.raises(TetrachipError, match="no lz4 here"):
        RtlBackend(config="tiny", waves=tmp_path / "x.fst")

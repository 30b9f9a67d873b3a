"""The deeper verification tools on a real HDL simulator: a mismatch from the injected RTL bug
(``TETRACHIP_RTL_BUG=repeat``, docs/cosim.md) shrunk to a minimal program that still mismatches; and
``Device("rtl", waves=...)`` on a config whose name is no Verilog identifier, writing a waveform and
saying on stderr that it builds the model."""

from __future__ import annotations

import dataclasses
import os
import re
import time

import numpy as np
import pytest

import tetrachip as tc
from isa import ChipConfig
from verify.cosim import Cosim, available, compare, mismatch_kinds
from verify.fuzz import _is_instr, case_job, generate, shrink_case

pytestmark = pytest.mark.slow
SIM = os.environ.get("SIM", "verilator")
TINY = ChipConfig.preset("tiny")


def _need_sim():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")


@pytest.mark.long
def test_shrink_a_real_injected_mismatch(monkeypatch):
    """In ``make test-long`` (about 90 s of CI's time); ``make test`` runs the shrinker on the simulator
    alone (tests/verify/test_shrink_coverage.py) and the injected bug caught (test_cosim_bug.py)."""
    _need_sim()
    monkeypatch.setenv("TETRACHIP_RTL_BUG", "repeat")
    cs = Cosim(TINY, 1, SIM)
    cases = [generate(TINY, s, illegal=False, link=False) for s in range(40)]
    jobs = [case_job(TINY, c, chips=1) for c in cases]
    reps = [compare(TINY, j, r) for j, r in zip(jobs, cs.run(jobs))]
    bad = [(c, rep) for c, rep in zip(cases, reps) if rep]
    assert bad, "the injected repeat-sequencer bug went unnoticed by 40 random programs"
    case, first = bad[0]
    t = time.perf_counter()
    sh, report = shrink_case(TINY, case, cs, chips=1, report=first)
    took = time.perf_counter() - t
    assert report is not None and "MISMATCH" in report and f"seed={case.seed}" in report
    assert mismatch_kinds(report) & mismatch_kinds(first)
    kept = [ln.strip() for ln in sh.sources[0].splitlines() if _is_instr(ln)]
    assert sh.lines_to == len(kept) <= 8 and sh.lines_to < sh.lines_from / 3, (sh.lines_from, kept)
    # what the bug needs is what is left: a nest of depth >= 2 whose outermost level runs >= 3 times
    nests = [int(m.group(2)) for ln in kept for m in [re.search(r"rep=l(\d):(\d)", ln)] if m]
    assert nests and max(nests) >= 2, kept
    # the shrunk program, run alone on a fresh simulator, still mismatches
    from verify.fuzz import host_text, source_job
    job = source_job(TINY, case, sh.sources + [host_text(sh.regs)], chips=1)
    assert compare(TINY, job, cs.run([job])[0]) is not None
    # the host registers shrank with it: none added, none larger
    assert all(r in case.regs[0] and 0 < abs(v) <= abs(case.regs[0][r]) for r, v in sh.regs.items()), sh.regs
    print(f"shrunk seed {case.seed}: {sh.lines_from} -> {sh.lines_to} lines, {sh.rounds} rounds, "
          f"{sh.tried} candidates, {took:.1f} s")


@pytest.mark.parametrize("sim", [pytest.param("verilator", marks=pytest.mark.long), "icarus"])
def test_rtl_device_waves_on_a_hyphenated_config(tmp_path, capfd, sim):
    """Under Icarus in ``make test`` (its waves model builds in seconds); Verilator's (about two minutes
    to build with waves) in ``make test-long``."""
    why = available(sim)
    if why:
        pytest.skip(f"{sim}: {why}")
    cfg = dataclasses.replace(TINY, name="tiny-waves")
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    cm = tc.compile(lambda a: (a @ tc.Tensor(w)).relu(), [x], config=cfg)
    vcd = tmp_path / "run.vcd"
    dev = tc.Device("rtl", config=cfg, simulator=sim, waves=vcd)
    built = not (dev.backend.cosim.dir / "stamp").exists()
    res = dev.run(cm, x)
    ref = tc.Device("sim", config=cfg).run(cm, x)
    assert np.array_equal(res.output, ref.output) and res.stats.cycles == ref.stats.cycles
    assert res.waves == vcd and vcd.stat().st_size > 0
    text = vcd.read_text(errors="replace")
    # a VCD header (Verilator's begins with $version, Icarus' with $date) that declares the clock
    assert re.match(r"\$(version|date|timescale|comment|scope)\b", text) and re.search(r"\$var wire\s+1 \S+ clk ", text)
    body = text[text.index("$enddefinitions"):]
    assert len(re.findall(r"^#\d+$", body, re.M)) > res.stats.cycles        # time steps of every cycle
    err = capfd.readouterr().err
    assert f"waves: {vcd}" in err
    if built:      # a cold model cache: the build said so, with its time (or another process built it:
        # tests/cosim/test_cosim_icarus.py's wave tests share Icarus's model)
        assert re.search(r"building the \w+ model with (vcd|vcd or fst) waves of tetrachip_tiny_waves_\w+ for config "
                         r"tiny-waves .*: done in [\d.]+ s", err) or re.search(
            r"waiting for another process building the \w+ model of tetrachip_tiny_waves_\w+: done in", err), err

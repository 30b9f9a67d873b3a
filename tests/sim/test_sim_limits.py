"""The default cycle limit derived from the program (``sim.limits``), its error, the ``tetrachip sim``
outputs written up to an error, and the GEMM generator's K limit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from isa.asm import assemble_file
from isa.errors import ErrorCode, TetrachipError
from isa.timing import TOKEN_MAX
from runtime.cli import main
from sim import Chip, SimError, System
from sim import limits
from sim.programs import GemmError, gemm

EX = Path(__file__).resolve().parents[2] / "examples"


def _limit(text: str, config: str = "tiny", **regs: int) -> int:
    ch = Chip(config)
    ch.load(text)
    ch.set_args(**regs)
    return limits.default_max_cycles([ch])


def test_spin_loop_stops_at_the_derived_limit_quickly():
    ch = Chip("tiny")
    ch.load("top: jmp top\n")
    limit = limits.default_max_cycles([ch])
    assert limits.MIN_CYCLES <= limit < 1 << 24
    t0 = time.perf_counter()
    with pytest.raises(SimError) as e:
        ch.run()
    wall = time.perf_counter() - t0
    assert e.value.code == ErrorCode.CYCLE_LIMIT and e.value.cycle == limit
    assert f"{limit} cycles" in str(e.value) and "--max-cycles" in str(e.value) and "max_cycles" in str(e.value)
    assert ch.stats.cycles == limit + 1
    assert wall < 60, f"the spin loop took {wall:.1f} s to stop"


def test_given_limit_wins_and_must_be_positive():
    ch = Chip("tiny")
    ch.load("top: jmp top\n")
    with pytest.raises(SimError) as e:
        ch.run(max_cycles=100)
    assert e.value.cycle == 100 and "the limit given" in str(e.value)
    for bad in (0, -5):
        with pytest.raises(TetrachipError, match="positive"):
            ch.run(max_cycles=bad)


def test_limit_grows_with_trip_counts_repeats_and_host_registers():
    spin = _limit("top: jmp top\n")
    # a scalar loop counted to a bound the host names: the bound scales with it
    loop = "seti r2, 0\ntop: vmov spm[0], spm[1], n=8\naddi r2, r2, 1\nblt r2, r1, top\nhalt\n"
    small, big = _limit(loop, r1=10), _limit(loop, r1=10_000_000)
    assert small >= spin and big > small
    # a repeat nest: its trip count and instance size enter the bound
    nest = "loop l0, {n}, s0=0\ndma.ld spm[0], dram[0], rows=64, rep=l0:1\nhalt\n"
    assert _limit(nest.format(n=4000)) > _limit(nest.format(n=40)) >= limits.MIN_CYCLES
    # a bound read from ACC (any 32-bit value): the loop may make 2**32 trips
    opaque = "top: sld r2, acc[0], 0\naddi r3, r3, 1\nblt r3, r2, top\nhalt\n"
    assert _limit(opaque) >= limits.MARGIN * 2 ** 32
    nested = "a: b: sld r2, acc[0], 0\nblt r3, r2, b\nblt r4, r2, a\nhalt\n"
    assert _limit(nested) == limits.MAX_CYCLES


def test_a_value_read_from_acc_unbounds_only_the_loops_it_reaches():
    """An embedding lookup reads a row number from ACC for an address: the loop around it, counted
    by registers the ACC value never reaches, keeps its bound; compared on that value, it has none."""
    counted = ("seti r6, 1\nseti r2, 0\ntop: {read}vmov spm[r5], spm[1], n=1\nadd r2, r2, r6\n"
               "blt r2, r1, top\nhalt\n")
    plain = _limit(counted.format(read=""), r1=100)
    lookup = _limit(counted.format(read="sld r5, acc[0], 0\n"), r1=100)
    assert lookup == plain < limits.MARGIN * 2 ** 32
    steered = counted.format(read="sld r5, acc[0], 0\nadd r7, r5, r6\n").replace("blt r2, r1", "blt r2, r7")
    assert _limit(steered, r1=100) >= limits.MARGIN * 2 ** 32         # r7 is computed from the ACC value


def test_a_branch_that_leaves_a_counted_loop_keeps_its_bound():
    """A bounds check that leaves the loop (an exit) only ends it sooner: the loop keeps the few trips
    its two registers allow. One that skips the increment inside it may stall the count, and the loop
    gets the general bound, from the largest value the program names (here 50,000,000)."""
    body = ("seti r9, 50000000\nseti r2, 0\ntop: sld r3, spm[0], 0\nvmov spm[1], spm[2], n=64\n"
            "blt r3, r0, {to}\naddi r2, r2, 1\nskip: blt r2, r1, top\nout: halt\n")
    leaves, skips = _limit(body.format(to="out"), r1=200_000), _limit(body.format(to="skip"), r1=200_000)
    assert skips > 100 * leaves > 0


def test_counted_loop_that_misses_its_bound_stops_at_the_floor():
    """A counter stepping past its bound (2, 4, 6, 8 ... never 7) would wrap around 2**32 first; its
    loop compares two plain registers, so its bound is a few trips and the run stops at MIN_CYCLES."""
    text = "seti r2, 0\ntop: addi r2, r2, 2\nbne r2, r1, top\nhalt\n"
    assert _limit(text, r1=7) == limits.MIN_CYCLES
    assert _limit(text, r1=10_000_000) > limits.MIN_CYCLES       # a bound the host names scales it
    # a forward branch inside the loop (a count kept elsewhere): the general bound, from every named value
    skip = "seti r2, 0\ntop: addi r3, r3, 1\nblt r3, r4, s\naddi r2, r2, 1\ns: blt r2, r1, top\nhalt\n"
    assert _limit(skip, r1=3, r4=10_000_000) > _limit(text, r1=3)
    ch = Chip("tiny")
    ch.load(text)
    ch.set_args(r1=7)
    with pytest.raises(SimError) as e:
        ch.run()
    assert e.value.code == ErrorCode.CYCLE_LIMIT and e.value.cycle == limits.MIN_CYCLES


def test_halting_programs_stay_far_inside_their_limit():
    """Every example, the GEMM generator, and a loop counted by the host all finish well within the
    default (the measured cycles are a small fraction of the derived limit)."""
    ratios = {}
    for f in sorted(EX.glob("*.s")):
        p = assemble_file(f)
        ch = Chip(p.config)
        ch.load(p)
        ch.set_args(r1=37, r2=-20)
        st = ch.run()
        ratios[f.name] = st.cycles / limits.default_max_cycles([ch])
    g = gemm(40, 600, 50, "small")
    ch = Chip("small")
    ch.load(g.program)
    ratios["gemm"] = ch.run().cycles / limits.default_max_cycles([ch])
    assert max(ratios.values()) < 0.1, ratios


def test_system_limit_is_the_sum_of_its_chips():
    sysm = System("tiny", 2)
    sysm.load(0, "top: jmp top\n")
    sysm.load(1, "halt\n")
    one = limits.chip_cycle_bound(sysm[0]) + limits.chip_cycle_bound(sysm[1])
    with pytest.raises(SimError) as e:
        sysm.run()
    assert e.value.code == ErrorCode.CYCLE_LIMIT and e.value.cycle == one


def test_cli_writes_trace_and_stats_up_to_an_error(tmp_path):
    src = tmp_path / "bad.s"
    src.write_text(".config tiny\nloop l0, 4, s0=1\ndma.ld spm[0], dram[0], rows=2, rep=l0:1\n"
                   "seti r4, 5000\nsld r5, spm[r4], 0\nhalt\n")
    out = {k: tmp_path / k for k in ("t.json", "s.json", "l.txt", "m.npz")}
    res = CliRunner().invoke(main, ["sim", str(src), "--trace", str(out["t.json"]), "--json", str(out["s.json"]),
                                    "--line-trace", str(out["l.txt"]), "--dump", str(out["m.npz"])])
    assert res.exit_code == 1, res.output
    line = res.output.strip()
    assert len(line.splitlines()) == 1 and line.startswith("ADDRESS_RANGE") and "Traceback" not in line
    for flag, name in (("--trace", "t.json"), ("--json", "s.json"), ("--line-trace", "l.txt"), ("--dump", "m.npz")):
        assert f"{flag} {out[name]}" in line
    stats = json.loads(out["s.json"].read_text())
    assert stats["cycles"] == 3 + 1 and stats["instances"]["load"] >= 1      # the sld at pc 3 stops the chip at cycle 3
    names = [e.get("name", "") for e in json.loads(out["t.json"].read_text())["traceEvents"]]
    assert any(n.startswith("dma.ld") for n in names)
    assert "dma.ld" in out["l.txt"].read_text()
    assert set(np.load(out["m.npz"]).files) == {"dram", "spm", "acc"}


def test_cli_spin_loop_stops_and_max_cycles_raises_the_limit(tmp_path):
    src = tmp_path / "spin.s"
    src.write_text(".config tiny\ntop: jmp top\n")
    r = CliRunner()
    res = r.invoke(main, ["sim", str(src), "--json", str(tmp_path / "s.json")])
    assert res.exit_code == 1 and res.output.startswith("CYCLE_LIMIT") and "--max-cycles" in res.output
    assert json.loads((tmp_path / "s.json").read_text())["cycles"] > limits.MIN_CYCLES
    res = r.invoke(main, ["sim", str(src), "--max-cycles", "5000"])
    assert res.exit_code == 1 and "within 5000 cycles (the limit given)" in res.output
    for bad in ("0", "-3"):
        res = r.invoke(main, ["sim", str(src), "--max-cycles", bad])
        assert res.exit_code == 2 and "--max-cycles" in res.output


def test_gemm_rejects_k_beyond_the_token_counter_up_front():
    rows = Chip("base").cfg.rows
    gemm(2, TOKEN_MAX * rows, 3, "base")                    # the largest K: built
    with pytest.raises(GemmError, match=f"K <= {TOKEN_MAX * rows}"):
        gemm(2, TOKEN_MAX * rows + 1, 3, "base")


def test_an_induction_loop_gets_its_own_trip_count():
    """A bound set from the counter (``addi r9, r12, K``) and a bound re-set before the closing branch
    (``seti r9, 5``) are neither plain nor ranged: the induction rule counts ``K / 4`` and 5 trips, so the
    limit stays at the floor and grows with ``K``; the run halts inside it."""
    text = ("seti r5, 0\nseti r12, 0\ntop: addi r9, r12, {k}\nin: vmov spm[0], spm[16], n=8\naddi r12, r12, 4\n"
            "blt r12, r9, in\naddi r12, r12, -{k}\naddi r5, r5, 1\nseti r9, 5\nblt r5, r9, top\nhalt\n")
    assert _limit(text.format(k=2496)) == limits.MIN_CYCLES
    assert limits.MIN_CYCLES < _limit(text.format(k=2_496_000)) < limits.MARGIN * 2 ** 32
    ch = Chip("tiny")
    ch.load(text.format(k=2496))
    assert ch.run().cycles < limits.MIN_CYCLES
    # the counter stepping away from its bound ends only by wrapping: no induction count
    away = text.format(k=2496).replace("addi r12, r12, 4", "addi r12, r12, -4")
    assert _limit(away) > limits.MIN_CYCLES


def test_a_bound_computed_from_a_host_register_has_a_range():
    """``r14 = (r15 + 15) >> 4`` (tiles of a dynamic length the host writes): its range bounds the loop."""
    text = ("addi r14, r15, 15\nseti r3, 4\nsra r14, r14, r3\nseti r1, 0\n"
            "top: vmov spm[0], spm[1], n=8\naddi r1, r1, 1\nblt r1, r14, top\nhalt\n")
    assert _limit(text, r15=64) == limits.MIN_CYCLES
    assert limits.MIN_CYCLES < _limit(text, r15=16_000_000) < _limit(text.replace("sra", "sll"), r15=16_000_000)


def test_an_exit_on_a_counter_bounds_a_data_steered_loop():
    """A convergence loop closed on a value read from ACC, left by ``bge trips, max_iter``: max_iter bounds it."""
    text = ("seti r1, 0\nseti r2, {m}\ntop: vmov spm[0], spm[1], n=8\nsld r3, acc[0], 0\naddi r1, r1, 1\n"
            "bge r1, r2, done\nblt r0, r3, top\ndone: halt\n")
    assert _limit(text.format(m=200)) == limits.MIN_CYCLES
    assert _limit(text.format(m=200).replace("bge r1, r2, done\n", "")) >= limits.MARGIN * 2 ** 32
    assert _limit(text.format(m=2_000_000)) > limits.MIN_CYCLES


def test_a_detour_back_into_a_counted_loop_keeps_its_bound():
    """An embedding lookup's fix-up: a negative row leaves the counted loop, is corrected after it and
    jumps back into its middle. Every way round that jump takes the loop's back branch: the loop's
    trips + 1, not 2**32 because the row came from ACC."""
    text = ("seti r2, 0\ntop: sld r3, acc[r2], 0\nblt r3, r0, neg\ngo: vmov spm[0], spm[16], n=8\n"
            "addi r2, r2, 1\nblt r2, r1, top\njmp done\nneg: add r3, r3, r4\njmp go\ndone: halt\n")
    assert _limit(text, r1=100, r4=7) == limits.MIN_CYCLES
    # a jump back that skips the counter's step may loop for ever: it keeps no bound
    assert _limit(text.replace("jmp go", "jmp top"), r1=100, r4=7) >= limits.MARGIN * 2 ** 32
    ch = Chip("tiny")
    ch.load(text)
    ch.write_acc(0, np.full((ch.cfg.acc_rows, ch.cfg.cols), -1, np.int32))
    ch.set_args(r1=8, r4=5)
    assert ch.run().cycles < limits.MIN_CYCLES

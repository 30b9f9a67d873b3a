"""The banked memories (``rtl/mem.py``, ``mem="banked"``: SPM and ACC as banks of consecutive rows,
a copy of each bank per read port, one writer per bank and cycle) under co-simulation against
``sim.System`` on configs with banks (``rtl.fpga.fit.banked_config``: SPM in 4 banks, ACC in banks of
16 rows, at least 4), where the simulator's race rule covers two units writing one bank (docs/microarchitecture.md
section 4). Random programs keep what different units write in different banks
(``verify.fuzz``); none may race, so every one is compared. See docs/cosim.md."""

from __future__ import annotations

import os

import pytest

from isa import ChipConfig
from isa.errors import ErrorCode
from rtl.fpga.fit import FPGA_MEMORY, banked_config, fpga_build_config, fpga_config, fpga_memory
from tests.cosim.jobs import assert_ring_results_match, directed_and_random_jobs
from verify.cosim import Cosim, available, sim_of
from verify.fuzz import run_fuzz

SIM = os.environ.get("SIM", "verilator")
TINY = ChipConfig.preset("tiny")
COUNT = int(os.environ.get("TETRACHIP_COSIM_BANKED_COUNT", "60"))


#: the default board build's memories (tiny, SPM 256 rows in 4 banks, ACC 64 in 4)
FPGA_TINY = fpga_build_config(TINY, "banked").replace(name="tiny-fpga")


@pytest.mark.parametrize("cfg, banks, seed", [
    (FPGA_TINY, (4, 4), 7000),
    # (a Verilog model of its own, of memories no command builds by default: the long lane)
    pytest.param(banked_config(fpga_config(TINY, **FPGA_MEMORY)), (4, 4), 7500, marks=pytest.mark.long)],
    ids=["fpga-mem", "lvt-depths"])
def test_fuzz_banked_memories_at_fpga_depths(cfg, banks, seed):
    """``Ring(tiny --fpga-mem --mem banked, 2)``: SPM 256 rows in 4 block RAM banks, ACC 64 rows in 4
    16-row LUT RAM banks (the model the compiled-model tests below run: one build); and at the
    live-value-table build's depths, SPM 64 rows in 4 LUT RAM banks of 16, ACC 16 in 4 of 4."""
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    if cfg is FPGA_TINY:
        assert cfg == banked_config(fpga_config(TINY, **fpga_memory("banked"))).replace(name=cfg.name)
    assert (cfg.spm_rows // cfg.spm_bank_rows, cfg.acc_rows // cfg.acc_bank_rows) == banks
    count = COUNT // 2 if cfg is FPGA_TINY else COUNT      # (make test: CI's budget)
    rep = run_fuzz(cfg, seed, count, SIM, mem="banked", require_all_opcodes=False)
    assert rep["mem"] == "banked" and rep["raced"] == 0
    assert rep["programs"] - rep["illegal"] > count // 2 and rep["rtl_cycles"] > 50 * count
    assert rep["mismatches"] == 0, "\n\n".join(rep["reports"][:2])


def test_compiled_models_on_banked_memories_match_the_simulator(monkeypatch):
    """Compiled models on the banked Verilog: a symbolic batch whose M tiles are whole ACC banks beside a bias
    loaded into ACC and a ReLU (with M tiles of 12 elements, as before the compiler placed by banks, the
    simulator stopped it with RACE), and a tensor-parallel MLP over a ring of two (an all-reduce whose scratch
    is in a bank of its own, an all-gather through buffers that start banks): outputs and cycles equal
    ``Device("sim")``'s, outputs the single-chip reference."""
    import numpy as np

    import tetrachip as tc
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    monkeypatch.setenv("TETRACHIP_COSIM_MEM", "banked")
    rng = np.random.default_rng(4)
    W, b = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    cm = tc.compile(lambda x: (x @ tc.Tensor(W) + tc.Tensor(b)).relu(), [rng.standard_normal((24, 2, 8)).astype(
        np.float32)], config=FPGA_TINY, dynamic={"N": 24})
    assert cm.kernels[0].tiling.Mt % FPGA_TINY.acc_bank_rows == 0 and cm.kernels[0].tiling.MT > 1
    dev = tc.Device("rtl", config=FPGA_TINY, simulator=SIM)
    for n in (9, 24):
        x = rng.standard_normal((n, 2, 8)).astype(np.float32)
        ref, res = tc.Device("sim", config=FPGA_TINY).run(cm, x), dev.run(cm, x)
        assert res.stats.cycles == ref.stats.cycles > 0
        assert np.array_equal(res.output, ref.output) and np.array_equal(res.output, cm.reference(x)[0])

    tc.manual_seed(1)
    nn = tc.nn
    mlp = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 12), nn.ReLU(), nn.Linear(12, 8))
    x = rng.standard_normal((5, 16)).astype(np.float32)
    sm = tc.compile(mlp, [x], FPGA_TINY, chips=2, parallel="tensor")
    assert [kind for _, kind in sm.collectives] == ["all-reduce", "all-gather"]
    ref = tc.Device("sim", config=FPGA_TINY, chips=2).run(sm, x)
    res = tc.Device("rtl", config=FPGA_TINY, chips=2, simulator=SIM).run(sm, x)
    assert res.stats.cycles == ref.stats.cycles > 0
    for got, want, single in zip(res.outputs, ref.outputs, tc.compile(mlp, [x], FPGA_TINY).reference(x)):
        assert np.array_equal(got, want) and np.array_equal(got, single)


def test_bias_on_the_vpu_from_resident_blocks_on_banked_memories(monkeypatch):
    """The digits CNN's two convolutions, shrunk, on the banked Verilog of the default board build's memories:
    both add their bias on the VPU from blocks resident in ACC (``KernelCode.vbias_rows``: the prologue's
    repeated ``dma.ld`` with ``rstride=0``, a ``vadd`` repeated over the region with tokens once), the second
    column by column (``nmk``: a code per N tile), its weights resident and its A tiles in a ring
    (``tiling._choose_col_ring``). Outputs and cycles equal ``Device("sim")``'s, outputs the reference."""
    import numpy as np

    import tetrachip as tc
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    monkeypatch.setenv("TETRACHIP_COSIM_MEM", "banked")
    tc.manual_seed(2)
    nn = tc.nn
    c1, c2 = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, stride=2, padding=1)
    x = np.random.default_rng(2).standard_normal((6, 1, 8, 8)).astype(np.float32)
    cm = tc.compile(lambda t: c2(c1(t).relu()).clip(0.0, 6.0), [x], config=FPGA_TINY)
    kernels = cm.asm.split("; kernel ")[1:]
    t = cm.kernels[1].tiling
    assert t.a_ring and t.order == "nmk" and t.NB == t.KT and len(kernels) == 1 + t.NT
    for k in kernels:
        assert "bias on the VPU" in k.splitlines()[0]
        assert any(ln.strip().startswith("vadd") and "rep=" in ln and "sync=once" in ln for ln in k.splitlines())
    ref = tc.Device("sim", config=FPGA_TINY).run(cm, x)
    res = tc.Device("rtl", config=FPGA_TINY, simulator=SIM).run(cm, x)
    assert res.stats.cycles == ref.stats.cycles > 0
    assert np.array_equal(res.output, ref.output) and np.array_equal(res.output, cm.reference(x)[0])


@pytest.mark.long       # make test-long: the preset's depths (4 SPM and 16 ACC banks) and the case library
def test_cosim_ring_tiny_banked_memories():
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    cfg = banked_config(TINY)
    _, jobs = directed_and_random_jobs(cfg, 60_000, 2 * COUNT)
    results = Cosim(cfg, 2, SIM, mem="banked").run(jobs)
    raced = [j.name for j, r in zip(jobs, results) if ErrorCode.RACE in sim_of(cfg, j, r, ring=True)[2]]
    # the library's cases were written for rows, not banks: a few write one bank from two units
    assert len(raced) <= len(jobs) // 10, raced
    assert_ring_results_match(cfg, jobs, results, " (banked memories)")


@pytest.mark.long
def test_fuzz_without_link_ports():
    """The default board build without link ports (``tetrachip fpga synth/build --no-links``: links = 0):
    one ``Chip``, built without the link units, against the simulator on random programs without
    link instructions (a link word is an illegal instruction on both: tests/rtl/test_rtl_no_links.py).
    In ``make test-long`` (a Verilog model of its own); ``make test`` runs the no-links chip in Amaranth's
    simulator (tests/rtl/test_rtl_no_links.py)."""
    why = available(SIM)
    if why:
        pytest.skip(f"SIM={SIM}: {why}")
    cfg = fpga_build_config(TINY, "banked", links=False).replace(name="tiny-fpga-nolink")
    assert cfg.links == 0
    rep = run_fuzz(cfg, 8000, COUNT, SIM, mem="banked", require_all_opcodes=False)
    assert rep["mem"] == "banked" and rep["raced"] == 0
    assert rep["programs"] - rep["illegal"] > COUNT // 2 and rep["rtl_cycles"] > 50 * COUNT
    assert not {"link.send", "link.recv"} & set(rep["coverage"]["opcodes"])
    assert len(rep["coverage"]["opcodes"]) >= 20
    assert rep["mismatches"] == 0, "\n\n".join(rep["reports"][:2])

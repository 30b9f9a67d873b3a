"""Logic depth of a synthesised ECP5 netlist: how many routed hops each register's input is from the
nearest registers, found from Yosys' ``top.json`` in seconds (nextpnr reports only the one worst path,
after minutes of placement and routing).

On the ECP5 most of a path's delay is routing (``tiny``'s worst path: 26 of its 30 ns), and a path
pays a route for each cell input it enters: a ``LUT4`` input, a ``PFUMX``/``L6MUX21`` select, a
``CCU2C`` operand, a flip-flop's data, enable or reset, a RAM's address or data. A ``PFUMX``'s or
``L6MUX21``'s data inputs and a carry chain's ``CIN`` are wired inside the slices and cost none.
``levels`` counts those routed hops from a path's start (a flip-flop, a block RAM's registered
output, a multiplier's output register) to its end; a ``TRELLIS_DPR16X4``'s read is combinational
(its read address in, its data out). The count ranks paths: nextpnr's worst path on ``tiny`` had
12 of them, and a 75 MHz clock leaves room for about five.

``tetrachip fpga depth build/fpga-synth/top.json [-n 20] [--paths 3]`` (or ``python -m
rtl.fpga.depth``) prints how many endpoints lie at each depth, the deepest registers, and the cells
of the deepest paths.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Endpoint", "DepthError", "analyse", "load", "report", "main"]

# inputs wired inside a slice (no route)
_FREE = {("PFUMX", "ALUT"), ("PFUMX", "BLUT"), ("L6MUX21", "D0"), ("L6MUX21", "D1"), ("CCU2C", "CIN")}
_CLOCKS = {"CLK", "WCK", "CLKA", "CLKB", "CLK0", "CLK1", "CLK2", "CLK3"}


@dataclass(frozen=True)
class Endpoint:
    cell: str           #: the register, RAM or multiplier whose input it is
    port: str
    levels: int         #: routed hops from the path's start
    path: tuple         #: (cell, type) from the start to the end


def _regs(cell: dict) -> tuple[set, set]:
    """(input ports that are registered (path ends), output ports that are registered (path starts))."""
    t, p, dirs = cell["type"], cell.get("parameters", {}), cell["port_directions"]
    ins = {k for k, d in dirs.items() if d == "input"}
    outs = {k for k, d in dirs.items() if d == "output"}
    if t == "TRELLIS_FF" or t == "DP16KD":
        return ins, outs
    if t == "TRELLIS_DPR16X4":
        return ins - {"RAD"}, set()
    if t == "MULT18X18D":
        reg_in = set()
        for op in "ABC":
            if p.get(f"REG_INPUT{op}_CLK", "NONE") != "NONE":
                reg_in |= {k for k in ins if re.fullmatch(f"{op}\\d+", k)}
        reg_in |= {k for k in ins if not re.fullmatch(r"[ABC]\d+", k)}
        return reg_in, (outs if p.get("REG_OUTPUT_CLK", "NONE") != "NONE" else set())
    return set(), set()


def analyse(netlist: dict) -> list[Endpoint]:
    """Every path end of the top module with its depth, deepest first."""
    mods = netlist["modules"].values()
    top = next(m for m in mods if str(m.get("attributes", {}).get("top", "0")).strip("0"))
    cells = {n: c for n, c in top["cells"].items() if not c["type"].startswith("$scopeinfo")}
    driver = {}                                 # net bit -> (cell, output port)
    for n, c in cells.items():
        for port, d in c["port_directions"].items():
            if d == "output":
                for b in c["connections"].get(port, []):
                    if isinstance(b, int):
                        driver[b] = (n, port)
    regs = {n: _regs(c) for n, c in cells.items()}
    memo: dict = {}

    def out_level(n, port):
        """(levels at the output ``port`` of cell ``n``, the cell before it on the deepest path)."""
        key = (n, port)
        if key in memo:
            return memo[key]
        c = cells[n]
        if port in regs[n][1] or c["type"] == "TRELLIS_FF":
            memo[key] = (0, None)
            return memo[key]
        memo[key] = (0, None)                   # (a combinational loop counts as a start)
        best = (0, None)
        t = c["type"]
        for ip, d in c["port_directions"].items():
            if d != "input" or ip in _CLOCKS or ip in regs[n][0]:
                continue
            if t == "TRELLIS_DPR16X4" and ip != "RAD":
                continue
            lv = in_level(n, ip)
            if lv[0] > best[0]:
                best = lv
        memo[key] = best
        return best

    def in_level(n, ip):
        c = cells[n]
        best = (0, None)
        free = (c["type"], ip) in _FREE
        for b in c["connections"].get(ip, []):
            if not isinstance(b, int) or b not in driver:
                continue
            dn, dp = driver[b]
            lv = out_level(dn, dp)[0] + (0 if free else 1)
            if lv > best[0]:
                best = (lv, (dn, dp))
        return best

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 200000))
    ends = []
    for n, c in cells.items():
        for ip in regs[n][0]:
            if ip in _CLOCKS:
                continue
            lv, prev = in_level(n, ip)
            if lv:
                path = [(n, c["type"])]
                while prev is not None:
                    path.append((prev[0], cells[prev[0]]["type"]))
                    prev = out_level(*prev)[1]
                ends.append(Endpoint(n, ip, lv, tuple(reversed(path))))
    ends.sort(key=lambda e: -e.levels)
    return ends


def _group(cell: str) -> str:
    """The register a cell name belongs to: its hierarchical name up to Yosys' suffixes."""
    return re.split(r"_TRELLIS_FF|_DP16KD|_TRELLIS_DPR|_MULT18|\$", cell)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtl.fpga.depth", description=__doc__.split("\n\n")[0])
    ap.add_argument("netlist", type=Path, help="Yosys JSON netlist (top.json of `tetrachip fpga synth`)")
    ap.add_argument("-n", type=int, default=20, help="registers to list (default 20)")
    ap.add_argument("--paths", type=int, default=3, help="deepest paths to print cell by cell (default 3)")
    a = ap.parse_args(argv)
    try:
        netlist = load(a.netlist)
    except DepthError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(report(analyse(netlist), a.n, a.paths), end="")
    return 0


class DepthError(ValueError):
    """The netlist cannot be read (the message names the file)."""


def load(path: Path) -> dict:
    """A Yosys JSON netlist with a top module."""
    try:
        netlist = json.loads(Path(path).read_text())
        mods = netlist["modules"].values()
        if not any(str(m.get("attributes", {}).get("top", "0")).strip("0") for m in mods):
            raise DepthError(f"{path}: no top module (not a synthesised Yosys netlist)")
        return netlist
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, DepthError):
            raise
        raise DepthError(f"{path}: {type(e).__name__}: {e}") from None


def report(ends: list[Endpoint], n: int = 20, paths: int = 3) -> str:
    """The depth histogram, the ``n`` deepest registers and the ``paths`` deepest paths, as text."""
    out = ["levels  endpoints"]
    hist = Counter(e.levels for e in ends)
    out += [f"{lv:6d}  {hist[lv]}" for lv in sorted(hist, reverse=True)]
    groups: dict = defaultdict(list)
    for e in ends:
        groups[_group(e.cell)].append(e)
    out.append(f"\ndeepest {n} registers (levels, endpoints at that depth, register)")
    for g, es in sorted(groups.items(), key=lambda kv: -kv[1][0].levels)[:n]:
        out.append(f"{es[0].levels:6d}  {sum(e.levels == es[0].levels for e in es):5d}  {g}")
    shown: set = set()
    for e in ends:
        if len(shown) >= paths:
            break
        if _group(e.cell) in shown:
            continue
        shown.add(_group(e.cell))
        out.append(f"\n{e.levels} levels into {e.cell}.{e.port}:")
        out += [f"  {t:16s} {c}" for c, t in e.path]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())

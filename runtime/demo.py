"""``make demo``: the most complete end-to-end path that exists today.

Assembles the example programs for the embedded default (tiny), prints a listing, writes the
binaries, disassembles them and checks that the text re-assembles to the same bytes. Then runs
each example on the cycle-level simulator with random inputs in DRAM, checks the outputs against
numpy and prints the run's Stats; finally a generated GEMM on ``base``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from isa import Program, assemble, assemble_file
from isa.errors import TetrachipError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["gemm_tiled.s", "vector_loop.s"]


def _roundtrip(out: Path) -> bool:
    for name in EXAMPLES:
        src = ROOT / "examples" / name
        prog = assemble_file(src)
        print(f"== {name}: {len(prog)} instructions for config {prog.config.name}")
        print(prog.listing(), end="")
        binary = out / src.with_suffix(".bin").name
        prog.save(binary)
        back = Program.load(binary)
        text = back.disassemble()
        again = assemble(text, back.config, f"{binary} (disassembled)")
        same = again.code_bytes() == prog.code_bytes()
        print(f"-- disassembly of {binary.relative_to(ROOT)}:")
        print(text, end="")
        print(f"-- re-assembled: {'identical' if same else 'DIFFERENT'} "
              f"({len(prog.code_bytes())} bytes of code)\n")
        if not same:
            return False
    return True


def _simulate(out: Path) -> bool:
    from sim import Chip
    from sim.programs import run_gemm
    rng = np.random.default_rng(0)
    ok = True

    # gemm_tiled.s: C (8x8 int32) = A (8x8 int8) @ B (8x8 int8)
    chip = Chip("tiny", trace=True)
    chip.load(ROOT / "examples" / "gemm_tiled.s")
    A = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    B = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    chip.write_dram(0x0000, A)
    chip.write_dram(0x0400, B)
    stats = chip.run()
    C = chip.read_dram(0x0800, 64, np.int32).reshape(8, 8)
    good = bool((C == A.astype(np.int32) @ B.astype(np.int32)).all())
    ok &= good
    chip.trace.save_chrome(out / "gemm_tiled.trace.json")
    (out / "gemm_tiled.lines.txt").write_text(chip.trace.line_trace())
    print(f"== simulate gemm_tiled.s on tiny: C == A @ B: {'yes' if good else 'NO'}")
    print(stats.table())
    print(f"-- trace: {(out / 'gemm_tiled.trace.json').relative_to(ROOT)} (Perfetto), "
          f"{(out / 'gemm_tiled.lines.txt').relative_to(ROOT)} (line trace)\n")

    # vector_loop.s: y = relu(3x + bias) for N rows; N and bias are run-time arguments
    chip = Chip("tiny")
    chip.load(ROOT / "examples" / "vector_loop.s")
    n, bias = 37, -20
    x = rng.integers(-128, 128, (n, 4), dtype=np.int8)
    chip.write_dram(0x000, x)
    chip.set_args(r1=n, r2=bias)
    stats = chip.run()
    y = chip.read_dram(0x800, n * 4, np.int8).reshape(n, 4)
    good = bool((y == np.clip(np.maximum(x.astype(np.int64) * 3 + bias, 0), -128, 127)).all())
    ok &= good
    print(f"== simulate vector_loop.s on tiny with N={n} (r1), bias={bias} (r2): y correct: {'yes' if good else 'NO'}")
    print(stats.table() + "\n")

    # a generated GEMM on base: bit-exact, and the MXU utilization of the schedule
    M, K, N = 256, 256, 256
    A = rng.integers(-128, 128, (M, K), dtype=np.int8)
    B = rng.integers(-128, 128, (K, N), dtype=np.int8)
    C, stats, _ = run_gemm(A, B, "base")
    good = bool((C == A.astype(np.int32) @ B.astype(np.int32)).all())
    ok &= good
    print(f"== generated GEMM {M}x{K}x{N} on base: C == A @ B: {'yes' if good else 'NO'}, "
          f"{stats.cycles} cycles, MXU utilization {100 * stats.mxu_utilization:.1f}%")
    return ok


def main() -> int:
    out = ROOT / "out"
    out.mkdir(exist_ok=True)
    if not _roundtrip(out):
        return 1
    return 0 if _simulate(out) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TetrachipError as e:
        print(e, file=sys.stderr)
        sys.exit(1)

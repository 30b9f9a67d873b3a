"""``make demo``: the most complete end-to-end path that exists today.

Assembles the example programs for the embedded default (tiny), prints a listing, writes the
binaries, disassembles them and checks that the text re-assembles to the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from isa import Program, assemble, assemble_file
from isa.errors import TetrachipError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["gemm_tiled.s", "vector_loop.s"]


def main() -> int:
    out = ROOT / "out"
    out.mkdir(exist_ok=True)
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
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TetrachipError as e:
        print(e, file=sys.stderr)
        sys.exit(1)

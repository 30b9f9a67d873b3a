"""Execute the notebooks of this folder and write them as HTML with their figures.

    python notebooks/run.py [--quick] [--out out/notebooks] [NOTEBOOK ...]

Each notebook runs from the repository root with ``QUICK`` and ``OUT`` set by a cell injected right after
the one tagged ``parameters`` (as papermill does); its PNG figures land in ``OUT`` and the executed
notebook is written there as ``NAME.html`` (nbconvert). The stored .ipynb files are not modified.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "notebooks"


def execute(path: Path | str, *, quick: bool, out: Path | str, timeout: int = 1800):
    """Run one notebook with ``QUICK = quick`` and ``OUT = out``; returns the executed NotebookNode."""
    import nbclient
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    at = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    if len(at) != 1:
        raise ValueError(f"{path}: needs exactly one cell tagged 'parameters', found {len(at)}")
    nb.cells.insert(at[0] + 1, nbformat.v4.new_code_cell(f"QUICK = {bool(quick)}\nOUT = {str(out)!r}",
                                                         metadata={"tags": ["injected-parameters"]}))
    # the kernel talks over Unix sockets in a fresh folder: TCP ports picked for one kernel can be taken by
    # another process (a second notebook run in parallel) before the kernel binds them (Windows: TCP)
    from traitlets.config import Config
    with tempfile.TemporaryDirectory(prefix="tetrachip-kernel-") as sockets:
        ipc = {"transport": "ipc", "ip": str(Path(sockets) / "kernel")} if os.name == "posix" else {}
        config = Config({"KernelManager": ipc})
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", config=config,
                                resources={"metadata": {"path": str(ROOT)}}).execute()
    return nb


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", help="notebooks to run (default: every one in notebooks/)")
    ap.add_argument("--quick", action="store_true", help="the test suite's short mode")
    ap.add_argument("--out", default="out/notebooks", help="folder for the HTML and the figures")
    args = ap.parse_args(argv)
    from nbconvert import HTMLExporter
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    paths = [Path(p) for p in args.notebooks] or sorted(HERE.glob("*.ipynb"))
    for p in paths:
        if not p.is_file():
            print(f"error: no notebook {p}", file=sys.stderr)
            return 2
        t = time.perf_counter()
        nb = execute(p, quick=args.quick, out=out)
        html, _ = HTMLExporter().from_notebook_node(nb)
        (out / f"{p.stem}.html").write_text(html)
        print(f"{p.name}: {time.perf_counter() - t:.1f} s -> {out / (p.stem + '.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

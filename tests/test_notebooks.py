"""The notebooks under notebooks/: stored without outputs, and each runs in quick mode and writes its figures.

Each notebook is executed by ``notebooks/run.py`` (nbclient, from the repository root, ``QUICK = True`` and
``OUT`` a temporary folder injected after the cell tagged ``parameters``), the runner ``make notebooks`` uses.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# the figures each notebook must write (one source: the save(...) calls in its cells)
SAVE = re.compile(r'save\(fig, "([^"]+\.png)"\)')


def _load(path):
    nbformat = pytest.importorskip("nbformat")
    return nbformat.read(path, as_version=4)


def test_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_gemm_roofline.ipynb", "02_design_space.ipynb", "03_model_on_chip.ipynb", "04_chip_vs_cpu_gpu.ipynb",
            "05_multichip.ipynb"} <= names


def _module(name):
    spec = importlib.util.spec_from_file_location(f"notebooks_{name}", ROOT / "notebooks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_matches_generator(path):
    """The stored notebook is what notebooks/generate.py writes (its cells are edited there)."""
    pytest.importorskip("nbformat")
    built = _module("generate").build(path.name)
    stored = _load(path)
    assert [(c.cell_type, c.source) for c in stored.cells] == [(c.cell_type, c.source) for c in built.cells], \
        f"{path.name} differs from notebooks/generate.py: run `python notebooks/generate.py`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(path):
    raw = json.loads(path.read_text())
    for i, cell in enumerate(raw["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has stored outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell(path):
    nb = _load(path)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
    assert "QUICK = True" in tagged[0].source and "OUT = " in tagged[0].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_quick(path, tmp_path):
    for mod in ("nbformat", "nbclient", "ipykernel", "matplotlib"):
        pytest.importorskip(mod)
    nb = _module("run").execute(path, quick=True, out=tmp_path, timeout=300)
    figures = {m for c in nb.cells if c.cell_type == "code" for m in SAVE.findall(c.source)}
    assert figures, f"{path.name} saves no figure"
    for name in figures:
        png = tmp_path / name
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name}: {name} not written"
    # the conclusion is printed from the data: the last code cell prints a sentence
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    text = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    assert len(text.split()) > 10, f"{path.name}: the conclusion cell printed nothing"


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets: the runner uses TCP elsewhere")
def test_kernel_talks_over_unix_sockets(tmp_path):
    """The runner's kernel uses IPC transport: TCP ports picked for one kernel could be taken by another
    notebook run in parallel before the kernel binds them (a kernel that never answers)."""
    for mod in ("nbformat", "nbclient", "ipykernel"):
        pytest.importorskip(mod)
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("QUICK = False\nOUT = None", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("from ipykernel.connect import get_connection_info\n"
                                  "print(get_connection_info(unpack=True)['transport'], QUICK)")])
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, str(path))
    out = _module("run").execute(path, quick=True, out=tmp_path, timeout=120)
    text = "".join(o.get("text", "") for o in out.cells[-1].outputs if o.get("output_type") == "stream")
    assert text.split() == ["ipc", "True"]

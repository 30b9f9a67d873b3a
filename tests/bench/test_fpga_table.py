"""docs/fpga.md's results table is bench/fpga.py's Markdown of bench/fpga_results.json: a table
edited by hand, or results committed without the table, fail here."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_fpga", ROOT / "bench" / "fpga.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_table_is_the_benchmark_json():
    rows = json.loads((ROOT / "bench" / "fpga_results.json").read_text())
    doc = (ROOT / "docs" / "fpga.md").read_text()
    start, end = "<!-- bench table start -->\n", "\n<!-- bench table end -->"
    table = doc[doc.index(start) + len(start):doc.index(end)]
    assert table.strip() == _bench().markdown(rows).strip(), \
        "docs/fpga.md's table is stale: rebuild it with bench/fpga.py --md and paste it between the markers"
    measured = [r for r in rows if r["status"].startswith("measured")]
    assert measured and all(r["luts"] > 0 for r in measured)

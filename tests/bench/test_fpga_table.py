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


def test_a_run_keeps_the_earlier_tables_other_builds():
    """A run that makes one build (memory implementation, depths, banks) keeps the earlier table's
    measured rows of the others, in the table's order, and replaces its own."""
    bench = _bench()
    mem = {"spm_rows": 64, "acc_rows": 16, "imem_words": 1024}
    earlier = [{"config": "small", "device": "ecp5-85k", "mem": "lvt", "memories": mem, "status": "measured, placed"},
               {"config": "tiny", "device": "ecp5-85k", "mem": "banked", "memories": dict(mem, spm_bank_rows=16),
                "status": "measured, placed"},
               {"config": "tiny", "device": "ecp5-85k", "mem": "lvt", "memories": mem, "status": "measured, old"},
               {"config": "tiny", "device": "ecp5-25k", "mem": "lvt", "memories": mem,
                "status": "does not fit (estimate)"},
               {"config": "array 8x8", "device": "ecp5-25k", "status": "measured, placed"}]
    made = [{"config": "tiny", "device": "ecp5-85k", "mem": "lvt", "memories": mem, "status": "measured, new"},
            {"config": "array 8x8", "device": "ecp5-25k", "status": "measured, new"}]
    earlier[0]["reused"] = "old.json"
    rows = bench._with_other_builds(made, earlier)
    assert [(r["config"], r.get("mem"), r["status"]) for r in rows] == [
        ("tiny", "lvt", "measured, new"), ("tiny", "banked", "measured, placed"),
        ("small", "lvt", "measured, placed"), ("array 8x8", None, "measured, new")]
    assert rows[2]["reused"] == "old.json" and "reused" not in rows[0] and "reused" not in rows[1]
    assert bench._with_other_builds(made, []) == made
    # a run without array rows (--no-arrays) keeps the earlier ones
    assert bench._with_other_builds(made[:1], earlier)[-1] == earlier[-1]


def test_the_mem_cell_names_depths_and_banks_other_than_the_fpga_defaults():
    bench = _bench()
    fpga = {"spm_rows": 64, "acc_rows": 16, "imem_words": 1024}
    assert bench._mem_cell({"mem": "lvt", "memories": fpga}) == "lvt"
    # a banked build's --fpga-mem depths are deeper (rtl.fpga.fit.fpga_memory): the LVT ones are named
    assert bench._mem_cell({"mem": "banked", "memories": dict(fpga, spm_bank_rows=16, acc_bank_rows=4)}) == \
        "banked: SPM 64 rows in 4 banks, ACC 16 in 4"
    banked = {"spm_rows": 256, "acc_rows": 64, "imem_words": 1024, "spm_bank_rows": 64, "acc_bank_rows": 16}
    assert bench._mem_cell({"mem": "banked", "memories": banked}) == "banked"
    assert bench._mem_cell({"mem": "banked", "memories": dict(banked, spm_bank_rows=16)}) == \
        "banked: SPM 256 rows in 16 banks, ACC 64 in 4"
    deep = {"spm_rows": 1024, "acc_rows": 64, "imem_words": 1024, "spm_bank_rows": 128, "acc_bank_rows": 16}
    assert bench._mem_cell({"mem": "banked", "memories": deep}) == "banked: SPM 1024 rows in 8 banks, ACC 64 in 4"


def test_the_fmax_cell_gives_the_range_over_placement_seeds():
    """A row placed with several seeds (``--seeds``) shows its first seed's Fmax and the range over
    all, naming seeds that did not route; a row of one seed shows its Fmax alone."""
    bench = _bench()
    rows = json.loads((ROOT / "bench" / "fpga_results.json").read_text())
    row = next(r for r in rows if r.get("fmax_mhz") and r["config"] == "tiny")
    one = bench.markdown([dict(row, fmax_mhz=38.78)]).splitlines()[-1]
    assert "| 38.8 |" in one
    three = bench.markdown([dict(row, fmax_mhz=38.78, fmax_by_seed={"1": 38.78, "2": 40.06, "3": None})])
    assert "| 38.8 (seeds 1, 2, 3: 38.8-40.1; 3 not routed) |" in three
    rep = {"placed": True, "luts": 1, "ffs": 1, "dsps": 0, "brams": 0, "fmax_mhz": 38.78, "available": {},
           "runs": [{"seed": 1, "routed": True, "fmax_mhz": 38.78}, {"seed": 2, "routed": False, "error": "x"}]}
    assert bench._measured({}, rep)["fmax_by_seed"] == {"1": 38.78, "2": None}
    assert "fmax_by_seed" not in bench._measured({}, dict(rep, runs=[]))


def test_a_row_over_the_device_once_packed_says_so():
    """A Yosys row whose LUTs fit but whose LUT4 sites once packed (LUT RAM) do not is marked over
    the device, with the packed count; one over in both says both."""
    b = _bench()
    row = {"config": "base", "device": "ecp5-85k", "mac": "dsp:93+reg2", "mem": "banked",
           "status": "measured, Yosys only", "luts": 83000, "packed_luts": 99000, "ffs": 38000, "dsps": 156,
           "brams": 123, "fmax_mhz": None,
           "available": {"luts": 83640, "ffs": 83640, "dsps": 156, "brams": 208}}
    line = b.markdown([row]).splitlines()[-1]
    assert "over the device (99000 LUT4 sites once packed)" in line, line
    line = b.markdown([dict(row, luts=84000)]).splitlines()[-1]
    assert "over the device (LUT: 99000 LUT4 sites once packed)" in line, line
    line = b.markdown([dict(row, packed_luts=83000)]).splitlines()[-1]
    assert "over the device" not in line, line

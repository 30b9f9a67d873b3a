"""FPGA resources and Fmax of tiny, small, base (and their systolic arrays alone) on ECP5-25k,
ECP5-85k and iCE40 UP5K.

Each whole-chip (config, device) first goes through the fit model (rtl/fpga/fit.py); a pair the
model refuses is reported with its estimate (marked "estimate") and not built. The others run Yosys
(synth_ecp5 without `share` / synth_ice40) and, unless --no-pnr, nextpnr out of context: those
rows are measured. ``array RxC`` rows are the systolic array alone (rtl/systolic.py), the part the
Fmax targets are about. Writes JSON (--json) and a Markdown table (--md).

``--throughput`` adds what a user gets from a placed chip: MAC/s at Fmax = array MACs x utilization x
Fmax on a 512^3 GEMM and on the digits CNN (bench/models.py's cases), the utilization (useful MACs /
(array MACs x cycles)) measured in the simulator on the row's config with its FPGA memories. The
cycles are the timing contract's, the same on the RTL (co-simulation), so the clock is the only
figure a front end or memory change moves unless it changes the contract.

    python bench/fpga.py --quick --json out/fpga.json --md out/fpga.md     # fit model only, no tools
    python bench/fpga.py --json out/fpga.json --md out/fpga.md             # all, with nextpnr (hours)
    python bench/fpga.py --reuse --json out/fpga.json --md out/fpga.md     # reuse OUT/*/report.json
    python bench/fpga.py --reuse --reuse-json bench/fpga_results.json ...   # and rows of an earlier table
    python bench/fpga.py --quick --throughput --reuse-json bench/fpga_results.json ...   # + MAC/s columns
    python bench/fpga.py --reuse --mem banked --full-mem --acc-rows 64 --banks 8,4 --reuse-json ...  # another build
    python bench/fpga.py --configs tiny --devices ecp5-85k --no-arrays --seeds 1,2,3 --reuse-json ...  # Fmax by seed

One run makes one build per config and device (``--mem``, ``--full-mem``, ``--spm-rows``,
``--acc-rows``, ``--banks``); the
``--reuse-json`` table's measured rows of other builds are kept, so the table collects several.

``--reuse`` takes a run's ``report.json`` from an earlier invocation (or from ``tetrachip fpga
synth -o OUT/NAME-DEVICE``) when its config, device and mac match, so a long table can be built
piece by piece on a slow machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isa import ChipConfig  # noqa: E402
from isa.outputs import write_atomic  # noqa: E402
from rtl.fpga.devices import DEVICES  # noqa: E402
from rtl.fpga.fit import (DSP_BASE, DSP_PER_LANE, Estimate, banked_config, default_banks, estimate,  # noqa: E402
                          estimate_array, fpga_build_config, fpga_memory, parse_banks)
from rtl.fpga.flow import FlowError, built_mac, report_memories, synth, synth_array  # noqa: E402
from rtl.mem import BANKED, FPGA_IMPL, IMPLS  # noqa: E402

CONFIGS = ["tiny", "small", "base"]
TARGETS = ["ecp5-25k", "ecp5-85k", "ice40-up5k"]
#: (rows, cols, device, mac) of the array-alone rows: the Fmax targets' arrays
#: a " dsp-regs" suffix: --dsp-regs (the hard multipliers' own registers)
ARRAYS = [(8, 8, "ecp5-25k", "dsp:28+reg"), (8, 8, "ecp5-25k", "dsp:28+reg2"),
          (8, 8, "ecp5-25k", "dsp:28+reg2 dsp-regs"), (8, 8, "ecp5-85k", "dsp+reg"), (8, 8, "ecp5-85k", "lut+reg"),
          (16, 16, "ecp5-85k", "dsp:156+reg2"), (16, 16, "ecp5-85k", "dsp:156+reg2 dsp-regs")]


def auto_mac(cfg, dev, reg: bool = True) -> str:
    free = max(0, dev.dsps - DSP_BASE - DSP_PER_LANE[dev.family] * cfg.cols)
    return ("dsp" if free >= cfg.rows * cfg.cols else f"dsp:{free}") + ("+reg2" if reg else "")


def _reused(path: Path, name: str, devname: str, mac: str | None, mem: str | None = None,
            memories: dict | None = None):
    """An earlier run's report for (name, device) (and mac, memory implementation, memories, unless
    None)."""
    if not path.exists():
        return None
    rep = json.loads(path.read_text())
    if (rep.get("config"), rep.get("device")) != (name, devname) or (mac is not None and rep.get("mac") != mac):
        return None
    if mem is not None and rep.get("mem", "flat") != mem:
        return None
    if memories is not None and rep.get("memories", memories) != memories:
        return None
    return rep


#: the models of the MAC/s columns (names of bench/models.py's cases)
THROUGHPUT = ("gemm 512x512x512", "digits cnn")


def utilization(name: str, mem: str, memories: dict | None = None) -> dict[str, float]:
    """Ideal utilization of THROUGHPUT's models on preset ``name`` with ``memories`` (a row's: depths
    and, for a banked build, bank rows; default the FPGA memories with ``banked_config``'s banks).
    DRAM grows to hold the model (the board's block-RAM DRAM is the host's buffer; the chip's cycles
    do not depend on its size)."""
    import dataclasses

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import models

    if memories is None:
        cfg = fpga_build_config(ChipConfig.preset(name), mem)
    else:
        cfg = banked_config(ChipConfig.preset(name).replace(**memories), mem)
    cfg = dataclasses.replace(cfg, name=f"{name}-fpga", dram_bytes=max(cfg.dram_bytes, 1 << 24))
    builds = dict(models.cases(quick=False))
    out = {}
    for model in THROUGHPUT:
        row = models.run_case(model, builds[model], cfg)
        if "error" in row or not row["bit_exact"]:
            raise RuntimeError(f"{model} on {cfg.name}: {row.get('error', 'not bit exact')}")
        out[model] = row["ideal_utilization"]
    return out


def add_throughput(row, util: dict[str, float]) -> None:
    """MAC/s at Fmax of a placed whole chip (``row["throughput"]``, in millions)."""
    cfg = ChipConfig.preset(row["config"])
    row["throughput"] = {m: {"utilization": round(u, 4), "mmac_s": round(cfg.rows * cfg.cols * u * row["fmax_mhz"], 1)}
                         for m, u in util.items()}


def _measured(row, rep: dict, seconds=None):
    row.update(status="measured, placed" if rep["placed"] else "measured, Yosys only",
               luts=rep["luts"], ffs=rep["ffs"], dsps=rep["dsps"], brams=rep["brams"],
               fmax_mhz=rep["fmax_mhz"], tool_seconds=rep.get("seconds", {}),
               critical_path=rep.get("critical_path", []), available=rep["available"])
    if rep.get("packed_luts") and rep["packed_luts"] != rep["luts"]:   # Yosys only: the LUT4 sites once packed
        row["packed_luts"] = rep["packed_luts"]
    if rep.get("runs"):                 # several placement seeds: each one's Fmax (None: not routed)
        row["fmax_by_seed"] = {str(r["seed"]): r.get("fmax_mhz") for r in rep["runs"]}
    if seconds is not None:
        row["seconds"] = seconds
    return row


def run_one(name, devname, *, pnr, freq, out, timeout, mem, fpga_mem=True, tools=True, reuse=False,
            banks=None, depths=None, seeds=(1,), links=True):
    """One whole chip: ``fpga_mem`` the FPGA memories (else the preset's), ``depths`` smaller ones
    ({"spm_rows": .., "acc_rows": ..}), ``banks`` ((SPM, ACC) bank counts) for ``banked_config``;
    ``links=False``: without link ports (``fpga synth --no-links``)."""
    cfg, dev = ChipConfig.preset(name), DEVICES[devname]
    cfg = fpga_build_config(cfg, mem, fpga_mem=fpga_mem, depths=depths, banks=banks, links=links)
    mac = auto_mac(cfg, dev, reg=dev.family == "ecp5")
    # the row names the mac as the flow's default build reports it (an earlier row of another build
    # does not match it)
    memories = report_memories(cfg)     # as the flow's report.json names them
    row = {"config": name, "device": devname, "mac": built_mac(mac, dev.family), "mem": mem, "memories": memories}
    est = estimate(cfg, dev, mac=mac, mem=mem)
    row["estimate"] = est.__dict__
    # one folder per build: the LVT build of the FPGA memories keeps the plain name
    tag = "".join([f"-{mem}" if mem != "lvt" else "", "" if fpga_mem else "-full",
                   "".join(f"-{k.split('_')[0]}{v}" for k, v in sorted((depths or {}).items())),
                   "-b" + "-".join(map(str, banks)) if banks else "", "" if links else "-nolinks"])
    d = out / f"{name}-{devname}{tag}"
    rep = _reused(d / "report.json", name, devname, None, mem, memories) if reuse else None
    if rep is not None:                 # the earlier run's mac and memories are what the row shows
        row.update(mac=rep["mac"], memories=rep.get("memories", row["memories"]))
        return _measured(row, rep)
    over = est.over(dev)
    if over:
        row.update(status="does not fit (estimate)", reason="; ".join(over))
        return row
    if not tools:
        row.update(status="fits (estimate)")
        return row
    t = time.monotonic()
    try:
        rep = synth(cfg, devname, mac=mac, mem=mem, out=d, pnr=pnr, freq_mhz=freq, timeout=timeout, check_fit=False,
                    seeds=seeds)
    except FlowError as e:
        row.update(status="tool failed", reason=str(e))
        return row
    return _measured(row, rep.to_dict(), round(time.monotonic() - t, 1))


def run_array(rows, cols, devname, mac, *, pnr, freq, out, timeout, tools=True, reuse=False, seeds=(1,)):
    dev = DEVICES[devname]
    name = f"array {rows}x{cols}"
    row = {"config": name, "device": devname, "mac": mac,
           "estimate": estimate_array(rows, cols, dev, mac.split()[0]).__dict__}
    d = out / f"array{rows}x{cols}-{devname}-{mac.replace(':', '').replace('+', '-').replace(' dsp-regs', '-dspregs')}"
    rep = _reused(d / "report.json", name, devname, mac) if reuse else None
    if rep is not None:                 # an array run, placed or Yosys only
        return _measured(row, rep)
    if not tools:
        row.update(status="fits (estimate)" if not row_over(row, dev) else "does not fit (estimate)")
        return row
    t = time.monotonic()
    try:
        rep = synth_array(rows, cols, devname, mac=mac.split()[0], out=d, pnr=pnr, freq_mhz=freq, timeout=timeout,
                          dsp_regs=mac.endswith(" dsp-regs"), seeds=seeds)
    except FlowError as e:
        row.update(status="tool failed", reason=str(e))
        return row
    return _measured(row, rep.to_dict(), round(time.monotonic() - t, 1))


def row_over(row, dev) -> bool:
    return bool(Estimate(**row["estimate"]).over(dev))


def _mem_cell(r) -> str:
    """The memory implementation, with the depths and banks where they are not --fpga-mem's
    (``fpga_memory``, ``default_banks``), and "no links" for a chip without link ports."""
    mem, m = r.get("mem", "--"), r.get("memories")
    if not m:
        return mem
    return _depths_cell(mem, m) + (", no links" if m.get("links") == 0 else "")


def _depths_cell(mem: str, m: dict) -> str:
    banked = mem in BANKED
    if all(m.get(k) == v for k, v in fpga_memory(mem).items() if k != "imem_words") and (
            not banked or all(m.get(k) == v for k, v in default_banks(m["spm_rows"], m["acc_rows"]).items())):
        return mem
    spm, acc = m["spm_rows"], m["acc_rows"]
    if not banked:
        return f"{mem}: SPM {spm}, ACC {acc} rows"
    return (f"{mem}: SPM {spm} rows in {spm // m['spm_bank_rows']} banks, "
            f"ACC {acc} in {acc // m['acc_bank_rows']}")


def markdown(rows) -> str:
    out = ["| design | device | mac | mem | LUT | FF | DSP | BRAM | Fmax (MHz) "
           "| MMAC/s at Fmax: GEMM 512^3 / digits CNN | Yosys / nextpnr (s) | status |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "luts" in r:
            a = r["available"]
            cells = [f"{r[k]} / {a[k]}" for k in ("luts", "ffs", "dsps", "brams")]
            f = f"{r['fmax_mhz']:.1f}" if r.get("fmax_mhz") else "--"
            f += _seeds_cell(r.get("fmax_by_seed"))
            s = r.get("tool_seconds", {})
            secs = f"{s.get('yosys', '--')} / {s.get('nextpnr', '--')}"
        else:
            e = r["estimate"]
            cells = [f"~{e[k]}" for k in ("luts", "ffs", "dsps", "brams")]
            f, secs = "--", "--"
        over = [k[:-1].upper() for k in ("luts", "ffs", "dsps", "brams") if "luts" in r and r[k] > r["available"][k]]
        if r.get("packed_luts", 0) > r.get("available", {}).get("luts", 1 << 62):
            packed = f"{r['packed_luts']} LUT4 sites once packed"
            over = [f"{o}: {packed}" if o == "LUT" else o for o in over] if "LUT" in over else [packed, *over]
        status = (r["status"] + (f": {r['reason']}" if r.get("reason") else "")
                  + (f", over the device ({', '.join(over)})" if over else "")
                  + (", earlier run" if r.get("reused") else ""))
        tp = r.get("throughput")
        macs = (" / ".join(f"{tp[m]['mmac_s']:.0f} ({100 * tp[m]['utilization']:.1f}%)" for m in THROUGHPUT)
                if tp else "--")
        out.append(f"| {r['config']} | {r['device']} | {r['mac']} | {_mem_cell(r)} | " + " | ".join(cells)
                   + f" | {f} | {macs} | {secs} | {status} |")
    return "\n".join(out)


def _seeds_cell(by_seed) -> str:
    """`` (seeds 1, 2, 3: 38.8-40.1)``: the range of a row's Fmax over its placement seeds, and
    the seeds that did not route; empty for one seed."""
    if not by_seed or len(by_seed) < 2:
        return ""
    got = [v for v in by_seed.values() if v]
    span = f"{min(got):.1f}-{max(got):.1f}" if got else "none routed"
    miss = [k for k, v in by_seed.items() if not v]
    return f" (seeds {', '.join(by_seed)}: {span}" + (f"; {', '.join(miss)} not routed" if miss and got else "") + ")"


def _utilizations(row) -> dict[str, float]:
    return {m: v["utilization"] for m, v in row["throughput"].items()}


def _memory_key(row) -> tuple:
    """What a row's utilization depends on: its config, memory implementation and memories."""
    return row["config"], row.get("mem", "lvt"), json.dumps(row.get("memories"), sort_keys=True)


def _with_other_builds(rows, earlier):
    """``rows`` and the earlier table's rows of what this run did not make: whole-chip rows
    measured with another build (memory implementation, depths or banks: one ``bench/fpga.py`` run
    makes one) and, when this run made none, the array rows; as that table has them (its "earlier
    run" marks included), whole chips in the table's order (config, device, memory implementation,
    depths), then the arrays."""
    key = lambda r: tuple(json.dumps(r.get(k), sort_keys=True) for k in ("config", "device", "mac", "mem", "memories"))
    made = {key(r) for r in rows}
    arrays_made = any(r["config"] not in CONFIGS for r in rows)
    extra = [dict(r) for r in earlier if key(r) not in made and (
        r.get("status", "").startswith("measured") if r.get("config") in CONFIGS else not arrays_made)]
    if not extra:
        return rows
    chips = [r for r in rows + extra if r["config"] in CONFIGS]
    chips.sort(key=lambda r: (CONFIGS.index(r["config"]), TARGETS.index(r["device"]) if r["device"] in TARGETS else 99,
                              IMPLS.index(r.get("mem", "lvt")), (r.get("memories") or {}).get("spm_rows", 0)))
    return chips + [r for r in rows + extra if r["config"] not in CONFIGS]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the fit model's estimates only (no tools)")
    ap.add_argument("--reuse", action="store_true", help="reuse OUT/*/report.json of matching earlier runs")
    ap.add_argument("--full-mem", action="store_true", help="the presets' memories (default: --fpga-mem depths)")
    ap.add_argument("--mem", choices=IMPLS, default=FPGA_IMPL,
                    help=f"SPM/ACC implementation (rtl/mem.py; default {FPGA_IMPL})")
    ap.add_argument("--banks", type=parse_banks, default=None, metavar="N|S,A",
                    help="--mem banked/banked-bram: SPM and ACC each in N banks, or S SPM and A ACC banks "
                         "(rtl.fpga.fit.banked_config)")
    ap.add_argument("--spm-rows", type=int, default=None, help="smaller SPM (rows)")
    ap.add_argument("--acc-rows", type=int, default=None, help="smaller ACC (rows)")
    ap.add_argument("--no-links", action="store_true",
                    help="chips without link ports (links = 0, as `tetrachip fpga synth --no-links`)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--devices", default=",".join(TARGETS))
    ap.add_argument("--no-arrays", action="store_true", help="skip the array-alone rows")
    ap.add_argument("--no-pnr", action="store_true")
    ap.add_argument("--freq", type=float, default=100.0)
    ap.add_argument("--seeds", default="1", metavar="N[,N...]",
                    help="nextpnr placement seeds: each build placed and routed with each; the row's figures are "
                         "the first seed's, its Fmax cell adds the range")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per tool run")
    ap.add_argument("--out", type=Path, default=Path("build/bench-fpga"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--throughput", action="store_true",
                    help="MAC/s at Fmax of every placed whole chip (simulates THROUGHPUT's models on its config)")
    ap.add_argument("--reuse-utilization", action="store_true",
                    help="--throughput: take a row's utilizations from the --reuse-json row of the same config, "
                         "memory implementation and memories that has them, instead of simulating the models again")
    ap.add_argument("--reuse-json", type=Path, metavar="FILE",
                    help="take measured rows from an earlier run's JSON (e.g. bench/fpga_results.json) "
                         "when design, device, mac and memories match: the rest of the table is rebuilt")
    a = ap.parse_args(argv)
    earlier = json.loads(a.reuse_json.read_text()) if a.reuse_json else []

    def from_earlier(row):
        """The earlier measured row for this one's design, device, mac and memory implementation."""
        for r in earlier:
            if r.get("status", "").startswith("measured") and all(
                    r.get(k) == row.get(k) for k in ("config", "device", "mac", "mem", "memories")):
                return dict(r, reused=str(a.reuse_json))
        return None
    configs, devices, pnr = [c for c in a.configs.split(",") if c], a.devices.split(","), not a.no_pnr
    try:
        seeds = tuple(int(x) for x in a.seeds.split(","))
    except ValueError:
        ap.error(f"--seeds: comma-separated integers, got {a.seeds!r}")
    if len(set(seeds)) != len(seeds) or min(seeds) < 1:
        ap.error(f"--seeds: distinct seeds >= 1, got {a.seeds!r}")
    kw = dict(pnr=pnr, freq=a.freq, out=a.out, timeout=a.timeout, tools=not a.quick, reuse=a.reuse, seeds=seeds,
              links=not a.no_links)
    depths = {k: v for k, v in (("spm_rows", a.spm_rows), ("acc_rows", a.acc_rows)) if v}
    rows = []
    for name in configs:
        for d in devices:
            # this run's report (--reuse) first, then the earlier table's row, then the tools
            quick = run_one(name, d, fpga_mem=not a.full_mem, mem=a.mem, banks=a.banks, depths=depths,
                            **dict(kw, tools=False))
            old = quick if "luts" in quick else from_earlier(quick)
            rows.append(old or run_one(name, d, fpga_mem=not a.full_mem, mem=a.mem, banks=a.banks, depths=depths, **kw))
            print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    if not a.no_arrays:
        for r, c, d, mac in ARRAYS:
            akw = {k: v for k, v in kw.items() if k != "links"}
            old = from_earlier(run_array(r, c, d, mac, **dict(akw, tools=False, reuse=False)))
            rows.append(old or run_array(r, c, d, mac, **akw))
            print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    rows = _with_other_builds(rows, earlier)
    if a.throughput:
        utils: dict = {}
        for r in rows:
            if r["config"] in CONFIGS and r.get("fmax_mhz"):
                key = _memory_key(r)
                if key not in utils and a.reuse_utilization:
                    utils[key] = next((_utilizations(o) for o in earlier
                                       if o.get("throughput") and _memory_key(o) == key), None)
                if utils.get(key) is None:
                    utils[key] = utilization(r["config"], r.get("mem", "lvt"), r.get("memories"))
                add_throughput(r, utils[key])
    md = markdown(rows)
    print(md)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(a.json, json.dumps(rows, indent=1))
    if a.md:
        a.md.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(a.md, md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

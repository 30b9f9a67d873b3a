"""FPGA resources and Fmax of tiny, small, base on ECP5-25k, ECP5-85k and iCE40 UP5K.

Each (config, device) first goes through the fit model (rtl/fpga/fit.py); a pair the model refuses
is reported with its estimate and not built. The others run Yosys (synth_ecp5 / synth_ice40) and,
unless --no-pnr, nextpnr out of context. Writes JSON (--json) and a Markdown table (--md).

    python bench/fpga.py --quick --json out/fpga.json --md out/fpga.md     # fit model only, no tools
    python bench/fpga.py --json out/fpga.json --md out/fpga.md             # all, with nextpnr
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isa import ChipConfig  # noqa: E402
from rtl.fpga.devices import DEVICES  # noqa: E402
from rtl.fpga.fit import DSP_PER_LANE, FPGA_MEMORY, estimate, fpga_config  # noqa: E402
from rtl.fpga.flow import FlowError, synth  # noqa: E402

CONFIGS = ["tiny", "small", "base"]
TARGETS = ["ecp5-25k", "ecp5-85k", "ice40-up5k"]


def auto_mac(cfg, dev) -> str:
    free = max(0, dev.dsps - DSP_PER_LANE[dev.family] * cfg.cols)
    return "dsp" if free >= cfg.rows * cfg.cols else f"dsp:{free}"


def run_one(name, devname, *, pnr, freq, out, timeout, fpga_mem=True, tools=True):
    cfg, dev = ChipConfig.preset(name), DEVICES[devname]
    if fpga_mem:
        cfg = fpga_config(cfg, **FPGA_MEMORY)
    mac = auto_mac(cfg, dev)
    row = {"config": name, "device": devname, "mac": mac}
    est = estimate(cfg, dev, mac=mac)
    row["estimate"] = est.__dict__
    over = est.over(dev)
    if over:
        row.update(status="does not fit (estimate)", reason="; ".join(over))
        return row
    if not tools:
        row.update(status="fits (estimate)")
        return row
    t = time.monotonic()
    try:
        rep = synth(cfg, devname, mac=mac, out=out / f"{name}-{devname}", pnr=pnr, freq_mhz=freq,
                    timeout=timeout, check_fit=False)
    except FlowError as e:
        row.update(status="tool failed", reason=str(e))
        return row
    row.update(status="placed" if rep.placed else "synthesised", luts=rep.luts, ffs=rep.ffs, dsps=rep.dsps,
               brams=rep.brams, fmax_mhz=rep.fmax_mhz, seconds=round(time.monotonic() - t, 1),
               critical_path=rep.critical_path, available=rep.available)
    return row


def markdown(rows) -> str:
    out = ["| config | device | mac | LUT | FF | DSP | BRAM | Fmax (MHz) | status |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "luts" in r:
            a = r["available"]
            cells = [f"{r[k]} / {a[k]}" for k in ("luts", "ffs", "dsps", "brams")]
            f = f"{r['fmax_mhz']:.1f}" if r.get("fmax_mhz") else "--"
        else:
            e = r["estimate"]
            cells = [f"~{e[k]}" for k in ("luts", "ffs", "dsps", "brams")]
            f = "--"
        status = r["status"] + (f": {r['reason']}" if r.get("reason") else "")
        out.append(f"| {r['config']} | {r['device']} | {r['mac']} | " + " | ".join(cells) + f" | {f} | {status} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the fit model's estimates only (no tools)")
    ap.add_argument("--full-mem", action="store_true", help="the presets' memories (default: --fpga-mem depths)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--devices", default=",".join(TARGETS))
    ap.add_argument("--no-pnr", action="store_true")
    ap.add_argument("--freq", type=float, default=100.0)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per tool run")
    ap.add_argument("--out", type=Path, default=Path("build/bench-fpga"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    a = ap.parse_args(argv)
    configs, devices, pnr = a.configs.split(","), a.devices.split(","), not a.no_pnr
    rows = []
    for name in configs:
        for d in devices:
            rows.append(run_one(name, d, pnr=pnr, freq=a.freq, out=a.out, timeout=a.timeout,
                                fpga_mem=not a.full_mem, tools=not a.quick))
            print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    md = markdown(rows)
    print(md)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(rows, indent=1))
    if a.md:
        a.md.parent.mkdir(parents=True, exist_ok=True)
        a.md.write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Timing rules of docs/microarchitecture.md, each checked on a small program.

Expected cycles are computed here from the contract's formulas (the constants come from
isa.timing and the config, the rules are written out in the tests), never read from the simulator.
"""

from __future__ import annotations

import json

from isa import ChipConfig, timing
from sim import Chip

CFG = ChipConfig.preset("tiny")
LAT = CFG.dram_latency


def traced(src: str, setup=None) -> tuple[Chip, dict]:
    chip = Chip(CFG, trace=True)
    chip.load(src)
    if setup:
        setup(chip)
    chip.run(max_cycles=100_000)
    recs = {}
    for r in chip.trace.records:
        recs.setdefault(r.pc, []).append(r)
    return chip, recs


def test_scalar_issue_and_halt():
    chip, _ = traced("seti r1, 1\nseti r2, 2\nhalt\n")
    assert chip.stats.cycles == 3                     # halt issues at 2, total = t_h + 1


def test_branch_penalty():
    chip, recs = traced("seti r1, 1\nbeq r1, r1, t\nnop\nt: nop\nbne r1, r1, t\nhalt\n")
    taken_at = recs[1][0].issue
    assert recs[3][0].issue == taken_at + 1 + timing.BRANCH_PENALTY
    assert recs[5][0].issue == recs[4][0].issue + 1    # not taken: no penalty
    assert chip.stats.stalls["branch"] == timing.BRANCH_PENALTY


def test_sld_penalty():
    """The instruction after an sld issues SLD_PENALTY cycles late and sees the loaded lane; an sst
    costs nothing extra."""
    chip, recs = traced("seti r1, -7\nsst r1, acc[2], 1\nsld r2, acc[2], 1\naddi r3, r2, 1\n"
                        "sst r3, spm[0], 0\nsld r4, spm[0], 0\nhalt\n")
    assert recs[2][0].issue == recs[1][0].issue + 1                       # sst: no penalty
    assert recs[3][0].issue == recs[2][0].issue + 1 + timing.SLD_PENALTY
    assert recs[6][0].issue == recs[5][0].issue + 1 + timing.SLD_PENALTY  # (a halt right after one too)
    assert chip.stats.stalls["sld"] == 2 * timing.SLD_PENALTY
    assert chip.regs[2:5] == [-7, -6, -6]


def test_dma_occupancy_latency_and_pipelining():
    # rows=3 contiguous rows of 4 int8 = 1 beat each (4-byte beats); ACC rows of 4 int32 = 4 beats
    chip, recs = traced("dma.ld spm[0], dram[0], rows=3, rstride=4\ndma.ld acc[0], dram[64], rows=2, rstride=16\n"
                        "dma.ld spm[8], dram[128], rows=2, len=3, estride=2, rstride=8\nhalt\n")
    s0 = 1
    o0 = 3 * 1
    assert (recs[0][0].start, recs[0][0].retire) == (s0, s0 + o0 - 1 + LAT)
    s1 = s0 + o0                                         # requests pipeline behind responses
    o1 = 2 * (4 * 4 // CFG.dma_beat_bytes)
    assert (recs[1][0].start, recs[1][0].retire) == (s1, s1 + o1 - 1 + LAT)
    s2 = s1 + o1
    o2 = 2 * 3                                           # strided: one element per beat
    assert (recs[2][0].start, recs[2][0].retire) == (s2, s2 + o2 - 1 + LAT)
    assert chip.stats.cycles == s2 + o2 - 1 + LAT + 1 + 1


def test_load_and_store_channels_are_independent():
    chip, recs = traced("dma.ld spm[0], dram[0], rows=8, rstride=4\n"
                        "dma.st dram[512], spm[100], rows=8, rstride=4\nhalt\n")
    assert recs[0][0].start == 1 and recs[1][0].start == 2


def test_queue_full_stalls_issue():
    # 7 loads of 10 beats each: the 5th and later wait for a free queue entry
    n, beats = 7, 10
    src = "\n".join(f"dma.ld spm[{16 * i}], dram[{64 * i}], rows=10, rstride=4" for i in range(n)) + "\nhalt\n"
    chip, recs = traced(src)
    q, s = [], []
    for i in range(n):
        qi = 0 if i == 0 else q[-1] + 1
        if i >= timing.QUEUE_DEPTH:
            qi = max(qi, s[i - timing.QUEUE_DEPTH] + 1)      # entry i-4 occupies its queue until its start
        si = qi + timing.ISSUE_TO_START if i == 0 else max(qi + timing.ISSUE_TO_START, s[-1] + beats)
        q.append(qi)
        s.append(si)
    assert [recs[i][0].issue for i in range(n)] == q
    assert [recs[i][0].start for i in range(n)] == s
    assert chip.stats.stalls["queue_full(load)"] == q[-1] - (n - 1)


def test_tokens_latency():
    chip, recs = traced("dma.ld spm[0], dram[0], signal=vpu\nvadd acc[0], spm[0], 1, wait=load\nhalt\n")
    r = recs[0][0].retire
    assert recs[1][0].start == r + timing.TOKEN_LATENCY
    assert chip.stats.stalls["vpu.token(load)"] == r + timing.TOKEN_LATENCY - 2


def test_vpu_one_instance_at_a_time():
    chip, recs = traced("vadd acc[0], acc[10], 1, n=5\nvadd acc[20], acc[30], 1, n=2\nhalt\n")
    a, b = recs[0][0], recs[1][0]
    assert a.retire == a.start + 5 - 1 + timing.VPU_LATENCY
    assert b.start == a.retire + 1 and b.retire == b.start + 2 - 1 + timing.VPU_LATENCY


def test_mxu_lw_mm_swap_rule():
    k, n = 3, 2
    chip, recs = traced(f"mxu.lw spm[0], k={k}\nmxu.mm acc[0], spm[8], n={n}\nmxu.lw spm[4]\n"
                        f"mxu.mm acc[8], spm[8], n={n}\nmxu.mma acc[8], spm[8], n=1\nhalt\n")
    lw1, mm1, lw2, mm2, mm3 = (recs[pc][0] for pc in range(5))
    assert (lw1.start, lw1.retire) == (1, 1 + k - 1)
    assert mm1.start == lw1.start + k                  # waits for the pending weights
    pipe = CFG.rows + CFG.cols + timing.MXU_EXTRA
    assert mm1.retire == mm1.start + n - 1 + pipe
    # the next lw waits for the swap wavefront: rows + cols after the swapping mm started
    assert lw2.start == mm1.start + CFG.rows + CFG.cols
    assert mm2.start == lw2.start + CFG.rows
    assert mm3.start == mm2.start + n                 # back-to-back streaming, no swap
    assert chip.stats.busy["mxu"] == n + n + 1


def test_fence_waits_for_retire():
    chip, recs = traced("dma.ld spm[0], dram[0]\nfence load\nnop\nhalt\n")
    assert recs[1][0].issue == recs[0][0].retire + 1
    assert chip.stats.stalls["fence"] > 0


def test_sync_once_and_empty_nest():
    # sync=once: only the first instance waits, only the last signals; an empty nest still passes tokens on
    chip, recs = traced("loop l0, 3, s0=1, s1=4\nloop l1, 0\n"
                        "dma.ld spm[0], dram[0], rep=l0:1, sync=once, signal=vpu\n"
                        "vadd acc[0], spm[0], 1, n=3, wait=load, signal=store\n"
                        "dma.st dram[256], acc[0], rows=0, rep=l1:1, wait=vpu, sync=once, signal=mxu\n"
                        "mxu.mm acc[50], spm[50], n=0, wait=store\nhalt\n")
    loads = recs[2]
    assert [x.start for x in loads] == [3, 4, 5]
    assert recs[3][0].start == loads[-1].retire + 1
    assert 4 not in recs                               # no instance for the empty nest
    assert recs[5][0].start >= recs[3][0].retire + 1 + 1


def test_stats_and_traces_outputs(tmp_path):
    chip, _ = traced("loop l0, 2, s0=1, s1=4\ndma.ld spm[0], dram[0], rep=l0:1, sync=once, signal=mxu\n"
                     "mxu.lw spm[0], wait=load\nmxu.mm acc[0], spm[0], n=4\nhalt\n")
    st = chip.stats
    d = st.to_dict()
    assert d["cycles"] == st.cycles and d["instances"]["load"] == 2 and d["instances"]["mxu"] == 2
    assert abs(d["mxu_utilization"] - 4 * 4 * 4 / (16 * st.cycles)) < 1e-12
    assert d["bytes"]["dram_read"] == 8 and d["busy"]["load"] == 2
    assert "MXU utilization" in st.table() and "load" in str(st)
    path = tmp_path / "t.json"
    chip.trace.save_chrome(path)
    ev = json.loads(path.read_text())["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == len(chip.trace.records)
    lt = chip.trace.line_trace().splitlines()
    assert lt[0].split()[:3] == ["retire", "start", "issue"]
    widths = {len(x.split("  ")[0]) for x in lt[1:]}
    assert len(widths) == 1                            # fixed columns
    retires = [int(x.split()[0]) for x in lt[1:]]
    assert retires == sorted(retires)


def test_event_cost_does_not_grow_with_idle_cycles():
    # a wait of ~2 million cycles (a long strided DMA) costs no more work than a short one
    import time
    chip = Chip("base")
    chip.load("dma.ld spm[0], dram[0], rows=16384, len=16, rstride=16, estride=8\nhalt\n")
    t0 = time.perf_counter()
    st = chip.run()
    assert st.cycles > 16384 * 16
    assert time.perf_counter() - t0 < 5.0

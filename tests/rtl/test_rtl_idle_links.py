"""``Chip(idle_links=True)``, the chip the FPGA top builds (its links lead nowhere): built without the
link receiver's buffers and memory write ports and the link transmitter's memory read ports, it
runs every program as the full chip does with its link ports held idle (nothing received, no
credit returned): the same cycles, error, memories, registers and per-instance trace, cycle for
cycle, also for link instructions that finish, stop on an error, or wait forever."""

from __future__ import annotations

import numpy as np
import pytest

from isa import ChipConfig
from isa.asm import assemble
from isa.table import Unit
from rtl.chip import MEMORY_PORTS, memory_ports
from rtl.fpga.fit import fpga_build_config
from tests.rtl import chip_bench
from tests.rtl.rtl_helpers import pack

CFG = ChipConfig.preset("tiny")

#: tiny: an SPM row is one flit, an ACC row four, and a transmitter starts with 8 credits
PROGRAMS = {
    # sends that fit the initial credits finish; a receive of no rows finishes
    "send-within-credits": """
        seti r1, 5
        vadd spm[0], spm[4], spm[8], n=4
        link.send 0, spm[0], n=3, signal=vpu
        link.send 1, acc[2], n=2
        link.recv 1, spm[20], n=0, signal=vpu
        vadd spm[30], spm[0], spm[1], n=2, wait=ltx
        vadd spm[40], spm[0], spm[1], n=2, wait=lrx
        halt
    """,
    # a send of more flits than credits waits for credits that never return
    "send-past-credits": """
        link.send 0, acc[0], n=3
        seti r2, 7
        halt
    """,
    # a receive of rows waits for flits that never arrive; the rest of the program goes on
    "recv-waits": """
        link.recv 0, acc[4], n=2
        vadd spm[8], spm[0], spm[1], n=2
        seti r3, 9
        link.send 0, spm[0], n=1, wait=lrx
        halt
    """,
    # the receiver's start-time checks still stop the run
    "recv-address-error": """
        seti r1, 3
        link.recv 0, spm[1023], n=2
        halt
    """,
}


def _run(text: str, idle: bool, mem: str = "flat"):
    prog = assemble(text, CFG)
    dram = np.arange(CFG.dram_bytes, dtype=np.uint64).astype(np.uint8)
    spm = {r: pack([(r * 7 + k) % 50 - 25 for k in range(CFG.cols)], 8) for r in range(12)}
    return chip_bench.run_chip(prog, dram, {4: 11}, spm_init=spm, max_cycles=300, mem=mem, idle_links=idle)


def _outcome(r):
    return r.cycles, r.error, r.done, r.sim_cycles


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_idle_links_chip_runs_as_the_full_chip(name):
    full, idle = _run(PROGRAMS[name], False), _run(PROGRAMS[name], True)
    assert _outcome(idle) == _outcome(full)
    assert idle.records == full.records
    assert idle.regs == full.regs
    for what in ("dram", "spm", "acc"):
        assert np.array_equal(getattr(idle, what), getattr(full, what)), what


def test_the_programs_reach_what_they_are_named_for():
    """The cases above are what their names say (so the equality means something): the run that
    fits the credits halts, the waiting ones are still busy when the bench stops, the last one
    stops with an error; and the finished run's link transfers did retire."""
    fits = _run(PROGRAMS["send-within-credits"], True)
    assert fits.done and fits.error == 0 and fits.sim_cycles < 300
    assert {r[1] for r in fits.records} >= {Unit.LTX, Unit.LRX}
    for name in ("send-past-credits", "recv-waits"):
        r = _run(PROGRAMS[name], True)
        assert not r.done and r.sim_cycles == 300, name
    bad = _run(PROGRAMS["recv-address-error"], True)
    assert bad.done and bad.error != 0


def test_idle_links_on_banked_memories():
    """The FPGA top's memories: banked, at its depths."""
    cfg = fpga_build_config(CFG, "banked")
    prog = assemble(PROGRAMS["send-within-credits"], cfg)
    runs = [chip_bench.run_chip(prog, None, None, cfg=cfg, max_cycles=300, mem="banked", idle_links=idle)
            for idle in (False, True)]
    assert runs[0].records == runs[1].records and runs[0].cycles == runs[1].cycles and runs[1].done
    assert np.array_equal(runs[0].spm, runs[1].spm) and np.array_equal(runs[0].acc, runs[1].acc)


def test_idle_links_build_fewer_memory_ports():
    full = chip_bench.bench(CFG).top
    idle = chip_bench.bench(CFG, idle_links=True).top
    for name in ("spm", "acc"):
        f, i = getattr(full, name), getattr(idle, name)
        assert (len(f.writes), len(f.reads)) == MEMORY_PORTS[name][:2]
        assert (len(i.writes), len(i.reads)) == (len(f.writes) - 1, len(f.reads) - 1)
        assert memory_ports(idle_links=True)[name][:2] == (len(i.writes), len(i.reads))

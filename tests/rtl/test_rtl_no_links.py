"""A chip without link ports (``ChipConfig.links = 0``, ``tetrachip fpga synth/build --no-links``):
the link instructions have no legal port, so the assembler refuses them (file:line:col), and a
link word met at run time is an illegal instruction in the simulator and in the RTL alike; the RTL
is built without the link units and their queues, and runs every other program as the chip with
link ports does (the same cycles, memories and per-instance trace)."""

from __future__ import annotations

import numpy as np
import pytest

from isa import ChipConfig, assemble
from isa.errors import AsmError, ConfigError, ErrorCode
from isa.table import Unit
from rtl.chip import memory_ports
from rtl.fpga.fit import fpga_build_config
from sim import Chip as SimChip
from sim import SimError
from tests.rtl import chip_bench
from verify.cosim import Job, compare

TINY = ChipConfig.preset("tiny")
NONE = TINY.replace(links=0, name="tiny-nolinks")

#: a program of every unit but the links, which fences and waits on them too (their units idle)
UNITS = """
    seti r1, 5
    dma.ld spm[0], dram[0], rows=4, rstride=4, signal=vpu
    vadd spm[8], spm[0], spm[4], n=4, wait=load, signal=mxu
    mxu.lw spm[0], wait=vpu
    mxu.mm acc[0], spm[4], n=4, signal=vpu
    fence ltx|lrx
    vadd acc[8], acc[0], acc[1], n=2, wait=mxu, signal=store
    dma.st dram[256], acc[8], rows=2, rstride=16, wait=vpu
    sst r1, acc[12], 0
    halt
"""

#: a link word after work in flight: assembled for tiny (2 ports), run on the chip without any
LINKED = """
    seti r1, 5
    vadd spm[8], spm[0], spm[4], n=4
    link.send 0, spm[8], n=2
    seti r2, 7
    halt
"""


def _dram(cfg):
    return np.arange(cfg.dram_bytes, dtype=np.uint64).astype(np.uint8)


def test_config_without_link_ports():
    assert NONE.links == 0
    with pytest.raises(ConfigError, match="links must be >= 0"):
        TINY.replace(links=-1)
    with pytest.raises(ConfigError, match="rows must be >= 1"):
        TINY.replace(rows=0)


def test_link_instructions_do_not_assemble_without_link_ports():
    with pytest.raises(AsmError) as ei:
        assemble("seti r1, 1\n  link.recv 0, acc[0], n=1\nhalt\n", NONE, filename="k.s")
    msg = str(ei.value)
    assert msg.startswith("k.s:2:13:") and "no legal port (links = 0)" in msg and "tiny-nolinks" in msg
    assemble("seti r1, 1\nlink.recv 0, acc[0], n=1\nhalt\n", TINY)        # the chip with ports takes it


def test_link_word_is_illegal_in_the_simulator_and_the_rtl():
    sim = SimChip(NONE)
    sim.load(bytes(assemble(LINKED, TINY).code_bytes()))
    with pytest.raises(SimError) as ei:
        sim.run()
    e = ei.value
    assert e.code == ErrorCode.ILLEGAL_INSTRUCTION and e.pc == 2 and "no legal port" in e.message
    for mem in ("flat", "banked"):
        cfg = NONE if mem == "flat" else fpga_build_config(TINY, "banked", links=False)
        # (the word as the same config with link ports encodes it: field widths follow the memories)
        words = assemble(LINKED, cfg.replace(links=TINY.links)).words()
        r = chip_bench.run_chip(words, None, None, cfg=cfg, max_cycles=200, mem=mem)
        job = Job([words], [None], [None], 200)
        assert r.done and r.error == ErrorCode.ILLEGAL_INSTRUCTION, mem
        assert compare(cfg, job, chip_bench.as_cosim([r])) is None, mem
        assert r.regs[1] == 5 and r.regs[2] == 0            # the instructions before it ran, not those after


@pytest.mark.parametrize("mem", ["flat", "banked"])
def test_chip_without_links_runs_as_the_chip_with_them(mem):
    """The same cycles, registers, memories and per-instance trace as the chip with link ports, and as
    the simulator's run of the config without them."""
    cfgs = [TINY, NONE] if mem == "flat" else [fpga_build_config(TINY, "banked", links=k) for k in (True, False)]
    words = assemble(UNITS, cfgs[0]).words()
    full, none = (chip_bench.run_chip(words, _dram(c), {4: 11}, cfg=c, max_cycles=400, mem=mem) for c in cfgs)
    assert full.done and full.error == 0 and full.sim_cycles < 400
    assert (none.cycles, none.error, none.done) == (full.cycles, full.error, full.done)
    assert none.records == full.records and none.regs == full.regs
    assert {r[1] for r in full.records} >= {Unit.LOAD, Unit.STORE, Unit.MXU, Unit.VPU}
    for what in ("dram", "spm", "acc"):
        assert np.array_equal(getattr(none, what), getattr(full, what)), what
    job = Job([words], [_dram(cfgs[1])], [{4: 11}], 400)
    assert compare(cfgs[1], job, chip_bench.as_cosim([none])) is None


def test_built_without_link_units(monkeypatch):
    """``Chip`` builds no link unit for a config without link ports (and does for one with them), and
    the memories lose the link units' ports, as the idle-link chip's do."""
    import rtl.chip
    from amaranth.hdl import Fragment

    built = []

    def count(kind):
        real = getattr(rtl.chip, kind)
        return lambda *a, **k: built.append(kind) or real(*a, **k)

    monkeypatch.setattr(rtl.chip, "LinkTx", count("LinkTx"))
    monkeypatch.setattr(rtl.chip, "LinkRx", count("LinkRx"))
    for cfg, want in ((NONE, []), (TINY, ["LinkTx", "LinkRx"])):
        built.clear()
        top = rtl.chip.Chip(cfg)
        Fragment.get(top, None)
        assert built == want, cfg.name
        ports = memory_ports(idle_links=not cfg.links)
        for name in ("spm", "acc"):
            mem = getattr(top, name)
            assert (len(mem.writes), len(mem.reads)) == ports[name][:2]

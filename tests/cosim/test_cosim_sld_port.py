"""``sld`` reads through the store unit's read port of its memory (docs/microarchitecture.md section 4,
"The store's read port"; ``rtl.dma.DmaStore``): the port reads the store's rows while the store moves
rows of that memory and the ``sld``'s row otherwise. On the Verilog of ``tiny`` and on the simulator,
from the same start: ``sld``s of one memory issued while a long store from the other is in flight (its
first beat and later ones), beside stores of the same memory without rows or elements (which hold no
port), and right before and after one of the same memory, ordered by tokens. The
lanes they load are written back with ``sst`` so the comparison sees them; the store's DRAM bytes show
that it kept its port."""

from __future__ import annotations

import os

import numpy as np
import pytest

from isa.asm import assemble
from isa.config import ChipConfig
from isa.errors import ErrorCode
from verify.cosim import Job, compare, sim_of

from .jobs import run_one_chip

SIM = os.environ.get("SIM", "verilator")
CFG = ChipConfig.preset("tiny")


def _job(name: str, text: str) -> Job:
    dram = np.arange(CFG.dram_bytes, dtype=np.uint64).astype(np.uint8)
    return Job([assemble(text, CFG)], [dram], [{}], 3000, name=name)


#: where the lanes the ``sld``s load are written back (``sst``), per memory: rows nothing else touches
BACK = {"spm": 200, "acc": 40}


def _slds(mem: str, rows) -> str:
    """An ``sld`` of each row (lane = row % 4) into r4..r7 in turn, then each written back to lane 0 of
    row ``BACK[mem] + i`` of the same memory."""
    out = [f"sld r{4 + i}, {mem}[{row}], {row % 4}" for i, row in enumerate(rows)]
    out.append("fence all")
    out += [f"sst r{4 + i}, {mem}[{BACK[mem] + i}], 0" for i in range(len(rows))]
    return "\n".join(out)


def _beside(fill: str, store: str, sld_mem: str, rows) -> str:
    """``fill`` (a load), then a long ``store`` with an ``sld`` of each of ``rows`` of ``sld_mem`` behind it."""
    return f"{fill}\nfence all\n{store}\n{_slds(sld_mem, rows)}\nhalt\n"


JOBS = {
    # the store reads SPM rows 0..31 (a row a cycle) while four sld of ACC rows issue
    "acc-sld-beside-spm-store": _job("acc-sld-beside-spm-store", _beside(
        "dma.ld acc[0], dram[0x200], rows=16, len=4, rstride=16",
        "dma.st dram[0x1000], spm[0], rows=32, len=4, rstride=4", "acc", [3, 6, 9, 13])),
    # the store reads ACC rows 0..15 (four beats a row) while four sld of SPM rows issue
    "spm-sld-beside-acc-store": _job("spm-sld-beside-acc-store", _beside(
        "dma.ld spm[0], dram[0x200], rows=64, len=4, rstride=4",
        "dma.st dram[0x1000], acc[0], rows=16, len=4, rstride=16", "spm", [5, 17, 33, 60])),
    # stores of the same memory without rows or without elements hold no port: no race, the sld reads
    "acc-sld-beside-empty-acc-stores": _job("acc-sld-beside-empty-acc-stores", _beside(
        "dma.ld acc[0], dram[0x200], rows=16, len=4, rstride=16",
        "dma.st dram[0x1000], acc[0], rows=0, len=4, rstride=16\ndma.st dram[0x1100], acc[4], rows=2, len=0",
        "acc", [3, 6])),
    # the same memory, ordered: an sld before the store (the store waits for it), then after its retire
    "acc-sld-around-acc-store": _job("acc-sld-around-acc-store", """
        dma.ld acc[0], dram[0x200], rows=16, len=4, rstride=16
        fence all
        sld r4, acc[2], 1, signal=store
        dma.st dram[0x1000], acc[0], rows=16, len=4, rstride=16, wait=scalar, signal=scalar
        sld r5, acc[7], 3, wait=store
        fence all
        sst r4, spm[200], 0
        sst r5, spm[201], 1
        halt
    """),
}


@pytest.fixture(scope="module")
def results():
    return run_one_chip(CFG, JOBS, SIM)


@pytest.mark.parametrize("name", list(JOBS))
def test_sld_through_the_store_port_equal_on_rtl_and_sim(results, name):
    job, res = JOBS[name], results[name]
    assert ErrorCode.RACE not in sim_of(CFG, job, res)[2]       # (a racing run would not be compared)
    assert compare(CFG, job, res) is None, compare(CFG, job, res)
    r = res["chips"][0]
    assert ErrorCode(r["error"]) == ErrorCode.OK and r["done"]
    # the loaded lanes came back, and the store's bytes are its rows'
    dram = np.arange(CFG.dram_bytes, dtype=np.uint64).astype(np.uint8)
    if name == "acc-sld-beside-empty-acc-stores":
        want = [int(dram[0x200 + 16 * row + 4 * (row % 4):][:4].view("<i4")[0]) for row in (3, 6)]
        assert [int(r["acc"][BACK["acc"] + i, 0]) for i in range(2)] == want
    elif name.startswith("acc-sld-beside"):
        want = [int(dram[0x200 + 16 * row + 4 * (row % 4):][:4].view("<i4")[0]) for row in (3, 6, 9, 13)]
        assert [int(r["acc"][BACK["acc"] + i, 0]) for i in range(4)] == want
        assert (r["dram"][0x1000:0x1000 + 128] == r["spm"][:32].astype(np.uint8).reshape(-1)).all()
    elif name.startswith("spm-sld-beside"):
        want = [int(dram[0x200 + 4 * row + row % 4].view(np.int8)) for row in (5, 17, 33, 60)]
        assert [int(r["spm"][BACK["spm"] + i, 0]) for i in range(4)] == want
        assert (r["dram"][0x1000:0x1000 + 256] == r["acc"][:16].astype("<i4").view(np.uint8).reshape(-1)).all()

"""The three corners where the chip's Verilog and the simulator used to differ, each run on both from the
same start (``verify.cosim``: one Verilator model of ``tiny``, every job in one simulator process) and
compared: error code, cycles, DRAM, and SPM/ACC and the per-instance trace when the run halts.

* A DMA instance with ``len = 0`` moves nothing: its local rows are neither written nor range-checked
  (the RTL's rule; the simulator zeroed the rows of a load and checked them).
* A DMA instance that fails its range check never starts: a store sends no beat, not even its first
  (the simulator's rule; the RTL's store put its first beat on the write channel).
* Addresses are 32-bit two's complement: base + register + nest offsets wrap modulo 2**32 (the RTL's
  rule; the simulator added unbounded integers). On ``tiny`` a wrapped address can never land inside a
  memory that an unwrapped one missed (that needs a memory of more than 2**30 rows or bytes), so these
  jobs pin the boundary cases; ``tests/sim/test_sim_corners.py`` shows the wrap on a 4 GiB DRAM.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from isa.asm import assemble
from isa.config import ChipConfig
from isa.errors import ErrorCode
from verify.cosim import Job, compare

from .jobs import run_one_chip

SIM = os.environ.get("SIM", "verilator")
CFG = ChipConfig.preset("tiny")
MARK = 0xAA                  # every DRAM byte of the image: a stray write shows


def _dram() -> np.ndarray:
    return np.full(CFG.dram_bytes, MARK, np.uint8)


def _job(name: str, text: str, regs: dict[int, int] | None = None) -> Job:
    return Job([assemble(text, CFG)], [_dram()], [regs or {}], 2000, name=name)


LAST_SPM, LAST_ACC = CFG.spm_rows - 1, CFG.acc_rows - 1

#: name -> (job, expected error code)
JOBS = {
    # 1. len = 0: nothing moves, nothing is checked (rows 3..4 keep what sst wrote; rows past the end pass)
    "len0-keeps-rows": (_job("len0-keeps-rows", f"""
        seti r5, 9
        sst r5, spm[3], 0
        sst r5, acc[4], 1
        fence all
        dma.ld spm[3], dram[0], rows=2, len=0
        dma.ld acc[4], dram[0], rows=1, len=0
        dma.ld spm[{LAST_SPM - 1}], dram[0], rows=8, len=0
        dma.st dram[0x800], acc[{LAST_ACC}], rows=9, len=0
        dma.st dram[0x900], spm[3], rows=2, len=0
        fence all
        halt
    """), ErrorCode.OK),
    "len0-then-real": (_job("len0-then-real", f"""
        dma.ld spm[{LAST_SPM}], dram[0x10], rows=4, len=0, signal=store
        dma.st dram[0x40], spm[{LAST_SPM}], rows=1, len=2, wait=load
        fence all
        halt
    """), ErrorCode.OK),
    # 2. a store whose local rows (or DRAM bytes) fail the check writes no DRAM byte
    "store-bad-rows-no-beat": (_job("store-bad-rows-no-beat", f"""
        seti r5, 5
        sst r5, spm[{LAST_SPM}], 0
        fence all
        dma.st dram[0x100], spm[{LAST_SPM}], rows=2
        halt
    """), ErrorCode.ADDRESS_RANGE),
    "store-bad-acc-rows-no-beat": (_job("store-bad-acc-rows-no-beat", f"""
        dma.st dram[0x200], acc[{LAST_ACC - 1}], rows=3, len=1, rstride=4
        halt
    """), ErrorCode.ADDRESS_RANGE),
    "store-bad-dram-no-beat": (_job("store-bad-dram-no-beat", f"""
        dma.st dram[{CFG.dram_bytes - CFG.cols}], spm[0], rows=2, rstride={CFG.cols}
        halt
    """), ErrorCode.ADDRESS_RANGE),
    "store-second-instance-bad": (_job("store-second-instance-bad", f"""
        loop l0, 3, s0=0x40, s1={LAST_SPM - 1}
        dma.st dram[0x300], spm[0], rows=2, rep=l0:1
        halt
    """), ErrorCode.ADDRESS_RANGE),
    "load-bad-rows": (_job("load-bad-rows", f"""
        dma.ld spm[{LAST_SPM}], dram[0], rows=2
        halt
    """), ErrorCode.ADDRESS_RANGE),
    # 3. 32-bit addresses: base + register wraps, and so do the nest's offsets
    "wrap-base-plus-register": (_job("wrap-base-plus-register", """
        dma.ld spm[0], dram[r3 + 0x20], rows=1
        halt
    """, {3: 0x7FFFFFF0}), ErrorCode.ADDRESS_RANGE),
    "wrap-negative-register": (_job("wrap-negative-register", """
        dma.ld spm[0], dram[r3 + 0x30], rows=1, signal=store
        dma.st dram[r3 + 0x80], spm[0], rows=1, wait=load
        fence all
        halt
    """, {3: -0x10}), ErrorCode.OK),
    "wrap-nest-offset": (_job("wrap-nest-offset", """
        loop l0, 2, s0=0x7FFFFFFF
        loop l1, 2, s0=1
        vmov spm[r3], spm[8], n=1, rep=l0:2
        halt
    """, {3: 1}), ErrorCode.ADDRESS_RANGE),
    "wrap-sld-row": (_job("wrap-sld-row", """
        sld r5, spm[r3 + 2], 0
        halt
    """, {3: 0x7FFFFFFF}), ErrorCode.ADDRESS_RANGE),
}


@pytest.fixture(scope="module")
def results():
    return run_one_chip(CFG, {name: job for name, (job, _) in JOBS.items()}, SIM)


@pytest.mark.parametrize("name", list(JOBS))
def test_corner_equal_on_rtl_and_sim(results, name):
    job, code = JOBS[name]
    res = results[name]
    assert compare(CFG, job, res) is None, compare(CFG, job, res)
    r = res["chips"][0]
    assert ErrorCode(r["error"]) == code and r["done"]
    if name.startswith("store-bad"):        # the failing instance wrote no DRAM byte
        assert (r["dram"] == MARK).all()


def test_len0_rows_kept_and_store_skipped(results):
    r = results["len0-keeps-rows"]["chips"][0]
    assert r["spm"][3, 0] == 9 and r["acc"][4, 1] == 9
    assert (r["dram"] == MARK).all()
    r = results["len0-then-real"]["chips"][0]
    assert (r["dram"][0x40:0x42] == r["spm"][LAST_SPM, :2].astype(np.uint8)).all()

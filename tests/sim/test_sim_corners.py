"""Corners the simulator now shares with the RTL (docs/microarchitecture.md; co-simulated in
tests/cosim/test_corners.py): a DMA instance with ``len = 0`` moves and checks nothing, and memory
operand addresses are 32-bit two's complement (base + register + nest offsets wrap modulo 2**32)."""

from __future__ import annotations

import numpy as np
import pytest

from isa.config import MAX_DRAM_BYTES, ChipConfig
from isa.errors import ConfigError, ErrorCode
from sim import Chip, SimError

TINY = ChipConfig.preset("tiny")


def test_dma_len0_moves_and_checks_nothing():
    ch = Chip(TINY)
    last = TINY.spm_rows - 1
    ch.load(f"seti r5, 9\nsst r5, spm[3], 0\nsst r5, acc[4], 1\nfence all\n"
            f"dma.ld spm[3], dram[0], rows=2, len=0\ndma.ld acc[4], dram[0], rows=1, len=0\n"
            f"dma.ld spm[{last - 1}], dram[0], rows=8, len=0\n"
            f"dma.st dram[0x800], acc[{TINY.acc_rows - 1}], rows=9, len=0\nfence all\nhalt\n")
    ch.write_dram(0, np.full(64, 0x55, np.uint8))
    st = ch.run(1000)
    assert ch.spm[3, 0] == 9 and ch.acc[4, 1] == 9 and not ch.spm[last].any()
    assert st.bytes["dram_read"] == st.bytes["dram_write"] == st.bytes["spm_write"] == 0
    assert not ch.dram[0x800:].any()


def test_dma_len0_rows_still_checked_when_len_is_not_zero():
    ch = Chip(TINY)
    ch.load(f"dma.ld spm[{TINY.spm_rows - 1}], dram[0], rows=2, len=1\nhalt\n")
    with pytest.raises(SimError) as e:
        ch.run(1000)
    assert e.value.code == ErrorCode.ADDRESS_RANGE


def test_address_wraps_at_32_bits_on_the_largest_dram():
    """On the largest DRAM (2**31 bytes, isa.config.MAX_DRAM_BYTES) base + register wraps as the
    RTL's 32-bit signed adder does: 0x7ffffff0 + 0x7fffffff is -17, outside DRAM (not 4294967279);
    the last byte is reachable, and 2**31 itself is refused by the config."""
    cfg = TINY.replace(name="tiny-2g", dram_bytes=MAX_DRAM_BYTES)
    ch = Chip(cfg)
    ch.load("dma.ld spm[0], dram[0x7ffffff0 + r3], rows=1, len=1\nhalt\n")
    ch.write_dram(MAX_DRAM_BYTES - 1, np.array([42], dtype=np.int8))
    ch.set_args(r3=0xf)
    ch.run(1000)
    assert ch.spm[0].tolist() == [42] + [0] * (cfg.cols - 1)
    ch.load("dma.ld spm[0], dram[0x7ffffff0 + r3], rows=1\nhalt\n")
    ch.set_args(r3=0x7fffffff)
    with pytest.raises(SimError) as e:
        ch.run(1000)
    assert e.value.code == ErrorCode.ADDRESS_RANGE and "-17" in str(e.value)
    with pytest.raises(ConfigError, match="2\\*\\*31"):
        TINY.replace(dram_bytes=MAX_DRAM_BYTES * 2)


def test_nest_offsets_wrap_at_32_bits():
    """Instance (0, 1) of the nest is row 2 + 0x7fffffff: as a 32-bit address, -2**31 + 1."""
    ch = Chip(TINY)
    ch.load("seti r5, 7\nsst r5, spm[1], 0\nfence all\n"
            "loop l0, 2, s0=0x7fffffff, s1=0\nloop l1, 2, s0=0x7fffffff, s1=0\n"
            "vmov spm[r3], spm[1], n=1, rep=l0:2\nhalt\n")
    ch.set_args(r3=2)
    with pytest.raises(SimError) as e:     # instance (0, 1): row 2 + 0x7fffffff wraps negative
        ch.run(1000)
    assert e.value.code == ErrorCode.ADDRESS_RANGE and "-2147483647" in str(e.value)

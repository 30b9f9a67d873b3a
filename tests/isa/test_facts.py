"""Facts declared once in isa/table.py (memory spaces, the requantizer's reset, op groups) and the
32-bit wrap of isa/semantics.py, as the assembler and the instruction semantics read them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from isa import assemble
from isa import semantics as sem
from isa.config import ChipConfig
from isa.table import (BRANCHES, INSTRUCTIONS, QCFG_RESET, SCALAR_ALU, SPACE_BYTES, SPACE_DTYPE, SPACE_NAME,
                       VPU_BINARY, VPU_UNARY, Space)

CFG = ChipConfig.load("tiny")


@pytest.mark.parametrize("space", list(Space))
def test_dma_element_size_defaults_to_the_space_bytes(space):
    ins = assemble(f"dma.ld {SPACE_NAME[space]}[0], dram[0]", CFG).instructions[0]
    assert ins.as_dict()["estride"] == SPACE_BYTES[space] == SPACE_DTYPE[space].itemsize


@pytest.mark.parametrize("space", list(Space))
def test_dma_moves_elements_of_the_space_dtype(space):
    eb = SPACE_BYTES[space]
    dram = np.arange(64, dtype=np.uint8)
    rows = sem.dma_gather(dram, 0, 2, CFG.cols, CFG.cols * eb, eb, space, CFG.cols)
    assert rows.dtype == SPACE_DTYPE[space]
    assert rows.tobytes() == dram[:2 * CFG.cols * eb].tobytes()
    assert sem.dma_scatter(np.zeros(64, np.uint8), rows, 0, CFG.cols, CFG.cols * eb, eb, space)[:rows.nbytes] \
        .tobytes() == rows.tobytes()


def test_vqcfg_without_operands_restores_the_reset_state():
    f = assemble("vqcfg", CFG).instructions[0].as_dict()
    assert {k: f[k] for k in QCFG_RESET} == QCFG_RESET
    assert (QCFG_RESET["lo"], QCFG_RESET["hi"]) == (sem.INT8_MIN, sem.INT8_MAX)


def test_op_groups_are_the_ops_their_semantics_define():
    a, b = np.array([[3, -7, 2**31 - 1, -2**31]]), np.array([[5, 2, 1, -1]])
    for op in VPU_BINARY:
        sem.binary_int32(op, a, b)
        with pytest.raises(ValueError):
            sem.unary_int32(op, a)
    for op in VPU_UNARY:
        sem.unary_int32(op, a, lut_table=np.arange(256, dtype=np.uint8).view(np.int8))
        with pytest.raises(ValueError):
            sem.binary_int32(op, a, b)
    for op in SCALAR_ALU:
        sem.scalar_alu(op, 7, -3)
    for op in BRANCHES:
        sem.branch_taken(op, 7, -3)
    vpu = {i.mnemonic for i in INSTRUCTIONS if i.format in ("vbin", "vun")}
    assert set(VPU_BINARY) | set(VPU_UNARY) == vpu and not set(VPU_BINARY) & set(VPU_UNARY)


@given(st.integers(-2**70, 2**70))
def test_the_32_bit_wraps_agree(v):
    w = sem.wrap32_int(v)
    assert -2**31 <= w < 2**31 and (w - v) % 2**32 == 0
    assert int(sem.wrap32(v % 2**40)) == sem.wrap32_int(v % 2**40)
    assert sem.u32(v) == w % 2**32

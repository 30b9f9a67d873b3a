"""Each way a run can stop: a specific SimError with its code, pc, instruction, cycle and address."""

from __future__ import annotations

import numpy as np
import pytest

from isa import PRESETS, ChipConfig, assemble
from isa.errors import ErrorCode, TetrachipError
from isa.table import WORD_BYTES
from sim import Chip, SimError, System

TINY = ChipConfig.preset("tiny")


def run(src, max_cycles=100_000, setup=None):
    chip = Chip("tiny")
    chip.load(src)
    if setup:
        setup(chip)
    return chip.run(max_cycles=max_cycles)


def err_of(src, **kw) -> SimError:
    with pytest.raises(SimError) as ei:
        run(src, **kw)
    e = ei.value
    assert isinstance(e, TetrachipError)
    assert "\n" not in str(e)
    return e


def test_address_out_of_range_dram():
    # a DRAM address taken from a register: the assembler cannot see it
    e = err_of("seti r1, 0xFFF0\ndma.ld spm[0], dram[0+r1], rows=2, rstride=16\nhalt\n")
    assert e.code == ErrorCode.ADDRESS_RANGE
    assert e.pc == 1 and e.instr.startswith("dma.ld")
    assert e.cycle == 2                          # issued at 1, starts at 1 + ISSUE_TO_START
    assert "dram bytes 65520..65539" in e.address


def test_address_out_of_range_by_repeat():
    # the third instance of a repeated matmul runs off the end of ACC (256 rows on tiny)
    e = err_of("loop l0, 3, s0=120\nmxu.mm acc[10], spm[0], n=20, rep=l0:1\nhalt\n")
    assert e.code == ErrorCode.ADDRESS_RANGE and e.pc == 1
    assert "acc rows 250..269" in e.address


def test_illegal_instruction():
    prog = assemble("seti r1, 1\nnop\nhalt\n", TINY)
    words = bytearray(prog.code_bytes())
    words[WORD_BYTES] = 0xEE                     # opcode 0xee does not exist
    chip = Chip("tiny")
    chip.load(bytes(words))
    with pytest.raises(SimError) as ei:
        chip.run()
    e = ei.value
    assert e.code == ErrorCode.ILLEGAL_INSTRUCTION and e.pc == 1 and e.cycle == 1
    assert "opcode" in e.message


def test_pc_range():
    e = err_of("seti r1, 1\njmp 5\nhalt\n")
    assert e.code == ErrorCode.PC_RANGE and e.cycle == 1 + 1 + 1   # jmp at 1, taken: next at 1+1+penalty


def test_race_names_both_instructions():
    e = err_of("dma.ld spm[0], dram[0], rows=4, rstride=4\nvadd acc[0], spm[2], 1, n=2\nhalt\n")
    assert e.code == ErrorCode.RACE
    assert e.pc == 1 and e.other[0] == 0
    assert "dma.ld" in e.other[1] and e.instr.startswith("vadd")
    assert e.address == "spm rows 2..3"
    assert "pc 0" in e.message and "pc 1" in e.message


@pytest.mark.parametrize("dst,race", [("spm[8]", "spm rows (both write; banks of 16 rows) 0..15"), ("spm[16]", None),
                                       ("acc[1]", "acc rows (both write; banks of 4 rows) 0..3"), ("acc[4]", None)])
def test_two_units_writing_one_bank_race(dst, race):
    """With banks (``spm_bank_rows`` 16, ``acc_bank_rows`` 4) two units writing different rows of one
    bank at once race; reading a bank another unit writes does not, nor do writes to other banks.
    Without banks (the presets) none of these races."""
    src = f"dma.ld spm[0], dram[0], rows=4\ndma.ld acc[0], dram[64], rows=1\nvadd {dst}, spm[2], 1, n=2\nhalt\n"
    for cfg in (TINY, TINY.replace(spm_bank_rows=16, acc_bank_rows=4)):
        chip = Chip(cfg)
        chip.load(assemble(src.replace("spm[2]", "spm[12]"), cfg))
        banked = cfg.spm_bank_rows > 1
        if race and banked:
            with pytest.raises(SimError) as ei:
                chip.run()
            e = ei.value
            assert e.code == ErrorCode.RACE and {e.pc, e.other[0]} == {2, 0 if race[0] == "s" else 1}
            assert e.address == race.replace(" rows", " bank rows", 1), e.address
        else:
            assert chip.run().cycles > 0
    # a read of the bank the load writes, at the same time, is no race (row granularity)
    cfg = TINY.replace(spm_bank_rows=16, acc_bank_rows=4)
    chip = Chip(cfg)
    chip.load(assemble("dma.ld spm[0], dram[0], rows=4\nvadd acc[8], spm[12], 1, n=2\nhalt\n", cfg))
    assert chip.run().cycles > 0


@pytest.mark.parametrize("store,sld,race", [("acc[0]", "acc[10]", True), ("spm[0]", "spm[30]", True),
                                             ("spm[0]", "acc[10]", False), ("acc[0]", "spm[30]", False)])
def test_sld_races_with_a_store_of_its_memory(store, sld, race):
    """An ``sld`` reads through the store unit's read port of its memory: beside a ``dma.st`` of that
    memory in flight it races whatever the rows; beside a store from the other memory it does not."""
    src = f"dma.st dram[0], {store}, rows=8, len=4, rstride=16\nsld r1, {sld}, 1\nhalt\n"
    if race:
        e = err_of(src)
        assert e.code == ErrorCode.RACE and {e.pc, e.other[0]} == {0, 1}
        mem = sld.split("[")[0]
        assert e.address == f"{mem} read port (sld reads through dma.st's, whatever the rows)"
    else:
        assert run(src).cycles > 0
    # ordered by the store's retire (a token): no race
    assert run(src.replace("rstride=16", "rstride=16, signal=scalar").replace(", 1\n", ", 1, wait=store\n")).cycles > 0
    # a store without rows holds no port
    assert run(src.replace("rows=8", "rows=0")).cycles > 0


def test_bank_rows_are_powers_of_two():
    from isa.errors import ConfigError
    with pytest.raises(ConfigError, match="spm_bank_rows \\(12\\) must be a power of two"):
        TINY.replace(spm_bank_rows=12)


def test_no_race_when_ordered_by_tokens():
    stats = run("dma.ld spm[0], dram[0], rows=4, rstride=4, signal=vpu\nvadd acc[0], spm[2], 1, n=2, wait=load\nhalt\n")
    assert stats.cycles > 0


def test_deadlock_wait_never_signalled():
    e = err_of("dma.ld spm[0], dram[0], wait=mxu\nhalt\n")
    assert e.code == ErrorCode.DEADLOCK and e.pc == 0
    assert "token from mxu" in e.message


def test_deadlock_receive_without_sender():
    sysm = System("tiny", 2)
    sysm.load(0, "link.recv 1, spm[0], n=1\nhalt\n")
    sysm.load(1, "halt\n")
    with pytest.raises(SimError) as ei:
        sysm.run()
    e = ei.value
    assert e.code == ErrorCode.DEADLOCK and e.chip == 0 and e.pc == 0
    assert e.instr.startswith("link.recv")


def test_cycle_limit_runaway_loop():
    e = err_of("top: addi r1, r1, 1\njmp top\nhalt\n", max_cycles=5000)
    assert e.code == ErrorCode.CYCLE_LIMIT and e.cycle == 5000


def test_token_overflow():
    # 300 one-beat loads signal the VPU, which never consumes: the 256th token overflows
    e = err_of("loop l0, 300\ndma.ld spm[0], dram[0], rows=0, rep=l0:1, signal=vpu\nhalt\n")
    # instance i: issued at 1, starts at 2 + i (one beat each), retires at start + 0 + dram_latency
    assert e.code == ErrorCode.TOKEN_OVERFLOW and e.pc == 1
    assert e.cycle == 2 + 255 + TINY.dram_latency


def test_cycle_counter_after_an_error():
    chip = Chip("tiny")
    chip.load("vadd acc[1], acc[0], 1, n=4\nhalt\n")
    with pytest.raises(SimError) as ei:
        chip.run()
    assert ei.value.cycle == 1 and chip.stats.cycles == 2


def test_link_mismatch():
    sysm = System("tiny", 2)
    sysm.load(0, "link.send 0, acc[0], n=1\nhalt\n")
    sysm.load(1, "link.recv 1, spm[0], n=1\nhalt\n")
    with pytest.raises(SimError) as ei:
        sysm.run()
    e = ei.value
    assert e.code == ErrorCode.LINK_MISMATCH and e.chip == 1 and e.pc == 0
    # first flit leaves at 1 (send starts at 1), is popped at 1 + link_latency
    assert e.cycle == 1 + TINY.link_latency


def test_vpu_overlap():
    e = err_of("vadd acc[1], acc[0], 1, n=4\nhalt\n")
    assert e.code == ErrorCode.OVERLAP and e.pc == 0 and e.address == "acc rows 1..3"
    # exactly in place is allowed
    assert run("vadd acc[0], acc[0], 1, n=4\nhalt\n").cycles > 0


def test_error_to_dict_and_cli_line(tmp_path):
    from click.testing import CliRunner

    from runtime.cli import main
    src = tmp_path / "bad.s"
    src.write_text(".config tiny\ndma.ld spm[0], dram[0], wait=mxu\nhalt\n")
    res = CliRunner().invoke(main, ["sim", str(src)])
    assert res.exit_code == 1
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("DEADLOCK:")
    e = err_of("dma.ld spm[0], dram[0], wait=mxu\nhalt\n")
    d = e.to_dict()
    assert d["code"] == "DEADLOCK" and d["pc"] == 0 and d["code_value"] == int(ErrorCode.DEADLOCK)


def test_host_access_out_of_range():
    chip = Chip("tiny")
    with pytest.raises(SimError):
        chip.write_dram(TINY.dram_bytes - 2, np.zeros(4, np.uint8))


@pytest.mark.parametrize("call,words", [
    (lambda c: c.read_dram(0, -5), "count -5 is negative"),
    (lambda c: c.read_dram(1.5, 4), "address must be an integer"),
    (lambda c: c.read_dram(0, 2.0), "count must be an integer"),
    (lambda c: c.read_dram(c.cfg.dram_bytes - 2, 1, np.int32), "outside DRAM"),
    (lambda c: c.read_spm(-1), "SPM rows -1..-1 outside SPM"),
    (lambda c: c.read_spm(c.cfg.spm_rows), "outside SPM"),
    (lambda c: c.read_acc(0, -3), "count -3 is negative"),
    (lambda c: c.write_spm(c.cfg.spm_rows - 1, np.zeros(2 * c.cfg.cols)), "outside SPM"),
    (lambda c: c.write_spm(0, np.full(c.cfg.cols, 200)), "values outside int8"),
    (lambda c: c.write_acc(0, np.zeros(c.cfg.cols + 1)), "not whole rows"),
    (lambda c: c.write_acc(0, np.full(c.cfg.cols, np.nan)), "values outside int32"),
    (lambda c: c.write_dram(0, "abc"), "not an array of numbers"),
    (lambda c: c.write_dram(-1, b"\x01"), "outside DRAM"),
])
def test_host_access_outside_a_memory_or_not_a_number_is_refused(call, words):
    """The host's reads and writes name the memory, the range or the value that is wrong; nothing is
    read short, wrapped or written partly (a negative count once read 65,531 bytes on tiny)."""
    chip = Chip(PRESETS["tiny"])
    before = (chip.dram.copy(), chip.spm.copy(), chip.acc.copy())
    with pytest.raises(SimError, match=words) as e:
        call(chip)
    assert e.value.code == ErrorCode.ADDRESS_RANGE
    for old, now in zip(before, (chip.dram, chip.spm, chip.acc)):
        assert np.array_equal(old, now)


def test_host_access_at_the_edges_of_each_memory():
    chip = Chip(PRESETS["tiny"])
    cfg = chip.cfg
    chip.write_dram(cfg.dram_bytes - 4, np.array([7], np.int32))
    assert chip.read_dram(cfg.dram_bytes - 4, 1, np.int32).tolist() == [7]
    assert chip.read_dram(cfg.dram_bytes, 0).size == 0
    chip.write_spm(cfg.spm_rows - 1, np.arange(cfg.cols) - 2)
    assert chip.read_spm(cfg.spm_rows - 1).tolist() == [list(range(-2, cfg.cols - 2))]
    chip.write_acc(cfg.acc_rows - 1, np.full(cfg.cols, -(1 << 31)))
    assert chip.read_acc(cfg.acc_rows - 1).min() == -(1 << 31)

"""The binary container: header, config check, integrity."""

import pytest

from isa import BinaryFormatError, PRESETS, ChipConfig, Program, assemble
from isa.program import HEADER_BYTES

SRC = ".config tiny\nstart: seti r1, 3\n  addi r1, r1, -1\n  bne r1, r0, start\n  halt\n"


def test_roundtrip_keeps_labels_and_lines():
    p = assemble(SRC, PRESETS["tiny"], "a.s")
    q = Program.from_bytes(p.to_bytes())
    assert q.instructions == p.instructions
    assert q.labels == {"start": 0} and q.lines == [2, 3, 4, 5] and q.source_name == "a.s"
    assert "start:" in q.disassemble() and "bne r1, r0, start" in q.disassemble()


def test_wrong_config_refused():
    blob = assemble(SRC, PRESETS["tiny"]).to_bytes()
    with pytest.raises(BinaryFormatError, match="built for config 'tiny'.*not for config 'small'"):
        Program.from_bytes(blob, PRESETS["small"])
    # same name, other sizes: the digest catches it
    other = PRESETS["tiny"].replace(spm_rows=2048)
    with pytest.raises(BinaryFormatError, match="digest"):
        Program.from_bytes(blob, other)


def test_custom_config_binary_needs_config():
    cfg = PRESETS["tiny"].replace(name="mine", dram_latency=3)
    blob = assemble(SRC.replace(".config tiny\n", ""), cfg).to_bytes()
    with pytest.raises(BinaryFormatError, match="not a preset"):
        Program.from_bytes(blob)
    assert len(Program.from_bytes(blob, cfg)) == 4


@pytest.mark.parametrize("cut", [0, 10, HEADER_BYTES - 1, HEADER_BYTES, HEADER_BYTES + 7, -1])
def test_truncated(cut):
    blob = assemble(SRC, PRESETS["tiny"]).to_bytes()
    with pytest.raises(BinaryFormatError, match="truncated"):
        Program.from_bytes(blob[:cut])


def test_garbled_and_foreign():
    blob = bytearray(assemble(SRC, PRESETS["tiny"]).to_bytes())
    blob[HEADER_BYTES + 3] ^= 0x10
    with pytest.raises(BinaryFormatError, match="checksum"):
        Program.from_bytes(bytes(blob))
    with pytest.raises(BinaryFormatError, match="not a tetrachip program"):
        Program.from_bytes(b"\x7fELF" + bytes(100))


def test_save_is_atomic(tmp_path):
    p = assemble(SRC, PRESETS["tiny"])
    out = tmp_path / "p.bin"
    p.save(out)
    assert Program.load(out).instructions == p.instructions
    assert not list(tmp_path.glob("*.tmp"))


def test_load_missing():
    with pytest.raises(BinaryFormatError, match="cannot read"):
        Program.load("/nonexistent.bin")


def test_config_digest_ignores_name_and_clock():
    a = ChipConfig.preset("base")
    assert a.digest() == a.replace(name="other", clock_mhz=1.0).digest()
    assert a.digest() != a.replace(dram_latency=a.dram_latency + 1).digest()

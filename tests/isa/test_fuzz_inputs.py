"""Fuzzed texts and byte strings never escape as anything but a TetrachipError."""

import random
from pathlib import Path

import pytest

from isa import PRESETS, Program, TetrachipError, assemble, decode
from isa.encoding import from_bytes
from isa.table import WORD_BYTES

ROOT = Path(__file__).resolve().parents[2]
SEEDS_TEXT = [p.read_text() for p in sorted((ROOT / "examples").glob("*.s"))]
ALPHABET = "abcdelmnoprstvxy0123456789[]()+-*/%<>|&^~=,:;#. \t\nrlspmacdw_'\"@!\\\x00é"
TOKENS = ["dma.ld", "mxu.mm", "vadd", "loop", "seti", "spm[", "acc[", "dram[", "]", "r1", "l0", ",",
          "rep=l0:", "wait=", "signal=", "sync=", "n=", "0x", "-", "<<", "(", ")", ":", "\n", ".equ",
          ".config", "tiny", "halt", "bne", "lbl", "lbl:", "999999999999", "r0"]


def _mutate_text(rng: random.Random, text: str) -> str:
    s = list(text)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        k = rng.randrange(len(s) + 1)
        if op < 0.3 and s:
            del s[min(k, len(s) - 1)]
        elif op < 0.6:
            s.insert(k, rng.choice(ALPHABET))
        elif op < 0.8:
            s[k:k] = list(rng.choice(TOKENS))
        elif s:
            j = rng.randrange(len(s))
            s[min(k, len(s) - 1)], s[j] = s[j], s[min(k, len(s) - 1)]
    return "".join(s)


def _token_soup(rng: random.Random) -> str:
    return "".join(rng.choice(TOKENS + [" ", " ", ", "]) for _ in range(rng.randint(1, 40)))


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_assembler_and_disassembler(seed):
    rng = random.Random(seed)
    cfg = PRESETS["tiny"]
    ok = bad = 0
    for _ in range(400):
        text = _mutate_text(rng, rng.choice(SEEDS_TEXT)) if rng.random() < 0.7 else _token_soup(rng)
        try:
            prog = assemble(text, cfg, "fuzz.s")
        except TetrachipError:
            bad += 1
            continue
        ok += 1
        # whatever assembles must disassemble and re-assemble to the same bytes
        again = assemble(prog.disassemble(), cfg)
        assert again.code_bytes() == prog.code_bytes(), f"seed {seed}"
    assert ok > 0 and bad > 0  # the fuzzer exercised both paths


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_decoder_and_binary_reader(seed):
    rng = random.Random(1000 + seed)
    cfg = PRESETS["tiny"]
    prog = assemble(SEEDS_TEXT[0], cfg)
    good, words = prog.to_bytes(), prog.words()
    decoded = rejected = 0
    for _ in range(300):
        # random words: mostly illegal, some legal
        if rng.random() < 0.5:
            word = rng.getrandbits(8 * WORD_BYTES) >> rng.choice([0, 40, 100, 150])
        else:  # a legal word with one bit flipped
            word = rng.choice(words) ^ (1 << rng.randrange(8 * WORD_BYTES))
        try:
            decode(word, cfg)
            decoded += 1
        except TetrachipError:
            rejected += 1
        # mutated and truncated binaries
        blob = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
        blob = bytes(blob[: rng.randint(0, len(blob))]) if rng.random() < 0.3 else bytes(blob)
        with pytest.raises(TetrachipError):
            Program.from_bytes(blob, name="fuzz.bin")
        # random byte strings
        with pytest.raises(TetrachipError):
            Program.from_bytes(rng.randbytes(rng.randint(0, 200)), name="rand.bin")
    assert decoded > 0 and rejected > 0


def test_mutated_binary_with_fixed_checksum_is_decoded_or_rejected_cleanly():
    """Garbling that also fixes the CRC reaches the decoder: it must reject or decode, never crash."""
    import struct
    import zlib
    cfg = PRESETS["tiny"]
    good = bytearray(assemble(SEEDS_TEXT[0], cfg).to_bytes())
    rng = random.Random(7)
    outcomes = set()
    for _ in range(200):
        blob = bytearray(good)
        k = 48 + rng.randrange(len(blob) - 48)
        blob[k] ^= 1 << rng.randrange(8)
        struct.pack_into("<I", blob, 40, zlib.crc32(bytes(blob[48:])))
        try:
            Program.from_bytes(bytes(blob))
            outcomes.add("ok")
        except TetrachipError:
            outcomes.add("error")
    assert "error" in outcomes


def test_word_too_wide_rejected():
    with pytest.raises(TetrachipError):
        decode(1 << (8 * WORD_BYTES), PRESETS["tiny"])
    assert from_bytes(b"\x01" + b"\0" * (WORD_BYTES - 1)) == 1

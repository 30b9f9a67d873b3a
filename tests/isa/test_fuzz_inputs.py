"""Fuzzers of the assembler, the disassembler and the binary reader: bad input never escapes as
anything but a TetrachipError, and whatever is accepted disassembles and re-assembles to the same words.

Every input is made from its own seed (``text_case(seed)``, ``binary_case(seed)``), so a failure
message names the seed and the input, and one call replays it. ``make test`` tries ``TEXTS`` assembly
texts and ``BINARIES`` binaries; ``make fuzz-long`` ten times as many (``fuzz_scale``).

Texts: mutated examples, edge numbers, token soups, deep and negative expressions, unicode, NUL bytes,
long lines, branch programs whose labels look like generated ones, any opcode. Binaries: the examples
and other programs with words, manifest JSON or header fields edited, bits flipped, bytes spliced,
truncated or extended; most have their checksum recomputed (``isa.program.checksum``) so the
decoder and the manifest reader are reached.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from isa import (PRESETS, AsmError, BinaryFormatError, DecodeError, Instruction, Program, TetrachipError,
                 assemble, decode, format_instruction)
from isa.encoding import from_bytes
from isa.program import HEADER_BYTES, checksum, pack_header, unpack_header
from isa.table import INSTRUCTIONS, WORD_BYTES, layout

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [p.read_text() for p in sorted((ROOT / "examples").glob("*.s"))]
CFG = PRESETS["tiny"]                 # the examples say `.config tiny`
#: inputs per run (times ``fuzz_scale``), split into CHUNKS tests (so xdist spreads them)
TEXTS, BINARIES, CHUNKS = 2000, 2000, 4
ALPHABET = "abcdelmnoprstvxy0123456789[]()+-*/%<>|&^~=,:;#. \t\nrlspmacdw_'\"@!\\\x00é"
TOKENS = ["dma.ld", "mxu.mm", "vadd", "loop", "seti", "spm[", "acc[", "dram[", "]", "r1", "l0", ",",
          "rep=l0:", "wait=", "signal=", "sync=", "n=", "0x", "-", "<<", "(", ")", ":", "\n", ".equ",
          ".config", "tiny", "halt", "bne", "lbl", "lbl:", "999999999999", "r0", "L0", "L1:", "a.b",
          "jmp", ">>", "/", "%", "~", "-1", "0", ".set", "small", "$"]
NUMBERS = ["0", "-0", "-1", "1", "-2", "255", "256", "-129", "32767", "-32768", "65535", "65536",
           str(2 ** 31 - 1), str(-2 ** 31), str(2 ** 32), str(-2 ** 32 - 1), str(2 ** 63), str(2 ** 80),
           str(2 ** 80 + 1), "9" * 30, "9" * 5000, "0x" + "f" * 40, "0x" + "f" * 3000, "0b" + "1" * 100,
           "0o777", "0x_ff", "1_000", "0x", "0b2", "1e5", "1.5", "--1", "~0", "-(-1)", "٣", "１"]
ODD = ["\x00", "\ufeff", "\u2028", "\x85", "\x0c", "\x0b", "\r", "é", "ß", "İ", "٣", "１", "𝟘", "\ud800",
       "\u0301", "ﬁ", "\t", "Ⅻ", "\x1c", "$", "."]
LABELS = ["L0", "L1", "L2", "L3", "L0_1", "L1_1", "a.b", "a.b.c", "x", "top", "$t", "_", "end", "x.L1"]
OPS = ["+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^"]


# --------------------------------------------------------------------------------------------
# Assembly texts
# --------------------------------------------------------------------------------------------

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


def _mutate_lines(rng: random.Random, text: str) -> str:
    """Numbers swapped for edge values, lines deleted, duplicated or swapped."""
    lines = text.splitlines()
    for _ in range(rng.randint(1, 4)):
        k = rng.randrange(len(lines))
        op = rng.random()
        if op < 0.5:
            words = lines[k].split(" ")
            nums = [j for j, w in enumerate(words) if any(c.isdigit() for c in w)]
            if nums:
                j = rng.choice(nums)
                words[j] = words[j].replace(words[j].strip(",]"), rng.choice(NUMBERS), 1)
            lines[k] = " ".join(words)
        elif op < 0.7:
            del lines[k]
        elif op < 0.85:
            lines.insert(rng.randrange(len(lines) + 1), lines[k])
        else:
            j = rng.randrange(len(lines))
            lines[k], lines[j] = lines[j], lines[k]
        if not lines:
            lines = ["halt"]
    return "\n".join(lines) + rng.choice(["", "\n"])


def _token_soup(rng: random.Random) -> str:
    return "".join(rng.choice(TOKENS + [" ", " ", ", "] + NUMBERS[:8]) for _ in range(rng.randint(1, 40)))


def _expression(rng: random.Random, depth: int) -> str:
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice(NUMBERS[:14] + ["ROWS", "COLS", "X", "(1 - 1)", "-3", "--3"])
    kind = rng.random()
    if kind < 0.15:
        return rng.choice("-~+") + _expression(rng, depth - 1)
    if kind < 0.35:
        return "(" + _expression(rng, depth - 1) + ")"
    return f"{_expression(rng, depth - 1)} {rng.choice(OPS)} {_expression(rng, depth - 1)}"


def _deep_expression(rng: random.Random) -> str:
    """Nested parentheses, unary chains and long operator chains, hundreds to thousands deep."""
    n = rng.choice([50, 130, 200, 500, 2000])
    kind = rng.randrange(5)
    if kind == 0:
        return "(" * n + "1" + ")" * n
    if kind == 1:
        return "".join(rng.choice("-~+") for _ in range(n)) + "1"
    if kind == 2:
        return "(" * n + "1" + ")" * rng.randint(0, n + 2)          # unbalanced
    if kind == 3:
        return " + ".join(["1"] * n)
    return "".join(f"(1 {rng.choice(OPS)} " for _ in range(n)) + "1" + ")" * n


def _expression_line(rng: random.Random) -> str:
    e = _deep_expression(rng) if rng.random() < 0.3 else _expression(rng, rng.randint(1, 6))
    where = rng.randrange(5)
    head = ".equ X, 5\n" if rng.random() < 0.8 else ""
    if where == 0:
        return f"{head}seti r1, {e}\nhalt\n"
    if where == 1:
        return f"{head}.equ Y, {e}\nseti r2, Y\n"
    if where == 2:
        return f"{head}dma.ld spm[{e}], dram[0], rows=1\n"
    if where == 3:
        return f"{head}top: bne r1, r0, {e}\nhalt\n"
    return f"{head}loop l0, r1, s0={e}, s1=1\n"


def _odd_text(rng: random.Random) -> str:
    """Unicode, NUL bytes, lone surrogates, long lines, in an example or alone."""
    kind = rng.randrange(4)
    if kind == 0:
        s = list(rng.choice(EXAMPLES))
        for _ in range(rng.randint(1, 6)):
            s.insert(rng.randrange(len(s) + 1), rng.choice(ODD))
        return "".join(s)
    if kind == 1:
        n = rng.choice([1000, 5000])
        return rng.choice([f"{'a' * n}: halt\n", f"seti r1, {'1+' * n}1\n", f"halt {', r1' * n}\n",
                           f"; {'x' * n}\nhalt\n", f"{'x: ' * 200}halt\n", "halt\n" * 1100,
                           f"seti r1, {'9' * n}\n", f".equ {'A' * n}, 1\n"])
    if kind == 2:
        return "".join(rng.choice(ODD + TOKENS) for _ in range(rng.randint(1, 30)))
    return rng.choice(["", "\n", "\x00", "halt\x00", "\ufeffhalt", "ha\u0301lt", "HALT", "İ: halt",
                       "é: jmp é", "a٣: jmp a٣", ".config", ".config tiny, small", ".config nope",
                       ".config small", ".equ", ".equ 1x, 2", "x: x: halt", ":", "a::", "halt:"])


def _branches(rng: random.Random) -> str:
    """Small programs of branches and labels: user labels named like the disassembler's own."""
    lines, used = [], set()
    n = rng.randint(1, 8)
    names = rng.sample(LABELS, rng.randint(0, 5))
    for pc in range(n + 1):
        for name in names:
            if name not in used and rng.random() < 0.3:
                lines.append(f"{name}:")
                used.add(name)
        if pc == n:
            break
        target = rng.choice([str(rng.randint(0, n + 2)), "1000", str(CFG.imem_words - 1),
                             str(CFG.imem_words), "-1", "0"] + (sorted(used) or ["0"]))
        lines.append(rng.choice([f"jmp {target}", f"bne r1, r0, {target}", f"beq r0, r0, {target}",
                                 "halt", "seti r1, 3"]))
    return "\n".join(lines) + "\n"


def _random_instruction(rng: random.Random) -> Instruction:
    """A legal instruction of any opcode: its opcode and random bits in the fields its format uses."""
    while True:
        spec = rng.choice(INSTRUCTIONS)
        used = layout(CFG).used_bits(spec.format)
        try:
            return decode(spec.opcode | rng.getrandbits(used - 8) << 8 if used > 8 else spec.opcode, CFG)
        except DecodeError:
            continue


def _any_opcode(rng: random.Random) -> str:
    """Disassembled random legal instructions, some mutated."""
    text = "\n".join(format_instruction(_random_instruction(rng), CFG) for _ in range(rng.randint(1, 6)))
    return _mutate_text(rng, text) if rng.random() < 0.5 else text


def text_case(seed: int) -> str:
    """The assembly text of fuzz case ``seed``."""
    rng = random.Random(seed)
    r = rng.random()
    if r < 0.30:
        return _mutate_text(rng, rng.choice(EXAMPLES))
    if r < 0.40:
        return _mutate_lines(rng, rng.choice(EXAMPLES))
    if r < 0.50:
        return _token_soup(rng)
    if r < 0.65:
        return _expression_line(rng)
    if r < 0.75:
        return _odd_text(rng)
    if r < 0.88:
        return _branches(rng)
    return _any_opcode(rng)


def check_text(text: str) -> tuple[str | None, bool]:
    """(None, accepted) if ``text`` assembles and round-trips, or is refused with an AsmError at
    fuzz.s:LINE:COL; else (what went wrong, accepted)."""
    try:
        prog = assemble(text, CFG, "fuzz.s")
    except AsmError as e:
        if not str(e).startswith(f"fuzz.s:{e.line}:{e.col}: ") or "\n" in str(e):
            return f"AsmError not one line at fuzz.s:LINE:COL: {str(e)[:200]!r}", False
        return None, False
    except Exception as e:  # noqa: BLE001 - the point of the fuzzer
        return f"assemble raised {type(e).__name__}: {str(e)[:200]}", False
    try:
        again = assemble(prog.disassemble(), CFG, "disasm.s")
    except Exception as e:  # noqa: BLE001
        return f"disassembly does not re-assemble: {type(e).__name__}: {str(e)[:200]}", True
    if again.words() != prog.words():
        return "disassembly re-assembles to other words", True
    lost = {n: pc for n, pc in prog.labels.items() if again.labels.get(n) != pc}
    if lost:
        return f"labels lost or moved by disassembly: {lost}", True
    return None, True


def _report(kind: str, case: str, failures: list[tuple[int, str, object]], tried: int) -> str:
    lines = [f"{len(failures)} of {tried} {kind} failed; replay one with {case}(SEED) of {__name__}:"]
    for seed, why, data in failures[:5]:
        r = repr(data)
        lines.append(f"  seed {seed}: {why}\n    input {r[:300]}{'...' if len(r) > 300 else ''}")
    return "\n".join(lines)


def _chunk(total: int, chunk: int) -> range:
    per = total // CHUNKS
    return range(chunk * per, total if chunk == CHUNKS - 1 else (chunk + 1) * per)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_assembly_texts(chunk, fuzz_scale):
    seeds = _chunk(TEXTS * fuzz_scale, chunk)
    failures, accepted = [], 0
    for seed in seeds:
        text = text_case(seed)
        why, ok = check_text(text)
        accepted += ok
        if why:
            failures.append((seed, why, text))
    if failures:
        pytest.fail(_report("texts", "text_case", failures, len(seeds)), pytrace=False)
    assert 0 < accepted < len(seeds), "the fuzzer exercised only one of the two paths"


# --------------------------------------------------------------------------------------------
# Binaries
# --------------------------------------------------------------------------------------------

def _bases() -> list[bytes]:
    """Binaries to mutate: the examples, a program with labels, manifest and source lines, and random
    legal instructions (branch targets inside and beyond the program)."""
    out = [assemble(t, CFG, "ex.s").to_bytes() for t in EXAMPLES]
    p = assemble("top: seti r1, 3\nL1: addi r1, r1, -1\n bne r1, r0, top\n jmp 9\nend: halt\n", CFG, "b.s")
    p.manifest = {"inputs": [{"name": "x", "shape": [4, 4], "dram": 0}], "note": "é"}
    out.append(p.to_bytes())
    rng = random.Random(12345)
    out.append(Program(CFG, [_random_instruction(rng) for _ in range(24)]).to_bytes())
    return out


BASES = _bases()
JUNK_JSON = ['{"labels": {"x": 1e999}}', '{"labels": {"x": -1}}', '{"labels": {"x": 99999}}',
             '{"labels": {"x": "3"}}', '{"labels": {"x": true}}', '{"labels": {"x": null}}',
             '{"labels": {"x": NaN}}', '{"labels": {"x": 1.0}}', '{"labels": []}', '{"labels": {"ROWS": 0}}',
             '{"labels": {"halt": 0, "L0": 1, "a b": 0, "": 0, "1x": 1, "r1": 0, ".x": 0}}',
             '{"lines": [1]}', '{"lines": "1"}', '{"lines": [true, 2]}', '{"source": 5}', '{"source": null}',
             '{"manifest": []}', '{"manifest": null}', '[]', '1', '"x"', 'null', '{', '', '{"labels": {}}',
             '{"labels": {"x": ' + "9" * 5000 + '}}', "[" * 100000 + "]" * 100000, '{"a": ' * 3000 + "1" + "}" * 3000,
             '\xff\xfe', '{"labels": {"x": 1}, "labels": {"y": 2}}', '{"manifest": {"k": Infinity}}']


def _meta_edit(rng: random.Random, n: int) -> bytes:
    """A manifest that to_bytes would not write."""
    if rng.random() < 0.6:
        s = rng.choice(JUNK_JSON)
    else:
        labels = {rng.choice(LABELS + ["ROWS", "halt", "a b", ""]): rng.choice([0, n, n + 1, -1, 2 ** 40, 1])
                  for _ in range(rng.randint(0, 4))}
        meta = {"labels": labels, "manifest": {}, "lines": rng.choice([None, list(range(1, n + 1)), [1]])}
        s = json.dumps(meta)
    return s.encode("utf-8", "surrogatepass") if rng.random() < 0.9 else s.encode("latin-1", "replace")


def _header_edit(rng: random.Random, h: dict, n: int) -> str:
    """Set one header field to an edge value; return its name."""
    field = rng.choice(["version", "word_bytes", "config", "digest", "count", "manifest_bytes", "reserved",
                        "magic"])
    choices = {"version": [0, 2, 65535], "word_bytes": [0, 8, WORD_BYTES + 1, 65535],
               "config": [b"small", b"base", b"nope", b"\xff\xfe", b"tiny\0x", b"", b"t" * 16],
               "digest": [PRESETS["small"].digest(), bytes(8), b"\xff" * 8],
               "count": [0, max(n - 1, 0), n + 1, 2 ** 32 - 1, 1], "manifest_bytes": [0, 1, 2 ** 32 - 1],
               "reserved": [1, 2 ** 31], "magic": [b"TCHQ", b"\0\0\0\0"]}
    h[field] = rng.choice(choices[field])
    if field == "config" and rng.random() < 0.5:          # a consistent other preset: the words mean other things
        name = rng.choice(["small", "base", "tpu"])
        h["config"], h["digest"] = name.encode(), PRESETS[name].digest()
    return field


def binary_case(seed: int) -> bytes:
    """The binary of fuzz case ``seed``: a base binary mutated, its checksum recomputed in most cases."""
    rng = random.Random(seed)
    data = bytearray(rng.choice(BASES))
    h = unpack_header(data)
    n = h["count"]
    words, meta = data[HEADER_BYTES:HEADER_BYTES + n * WORD_BYTES], data[HEADER_BYTES + n * WORD_BYTES:]
    edited: set[str] = set()
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        if op < 0.25 and n:                                # one word: random bits, or a legal word
            k = rng.randrange(n)
            w = (rng.getrandbits(8 * WORD_BYTES) >> rng.choice([0, 40, 100, 150]) if rng.random() < 0.5
                 else from_bytes(words[k * WORD_BYTES:(k + 1) * WORD_BYTES]) ^ 1 << rng.randrange(8 * WORD_BYTES))
            words[k * WORD_BYTES:(k + 1) * WORD_BYTES] = w.to_bytes(WORD_BYTES, "little")
        elif op < 0.4 and n:                               # a word from another program (a jump past the end)
            other = rng.choice(BASES)
            m = unpack_header(other)["count"]
            j, k = rng.randrange(m), rng.randrange(n)
            words[k * WORD_BYTES:(k + 1) * WORD_BYTES] = other[HEADER_BYTES + j * WORD_BYTES:
                                                               HEADER_BYTES + (j + 1) * WORD_BYTES]
        elif op < 0.6:
            meta = bytearray(_meta_edit(rng, n))
        elif op < 0.75:
            edited.add(_header_edit(rng, h, n))
        elif op < 0.85:                                    # bit flips anywhere in the body
            body = words + meta
            for _ in range(rng.randint(1, 8)):
                if body:
                    body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
            words, meta = body[:len(words)], body[len(words):]
        else:                                              # a splice of bytes from another binary
            other = rng.choice(BASES)
            a = rng.randrange(len(other))
            chunk = other[a:a + rng.randint(1, 64)]
            body = words + meta
            k = rng.randrange(len(body) + 1)
            body[k:k + (len(chunk) if rng.random() < 0.5 else 0)] = chunk
            words, meta = body[:len(words)], body[len(words):]
    if "count" not in edited:                             # keep the header's lengths in step
        h["count"] = len(words) // WORD_BYTES
    if "manifest_bytes" not in edited:
        h["manifest_bytes"] = len(words) % WORD_BYTES + len(meta)
    body = bytes(words + meta)
    if rng.random() < 0.75:
        h["crc"] = checksum(body)
    out = pack_header(**h) + body
    r = rng.random()
    if r < 0.08:
        out = out[:rng.randrange(len(out))]                # truncated
    elif r < 0.12:
        out += rng.randbytes(rng.randint(1, 16))           # trailing bytes
    elif r < 0.14:
        out = rng.randbytes(rng.randint(0, 200))           # not a binary at all
    return out


def check_binary(data: bytes) -> tuple[str | None, str]:
    """(None or what went wrong, the outcome): "loaded", or refused for its "checksum", for an illegal
    word ("decode"), for its "manifest" or for its "header"."""
    try:
        prog = Program.from_bytes(data, name="fuzz.bin")
    except (BinaryFormatError, DecodeError) as e:
        msg = str(e)
        outcome = ("checksum" if "checksum" in msg else "decode" if msg.startswith("fuzz.bin: pc ")
                   else "manifest" if "manifest" in msg else "header")
        if not msg.startswith("fuzz.bin: ") or "\n" in msg:
            return f"error does not name the binary in one line: {msg[:200]!r}", outcome
        return None, outcome
    except Exception as e:  # noqa: BLE001 - the point of the fuzzer
        return f"from_bytes raised {type(e).__name__}: {str(e)[:200]}", "crash"
    try:
        prog.listing()
        again = assemble(prog.disassemble(), prog.config, "disasm.s")
    except Exception as e:  # noqa: BLE001
        return f"loaded, but its disassembly fails: {type(e).__name__}: {str(e)[:200]}", "loaded"
    if again.words() != prog.words():
        return "disassembly re-assembles to other words", "loaded"
    moved = {n: pc for n, pc in again.labels.items() if n in prog.labels and prog.labels[n] != pc}
    if moved:
        return f"disassembly moves labels: {moved}", "loaded"
    return None, "loaded"


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_binaries(chunk, fuzz_scale):
    seeds = _chunk(BINARIES * fuzz_scale, chunk)
    failures, outcomes = [], dict.fromkeys(["loaded", "checksum", "decode", "manifest", "header", "crash"], 0)
    for seed in seeds:
        data = binary_case(seed)
        why, outcome = check_binary(data)
        outcomes[outcome] += 1
        if why:
            failures.append((seed, why, data))
    if failures:
        pytest.fail(_report("binaries", "binary_case", failures, len(seeds)), pytrace=False)
    # past the checksum (recomputed) the decoder and the manifest reader refused some, and some loaded
    assert all(outcomes[k] > 0 for k in ("loaded", "checksum", "decode", "manifest", "header")), outcomes


def test_fuzz_random_words_decode_or_refuse(fuzz_scale):
    rng = random.Random(1000)
    decoded = rejected = 0
    for _ in range(1000 * fuzz_scale):
        word = (rng.getrandbits(8 * WORD_BYTES) >> rng.choice([0, 40, 100, 150]) if rng.random() < 0.5
                else _random_instruction(rng).spec.opcode | rng.getrandbits(64) << 8)
        try:
            ins = decode(word, CFG)
        except DecodeError:
            rejected += 1
            continue
        decoded += 1
        assert assemble(Program(CFG, [ins]).disassemble(), CFG).words() == [word], hex(word)
    assert decoded > 0 and rejected > 0


def test_word_too_wide_rejected():
    with pytest.raises(TetrachipError):
        decode(1 << (8 * WORD_BYTES), PRESETS["tiny"])
    assert from_bytes(b"\x01" + b"\0" * (WORD_BYTES - 1)) == 1

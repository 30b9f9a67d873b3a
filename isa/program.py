"""The Program container: instructions for one config, labels, a manifest, and the binary format.

Binary layout (little-endian)::

    offset size  field
    0      4     magic b"TCHP"
    4      2     format version (FORMAT_VERSION)
    6      2     instruction word size in bytes (WORD_BYTES)
    8      16    config name, NUL padded
    24     8     config digest (ChipConfig.digest())
    32     4     number of instruction words
    36     4     manifest length in bytes
    40     4     CRC-32 of everything after the header
    44     4     reserved, zero
    48     ...   instruction words, then the manifest (UTF-8 JSON: labels, source lines, user data)
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import disasm
from .config import PRESETS, ChipConfig
from .encoding import Instruction, decode, encode, from_bytes, to_bytes
from .errors import BinaryFormatError, DecodeError
from .outputs import write_atomic
from .table import WORD_BYTES

MAGIC = b"TCHP"
FORMAT_VERSION = 1
#: the header's fields in order with their ``struct`` codes (the table above): one source for writing
#: and reading a header (``pack_header``, ``unpack_header``)
HEADER_FIELDS = (("magic", "4s"), ("version", "H"), ("word_bytes", "H"), ("config", "16s"), ("digest", "8s"),
                 ("count", "I"), ("manifest_bytes", "I"), ("crc", "I"), ("reserved", "I"))
_HEADER = struct.Struct("<" + "".join(code for _, code in HEADER_FIELDS))
HEADER_BYTES = _HEADER.size
#: byte alignment of the tensors a program places in DRAM (compiled models, the reference GEMM):
#: one DMA beat or more, so a tensor never shares a beat with the one before it
DRAM_ALIGN = 64


@dataclass
class Program:
    config: ChipConfig
    instructions: list[Instruction]
    labels: dict[str, int] = field(default_factory=dict)
    #: source line of each instruction (for error messages), when assembled from text
    lines: list[int] | None = None
    source_name: str | None = None
    #: free-form metadata a compiler attaches: inputs, outputs, DRAM layout, scalar arguments
    manifest: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.instructions)

    def words(self) -> list[int]:
        return [encode(i, self.config) for i in self.instructions]

    def code_bytes(self) -> bytes:
        return b"".join(to_bytes(w) for w in self.words())

    def to_bytes(self) -> bytes:
        code = self.code_bytes()
        meta: dict[str, object] = {"labels": self.labels, "manifest": self.manifest}
        if self.lines is not None:
            meta["lines"] = self.lines
        if self.source_name is not None:
            meta["source"] = self.source_name
        blob = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
        body = code + blob
        header = pack_header(magic=MAGIC, version=FORMAT_VERSION, word_bytes=WORD_BYTES,
                             config=self.config.name.encode(), digest=self.config.digest(),
                             count=len(self.instructions), manifest_bytes=len(blob), crc=checksum(body),
                             reserved=0)
        return header + body

    def save(self, path: str | Path, *, inputs: Iterable[str | Path] = ()) -> None:
        """Write atomically (``isa.outputs.write_atomic``): a failure leaves no half-written file, a
        missing folder or an unwritable path is a TetrachipError, and so is a path among ``inputs``
        (the files the command read, such as the source)."""
        write_atomic(path, self.to_bytes(), inputs=inputs, what="program binary")

    @classmethod
    def from_bytes(cls, data: bytes, config: "ChipConfig | str | None" = None, *, name: str = "binary") -> "Program":
        """Read a binary (``to_bytes``) for ``config`` (a ChipConfig or a preset name; default: the preset
        its header names). Anything else raises BinaryFormatError naming ``name`` and what is wrong."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise BinaryFormatError(f"{name}: a program binary is bytes, not {type(data).__name__}")
        data = bytes(data)
        if len(data) < HEADER_BYTES:
            raise BinaryFormatError(f"{name}: truncated: {len(data)} bytes, a header alone is {HEADER_BYTES}")
        h = unpack_header(data)
        if h["magic"] != MAGIC:
            raise BinaryFormatError(f"{name}: not a tetrachip program (magic {h['magic']!r}, expected {MAGIC!r})")
        if h["version"] != FORMAT_VERSION:
            raise BinaryFormatError(f"{name}: format version {h['version']}, this tool reads {FORMAT_VERSION}")
        if h["word_bytes"] != WORD_BYTES:
            raise BinaryFormatError(f"{name}: {h['word_bytes']}-byte words, this ISA has {WORD_BYTES}")
        if h["reserved"]:
            raise BinaryFormatError(f"{name}: reserved header bytes are not zero")
        n, mlen = h["count"], h["manifest_bytes"]
        need = HEADER_BYTES + n * WORD_BYTES + mlen
        if len(data) != need:
            raise BinaryFormatError(f"{name}: {'truncated' if len(data) < need else 'trailing bytes'}: "
                                    f"{len(data)} bytes, header says {need}")
        body = data[HEADER_BYTES:]
        if checksum(body) != h["crc"]:
            raise BinaryFormatError(f"{name}: checksum mismatch: the file is corrupted")
        try:
            cname = h["config"].rstrip(b"\0").decode()
        except UnicodeDecodeError:
            raise BinaryFormatError(f"{name}: bad config name in header") from None
        if config is None:
            config = PRESETS.get(cname)
            if config is None:
                raise BinaryFormatError(f"{name}: built for config {cname!r}, which is not a preset; "
                                        f"give its config file with --config")
        else:
            config = ChipConfig.load(config)
        if h["digest"] != config.digest():
            raise BinaryFormatError(
                f"{name}: built for config {cname!r} (digest {h['digest'].hex()}), not for config "
                f"{config.name!r} (digest {config.digest().hex()})")
        instrs = []
        for pc in range(n):
            w = from_bytes(body[pc * WORD_BYTES:(pc + 1) * WORD_BYTES])
            try:
                instrs.append(decode(w, config, pc=pc))
            except DecodeError as e:
                raise BinaryFormatError(f"{name}: {e}") from None
        labels, lines, source, manifest = _read_meta(body[n * WORD_BYTES:], n, name)
        return cls(config, instrs, labels, lines, source, manifest)

    @classmethod
    def load(cls, path: str | Path, config: "ChipConfig | str | None" = None) -> "Program":
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise BinaryFormatError(f"{path}: cannot read: {e.strerror}") from None
        return cls.from_bytes(data, config, name=str(path))

    def disassemble(self) -> str:
        return disasm.disassemble(self)

    def listing(self) -> str:
        """pc, word in hex, and the instruction, one line each."""
        out = []
        for pc, (ins, w) in enumerate(zip(self.instructions, self.words())):
            src = f"  ; line {self.lines[pc]}" if self.lines else ""
            out.append(f"{pc:5d}  {w:0{WORD_BYTES * 2}x}  {disasm.format_instruction(ins, self.config)}{src}")
        return "\n".join(out) + "\n"


def checksum(body: bytes) -> int:
    """The header's ``crc``: CRC-32 of everything after the header (the words, then the manifest)."""
    return zlib.crc32(body)


def pack_header(**fields: object) -> bytes:
    """The header with the given value of every field of ``HEADER_FIELDS``."""
    return _HEADER.pack(*(fields[f] for f, _ in HEADER_FIELDS))


def unpack_header(data: bytes) -> dict:
    """The fields of the header at the start of ``data`` (at least ``HEADER_BYTES`` long), by name."""
    return dict(zip((f for f, _ in HEADER_FIELDS), _HEADER.unpack_from(data)))


def _read_meta(blob: bytes, n: int, name: str) -> tuple[dict[str, int], list[int] | None, str | None, dict]:
    """Labels, source lines, source name and manifest from the JSON after the words of ``n`` instructions;
    BinaryFormatError naming the binary and the field for anything ``to_bytes`` would not have written."""
    try:
        meta = json.loads(blob.decode())
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:80]
        raise BinaryFormatError(f"{name}: the manifest is not valid JSON: {why}") from None
    if not isinstance(meta, dict):
        raise BinaryFormatError(f"{name}: the manifest is not a JSON object")

    def bad(field: str, v: object, want: str) -> BinaryFormatError:
        return BinaryFormatError(f"{name}: manifest field {field} = {_short(v)} is not {want}")

    labels = meta.get("labels", {})
    if not isinstance(labels, dict):
        raise bad("labels", labels, "an object of label: instruction index")
    for k, v in labels.items():
        if not _index(v) or not 0 <= v <= n:
            raise bad(f"labels[{_short(k)}]", v, f"an instruction index 0..{n}")
    lines = meta.get("lines")
    if lines is not None:
        if not isinstance(lines, list) or len(lines) != n:
            raise bad("lines", lines, f"a list of {n} line numbers")
        for k, v in enumerate(lines):
            if not _index(v):
                raise bad(f"lines[{k}]", v, "a line number")
    source = meta.get("source")
    if source is not None and not isinstance(source, str):
        raise bad("source", source, "a file name")
    manifest = meta.get("manifest", {})
    if not isinstance(manifest, dict):
        raise bad("manifest", manifest, "an object")
    return labels, lines, source, manifest


def _index(v: object) -> bool:
    """A JSON whole number (not a float such as 1e999, not a boolean) that is not negative."""
    return type(v) is int and v >= 0


def _short(v: object, limit: int = 40) -> str:
    """``repr(v)`` trimmed for a one-line message (a number too long to print says so)."""
    try:
        r = repr(v)
    except ValueError:                  # an int beyond Python's digit limit for str()
        return "a number too long to print"
    return r if len(r) <= limit else r[:limit - 3] + "..."

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
from dataclasses import dataclass, field
from pathlib import Path

from . import disasm
from .config import PRESETS, ChipConfig
from .encoding import Instruction, decode, encode, from_bytes, to_bytes
from .errors import BinaryFormatError, DecodeError
from .table import WORD_BYTES

MAGIC = b"TCHP"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sHH16s8sIIII")
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
        header = _HEADER.pack(MAGIC, FORMAT_VERSION, WORD_BYTES, self.config.name.encode(),
                              self.config.digest(), len(self.instructions), len(blob),
                              zlib.crc32(body), 0)
        return header + body

    def save(self, path: str | Path) -> None:
        """Write atomically: a failure leaves no half-written file."""
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(p)

    @classmethod
    def from_bytes(cls, data: bytes, config: ChipConfig | None = None, *, name: str = "binary") -> "Program":
        if len(data) < HEADER_BYTES:
            raise BinaryFormatError(f"{name}: truncated: {len(data)} bytes, a header alone is {HEADER_BYTES}")
        magic, version, wbytes, cname, digest, n, mlen, crc, reserved = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise BinaryFormatError(f"{name}: not a tetrachip program (magic {magic!r}, expected {MAGIC!r})")
        if version != FORMAT_VERSION:
            raise BinaryFormatError(f"{name}: format version {version}, this tool reads {FORMAT_VERSION}")
        if wbytes != WORD_BYTES:
            raise BinaryFormatError(f"{name}: {wbytes}-byte words, this ISA has {WORD_BYTES}")
        if reserved:
            raise BinaryFormatError(f"{name}: reserved header bytes are not zero")
        need = HEADER_BYTES + n * WORD_BYTES + mlen
        if len(data) != need:
            raise BinaryFormatError(f"{name}: {'truncated' if len(data) < need else 'trailing bytes'}: "
                                    f"{len(data)} bytes, header says {need}")
        body = data[HEADER_BYTES:]
        if zlib.crc32(body) != crc:
            raise BinaryFormatError(f"{name}: checksum mismatch: the file is corrupted")
        try:
            cname = cname.rstrip(b"\0").decode()
        except UnicodeDecodeError:
            raise BinaryFormatError(f"{name}: bad config name in header") from None
        if config is None:
            config = PRESETS.get(cname)
            if config is None:
                raise BinaryFormatError(f"{name}: built for config {cname!r}, which is not a preset; "
                                        f"give its config file with --config")
        if digest != config.digest():
            raise BinaryFormatError(
                f"{name}: built for config {cname!r} (digest {digest.hex()}), not for config "
                f"{config.name!r} (digest {config.digest().hex()})")
        instrs = []
        for pc in range(n):
            w = from_bytes(body[pc * WORD_BYTES:(pc + 1) * WORD_BYTES])
            try:
                instrs.append(decode(w, config, pc=pc))
            except DecodeError as e:
                raise BinaryFormatError(f"{name}: {e}") from None
        try:
            meta = json.loads(body[n * WORD_BYTES:].decode())
            labels = {str(k): int(v) for k, v in meta.get("labels", {}).items()}
            lines = meta.get("lines")
            manifest = meta.get("manifest", {})
            source = meta.get("source")
            if not isinstance(manifest, dict) or (lines is not None and not isinstance(lines, list)):
                raise ValueError("bad manifest")
        except (ValueError, UnicodeDecodeError, AttributeError, TypeError):
            raise BinaryFormatError(f"{name}: the manifest is not valid") from None
        return cls(config, instrs, labels, lines, source, manifest)

    @classmethod
    def load(cls, path: str | Path, config: ChipConfig | None = None) -> "Program":
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

"""The host side of the UART byte protocol (``rtl/fpga/top.py``, ``docs/fpga.md``): the bytes of
each command, and the replies' lengths. Pure Python: a serial port (pyserial) or a test bench sends
them."""

from __future__ import annotations

import struct

from isa.semantics import u32
from isa.table import WORD_BITS

__all__ = ["write_dram", "read_dram", "write_instr", "set_len", "write_reg", "read_reg", "start", "status",
           "load_program", "parse_status", "MAX_CHUNK"]

MAX_CHUNK = 0xFFFF


def write_dram(addr: int, data: bytes) -> bytes:          # reply b"K"
    if len(data) > MAX_CHUNK:
        raise ValueError(f"at most {MAX_CHUNK} bytes per write")
    return b"W" + struct.pack("<IH", addr, len(data)) + bytes(data)


def read_dram(addr: int, n: int) -> bytes:                # reply: n bytes
    return b"R" + struct.pack("<IH", addr, n)


def write_instr(index: int, word: int) -> bytes:          # reply b"K"
    return b"I" + struct.pack("<H", index) + word.to_bytes(WORD_BITS // 8, "little")


def set_len(n: int) -> bytes:                              # reply b"K"
    return b"L" + struct.pack("<H", n)


def write_reg(reg: int, value: int) -> bytes:              # reply b"K"
    return b"A" + struct.pack("<BI", reg, u32(value))


def read_reg(reg: int) -> bytes:                            # reply: u32
    return b"Q" + struct.pack("<B", reg)


def start() -> bytes:                                       # reply b"K"
    return b"G"


def status() -> bytes:                                      # reply: status u8, cycles u32
    return b"S"


def parse_status(reply: bytes) -> dict:
    s, cycles = struct.unpack("<BI", reply)
    return {"busy": bool(s & 1), "done": bool(s & 2), "error": s >> 4, "cycles": cycles}


def load_program(words: list[int], regs: dict[int, int] | None = None) -> tuple[bytes, int]:
    """Bytes that load a program and its argument registers, and how many ``K`` replies follow."""
    out = b"".join(write_instr(i, w) for i, w in enumerate(words)) + set_len(len(words))
    out += b"".join(write_reg(r, v) for r, v in (regs or {}).items())
    return out, len(words) + 1 + len(regs or {})

"""Errors raised by the ISA layer, and the chip's error codes (one source for simulator and RTL)."""

from __future__ import annotations

import enum


class TetrachipError(Exception):
    """Base of every error a user can cause with bad input; the CLI prints it as one line."""

    #: set on an EncodeError or DecodeError about one instruction field (the assembler finds its
    #: column from it); declared only, so an error without one has no such attribute
    field: str


class ConfigError(TetrachipError):
    """An invalid ChipConfig or config file."""


class EncodeError(TetrachipError):
    """A field value that does not fit its field, or an unknown mnemonic/field."""


class DecodeError(TetrachipError):
    """A word that is not a legal instruction (unknown opcode, reserved bits set, bad field)."""


class BinaryFormatError(TetrachipError):
    """A program binary that is truncated, garbled, or built for another config."""


class AsmError(TetrachipError):
    """An assembly error, located as FILE:LINE:COL."""

    def __init__(self, message: str, file: str = "<input>", line: int = 0, col: int = 0):
        self.message, self.file, self.line, self.col = message, file, line, col
        super().__init__(f"{file}:{line}:{col}: {message}")


class ErrorCode(enum.IntEnum):
    """Value of the chip's error-code register after it stops; the simulator's SimError carries the same."""

    OK = 0
    ILLEGAL_INSTRUCTION = 1   #: undecodable word (unknown opcode, reserved bits, illegal field value)
    ADDRESS_RANGE = 2         #: an SPM/ACC/DRAM/lane address outside its memory
    PC_RANGE = 3              #: fetch or branch target beyond the program
    RACE = 4                  #: two in-flight instructions of different units touch overlapping addresses
    DEADLOCK = 5              #: nothing can make progress (a wait or receive that can never complete)
    CYCLE_LIMIT = 6           #: the run exceeded its cycle limit
    TOKEN_OVERFLOW = 7        #: a synchronisation token counter exceeded TOKEN_MAX
    LINK_MISMATCH = 8         #: a receive expected another row type than the sender sent
    OVERLAP = 9               #: a VPU instruction whose destination partly overlaps a source

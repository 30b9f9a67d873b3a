"""tetrachip ISA: ChipConfig, the instruction table, encoding, assembler, program builder, the Program container.

Imports only numpy and the standard library.
"""

from .asm import assemble, assemble_file
from .builder import ProgramBuilder
from .config import PRESETS, ChipConfig
from .disasm import disassemble, format_instruction
from .encoding import Instruction, decode, encode
from .errors import (AsmError, BinaryFormatError, ConfigError, DecodeError, EncodeError, ErrorCode,
                     TetrachipError)
from .program import Program
from .table import INSTRUCTIONS, WORD_BITS, WORD_BYTES, Space, Unit

__all__ = ["ChipConfig", "PRESETS", "Instruction", "encode", "decode", "assemble", "assemble_file",
           "ProgramBuilder", "disassemble", "format_instruction", "Program", "INSTRUCTIONS", "WORD_BITS",
           "WORD_BYTES", "Space", "Unit", "ErrorCode", "TetrachipError", "AsmError", "BinaryFormatError",
           "ConfigError", "DecodeError", "EncodeError"]

"""SimError: why a simulated chip stopped, with everything needed to find the cause."""

from __future__ import annotations

from isa.errors import ErrorCode, TetrachipError


class SimError(TetrachipError):
    """The chip stopped with ``code`` (an ``isa.errors.ErrorCode``, as the RTL's error register).

    Attributes: ``code``, ``cycle`` (when the condition was detected), ``pc`` and ``instr`` (the
    instruction at fault, as assembly text), ``address`` (a description such as ``spm rows
    12..15``, where one is involved), ``chip`` (index in a System) and ``other`` (for a race:
    ``(pc, instr)`` of the second instruction).
    """

    def __init__(self, code: ErrorCode, message: str, *, cycle: int | None = None, pc: int | None = None,
                 instr: str | None = None, address: str | None = None, chip: int | None = None,
                 other: tuple[int, str] | None = None):
        self.code, self.message, self.cycle, self.pc = ErrorCode(code), message, cycle, pc
        self.instr, self.address, self.chip, self.other = instr, address, chip, other
        super().__init__(self._text())

    def _text(self) -> str:
        where = []
        if self.cycle is not None:
            where.append(f"cycle {self.cycle}")
        if self.chip is not None:
            where.append(f"chip {self.chip}")
        if self.pc is not None:
            where.append(f"pc {self.pc}" + (f" `{self.instr}`" if self.instr else ""))
        head = ", ".join(where)
        tail = f" [{self.address}]" if self.address else ""
        return f"{self.code.name}: {head + ': ' if head else ''}{self.message}{tail}"

    def to_dict(self) -> dict:
        return {"code": self.code.name, "code_value": int(self.code), "message": self.message,
                "cycle": self.cycle, "pc": self.pc, "instr": self.instr, "address": self.address,
                "chip": self.chip, "other": list(self.other) if self.other else None}

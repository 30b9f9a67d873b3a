"""One simulated chip: memories, registers, the issue stage, host API (its tokens and race records: ``sim.state``).

>>> from sim import Chip
>>> chip = Chip("tiny")
>>> chip.load("seti r1, 5\\nhalt\\n")
>>> chip.run().cycles
2
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from isa import semantics as sem
from isa import timing
from isa.asm import assemble, assemble_file
from isa.config import ChipConfig
from isa.disasm import format_instruction
from isa.encoding import Instruction, check_values, decode, from_bytes
from isa.errors import DecodeError, EncodeError, ErrorCode
from isa.program import Program
from isa.table import SPACE_BYTES, SPACE_DTYPE, SPACE_NAME, WORD_BYTES, Space, Unit

from . import engine
from .errors import SimError
from .handlers import HANDLERS
from .links import Channel
from .state import INF, MxuState, Races, Tokens, VpuState
from .stats import Stats, Trace
from .units import Decoded, Entry, make_units

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

_PURE, _QUEUED, _SMEM, _FENCE, _HALT, _BAD = range(6)


class IssueStage:
    """Fetches and issues one instruction per cycle (section 1 of the contract)."""

    #: its next time is never cached (the engine asks again whenever the chip changed)
    fresh = False
    _t = INF

    def __init__(self, chip):
        self.chip = chip
        self.pc = 0
        self.ready = 0                  # earliest cycle the instruction at pc may issue
        self.halted = False
        self.cause = None
        self.kind = _BAD                # the kind of the instruction at pc, as next_time() found it

    def next_time(self) -> int:
        if self.halted:
            return INF
        chip, pc = self.chip, self.pc
        kinds = chip.kinds              # (a pc outside the program fetches nothing: _BAD)
        self.kind = kind = kinds[pc] if 0 <= pc < len(kinds) else _BAD
        t = self.ready
        if kind == _QUEUED:
            unit = chip.issue_units[pc]
            t = unit.accept_time(t)
            self.cause = unit.queue_full
        elif kind == _SMEM:
            w = chip.fields[pc]["wait"]
            if w:
                t, p = chip.tokens.wait_time(w, Unit.SCALAR, t)
                self.cause = f"token({Unit(p).name.lower()})" if p is not None else None
        elif kind in (_FENCE, _HALT):
            mask = (1 << len(Unit)) - 1 if kind == _HALT else chip.fields[pc]["units"]
            for u, unit in chip.units.items():
                if mask >> u & 1:
                    t = max(t, unit.drained_time())
            self.cause = "fence"
        return t

    def act(self, t: int, horizon: int) -> None:
        chip, st = self.chip, self.chip.stats
        kind = self.kind                # (the engine asks next_time() after every act: pc has not moved)
        if kind == _BAD:
            code, msg = chip.bad[self.pc] if self.pc < len(chip.prog) else (
                ErrorCode.PC_RANGE, f"fetch beyond the end of the program ({len(chip.prog)} instructions)")
            raise chip.error(code, msg, t, self.pc if self.pc < len(chip.prog) else None)
        if t > self.ready and self.cause:
            st.stall(self.cause, t - self.ready)
        pc = self.pc
        st.instructions += 1
        if kind != _QUEUED:
            st.busy["scalar"] += 1
            st.instances["scalar"] += 1
            if chip.trace is not None:
                rec = chip.trace.add(chip.index, int(Unit.SCALAR), pc, 0, chip.text(pc), t, t, t)
                if kind == _SMEM:       # sld/sst take their tokens and signal in their one cycle
                    rec.waits, rec.signals = chip.fields[pc]["wait"], chip.fields[pc]["signal"]
        penalty = 0
        if kind == _QUEUED:
            chip.issue_queued(pc, t)
        elif kind == _SMEM:
            if chip.scalar_mem(pc, t):      # an sld: its lane reaches the register after a bubble
                penalty = timing.SLD_PENALTY
                st.stall("sld", penalty)
        elif kind == _HALT:
            self.halted = True
            chip.halt_cycle = t
            st.cycles = t + 1
            return
        elif kind == _PURE:
            self._pure(t)
            return
        self.pc += 1
        self.ready = t + 1 + penalty

    def _pure(self, t: int) -> None:
        """Run scalar instructions back to back: they touch nothing but the issue stage's registers."""
        chip, st = self.chip, self.chip.stats
        prog, limit = chip.prog, chip.max_cycles
        kinds = chip.kinds
        n = len(prog)
        first = True
        while True:
            pc = self.pc
            if not first:
                if pc >= n or kinds[pc] != _PURE or t >= limit:
                    self.ready = t
                    return
                st.instructions += 1
                st.busy["scalar"] += 1
                st.instances["scalar"] += 1
                if chip.trace is not None:
                    chip.trace.add(chip.index, int(Unit.SCALAR), pc, 0, chip.text(pc), t, t, t)
            first = False
            ins = prog[pc]
            target = HANDLERS[ins.op](chip, ins)
            if target is not None:
                self.pc = target
                t += 1 + timing.BRANCH_PENALTY
                st.stall("branch", timing.BRANCH_PENALTY)
            else:
                self.pc = pc + 1
                t += 1


class Chip:
    """A tetrachip: load a Program, write DRAM/registers, run, read memories and Stats.

    ``Chip(config)`` takes a ChipConfig, a preset name or a config file. ``trace=True`` records
    every instruction instance (``chip.trace``).
    """

    trace: Trace | None             #: the run's records (``trace=True``), else None; made anew by every run

    def __init__(self, config: str | Path | ChipConfig = "base", *, trace: bool = False, index: int = 0,
                 in_system: bool = False):
        self.cfg = cfg = ChipConfig.load(config)
        self.index, self.in_system = index, in_system
        self.spm = np.zeros((cfg.spm_rows, cfg.cols), SPACE_DTYPE[Space.SPM])
        self.acc = np.zeros((cfg.acc_rows, cfg.cols), SPACE_DTYPE[Space.ACC])
        self.dram = np.zeros(cfg.dram_bytes, np.uint8)
        self.regs = [0] * cfg.scalar_regs
        self.want_trace = trace
        self.prog: list[Instruction | None] = []
        self.bad: dict[int, tuple[ErrorCode, str]] = {}      # pc -> why its word cannot run
        self.fields: list[dict[str, int]] = []
        self.kinds: list[int] = []
        self.decoded: list[Decoded | None] = []     # pc -> its queued instruction's facts (else None)
        self._texts: dict[int, str] = {}
        self._reset()

    # -- host API -------------------------------------------------------------------------
    def load(self, program: Program | str | Path | bytes | bytearray | Iterable[Instruction | None]) -> "Chip":
        """Load a Program, assembly text, a path (.s or .bin), a list of Instructions, or raw code bytes.

        Words that do not decode are kept: fetching one stops the chip with ILLEGAL_INSTRUCTION.
        """
        if isinstance(program, (str, Path)) and (isinstance(program, Path) or "\n" not in program) \
                and Path(program).suffix in (".s", ".bin"):
            p = Path(program)
            program = Program.load(p, self.cfg) if p.suffix == ".bin" else assemble_file(p, self.cfg)
        elif isinstance(program, str):
            program = assemble(program, self.cfg)
        self.bad = {}
        instrs: list[Instruction | None]
        if isinstance(program, Program):
            if program.config.digest() != self.cfg.digest():
                raise SimError(ErrorCode.ILLEGAL_INSTRUCTION, f"program built for config {program.config.name!r}, "
                               f"this chip is {self.cfg.name!r}")
            instrs = list(program.instructions)
        elif isinstance(program, (bytes, bytearray)):
            instrs = []
            for pc in range(len(program) // WORD_BYTES):
                w = from_bytes(program[pc * WORD_BYTES:(pc + 1) * WORD_BYTES])
                try:
                    instrs.append(decode(w, self.cfg, pc=pc))
                except DecodeError as e:
                    instrs.append(None)
                    self.bad[pc] = (ErrorCode.ILLEGAL_INSTRUCTION, str(e))
        elif isinstance(program, (str, Path)):
            raise TypeError(f"{program}: not a program file (.s or .bin)")
        else:
            instrs = list(program)
        for pc, ins in enumerate(instrs):
            if ins is not None and pc not in self.bad:
                try:
                    check_values(ins, self.cfg)
                except EncodeError as e:
                    self.bad[pc] = (ErrorCode.ILLEGAL_INSTRUCTION, str(e))
        if len(instrs) > self.cfg.imem_words:
            raise SimError(ErrorCode.PC_RANGE, f"program of {len(instrs)} instructions does not fit "
                           f"imem ({self.cfg.imem_words} words)")
        self.prog = instrs
        self.fields = [ins.as_dict() if ins is not None else {} for ins in instrs]
        self.kinds = [self._kind(pc, ins) for pc, ins in enumerate(instrs)]
        self.decoded = [Decoded(ins, f) if k == _QUEUED and ins is not None else None
                        for ins, f, k in zip(instrs, self.fields, self.kinds)]
        self._texts = {}
        self._reset()
        return self

    # -- host access: every address and count an integer, every range inside its memory -------------
    def _host_range(self, space: str, start: object, n: object, size: int, unit: str) -> tuple[int, int]:
        """``(start, n)`` as ints if ``start .. start + n - 1`` lies in a memory of ``size`` ``unit``s
        (n = 0 is an empty access anywhere in 0..size); else a SimError (ADDRESS_RANGE) naming it."""
        for what, v in (("address" if unit == "bytes" else "row", start), ("count", n)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise SimError(ErrorCode.ADDRESS_RANGE,
                               f"host access to {space}: the {what} must be an integer, got {v!r}")
        lo, cnt = int(start), int(n)                  # type: ignore[call-overload]
        if cnt < 0:
            raise SimError(ErrorCode.ADDRESS_RANGE, f"host access to {space}: count {cnt} is negative")
        if lo < 0 or lo + cnt > size:
            raise SimError(ErrorCode.ADDRESS_RANGE, f"host access to {space} {unit} {lo}..{lo + cnt - 1} "
                           f"outside {space} ({size} {unit})")
        return lo, cnt

    def _host_data(self, space: str, data: ArrayLike, dtype: DTypeLike | None = None) -> np.ndarray:
        """Host data as an array of numbers (bytes, a numeric array or list); anything else refused."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            return np.frombuffer(bytes(data), np.uint8)
        try:
            arr = np.asarray(data)
        except (TypeError, ValueError) as e:
            raise SimError(ErrorCode.ADDRESS_RANGE, f"host write to {space}: not an array of numbers ({e})") from None
        if arr.dtype.kind not in "biuf":
            raise SimError(ErrorCode.ADDRESS_RANGE,
                           f"host write to {space}: data of dtype {arr.dtype} is not an array of numbers")
        if dtype is not None:
            info = np.iinfo(dtype)
            if arr.size and (arr.dtype.kind == "f" and not np.all(np.isfinite(arr))
                             or arr.min() < info.min or arr.max() > info.max):
                raise SimError(ErrorCode.ADDRESS_RANGE, f"host write to {space}: values outside "
                               f"{np.dtype(dtype).name} ({info.min}..{info.max})")
            arr = arr.astype(dtype)
        return arr

    def write_dram(self, addr: int, data: ArrayLike) -> None:
        b = np.ascontiguousarray(self._host_data("DRAM", data)).reshape(-1).view(np.uint8)
        lo, n = self._host_range("DRAM", addr, len(b), self.cfg.dram_bytes, "bytes")
        self.dram[lo:lo + n] = b

    def read_dram(self, addr: int, n: int, dtype: DTypeLike = np.uint8) -> np.ndarray:
        """``n`` elements of ``dtype`` (little-endian) from DRAM byte ``addr``."""
        try:
            dt = np.dtype(dtype).newbyteorder("<")
        except (TypeError, ValueError):
            raise SimError(ErrorCode.ADDRESS_RANGE, f"host read of DRAM: {dtype!r} is not a numpy dtype") from None
        self._host_range("DRAM", addr, n, self.cfg.dram_bytes, "bytes")        # integers, n >= 0, addr inside
        lo, nbytes = self._host_range("DRAM", addr, int(n) * dt.itemsize, self.cfg.dram_bytes, "bytes")
        return self.dram[lo:lo + nbytes].copy().view(dt)

    def _check_dram(self, addr: int, nbytes: int) -> None:
        self._host_range("DRAM", addr, nbytes, self.cfg.dram_bytes, "bytes")

    def _rows(self, space: Space, data: ArrayLike) -> np.ndarray:
        name = SPACE_NAME[space].upper()
        d = self._host_data(name, data, SPACE_DTYPE[space])
        if d.size % self.cfg.cols:
            raise SimError(ErrorCode.ADDRESS_RANGE, f"host write to {name}: {d.size} values are not "
                           f"whole rows of {self.cfg.cols} lanes")
        return d.reshape(-1, self.cfg.cols)

    def write_spm(self, row: int, data: ArrayLike) -> None:
        d = self._rows(Space.SPM, data)
        lo, n = self._host_range("SPM", row, len(d), self.cfg.spm_rows, "rows")
        self.spm[lo:lo + n] = d

    def read_spm(self, row: int, n: int = 1) -> np.ndarray:
        lo, n = self._host_range("SPM", row, n, self.cfg.spm_rows, "rows")
        return self.spm[lo:lo + n].copy()

    def write_acc(self, row: int, data: ArrayLike) -> None:
        d = self._rows(Space.ACC, data)
        lo, n = self._host_range("ACC", row, len(d), self.cfg.acc_rows, "rows")
        self.acc[lo:lo + n] = d

    def read_acc(self, row: int, n: int = 1) -> np.ndarray:
        lo, n = self._host_range("ACC", row, n, self.cfg.acc_rows, "rows")
        return self.acc[lo:lo + n].copy()

    def set_args(self, args: Mapping[int, int] | None = None, **named: int) -> None:
        """Write scalar registers before launch: ``set_args({1: 5})`` or ``set_args(r1=5)``."""
        items = dict(args or {})
        items.update({int(k.lstrip("r")): v for k, v in named.items()})
        for r, v in items.items():
            r = int(str(r).lstrip("r"))
            if not 0 < r < self.cfg.scalar_regs:
                raise SimError(ErrorCode.ILLEGAL_INSTRUCTION, f"no scalar register r{r} to write "
                               f"(r1..r{self.cfg.scalar_regs - 1})")
            self.set_reg(r, int(v))

    def run(self, max_cycles: int | None = None) -> Stats:
        """Run from pc 0 until halt; return the Stats (also ``chip.stats``). Raises SimError."""
        self._reset()
        engine.run([self], max_cycles)
        return self.stats

    def run_pages(self, pages: Sequence[Program], max_cycles: int | None = None,
                  args: Mapping[int, int] | None = None) -> Stats:
        """Run a paged program (docs/microarchitecture.md, "Programs longer than imem"): each page is loaded
        and run from pc 0 in turn; SPM, ACC, DRAM and the scalar registers carry over from page to page (the
        units, tokens, loop registers, MXU weights and VPU settings start afresh, as at any start). ``args``
        are written into the scalar registers before every page. The Stats count every page; their
        ``cycles`` are ``isa.timing.paged_cycles`` (the runs plus the loads of the pages after the first);
        with ``trace`` the records of a page are shifted to the cycle its run starts at and their pcs count on
        through the pages (a page's pc plus the lengths of the pages before it: the pages' listings end to end)."""
        if not pages:
            raise SimError(ErrorCode.PC_RANGE, "a paged program needs at least one page")
        total: Stats | None = None
        records: list = []
        runs: list[int] = []
        lengths: list[int] = []
        for k, page in enumerate(pages):
            self.load(page)
            lengths.append(len(self.prog))
            at = timing.paged_cycles(runs, lengths[:k]) + timing.page_load_cycles(lengths[k]) if k else 0
            if args:
                self.set_args(args)
            budget = None if max_cycles is None else max(max_cycles - at, 1)
            st = self.run(budget)
            runs.append(st.cycles)
            if self.trace is not None:
                base = sum(lengths[:k])
                for r in self.trace.records:
                    r.pc += base
                    r.issue += at
                    r.start += at
                    r.retire = None if r.retire is None else r.retire + at
                records += self.trace.records
            if total is None:
                total = st
            else:
                total.add_run(st, at)
        assert total is not None        # at least one page ran
        total.cycles = timing.paged_cycles(runs, lengths)
        self.stats = total
        if self.trace is not None:
            self.trace.records = records
        return total

    # -- state --------------------------------------------------------------------------
    def _reset(self) -> None:
        cfg = self.cfg
        self.loops = [(0, (0, 0, 0))] * cfg.loop_regs
        self.mxu = MxuState(cfg)
        self.vpu = VpuState()
        self.tokens = Tokens(self)
        self.races = Races(self)
        self.units = make_units(self)
        #: pc -> the unit its queued instruction goes to (None: not a queued instruction)
        self.issue_units = [self.units[d.uid] if d is not None else None for d in self.decoded]
        self.issue = IssueStage(self)
        self.stats = Stats(config=cfg.name, rows=cfg.rows, cols=cfg.cols, clock_mhz=cfg.clock_mhz)
        self.trace = Trace() if self.want_trace else None
        self.halt_cycle: int | None = None
        self.max_cycles = INF
        self.tx: dict[int, Channel] = {}       # link port -> channel (System wires them)
        self.rx: dict[int, Channel] = {}

    def components(self) -> list:
        """What the event loop runs: the issue stage and the units the program has instructions for (a
        unit no instruction goes to never has work: leaving it out saves the loop a look at it per event)."""
        used = {d.uid for d in self.decoded if d is not None}
        return [self.issue] + [u for uid, u in self.units.items() if uid in used]

    def mem(self, space: int) -> np.ndarray:
        return self.spm if space == Space.SPM else self.acc

    def set_reg(self, r: int, v: int) -> None:
        if r:
            self.regs[r] = sem.wrap32_int(v)

    def _kind(self, pc: int, ins: Instruction | None) -> int:
        if ins is None or pc in self.bad:
            return _BAD
        if ins.spec.queued:
            return _QUEUED
        return {"sld": _SMEM, "sst": _SMEM, "fence": _FENCE, "halt": _HALT}.get(ins.op, _PURE)

    def text(self, pc: int) -> str:
        s = self._texts.get(pc)
        ins = self.prog[pc] if 0 <= pc < len(self.prog) else None
        if s is None and ins is not None:
            s = self._texts[pc] = format_instruction(ins, self.cfg)
        return s or "?"

    def error(self, code: ErrorCode, msg: str, cycle: int | None, pc: int | None = None, address: str | None = None,
              other: tuple[int, str] | None = None) -> SimError:
        return SimError(code, msg, cycle=cycle, pc=pc, instr=self.text(pc) if pc is not None else None,
                        address=address, chip=self.index if self.in_system else None,
                        other=other)

    # -- issue-stage work that touches units ----------------------------------------------
    def issue_queued(self, pc: int, t: int) -> None:
        dec, regs = self.decoded[pc], self.regs
        assert dec is not None          # its kind is _QUEUED, not _BAD
        if dec.rep_depth:
            nest = self.loops[dec.rep_base:dec.rep_base + dec.rep_depth]
            counts = [c for c, _ in nest]
            strides = [s for _, s in nest]
        else:
            counts, strides = [], []
        # a memory operand's address is 32-bit, two's complement: base + register wraps modulo 2**32
        # (docs/microarchitecture.md section 2), as the instance addresses of its nest do (Entry.addrs)
        bases = [sem.wrap32_int(off + regs[x]) for off, x in dec.slots]
        bval = regs[dec.breg] if dec.breg is not None else 0
        sval = regs[dec.sreg] if dec.sreg is not None else 0
        unit = self.issue_units[pc]
        assert unit is not None
        unit.push(Entry(dec, pc, t, counts, strides, bases, bval, sval))

    def scalar_mem(self, pc: int, t: int) -> bool:
        """``sld``/``sst`` at its issue cycle ``t``; true for an ``sld`` (``SLD_PENALTY`` follows)."""
        ins, f = self.prog[pc], self.fields[pc]
        assert ins is not None          # its kind is _SMEM, not _BAD
        if f["wait"]:
            self.tokens.consume(f["wait"], Unit.SCALAR, t)
        space, row, lane = f["space"], f["addr"] + self.regs[f["xaddr"]], f["lane"]
        depth = self.cfg.spm_rows if space == Space.SPM else self.cfg.acc_rows
        name = SPACE_NAME[space]
        if not 0 <= row < depth:
            raise self.error(ErrorCode.ADDRESS_RANGE, f"{ins.op} row {row} outside {name} (0..{depth - 1})",
                             t, pc, f"{name} row {row}")
        rng = [(name, row, row + 1)]
        load = ins.op == "sld"
        self.races.start(Unit.SCALAR, pc, t, rng if load else [], [] if load else rng, r=t,
                         ports=(name,) if load else ())
        if load:
            self.set_reg(f["rd"], sem.scalar_load(self.mem(space)[row], lane))
        else:
            self.mem(space)[row, lane] = sem.scalar_store_value(self.regs[f["rd"]], space)
        if f["signal"]:
            self.tokens.signal(Unit.SCALAR, f["signal"], t, pc)
        return load

    # -- links ----------------------------------------------------------------------------------
    def link_start(self, unit, inst, t, port, space, addr, n):
        """Start a send (LTX) or receive (LRX) instance; returns its retire cycle if known now."""
        send = unit.uid == Unit.LTX
        if n == 0:
            return t
        st = self.stats
        nbytes = n * self.cfg.cols * SPACE_BYTES[space]
        if send:
            ch = self.tx.get(port)
            if ch is None:
                ch = self.tx[port] = Channel(self.cfg, self)          # wired to nothing
            rows = self.mem(space)[addr:addr + n].copy()
            st.bytes["link_tx"] += nbytes
            st.busy["ltx"] += n * timing.flits_per_row(self.cfg, space)
            ch.send(unit, inst, t, space, rows)
        else:
            ch = self.rx.get(port)
            st.bytes["link_rx"] += nbytes
            st.busy["lrx"] += n * timing.flits_per_row(self.cfg, space)
            if ch is None:
                return None                                          # nothing will ever arrive
            ch.recv(unit, inst, t, space, n, addr)
        return None


__all__ = ["Chip", "SimError"]

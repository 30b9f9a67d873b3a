"""A chip's state that its units, handlers and links share, and ``ChipState``, what they use of a chip.

The token counters, the in-flight footprints for race detection and the MXU's and VPU's data
state live here, below the units; ``sim.chip.Chip`` holds one of each and implements
``ChipState``, so the units, handlers and links name the chip by that protocol and never import
``sim.chip`` (which imports them).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from isa import timing
from isa.config import ChipConfig
from isa.errors import ErrorCode
from isa.table import LUT_ENTRIES, QCFG_RESET, Unit

from .errors import SimError
from .stats import Stats, Trace

#: a cycle that never comes (a time not known yet, or no limit)
INF = 1 << 62

#: a footprint: (memory name, first row or byte, one past the last)
Span = tuple[str, int, int]

#: unit set (a wait/signal mask) -> the unit numbers in it
_MEMBERS = [tuple(int(u) for u in Unit if m >> u & 1) for m in range(1 << len(Unit))]


class Tokens:
    """A counter per (producer, consumer) pair; a signal at r counts at r and is usable at r + TOKEN_LATENCY."""

    def __init__(self, chip: ChipState) -> None:
        self.chip = chip
        self.pending: dict = {}         # (P, C) -> heap of (r, pc) not yet counted
        self.ready: dict = {}           # (P, C) -> deque of r counted, not consumed
        self.active: set = set()

    def signal(self, unit: Unit, mask: int, r: int, pc: int) -> None:
        p = int(unit)
        units = self.chip.units
        for c in _MEMBERS[mask]:
            key = (p, c)
            heapq.heappush(self.pending.setdefault(key, []), (r, pc))
            self.active.add(key)
            if c in units:                  # the consumer's next start may come earlier now
                units[c].stale()

    def flush(self, t: int) -> None:
        """Count every signal with r < t, before anything acts at t.

        Every consumption at a cycle <= r has happened by then, so the count after a signal is the
        counter's value at the end of cycle r: above TOKEN_MAX it raises TOKEN_OVERFLOW at r.
        """
        for key in list(self.active):
            heap = self.pending[key]    # (not empty: a pair is active while it has pending signals)
            if heap[0][0] >= t:
                continue
            dq = self.ready.get(key)
            if dq is None:
                dq = self.ready[key] = deque()
            while heap and heap[0][0] < t:
                r, pc = heapq.heappop(heap)
                dq.append(r)
                if len(dq) > timing.TOKEN_MAX:
                    p, c = (Unit(k).name.lower() for k in key)
                    raise self.chip.error(ErrorCode.TOKEN_OVERFLOW,
                                          f"token counter {p}->{c} exceeds TOKEN_MAX ({timing.TOKEN_MAX})", r, pc)
            if not heap:
                self.active.discard(key)

    def usable_time(self, p: int, c: int) -> int:
        key = (p, c)
        dq = self.ready.get(key)
        if dq:
            return dq[0] + timing.TOKEN_LATENCY
        heap = self.pending.get(key)
        return heap[0][0] + timing.TOKEN_LATENCY if heap else INF

    def wait_time(self, mask: int, c: int, t: int) -> tuple[int, int | None]:
        """First cycle >= t at which a token from every unit in ``mask`` is usable, and the last producer."""
        worst, who = t, None
        c = int(c)
        for p in _MEMBERS[mask]:
            u = self.usable_time(p, c)
            if u > worst:
                worst, who = u, p
        return worst, who

    def consume(self, mask: int, c: int, t: int) -> None:
        c = int(c)
        for p in _MEMBERS[mask]:
            self.ready[(p, c)].popleft()


class Races:
    """Instances in flight with their footprints; a new one overlapping another unit's is a RACE.

    A read and a write meet by the row (DRAM: by the byte); two writes also meet by the bank
    (``cfg.spm_bank_rows``, ``cfg.acc_bank_rows`` rows): a bank has one write port, so two units
    writing one bank at once race even on different rows. Two instances that hold the same shared
    read port (``ports``: an ``sld`` and a ``dma.st`` with rows, of one memory) race whatever their rows."""

    def __init__(self, chip: ChipState) -> None:
        self.chip = chip
        self.live: list = []            # [unit, pc, s, r, reads, writes, writes widened to banks, ports]
        self.bank = {"spm": chip.cfg.spm_bank_rows, "acc": chip.cfg.acc_bank_rows}
        self.widen = max(self.bank.values()) > 1

    def _banks(self, spans: Sequence[Span]) -> list[Span]:
        out = []
        for m, lo, hi in spans:
            b = self.bank.get(m, 1)
            out.append((m, lo - lo % b, hi + (-hi) % b) if b > 1 else (m, lo, hi))
        return out

    def start(self, unit: Unit, pc: int, s: int, reads: Sequence[Span], writes: Sequence[Span],
              r: int = INF, ports: Sequence[str] = ()) -> list[Any]:
        wbanks = self._banks(writes) if self.widen and writes else writes
        rec = [unit, pc, s, r, reads, writes, wbanks, ports]
        if not reads and not writes:
            return rec
        live = [x for x in self.live if x[3] >= s]
        for x in live:
            if x[0] == unit:
                continue
            where = None
            hit = _overlap(writes, x[4]) or _overlap(reads, x[5]) or _overlap(writes, x[5])
            if hit:
                where = f"{hit[0]} {'rows' if hit[0] != 'dram' else 'bytes'} {hit[1]}..{hit[2] - 1}"
            elif wbanks is not writes and (hit := _overlap(wbanks, x[6])):
                where = f"{hit[0]} bank rows (both write; banks of {self.bank[hit[0]]} rows) {hit[1]}..{hit[2] - 1}"
            elif ports and x[7] and (shared := next((p for p in ports if p in x[7]), None)):
                where = f"{shared} read port (sld reads through dma.st's, whatever the rows)"
            if where is not None:
                unit_of = lambda u: Unit(u).name.lower()  # noqa: E731
                other_r = "?" if x[3] >= INF else x[3]
                raise self.chip.error(
                    ErrorCode.RACE,
                    f"{unit_of(unit)} instance of pc {pc} `{self.chip.text(pc)}` starting at {s} overlaps "
                    f"{unit_of(x[0])} instance of pc {x[1]} `{self.chip.text(x[1])}` in flight {x[2]}..{other_r} "
                    f"on {where}", s, pc, where, other=(x[1], self.chip.text(x[1])))
        live.append(rec)
        self.live = live
        return rec


def _overlap(a: Sequence[Span], b: Sequence[Span]) -> Span | None:
    for m1, lo1, hi1 in a:
        for m2, lo2, hi2 in b:
            if m1 == m2 and lo1 < hi2 and lo2 < hi1:
                return m1, max(lo1, lo2), min(hi1, hi2)
    return None


class MxuState:
    """The array's data state: front weights (used by mm), shadow (filled by lw), pending flag."""

    def __init__(self, cfg):
        self.front = np.zeros((cfg.rows, cfg.cols), np.int8)
        self.shadow = np.zeros((cfg.rows, cfg.cols), np.int8)
        self.front_k = self.shadow_k = 0
        self.pending = False


class VpuState:
    def __init__(self):
        self.lut = np.zeros(LUT_ENTRIES, np.int8)
        self.qcfg = tuple(QCFG_RESET.values())      # shift, zp, lo, hi, rounding (reset values)


class ChipState(Protocol):
    """What the units, handlers and links use of a chip (``sim.chip.Chip`` implements it)."""

    @property
    def cfg(self) -> ChipConfig: ...
    @property
    def index(self) -> int: ...
    @property
    def stats(self) -> Stats: ...
    @property
    def trace(self) -> Trace | None: ...
    @property
    def tokens(self) -> Tokens: ...
    # the queued units by number (sim.units.QueuedUnit, which sits above this module): a token
    # signalled to one marks its cached next start stale
    @property
    def units(self) -> Mapping[Any, Any]: ...
    @property
    def races(self) -> Races: ...
    @property
    def mxu(self) -> MxuState: ...
    @property
    def vpu(self) -> VpuState: ...
    @property
    def spm(self) -> np.ndarray: ...
    @property
    def acc(self) -> np.ndarray: ...
    @property
    def dram(self) -> np.ndarray: ...
    @property
    def regs(self) -> list[int]: ...
    @property
    def loops(self) -> list[tuple[int, tuple[int, int, int]]]: ...

    def mem(self, space: int) -> np.ndarray: ...

    def set_reg(self, r: int, v: int) -> None: ...

    def text(self, pc: int) -> str: ...

    def error(self, code: ErrorCode, msg: str, cycle: int | None, pc: int | None = None, address: str | None = None,
              other: tuple[int, str] | None = None) -> SimError: ...

    # unit: the sim.units.LinkUnit starting instance inst (sim.units sits above this module)
    def link_start(self, unit: Any, inst: Any, t: int, port: int, space: int, addr: int, n: int) -> int | None: ...

"""The event loop that runs one or more chips (``Chip.run`` runs one, ``System.run`` a ring).

Time jumps from one event to the next: every component (each chip's issue stage and queued
units) tells the earliest cycle at which it can next act, given what is known; the loop takes the
smallest, lets every component due at that cycle act, and asks again. A decision at cycle t only
depends on what happened before t (every latency of the contract is at least one cycle), so the
components due at the same cycle may act in any order. Idle cycles cost nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from isa.encoding import Instruction
from isa.errors import ErrorCode, TetrachipError
from isa.table import Unit

from .errors import SimError
from .limits import MAX_CYCLES, default_max_cycles
from .state import INF, ChipState

if TYPE_CHECKING:
    from .links import Channel
    from .units import QueuedUnit

class Component(Protocol):
    """What the loop runs: a chip's issue stage or one of its queued units. While ``fresh``, ``_t`` is
    what ``next_time()`` would return (the loop reads it without the call)."""

    fresh: bool
    _t: int

    def next_time(self) -> int: ...

    def act(self, t: int, horizon: int) -> None: ...


class Issue(Protocol):
    @property
    def pc(self) -> int: ...
    @property
    def halted(self) -> bool: ...


class Clocked(ChipState, Protocol):
    """What the loop uses of a chip besides its state (``sim.chip.Chip`` implements it)."""

    halt_cycle: int | None
    max_cycles: int

    @property
    def issue(self) -> Issue: ...
    @property
    def prog(self) -> Sequence[Instruction | None]: ...
    @property
    def fields(self) -> Sequence[Mapping[str, int]]: ...
    @property
    def units(self) -> Mapping[Unit, QueuedUnit]: ...
    @property
    def tx(self) -> Mapping[int, Channel]: ...
    @property
    def rx(self) -> Mapping[int, Channel]: ...

    def components(self) -> Sequence[Component]: ...


#: the most cycles a run is allowed when the caller gives no limit (the default is derived from the
#: programs: ``sim.limits.default_max_cycles``)
DEFAULT_MAX_CYCLES = MAX_CYCLES


_BLAS: list[Any] = []          # the threadpoolctl controller, or None without threadpoolctl


def _one_blas_thread():
    """A context that keeps BLAS on one thread (if threadpoolctl is installed).

    The simulator's matmuls are small (one weight tile x the rows of one instance); with several
    BLAS threads they are several times slower on a busy machine, never faster.
    """
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController
            _BLAS.append(ThreadpoolController())
        except ImportError:
            _BLAS.append(None)
    return _BLAS[0].limit(limits=1, user_api="blas") if _BLAS[0] is not None else contextlib.nullcontext()


def run(chips: Sequence[Clocked], max_cycles: int | None = None) -> None:
    with _one_blas_thread():
        try:
            _run(chips, max_cycles)
        except SimError as e:         # the cycle counter reads as if the chip halted at the error
            if e.cycle is not None:
                for ch in chips:
                    if ch.halt_cycle is None:
                        ch.stats.cycles = e.cycle + 1
            raise


def _run(chips: Sequence[Clocked], max_cycles: int | None = None) -> None:
    derived = max_cycles is None
    limit = default_max_cycles(chips) if max_cycles is None else int(max_cycles)
    if limit < 1:
        raise TetrachipError(f"max_cycles={max_cycles!r}: a run's cycle limit must be a positive number of cycles")
    for ch in chips:
        ch.max_cycles = limit
    if len(chips) == 1:
        _run_one(chips[0], limit, derived)
        return
    # Each chip's components and their next times, and the chip's earliest. A component's next time
    # depends only on its chip's state, which changes only when one of the chip's components acts or a
    # channel to it moves flits (the other end acted): after cycle t only the chips that acted and the
    # chips wired to them are asked again, so an event costs what it touches, not the number of chips.
    groups = [list(ch.components()) for ch in chips]
    times = [[c.next_time() for c in g] for g in groups]
    # (a component whose next time is cached, ``fresh``, is not asked again: the hot loop below
    # reads its ``_t``; the issue stage is never fresh)
    chip_t = [min(ts) if ts else INF for ts in times]
    where = {id(ch): i for i, ch in enumerate(chips)}
    near = [_wired(ch, i, where) for i, ch in enumerate(chips)]
    last = 0
    while True:
        t = min(chip_t)
        if t >= INF or t >= limit:
            _stop(chips, t, last, limit, derived)
            return
        for ch in chips:
            if ch.tokens.active:
                ch.tokens.flush(t)
        acted = [i for i, ct in enumerate(chip_t) if ct == t]
        for i in acted:
            for c, ct in zip(groups[i], times[i]):
                if ct == t:
                    c.act(t, INF)
        last = t
        dirty = near[acted[0]] if len(acted) == 1 else {j for i in acted for j in near[i]}
        for i in dirty:
            ts = times[i] = [c._t if c.fresh else c.next_time() for c in groups[i]]
            chip_t[i] = min(ts) if ts else INF


def _run_one(ch: Clocked, limit: int, derived: bool) -> None:
    """``_run``'s loop for a single chip (most runs), without the bookkeeping of which chips acted and
    which are wired to them: every event asks the chip's components again."""
    comps = list(ch.components())
    tokens = ch.tokens
    times = [c.next_time() for c in comps]
    t = min(times)
    last = 0
    while t < INF and t < limit:
        if tokens.active:
            tokens.flush(t)
        for c, ct in zip(comps, times):
            if ct == t:
                c.act(t, INF)
        last = t
        times = [c._t if c.fresh else c.next_time() for c in comps]
        t = min(times)
    _stop([ch], t, last, limit, derived)


def _stop(chips: Sequence[Clocked], t: int, last: int, limit: int, derived: bool) -> None:
    """The loop reached ``t``, INF (nothing can act again) or the cycle limit: return if every chip
    halted, else raise the deadlock or cycle-limit error."""
    if t >= INF:
        for ch in chips:
            ch.tokens.flush(INF)
        if all(ch.issue.halted for ch in chips):
            return
        raise _deadlock(chips, last)
    ch = next(c for c in chips if not c.issue.halted)
    pc = ch.issue.pc if ch.issue.pc < len(ch.prog) else None
    how = ("the default limit, derived from the program (docs/simulator.md, \"Cycle limit\")" if derived
           else "the limit given")
    raise ch.error(ErrorCode.CYCLE_LIMIT, f"the run did not halt within {limit} cycles ({how}); "
                   f"raise it with run(max_cycles=N) or `tetrachip sim --max-cycles N`", limit, pc)


def _wired(chip: Clocked, i: int, where: dict[int, int]) -> tuple[int, ...]:
    """Chip i and the chips its channels reach (a channel made during the run, for a port wired to
    nothing, reaches no other chip)."""
    out = {i}
    for link in (*chip.tx.values(), *chip.rx.values()):
        for other in (link.tx_chip, link.rx_chip):
            j = where.get(id(other)) if other is not None else None
            if j is not None:
                out.add(j)
    return tuple(sorted(out))


def _deadlock(chips: Sequence[Clocked], last: int) -> SimError:
    """Nothing can ever act again but some chip has not halted: name what is stuck."""
    cycle = max([last] + [u.max_retire for ch in chips for u in ch.units.values()]) + 1
    for ch in chips:
        if ch.issue.halted:
            continue
        stuck = [(u.queue[0].q if u.queue else -1, u) for u in ch.units.values() if u.queue or u.open]
        stuck.sort(key=lambda x: x[0])
        others = "; ".join(f"{u.name} waits for {u.blocked_on()}" for _, u in stuck)
        if stuck:
            u = stuck[0][1]
            pc = u.queue[0].pc if u.queue else _open_pc(ch, u)
            return ch.error(ErrorCode.DEADLOCK, f"no unit can make progress ({others}); "
                            f"the issue stage is stuck at pc {ch.issue.pc}", cycle, pc)
        return ch.error(ErrorCode.DEADLOCK, "the issue stage waits for a token that is never signalled",
                        cycle, ch.issue.pc)
    return SimError(ErrorCode.DEADLOCK, "no chip can make progress", cycle=cycle)


def _open_pc(chip: Clocked, unit: QueuedUnit) -> int | None:
    for ch in (chip.tx.values() if unit.uid == Unit.LTX else chip.rx.values()):
        jobs = ch.sends if unit.uid == Unit.LTX else ch.recvs
        if jobs:
            return jobs[0].inst.ent.pc
    return None

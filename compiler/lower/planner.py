"""The "tetris" memory planner: buffers are rectangles (lifetime x size) packed into one memory.

Every buffer has a size and a lifetime ``[start, end]`` (inclusive steps: kernel indices). Two
buffers may share addresses only if their lifetimes are disjoint. ``plan`` places buffers one at
a time at the lowest offset where they fit among the already placed buffers they overlap in time
(first fit), for each of several orderings, and keeps the ordering with the smallest footprint.

In a memory of banks (``align``: rows per bank, docs/microarchitecture.md section 4: two units writing
one bank race) a buffer owns whole banks unless it names its writer (``Buffer.writer``): buffers that
one unit writes, or that no unit writes, may share a bank with each other (never with one another
unit writes while both live).

The lower bound of any placement is the largest live set: ``max_t sum(size of buffers live at
t)``. ``Plan.per_ordering`` reports the footprint every ordering reached, so the gap to the bound
is visible. The planner packs DRAM (tensors between kernels) and, per kernel, SPM and ACC.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from isa.ints import align_up


#: ``Buffer.writer`` of a buffer whose writers are not stated: it owns whole banks
ANY = "?"


@dataclass(frozen=True)
class Buffer:
    name: str
    size: int
    start: int
    end: int
    #: the one unit that writes the buffer while it lives (``"load"``, ``"vpu"``...), None when no unit
    #: does (it is read only), ``ANY`` when not stated (several units, or not known)
    writer: str | None = ANY

    def span(self, align: int) -> int:
        """Rows the buffer takes in a memory of ``align``-row banks: whole banks unless its writer is stated."""
        return align_up(self.size, align) if self.writer == ANY else self.size


def _clash(a: Buffer, b: Buffer) -> bool:
    """May ``a`` and ``b``, live at once, not share a bank? When both are written, by different units
    (or either by units not stated)."""
    return a.writer is not None and b.writer is not None and (a.writer == ANY or a.writer != b.writer)


@dataclass
class Plan:
    memory: str
    offsets: dict[str, int]
    footprint: int
    bound: int
    best: str
    per_ordering: dict[str, int] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.footprint / self.bound if self.bound else 1.0

    def to_dict(self) -> dict:
        return {"memory": self.memory, "footprint": self.footprint, "bound": self.bound,
                "ratio": self.ratio, "best": self.best, "per_ordering": dict(self.per_ordering)}


#: name -> sort key (buffers are placed in ascending key order)
ORDERINGS = {
    "size": lambda b: (-b.size, b.start),
    "lifetime": lambda b: (-(b.end - b.start), -b.size),
    "start": lambda b: (b.start, -b.size),
    "end": lambda b: (-b.end, -b.size),
    "area": lambda b: (-b.size * (b.end - b.start + 1), b.start),
    "conflicts": None,   # most time-overlapping bytes first (computed per plan)
}


def live_bound(bufs: list[Buffer], align: int = 1) -> int:
    steps = sorted({b.start for b in bufs} | {b.end for b in bufs})
    best = 0
    for t in steps:
        best = max(best, sum(b.span(align) for b in bufs if b.start <= t <= b.end))
    return best


def _place(order: list[Buffer], align: int) -> tuple[dict[str, int], int]:
    if align > 1 and any(b.writer != ANY for b in order):
        return _place_banks(order, align)
    placed: list[tuple[Buffer, int]] = []
    offsets: dict[str, int] = {}
    top = 0
    for b in order:
        size = align_up(b.size, align)
        busy = sorted((o, o + align_up(p.size, align)) for p, o in placed
                      if p.start <= b.end and b.start <= p.end)
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, align_up(hi, align))
        offsets[b.name] = off
        placed.append((b, off))
        top = max(top, off + size)
    return offsets, top


def _place_banks(order: list[Buffer], align: int) -> tuple[dict[str, int], int]:
    """First fit in a memory of ``align``-row banks: a buffer may not overlap the rows of one it lives
    with, nor its banks where they ``_clash``; a buffer of writers not stated starts a bank."""
    placed: list[tuple[Buffer, int]] = []
    offsets: dict[str, int] = {}
    top = 0
    for b in order:
        size = b.span(align)
        live = [(p, o, p.span(align)) for p, o in placed if p.start <= b.end and b.start <= p.end]
        ends = {0} | {o + n for _, o, n in live} | {align_up(o + n, align) for _, o, n in live}
        for off in sorted(e for e in ends if b.writer != ANY or e % align == 0):
            if all(not (off < o + n and o < off + size) and not (
                    size and n and _clash(b, p) and off // align <= (o + n - 1) // align
                    and o // align <= (off + size - 1) // align) for p, o, n in live):
                break
        offsets[b.name] = off
        placed.append((b, off))
        top = max(top, off + size)
    return offsets, top


def plan(bufs: list[Buffer], capacity: int | None = None, *, memory: str = "dram", align: int = 1,
         orderings: dict | None = None) -> Plan:
    """Pack ``bufs``; raises ValueError when even the best placement exceeds ``capacity``."""
    names = [b.name for b in bufs]
    if len(set(names)) != len(names):
        raise ValueError("buffer names must be unique")
    if not bufs:
        return Plan(memory, {}, 0, 0, "-", {})
    per, best = {}, None
    for name, key in (orderings or ORDERINGS).items():
        if key is None:
            def key(b, _bs=bufs):
                return -sum(o.size for o in _bs if o.start <= b.end and b.start <= o.end)
        order = sorted(bufs, key=key)
        offsets, top = _place(order, align)
        per[name] = top
        if best is None or top < best[1]:
            best = (offsets, top, name)
    bound = live_bound(bufs, align)
    p = Plan(memory, best[0], best[1], bound, best[2], per)
    if capacity is not None and p.footprint > capacity:
        raise ValueError(f"{memory}: buffers need {p.footprint} (live bound {bound}), the memory holds {capacity}")
    return p


def check(p: Plan, bufs: list[Buffer], align: int = 1) -> None:
    """Assert no two buffers that are live together overlap, nor share a bank of ``align`` rows where
    they ``_clash``, and that a buffer of writers not stated starts a bank (used by the tests)."""
    for a in bufs:
        if a.writer == ANY and p.offsets[a.name] % align:
            raise AssertionError(f"{a.name} does not start a bank")
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.start <= b.end and b.start <= a.end and a.size and b.size:
                oa, ob = p.offsets[a.name], p.offsets[b.name]
                if oa < ob + b.size and ob < oa + a.size:
                    raise AssertionError(f"{a.name} and {b.name} overlap")
                if _clash(a, b) and oa // align <= (ob + b.span(align) - 1) // align \
                        and ob // align <= (oa + a.span(align) - 1) // align:
                    raise AssertionError(f"{a.name} and {b.name} share a bank")

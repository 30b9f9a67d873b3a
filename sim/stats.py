"""Stats (figures of one run) and Trace (one record per instruction instance)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from isa.table import QUEUED_UNITS, Unit

UNIT_NAMES = [u.name.lower() for u in Unit]


@dataclass
class Stats:
    """Figures of one chip's run.

    ``busy``: cycles each unit did work (scalar: scalar instructions issued; load/store: DRAM channel
    beats; mxu: input rows streamed; vpu: rows processed; ltx/lrx: flits moved).
    ``mxu_macs``: multiply-accumulate slots with a loaded weight row (rows streamed x weight rows
    ``k`` x ``cols``); ``mxu_utilization = mxu_macs / (rows * cols * cycles)``.
    ``bytes``: bytes read/written per memory (``dram_read``, ``spm_write``, ``link_tx``...).
    ``stalls``: cycles by cause: issue stage ``queue_full(U)``, ``token(U)``, ``fence``,
    ``branch``; units ``U.token(P)`` (a ready instance waiting for a token from P),
    ``mxu.weights`` (an mm waiting for its weights), ``mxu.swap`` (an lw waiting for the swap
    wavefront).
    """

    config: str = ""
    rows: int = 0
    cols: int = 0
    clock_mhz: float = 0.0
    cycles: int = 0
    instructions: int = 0
    instances: dict = field(default_factory=lambda: {n: 0 for n in UNIT_NAMES})
    busy: dict = field(default_factory=lambda: {n: 0 for n in UNIT_NAMES})
    mxu_macs: int = 0
    bytes: dict = field(default_factory=lambda: {k: 0 for k in (
        "dram_read", "dram_write", "spm_read", "spm_write", "acc_read", "acc_write", "link_tx", "link_rx")})
    stalls: dict = field(default_factory=dict)

    def __post_init__(self):
        self.instances["scalar"] = self.busy["scalar"] = 0

    @property
    def mxu_utilization(self) -> float:
        return self.mxu_macs / (self.rows * self.cols * self.cycles) if self.cycles else 0.0

    @property
    def time_us(self) -> float:
        return self.cycles / self.clock_mhz if self.clock_mhz else 0.0

    def stall(self, cause: str, n: int) -> None:
        if n > 0:
            self.stalls[cause] = self.stalls.get(cause, 0) + n

    def add_run(self, other: "Stats", at: int) -> None:
        """Count another run of the same chip that started at cycle ``at`` (a later page of a paged program,
        ``Chip.run_pages``): ``cycles`` becomes its end, every count adds up."""
        self.cycles = at + other.cycles
        self.instructions += other.instructions
        self.mxu_macs += other.mxu_macs
        for mine, theirs in ((self.instances, other.instances), (self.busy, other.busy), (self.bytes, other.bytes),
                             (self.stalls, other.stalls)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v

    def to_dict(self) -> dict:
        return {"config": self.config, "cycles": self.cycles, "time_us": self.time_us,
                "instructions": self.instructions, "instances": dict(self.instances),
                "busy": dict(self.busy), "mxu_macs": self.mxu_macs,
                "mxu_utilization": self.mxu_utilization, "bytes": dict(self.bytes),
                "stalls": dict(sorted(self.stalls.items()))}

    def table(self) -> str:
        c = max(self.cycles, 1)
        out = [f"config {self.config} ({self.rows}x{self.cols}): {self.cycles} cycles "
               f"({self.time_us:.2f} us at {self.clock_mhz:g} MHz), {self.instructions} instructions issued",
               f"MXU utilization {100 * self.mxu_utilization:.2f}% ({self.mxu_macs} MACs)",
               f"{'unit':<8}{'instances':>12}{'busy':>12}{'busy %':>9}"]
        for n in UNIT_NAMES:
            out.append(f"{n:<8}{self.instances[n]:>12}{self.busy[n]:>12}{100 * self.busy[n] / c:>8.1f}%")
        out.append(f"{'memory':<12}{'bytes':>14}")
        out += [f"{k:<12}{v:>14}" for k, v in self.bytes.items()]
        if self.stalls:
            out.append(f"{'stall cause':<24}{'cycles':>12}")
            out += [f"{k:<24}{v:>12}" for k, v in sorted(self.stalls.items())]
        return "\n".join(out)

    __str__ = table


def _overlap(a: int, b: int, lo: int, hi: int) -> int:
    """Cycles of [a, b) inside [lo, hi)."""
    return max(0, min(b, hi) - max(a, lo))


@dataclass
class Record:
    """One instruction instance: chip, unit, pc, instance index, text, issue/start/retire cycles.

    ``issue`` is the cycle its queue entry (the instruction with its whole loop nest) was issued;
    ``dram_bytes`` the DRAM bytes a DMA instance reads or writes (0 for the other units);
    ``waits`` the token mask the instance consumed at ``start`` and ``signals`` the mask it signalled at
    ``retire`` (bit ``p`` = unit ``p``; with ``sync=once`` only an entry's first instance waits and only
    its last signals; a scalar ``sld``/``sst`` waits and signals at its one cycle).
    """

    chip: int
    unit: int
    pc: int
    index: int
    text: str
    issue: int
    start: int
    retire: int | None = None
    dram_bytes: int = 0
    waits: int = 0
    signals: int = 0


class Trace:
    """Instances of a run, in start order; exported as Chrome/Perfetto JSON or a line trace."""

    def __init__(self):
        self.records: list[Record] = []

    def __len__(self) -> int:
        return len(self.records)

    def add(self, *args: Any) -> Record:
        r = Record(*args)
        self.records.append(r)
        return r

    def retired(self) -> list[Record]:
        return sorted((r for r in self.records if r.retire is not None),
                      key=lambda r: (r.retire, r.chip, r.unit, r.pc, r.index))

    def line_trace(self) -> str:
        """One fixed-column line per retired instance, ordered by retire cycle (then chip, unit, pc, index).

        Columns: retire, start, issue, chip, unit, pc, instance index, instruction text.
        """
        head = f"{'retire':>10} {'start':>10} {'issue':>10} {'chip':>4} {'unit':<6} {'pc':>5} {'inst':>7}  instr"
        lines = [head] + [f"{r.retire:>10} {r.start:>10} {r.issue:>10} {r.chip:>4} {UNIT_NAMES[r.unit]:<6} "
                          f"{r.pc:>5} {r.index:>7}  {r.text}" for r in self.retired()]
        return "\n".join(lines) + "\n"

    def to_chrome(self) -> dict:
        """Chrome trace-event JSON (load in Perfetto or chrome://tracing): 1 us = 1 cycle."""
        ev = []
        chips = sorted({r.chip for r in self.records})
        for c in chips:
            ev.append({"ph": "M", "name": "process_name", "pid": c, "args": {"name": f"chip {c}"}})
            for u in Unit:
                ev.append({"ph": "M", "name": "thread_name", "pid": c, "tid": int(u), "args": {"name": u.name.lower()}})
        for r in self.records:
            end = r.retire if r.retire is not None else r.start
            ev.append({"ph": "X", "name": r.text, "pid": r.chip, "tid": r.unit, "ts": r.start,
                       "dur": end - r.start + 1,
                       "args": {"pc": r.pc, "instance": r.index, "issue": r.issue, "start": r.start,
                                "retire": r.retire}})
        counters, width = self.counters()
        return {"traceEvents": ev + counters, "displayTimeUnit": "ns",
                "otherData": {"time_unit": "1 us = 1 cycle", "dram_bin_cycles": width}}

    def queue_occupancy(self, chip: int, unit: int) -> list[tuple[int, int]]:
        """``(cycle, entries)`` at each change of ``unit``'s queue occupancy on ``chip``.

        An entry (one issued instruction with its loop nest) holds its queue slot from its issue cycle
        through the cycle its last instance starts, the rule ``isa.timing.QUEUE_DEPTH`` bounds. Entries
        with no instances (a zero trip count) leave no record and are not counted.
        """
        span: dict[tuple[int, int], int] = {}
        for r in self.records:
            if r.chip == chip and r.unit == unit:
                k = (r.pc, r.issue)
                span[k] = max(span.get(k, r.start), r.start)
        delta: dict[int, int] = {}
        for (_, q), d in span.items():
            delta[q] = delta.get(q, 0) + 1
            delta[d + 1] = delta.get(d + 1, 0) - 1
        out, n = [], 0
        for t in sorted(delta):
            if delta[t]:
                n += delta[t]
                out.append((t, n))
        return out

    def dram_rate(self, chip: int, max_bins: int = 2000) -> tuple[int, np.ndarray, np.ndarray]:
        """DRAM bytes per cycle on ``chip``, binned: ``(width, read, write)``.

        Each DMA instance's bytes are spread evenly (in whole bytes) over its start..retire cycles; bin i covers cycles
        ``i*width .. (i+1)*width - 1`` and holds the bytes moved in it divided by ``width``, so
        ``sum(read + write) * width`` is the run's ``dram_read + dram_write``.
        """
        dma = [r for r in self.records if r.chip == chip and r.dram_bytes and r.unit in (Unit.LOAD, Unit.STORE)]
        end = max((r.retire if r.retire is not None else r.start for r in dma), default=0) + 1
        width = max(1, -(-end // max_bins))
        nb = -(-end // width)
        rates = []
        for unit in (Unit.LOAD, Unit.STORE):
            acc = [0] * nb                              # integer bytes per bin: the sum stays exact
            for r in dma:
                if r.unit == unit:
                    n = (r.retire if r.retire is not None else r.start) - r.start + 1
                    q, rem = divmod(r.dram_bytes, n)    # q bytes a cycle, one more in the first rem cycles
                    for b in range(r.start // width, (r.start + n - 1) // width + 1):
                        lo, hi = b * width, (b + 1) * width
                        acc[b] += q * _overlap(r.start, r.start + n, lo, hi) + _overlap(r.start, r.start + rem, lo, hi)
            rates.append(np.asarray(acc, np.float64) / width)
        return width, rates[0], rates[1]

    def tokens_outstanding(self, chip: int) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """``(producer, consumer) -> [(cycle, tokens), ...]``: the token counter of each pair that appears on
        ``chip``, at each cycle it changes.

        As ``sim.state.Tokens`` counts them: a signal counts at its instance's retire cycle (it becomes usable
        ``isa.timing.TOKEN_LATENCY`` later) and a wait takes the token at the consuming instance's start; the
        value at a cycle is the counter at the end of that cycle, the one ``isa.timing.TOKEN_MAX`` bounds.
        Entries with no instances (a zero trip count) leave no record and their tokens are not counted.
        """
        delta: dict[tuple[int, int], dict[int, int]] = {}
        for r in self.records:
            if r.chip != chip:
                continue
            for p in Unit:
                if r.waits >> p & 1:
                    d = delta.setdefault((int(p), r.unit), {})
                    d[r.start] = d.get(r.start, 0) - 1
                if r.signals >> p & 1 and r.retire is not None:
                    d = delta.setdefault((r.unit, int(p)), {})
                    d[r.retire] = d.get(r.retire, 0) + 1
        out = {}
        for key in sorted(delta):
            d, n, series = delta[key], 0, [(0, 0)]
            for t in sorted(d):
                if d[t]:
                    n += d[t]
                    series.append((t, n))
            out[key] = series
        return out

    def counters(self, max_bins: int = 2000) -> tuple[list[dict], int]:
        """Perfetto counter events (``"ph": "C"``): per chip, each queued unit's queue occupancy
        (``queue <unit>``, entries), DRAM bytes per cycle (``dram bytes/cycle``: read, write), binned to
        at most ``max_bins`` bins, and the tokens outstanding per producer->consumer pair that appears
        (``tokens <producer>-><consumer>``, see ``tokens_outstanding``); returns the events and the DRAM bin
        width in cycles."""
        ev: list[dict] = []
        width = 1
        for c in sorted({r.chip for r in self.records}):
            for u in QUEUED_UNITS:
                occ = self.queue_occupancy(c, int(u))
                ev += [{"ph": "C", "name": f"queue {u.name.lower()}", "pid": c, "ts": t, "args": {"entries": n}}
                       for t, n in occ]
            width, rd, wr = self.dram_rate(c, max_bins)
            prev = None
            for i, (a, b) in enumerate(zip(rd.tolist(), wr.tolist())):
                if (a, b) != prev:
                    ev.append({"ph": "C", "name": "dram bytes/cycle", "pid": c, "ts": i * width,
                               "args": {"read": a, "write": b}})
                    prev = (a, b)
            if prev is not None and prev != (0.0, 0.0):
                ev.append({"ph": "C", "name": "dram bytes/cycle", "pid": c, "ts": len(rd) * width,
                           "args": {"read": 0.0, "write": 0.0}})
            for (p, q), series in self.tokens_outstanding(c).items():
                name = f"tokens {UNIT_NAMES[p]}->{UNIT_NAMES[q]}"
                ev += [{"ph": "C", "name": name, "pid": c, "ts": t, "args": {"tokens": n}} for t, n in series]
        return ev, width

    def save_chrome(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_chrome()))

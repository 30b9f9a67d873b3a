"""Chip-to-chip link channels: flits, latency and credits (docs/microarchitecture.md, "Links").

A ``Channel`` is one direction of one link: the transmit side of a port on one chip and the
receive side of the port it is wired to. It keeps the cycle each flit left (``t``) and was
popped (``u``) and advances both recurrences as far as what is known allows:

* flit g leaves at ``t_g = max(s or t_{g-1} + 1, u_{g-C} + L)`` (a credit: the first C flits
  need none), and
* is popped at ``u_g = max(s' or u_{g-1} + 1, t_g + L)`` by the receive in progress.

Every value is computed once, when its inputs are final, so the cost grows with the flits
moved, never with the cycles waited. A send or receive retires at its last flit's cycle.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from isa import timing
from isa.errors import ErrorCode
from isa.table import SPACE_NAME

if TYPE_CHECKING:
    from .units import Instance, QueuedUnit


class _Job:
    __slots__ = ("unit", "inst", "s", "total", "done", "space", "rows", "addr", "F", "row_flits", "row_i")

    def __init__(self, unit, inst, s, space, n, F, rows=None, addr=0):
        self.unit, self.inst, self.s, self.space, self.F = unit, inst, s, space, F
        self.total, self.done, self.rows, self.addr = n * F, 0, rows, addr
        self.row_flits, self.row_i = 0, 0


class Channel:
    """Transmit side of (chip, port) -> receive side of the port it is wired to (``rx`` None: unwired)."""

    def __init__(self, cfg, tx_chip, rx_chip=None):
        self.L, self.C = cfg.link_latency, cfg.link_credits
        self.tx_chip, self.rx_chip = tx_chip, rx_chip
        self.t: list[int] = []
        self.u: list[int] = []
        self.wire: deque = deque()     # rows in flight: [space, data, flits, flits popped]
        self.sends: deque[_Job] = deque()
        self.recvs: deque[_Job] = deque()

    def send(self, unit: QueuedUnit, inst: Instance, s: int, space: int, rows: np.ndarray) -> None:
        F = timing.flits_per_row(self.tx_chip.cfg, space)
        job = _Job(unit, inst, s, space, len(rows), F, rows)
        for r in rows:
            self.wire.append([space, r, F, 0])
        self.sends.append(job)
        self.advance()

    def recv(self, unit: QueuedUnit, inst: Instance, s: int, space: int, n: int, addr: int) -> None:
        job = _Job(unit, inst, s, space, n, timing.flits_per_row(self.rx_chip.cfg, space), addr=addr)
        self.recvs.append(job)
        self.advance()

    def advance(self) -> None:
        progress = True
        while progress:
            progress = self._tx() | self._rx()

    def _tx(self) -> bool:
        moved = False
        t, u, C, L = self.t, self.u, self.C, self.L
        while self.sends:
            job = self.sends[0]
            g = len(t)
            if g >= C:
                if g - C >= len(u):
                    break                       # no credit known yet
                cred = u[g - C] + L
            else:
                cred = 0
            lb = job.s if job.done == 0 else t[-1] + 1
            t.append(max(lb, cred))
            job.done += 1
            moved = True
            if job.done == job.total:
                self.sends.popleft()
                job.unit.retired_later(job.inst, t[-1])
        return moved

    def _rx(self) -> bool:
        moved = False
        t, u, L = self.t, self.u, self.L
        while self.recvs and len(u) < len(t):
            job = self.recvs[0]
            h = len(u)
            lb = job.s if job.done == 0 else u[-1] + 1
            uh = max(lb, t[h] + L)
            u.append(uh)
            row = self.wire[0]
            if row[0] != job.space:
                unit = job.unit
                err = unit.chip.error(ErrorCode.LINK_MISMATCH,
                                      f"received a flit of {SPACE_NAME[row[0]]} rows, the receive expects "
                                      f"{SPACE_NAME[job.space]} rows", uh, job.inst.ent.pc,
                                      f"{SPACE_NAME[job.space]} row {job.addr + job.row_i}")
                if unit.pending_error is None or unit.pending_error[0] > uh:
                    unit.pending_error = (uh, err)
                self.recvs.popleft()            # this receive never completes
                return True
            row[3] += 1
            job.done += 1
            moved = True
            if row[3] == row[2]:                # last flit of the row: write it
                self.wire.popleft()
                mem = job.unit.chip.mem(job.space)
                mem[job.addr + job.row_i] = row[1]
                job.row_i += 1
            if job.done == job.total:
                self.recvs.popleft()
                job.unit.retired_later(job.inst, uh)
        return moved

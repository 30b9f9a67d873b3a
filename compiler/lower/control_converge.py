"""A hand-built data-dependent loop on the chip: runs until a value converges (the mechanism
``compiler.lower.control_lower`` generalises to the frontend's ``while_loop``).

    loop = until_converged(rows=1, a=3, b=b_vec, shift=2, tol=0, max_iter=200, config="base")
    x, trips, stats = loop.run(x0)            # on the simulator
    x_ref, trips_ref = loop.reference(x0)     # numpy, the same integer arithmetic

The body is a lane-wise integer fixed-point step on the VPU, ``x <- (a * x + b) >> shift`` over
``rows`` ACC rows of int32 lanes (``b`` per lane). After each step the VPU computes the largest
change, ``max |x_new - x|`` (``vsub``, ``vabs``, a ``vmax`` chain over rows, ``vrmax`` over
lanes) and signals the scalar unit; ``sld`` reads that lane into a register (waiting on the
VPU token) and the scalar unit branches back while it exceeds ``tol`` and fewer than
``max_iter`` trips ran. The trip count is data-dependent: nothing about it is known when the
program is compiled. At the end the result rows and the trip count (``sst`` into an ACC lane)
are stored to DRAM; the host reads both.

For ``0 <= a < 2**shift`` the step is a monotone contraction on the integers, so the sequence is
monotone and stops at a fixed point (``tol = 0`` terminates); ``max_iter`` bounds it anyway.

Registers (``isa.regs.Converge``): trips, tol, max_iter, the change read by ``sld``. ACC rows: x, the
new x, the change, b (``rows`` each), one row for the trip count.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.builder import ProgramBuilder, acc, dram
from isa.config import ChipConfig
from isa.regs import Converge as R
from isa.semantics import wrap32
from isa.table import SPACE_BYTES, Space

from compiler.lower.schedule import ChipCompileError


def _wrap32(v: np.ndarray) -> np.ndarray:
    """The chip's 32-bit wrap (``isa.semantics.wrap32``), kept in int64 for the arithmetic that follows."""
    return wrap32(v).astype(np.int64)


@dataclass
class ConvergeLoop:
    config: ChipConfig
    rows: int
    a: int
    b: np.ndarray            # (rows, cols) int32
    shift: int
    tol: int
    max_iter: int
    program: object
    x_addr: int
    b_addr: int
    out_addr: int
    count_addr: int

    def reference(self, x0) -> tuple[np.ndarray, int]:
        x = np.asarray(x0, np.int64).reshape(self.rows, self.config.cols)
        trips = 0
        while True:
            new = _wrap32(_wrap32(_wrap32(x * self.a) + self.b) >> self.shift)
            diff = int(np.max(np.abs(new - x)))
            x, trips = new, trips + 1
            if trips >= self.max_iter or diff <= self.tol:
                return x.astype(np.int32), trips

    def run(self, x0, trace: bool = False):
        from sim import Chip
        C = self.config.cols
        x0 = np.asarray(x0, np.int32).reshape(self.rows, C)
        chip = Chip(self.config, trace=trace)
        chip.load(self.program)
        chip.write_dram(self.x_addr, x0.reshape(-1).view(np.uint8))
        chip.write_dram(self.b_addr, self.b.astype(np.int32).reshape(-1).view(np.uint8))
        stats = chip.run()
        x = chip.read_dram(self.out_addr, self.rows * C, np.int32).reshape(self.rows, C)
        trips = int(chip.read_dram(self.count_addr, 1, np.int32)[0])
        return x, trips, stats


def until_converged(rows: int, a: int, b, shift: int, tol: int = 0, max_iter: int = 1000,
                    config="base") -> ConvergeLoop:
    cfg = ChipConfig.load(config)
    C = cfg.cols
    b = np.broadcast_to(np.asarray(b, np.int64), (rows, C)).astype(np.int32)
    if not 1 <= rows or 4 * rows + 1 > cfg.acc_rows:
        raise ChipCompileError(f"until_converged: {rows} rows do not fit ACC ({cfg.acc_rows} rows) on "
                               f"config {cfg.name!r}")
    if not 1 <= max_iter < (1 << 15) or not 0 <= shift < 32:
        raise ChipCompileError(f"until_converged: max_iter {max_iter} / shift {shift} out of range")
    X, T, D, B, CNT = 0, rows, 2 * rows, 3 * rows, 4 * rows
    eb = SPACE_BYTES[Space.ACC]
    rb = eb * C                                          # bytes of one int32 row
    x_addr, b_addr, out_addr, count_addr = 0, rows * rb, 2 * rows * rb, 3 * rows * rb
    pb = ProgramBuilder(cfg)
    pb.comment(f"until converged: x <- ({a} * x + b) >> {shift} over {rows} row(s), while max|dx| > {tol}")
    pb.emit("seti", R.TRIPS, 0)
    pb.emit("seti", R.TOL, tol)
    pb.emit("seti", R.MAX_ITER, max_iter)
    pb.emit("dma.ld", acc[X], dram[x_addr], rows=rows, len=C, rstride=rb, estride=eb)
    pb.emit("dma.ld", acc[B], dram[b_addr], rows=rows, len=C, rstride=rb, estride=eb)
    pb.emit("fence", "all")
    top, done = pb.label("top"), pb.new_label("done")
    pb.emit("vmul", acc[T], acc[X], a, n=rows)
    pb.emit("vadd", acc[T], acc[T], acc[B], n=rows)
    pb.emit("vsra", acc[T], acc[T], shift, n=rows)
    pb.emit("vsub", acc[D], acc[T], acc[X], n=rows)
    pb.emit("vabs", acc[D], acc[D], n=rows)
    for i in range(1, rows):
        pb.emit("vmax", acc[D], acc[D], acc[D + i], n=1)
    pb.emit("vrmax", acc[D], acc[D], n=1, signal="scalar")
    pb.emit("vmov", acc[X], acc[T], n=rows)
    pb.emit("sld", R.CHANGE, acc[D], 0, wait="vpu")      # the VPU's result steers the branch
    pb.emit("addi", R.TRIPS, R.TRIPS, 1)
    pb.emit("bge", R.TRIPS, R.MAX_ITER, done)
    pb.emit("blt", R.TOL, R.CHANGE, top)
    pb.place(done)
    pb.emit("fence", "all")
    pb.emit("sst", R.TRIPS, acc[CNT], 0)
    pb.emit("dma.st", dram[out_addr], acc[X], rows=rows, len=C, rstride=rb, estride=eb)
    pb.emit("dma.st", dram[count_addr], acc[CNT], rows=1, len=1, rstride=rb, estride=eb)
    pb.emit("halt")
    prog = pb.build("<until_converged>")
    return ConvergeLoop(cfg, rows, int(a), b, int(shift), int(tol), int(max_iter), prog,
                        x_addr, b_addr, out_addr, count_addr)


__all__ = ["until_converged", "ConvergeLoop"]

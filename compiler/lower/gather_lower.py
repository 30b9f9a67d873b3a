"""Lowering of a table lookup (``compiler.lower.gather.GatherKernel``) to the chip.

The int8 table is a constant in DRAM, each row padded to ``rpt`` whole rows of ``cols`` bytes, with a
zero row last (what an index outside the table selects). The host writes the int32 indices raw
(``compiler.lower.quantize.input_ints``). Tokens go in chunks that fit the kernel's SPM and ACC
buffers; per chunk, a scalar loop whose code does not grow with the number of tokens:

    dma.ld   the chunk's indices into ACC, one per row (lane 0); fence load
    loop     sld the index; negative: add V; outside 0..V-1: the zero row; times the row's bytes;
             dma.ld the table row (register-indexed DRAM address) into the next SPM staging rows
             (an index inside the table takes no branch but the loop's; the others branch out of line)
    fence load; dma.st the staged rows to the output (a repeat over tokens); fence store

When a reader pads the output so that its rows are not evenly spaced, each token's output-row offset
is a constant (int32) loaded into ACC next to the indices, and a second scalar loop stores the rows
one by one at the offsets it reads with ``sld``.

Full chunks run in a scalar loop, a shorter last chunk once more after it. The code is fenced
before (``emit_program``) and after, and uses the registers of ``isa.regs.Gather``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.builder import ProgramBuilder, acc, dram, spm
from isa.ints import cdiv
from isa.regs import L0, ZERO, Gather as G

from compiler.lower.gather import GatherKernel, QGather
from compiler.lower.planner import Buffer
from compiler.lower.schedule import ChipCompileError, Schedule

#: bytes of one index in DRAM and in an ACC lane (int32)
_IDX_BYTES = np.dtype(np.int32).itemsize


@dataclass
class GatherCode:
    """Everything the emitter needs for one table lookup."""
    name: str
    ntok: int
    V: int
    rpt: int                        # SPM rows (and DRAM rows of ``cols`` bytes) per table row
    d: int
    cols: int
    table: int                      # DRAM address of the padded int8 table
    idx: int                        # DRAM address of the first token's index
    istride: int                    # DRAM bytes between tokens' indices
    out: int                        # DRAM address of the first token's output row
    ostride: int                    # DRAM bytes between tokens' output rows
    chunk: int                      # tokens per chunk
    #: DRAM address of each token's output-row offset (int32, from ``out``) when the rows are not evenly
    #: spaced (a reader pads the output); None: ``ostride`` apart
    orows: int | None = None
    stage: int = 0                  # SPM row of the staging buffer
    acc_base: int = 0               # ACC row of the chunk's indices

    def place(self, spm_off: dict, acc_off: dict, i: int) -> None:
        self.stage, self.acc_base = spm_off[f"k{i}.A"], acc_off[f"k{i}.acc"]

    def emit(self, e: ProgramBuilder) -> None:
        e.comment(f"kernel {self.name}: {self.ntok} rows of a {self.V}x{self.d} table, chunks of {self.chunk}")
        e.emit("seti", G.IOFF, 0)
        e.emit("seti", G.OOFF, 0)
        e.emit("seti", G.ROFF, 0)
        e.emit("seti", G.V, self.V)
        e.emit("seti", G.RB, self.rpt * self.cols)
        full, rest = divmod(self.ntok, self.chunk)
        if full:
            e.emit("seti", G.CH, 0)
            e.emit("seti", G.TMP, full)
            top = e.place(e.fresh_label("gather_chunk"))
            self._chunk(e, self.chunk)
            e.emit("addi", G.IOFF, G.IOFF, self.chunk * self.istride)
            e.emit("addi", G.OOFF, G.OOFF, self.chunk * self.ostride)
            e.emit("addi", G.ROFF, G.ROFF, self.chunk * _IDX_BYTES)
            e.emit("addi", G.CH, G.CH, 1)
            e.emit("blt", G.CH, G.TMP, top)
        if rest:
            self._chunk(e, rest)
        e.emit("fence", "all")

    def _chunk(self, e: ProgramBuilder, n: int) -> None:
        """``n`` tokens from the offsets in ``IOFF``/``OOFF``: indices, row loads, stores."""
        C, rpt = self.cols, self.rpt
        e.emit("dma.ld", acc[self.acc_base], dram[self.idx + G.IOFF], rows=n, len=1, rstride=self.istride)
        if self.orows is not None:
            e.emit("dma.ld", acc[self.acc_base + self.chunk], dram[self.orows + G.ROFF], rows=n, len=1,
                   rstride=_IDX_BYTES)
        e.emit("fence", "load")
        e.emit("seti", G.TOK, 0)
        e.emit("seti", G.SROW, 0)
        e.emit("seti", G.N, n)
        top, neg, oor, go, done = (e.fresh_label(s) for s in ("gather_tok", "gather_neg", "gather_out",
                                                               "gather_go", "gather_done"))
        e.place(top)                                  # an index in the table: no taken branch but the loop's
        e.emit("sld", G.ROW, acc[self.acc_base + G.TOK], 0)
        e.emit("blt", G.ROW, ZERO, neg)
        e.emit("bge", G.ROW, G.V, oor)
        e.emit("mul", G.ROW, G.ROW, G.RB)
        e.place(go)
        e.emit("dma.ld", spm[self.stage + G.SROW], dram[self.table + G.ROW], rows=rpt, len=C, rstride=C)
        e.emit("addi", G.TOK, G.TOK, 1)
        e.emit("addi", G.SROW, G.SROW, rpt)
        e.emit("blt", G.TOK, G.N, top)
        e.emit("jmp", done)
        e.place(neg)                                  # i < 0: i + V, when that is a row
        e.emit("add", G.ROW, G.ROW, G.V)
        e.emit("blt", G.ROW, ZERO, oor)
        e.emit("mul", G.ROW, G.ROW, G.RB)
        e.emit("jmp", go)
        e.place(oor)                                  # outside the table: the zero row
        e.emit("mul", G.ROW, G.V, G.RB)
        e.emit("jmp", go)
        e.place(done)
        e.emit("fence", "load")
        if self.orows is not None:
            self._row_stores(e)
            return
        whole, rem = divmod(self.d, C)
        if whole:
            e.emit("loop", L0, n, s0=self.ostride, s1=rpt)
            e.emit("dma.st", dram[self.out + G.OOFF], spm[self.stage], rows=whole, len=C, rstride=C, rep=L0)
        if rem:
            e.emit("loop", L0, n, s0=self.ostride, s1=rpt)
            e.emit("dma.st", dram[self.out + whole * C + G.OOFF], spm[self.stage + whole], rows=1, len=rem,
                   rstride=C, rep=L0)
        e.emit("fence", "store")


    def _row_stores(self, e: ProgramBuilder) -> None:
        """The staged rows stored token by token, each at its offset (``sld`` from the chunk's ACC rows)."""
        C, rpt = self.cols, self.rpt
        whole, rem = divmod(self.d, C)
        e.emit("seti", G.TOK, 0)
        e.emit("seti", G.SROW, 0)
        top = e.place(e.fresh_label("gather_st"))
        e.emit("sld", G.ROW, acc[self.acc_base + self.chunk + G.TOK], 0)
        if whole:
            e.emit("dma.st", dram[self.out + G.ROW], spm[self.stage + G.SROW], rows=whole, len=C, rstride=C)
        if rem:
            e.emit("dma.st", dram[self.out + whole * C + G.ROW], spm[self.stage + whole + G.SROW], rows=1, len=rem,
                   rstride=C)
        e.emit("addi", G.TOK, G.TOK, 1)
        e.emit("addi", G.SROW, G.SROW, rpt)
        e.emit("blt", G.TOK, G.N, top)
        e.emit("fence", "store")


def _stride(offs: np.ndarray, what: str, step: int) -> int:
    """The one stride of a sequence of addresses (``step`` for a single one), else ChipCompileError."""
    if len(offs) < 2:
        return step
    d = np.diff(offs)
    if not np.all(d == d[0]):
        raise ChipCompileError(what)
    return int(d[0])


def lower_gather(cfg, s: Schedule, i: int, k: GatherKernel, qk: QGather, tensor_addr: dict, put,
                 spm_rows: int) -> tuple:
    """(GatherCode, SPM buffers, ACC buffers) of the program's code ``i``; ``put(array)`` places a constant in
    DRAM and returns its address; ``spm_rows``: the SPM rows kernels may use."""
    C = cfg.cols
    what = f"kernel {k.name} (table lookup: {k.ntok} tokens of a {k.V}x{k.d} table)"
    rpt = cdiv(k.d, C)
    tab = np.zeros((k.V + 1, rpt * C), np.int8)
    tab[:, :k.d] = qk.table_q
    ti, to = s.tensors[k.src], s.tensors[k.out]
    ioffs = ti.phys_offsets(k.pos) * _IDX_BYTES
    istride = _stride(ioffs, f"{what}: the tokens' indices are not evenly spaced in DRAM", _IDX_BYTES)
    ooffs = to.phys_offsets(to.identity()).reshape(k.ntok, k.d)
    if k.d > 1 and not np.all(np.diff(ooffs, axis=1) == 1):
        raise ChipCompileError(f"{what}: an output row is not contiguous in DRAM")
    starts = ooffs[:, 0] - ooffs[0, 0]
    even = k.ntok < 2 or np.all(np.diff(starts) == starts[1] - starts[0])
    ostride = int(starts[1] - starts[0]) if even and k.ntok > 1 else k.d
    chunk = min(k.ntok, cfg.acc_rows // (1 if even else 2), spm_rows // rpt)
    if chunk < 1:
        raise ChipCompileError(f"{what}: a table row takes {rpt} SPM rows, config {cfg.name!r} has {spm_rows}")
    code = GatherCode(k.name, k.ntok, k.V, rpt, k.d, C, put(tab), tensor_addr[k.src] + int(ioffs[0]), istride,
                      tensor_addr[k.out] + int(ooffs[0, 0]), ostride, chunk,
                      None if even else put(starts.astype(np.int32)))
    steps = (2 * i, 2 * i + 1)                     # the code is fenced before and after (emit_program)
    acc_rows = chunk * (1 if even else 2)
    return code, [Buffer(f"k{i}.A", chunk * rpt, *steps)], [Buffer(f"k{i}.acc", acc_rows, *steps)]


__all__ = ["GatherCode", "lower_gather"]

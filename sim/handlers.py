"""One handler per instruction: what it reads and writes, and its data effect (via isa.semantics).

A queued instruction's handler ``q_<family>(chip, ent, a)`` is called for each instance with
``a``, the instance's memory-operand addresses in stride-slot order. It checks the addresses and
returns a ``Plan``: the instance's footprint (for race detection), its size ``n`` (rows, beats or
flits, as the unit's timing rule needs) and the function that performs its data effect when the
instance starts. A scalar instruction's handler ``s_<family>(chip, ins)`` runs in the issue stage
and returns a branch target or None.

Dispatch is derived from the table: ``HANDLERS[mnemonic]`` is ``q_<mnemonic>`` or
``s_<mnemonic>`` if such a function exists, else the handler of the instruction's format
(``q_vbin`` serves vadd..vsra). No opcode number appears here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from isa import semantics as sem
from isa import timing
from isa.errors import ErrorCode
from isa.table import INSTRUCTIONS, SPACE_BYTES, SPACE_NAME, ScaleMode, Space, SrcMode

if TYPE_CHECKING:
    from .state import ChipState

#: element bytes by the memory names that footprints and statistics use
_NAME_BYTES = {SPACE_NAME[s]: SPACE_BYTES[s] for s in Space}
#: the MXU handlers' memories: names (as footprints name them) and element bytes
_SPM, _ACC = SPACE_NAME[Space.SPM], SPACE_NAME[Space.ACC]
_SPM_BYTES, _ACC_BYTES = SPACE_BYTES[Space.SPM], SPACE_BYTES[Space.ACC]


class Plan:
    """What one instance does: footprint, size, data effect, or the error it raises at its start."""

    __slots__ = ("fn", "args", "reads", "writes", "n", "error", "addr", "dram_bytes", "ports")

    def __init__(self, fn=None, args=(), reads=(), writes=(), n=1, error=None, addr=None, dram_bytes=0, ports=()):
        self.fn, self.args, self.reads, self.writes, self.n = fn, args, reads, writes, n
        self.error, self.addr = error, addr
        self.dram_bytes = dram_bytes    # DRAM bytes this instance reads or writes (the trace's counter track)
        self.ports = ports              # shared read ports it holds ("spm"/"acc": dma.st's, which sld shares)

    def run(self) -> None:
        if self.fn is not None:
            self.fn(*self.args)


def _bad(code: ErrorCode, msg: str, addr: str | None = None) -> Plan:
    return Plan(error=(code, msg, addr))


def _rows_error(chip, space, lo, n, what):
    """None, or a Plan error if rows lo..lo+n-1 of ``space`` are not all inside it."""
    depth = chip.cfg.spm_rows if space == Space.SPM else chip.cfg.acc_rows
    if n > 0 and (lo < 0 or lo + n > depth):
        return _bad(ErrorCode.ADDRESS_RANGE,
                    f"{what} rows {lo}..{lo + n - 1} outside {SPACE_NAME[space]} (0..{depth - 1})",
                    f"{SPACE_NAME[space]} rows {lo}..{lo + n - 1}")
    return None


def _rng(space, lo, n):
    return (SPACE_NAME[space], lo, lo + n)


# --------------------------------------------------------------------------------------------
# DMA
# --------------------------------------------------------------------------------------------

def _dma(chip: ChipState, f: dict[str, int], local: int, dram: int, load: bool) -> Plan:
    cfg = chip.cfg
    space, rows, length, rs, es = f["space"], f["rows"], f["len"], f["rstride"], f["estride"]
    if length == 0:                     # no element: the instance moves nothing, checks nothing and
        rows = 0                        # touches no row (docs/microarchitecture.md section 3)
    err = _rows_error(chip, space, local, rows, "dma")
    if err:
        return err
    lo, hi = sem.dma_footprint(dram, rows, length, rs, es, space)
    if hi > lo and (lo < 0 or hi > cfg.dram_bytes):
        return _bad(ErrorCode.ADDRESS_RANGE, f"dma DRAM bytes {lo}..{hi - 1} outside DRAM (0..{cfg.dram_bytes - 1})",
                    f"dram bytes {lo}..{hi - 1}")
    n = timing.dma_occupancy(cfg, rows, length, space, es)
    eb = SPACE_BYTES[space]
    local_r, dram_r = [_rng(space, local, rows)] if rows else [], [("dram", lo, hi)] if hi > lo else []
    st = chip.stats.bytes
    mem = chip.mem(space)
    nbytes = rows * length * eb
    if load:
        st["dram_read"] += nbytes
        st[SPACE_NAME[space] + "_write"] += rows * cfg.cols * eb
        return Plan(_load, (chip.dram, mem, local, dram, rows, length, rs, es, space, cfg.cols),
                    dram_r, local_r, n, dram_bytes=nbytes)
    st["dram_write"] += nbytes
    st[SPACE_NAME[space] + "_read"] += nbytes
    return Plan(_store, (chip.dram, mem, local, dram, rows, length, rs, es, space), local_r, dram_r, n,
                dram_bytes=nbytes, ports=(SPACE_NAME[space],) if rows else ())


def _load(dram_arr, mem, local, dram, rows, length, rs, es, space, cols):
    mem[local:local + rows] = sem.dma_gather(dram_arr, dram, rows, length, rs, es, space, cols)


def _store(dram_arr, mem, local, dram, rows, length, rs, es, space):
    sem.dma_scatter_into(dram_arr, mem[local:local + rows], dram, length, rs, es, space)


def q_dma_ld(chip, ent, a):
    return _dma(chip, ent.f, a[0], a[1], load=True)


def q_dma_st(chip, ent, a):
    return _dma(chip, ent.f, a[1], a[0], load=False)


# --------------------------------------------------------------------------------------------
# MXU
# --------------------------------------------------------------------------------------------

def q_mxu_lw(chip, ent, a):
    src, k = a[0], ent.f["k"]
    err = _rows_error(chip, Space.SPM, src, k, "mxu.lw")
    if err:
        return err
    chip.stats.bytes["spm_read"] += k * chip.cfg.cols * _SPM_BYTES
    return Plan(_lw, (chip, src, k), [(_SPM, src, src + k)] if k else [], [], max(1, k))


def _lw(chip, src, k):
    m = chip.mxu
    m.shadow = sem.load_weights(chip.spm[src:src + k], k, chip.cfg.rows, chip.cfg.cols)
    m.shadow_k = k
    m.pending = True


def q_mm(chip, ent, a):
    dst, src, n = a[0], a[1], ent.f["n"]
    op = ent.ins.op
    err = _rows_error(chip, Space.ACC, dst, n, op) or _rows_error(chip, Space.SPM, src, n, op)
    if err:
        return err
    acc = op == "mxu.mma"
    st, cols = chip.stats.bytes, chip.cfg.cols
    st["spm_read"] += n * cols * _SPM_BYTES
    st["acc_write"] += n * cols * _ACC_BYTES
    if acc:
        st["acc_read"] += n * cols * _ACC_BYTES
    if not n:
        return Plan(_mm, (chip, dst, src, n, acc), [], [], 1)
    out = (_ACC, dst, dst + n)
    return Plan(_mm, (chip, dst, src, n, acc), [(_SPM, src, src + n), out] if acc else [(_SPM, src, src + n)],
                [out], n)


def _mm(chip, dst, src, n, acc):
    m = chip.mxu
    if m.pending:                       # swap at the start of the first mm after an lw
        m.front, m.front_k, m.pending = m.shadow, m.shadow_k, False
    chip.stats.mxu_macs += n * m.front_k * chip.cfg.cols
    if n == 0:
        return
    sem.matmul_into(chip.acc[dst:dst + n], chip.spm[src:src + n], m.front, acc)


# --------------------------------------------------------------------------------------------
# VPU
# --------------------------------------------------------------------------------------------

def _overlap_error(dspace, dst, n, sources):
    """OVERLAP unless each source is disjoint from the destination or exactly equal to it."""
    for sp, lo, cnt in sources:
        if sp != dspace or n == 0 or cnt == 0:
            continue
        if lo < dst + n and dst < lo + cnt and not (lo == dst and cnt == n):
            return _bad(ErrorCode.OVERLAP,
                        f"destination {SPACE_NAME[dspace]} rows {dst}..{dst + n - 1} partly overlap source rows "
                        f"{lo}..{lo + cnt - 1}",
                        f"{SPACE_NAME[dspace]} rows {max(lo, dst)}..{min(lo + cnt, dst + n) - 1}")
    return None


def _vpu_bytes(chip, reads, writes):
    st, cols = chip.stats.bytes, chip.cfg.cols
    for mem, lo, hi in reads:
        st[mem + "_read"] += (hi - lo) * cols * _NAME_BYTES[mem]
    for mem, lo, hi in writes:
        st[mem + "_write"] += (hi - lo) * cols * _NAME_BYTES[mem]


def q_vbin(chip, ent, a):
    f, n = ent.f, ent.f["n"]
    dsp, asp, bmode = f["dspace"], f["aspace"], f["bmode"]
    dst, arow = a[0], a[1]
    srcs = [(asp, arow, n)]
    if bmode in (SrcMode.SPM, SrcMode.ACC):
        bsp, brow = Space(int(bmode)), a[2]
        srcs.append((bsp, brow, n))
        b = None
    else:
        b = ent.bval if bmode == SrcMode.REG else f["b"]
    for sp, lo, cnt in [(dsp, dst, n)] + srcs:
        err = _rows_error(chip, sp, lo, cnt, ent.ins.op)
        if err:
            return err
    err = _overlap_error(dsp, dst, n, srcs)
    if err:
        return err
    reads = [_rng(sp, lo, cnt) for sp, lo, cnt in srcs] if n else []
    writes = [_rng(dsp, dst, n)] if n else []
    _vpu_bytes(chip, reads, writes)
    return Plan(_vbin, (chip, ent.ins.op, dsp, dst, asp, arow, srcs[1] if b is None else None, b, n),
                reads, writes, max(1, n))


def _vbin(chip, op, dsp, dst, asp, arow, brows, b, n):
    if n == 0:
        return
    av = chip.mem(asp)[arow:arow + n]
    bv = chip.mem(brows[0])[brows[1]:brows[1] + n] if brows else b
    chip.mem(dsp)[dst:dst + n] = sem.vpu_binary(op, av, bv, dsp)


def q_vun(chip, ent, a):
    f, n = ent.f, ent.f["n"]
    dsp, asp, dst, arow = f["dspace"], f["aspace"], a[0], a[1]
    for sp, lo in ((dsp, dst), (asp, arow)):
        err = _rows_error(chip, sp, lo, n, ent.ins.op)
        if err:
            return err
    err = _overlap_error(dsp, dst, n, [(asp, arow, n)])
    if err:
        return err
    reads, writes = ([_rng(asp, arow, n)], [_rng(dsp, dst, n)]) if n else ([], [])
    _vpu_bytes(chip, reads, writes)
    return Plan(_vun, (chip, ent.ins.op, dsp, dst, asp, arow, n), reads, writes, max(1, n))


def _vun(chip, op, dsp, dst, asp, arow, n):
    if n:
        chip.mem(dsp)[dst:dst + n] = sem.vpu_unary(op, chip.mem(asp)[arow:arow + n], dsp, chip.vpu.lut)


def q_vlutld(chip, ent, a):
    n = timing.lut_rows(chip.cfg)
    err = _rows_error(chip, Space.SPM, a[0], n, "vlutld")
    if err:
        return err
    reads = [_rng(Space.SPM, a[0], n)]
    _vpu_bytes(chip, reads, [])
    return Plan(_vlutld, (chip, a[0], n), reads, [], n)


def _vlutld(chip, src, n):
    chip.vpu.lut = sem.lut_from_rows(chip.spm[src:src + n])


def q_vqcfg(chip, ent, a):
    f = ent.f
    return Plan(_vqcfg, (chip, f["shift"], f["zp"], f["lo"], f["hi"], f["round"]), [], [], 1)


def _vqcfg(chip, shift, zp, lo, hi, rnd):
    chip.vpu.qcfg = (shift, zp, lo, hi, rnd)


def q_vreq(chip, ent, a):
    f, n = ent.f, ent.f["n"]
    dst, src, smode = a[0], a[1], f["smode"]
    err = _rows_error(chip, Space.SPM, dst, n, "vreq") or _rows_error(chip, Space.ACC, src, n, "vreq")
    reads = [_rng(Space.ACC, src, n)] if n else []
    scale_row = None
    if smode == ScaleMode.ROW:
        scale_row = a[2]
        err = err or _rows_error(chip, Space.ACC, scale_row, 1, "vreq scale")
        reads.append(_rng(Space.ACC, scale_row, 1))
        scale = None
    else:
        scale = int(sem.scale16(ent.scale_val if smode == ScaleMode.REG else f["scale"]))
    if err:
        return err
    writes = [_rng(Space.SPM, dst, n)] if n else []
    _vpu_bytes(chip, reads, writes)
    return Plan(_vreq, (chip, dst, src, scale, scale_row, n), reads, writes, max(1, n))


def _vreq(chip, dst, src, scale, scale_row, n):
    if n == 0:
        return
    if scale_row is not None:
        scale = sem.scale16(chip.acc[scale_row])
    chip.spm[dst:dst + n] = sem.requantize(chip.acc[src:src + n], scale, *chip.vpu.qcfg)


# --------------------------------------------------------------------------------------------
# Links: the unit moves the rows (see sim.links); the handler checks and reads them
# --------------------------------------------------------------------------------------------

def q_link(chip, ent, a):
    f, n = ent.f, ent.f["n"]
    space, addr = f["space"], a[0]
    err = _rows_error(chip, space, addr, n, ent.ins.op)
    if err:
        return err
    send = ent.ins.op == "link.send"
    rng = [_rng(space, addr, n)] if n else []
    p = Plan(None, (), rng if send else [], [] if send else rng, n)
    p.addr = (f["port"], space, addr)
    return p


# --------------------------------------------------------------------------------------------
# Scalar instructions (executed by the issue stage)
# --------------------------------------------------------------------------------------------

def s_none(chip, ins):
    return None


def s_seti(chip, ins):
    chip.set_reg(ins["rd"], ins["imm"])


def s_alu(chip, ins):
    chip.set_reg(ins["rd"], sem.scalar_alu(ins.op, chip.regs[ins["rs1"]], chip.regs[ins["rs2"]]))


def s_alui(chip, ins):
    chip.set_reg(ins["rd"], sem.scalar_alu("add", chip.regs[ins["rs1"]], ins["imm"]))


def s_branch(chip, ins):
    if sem.branch_taken(ins.op, chip.regs[ins["rs1"]], chip.regs[ins["rs2"]]):
        return ins["target"]
    return None


def s_jump(chip, ins):
    return ins["target"]


def s_loop(chip, ins):
    count = ins["count"] if ins["cmode"] == 0 else sem.u32(chip.regs[ins["count"]])
    chip.loops[ins["lr"]] = (count, (ins["s0"], ins["s1"], ins["s2"]))


#: scalar instructions the issue stage executes itself, because they wait for units or tokens
ISSUE_STAGE_OPS = ("sld", "sst", "fence", "halt")


def _handler(ins):
    if ins.mnemonic in ISSUE_STAGE_OPS:
        return None
    g = globals()
    prefix = "q_" if ins.queued else "s_"
    for name in (ins.mnemonic.replace(".", "_"), ins.format):
        if prefix + name in g:
            return g[prefix + name]
    raise AssertionError(f"no handler for {ins.mnemonic}")


#: mnemonic -> handler, derived from the instruction table
HANDLERS = {ins.mnemonic: _handler(ins) for ins in INSTRUCTIONS}

"""Row memories with many ports: SPM and ACC.

The chip's SPM and ACC are read and written by every unit at once (SPM: 4 write ports, 4
registered and 3 combinational read ports; ACC: 5 and 3 + 3). ``RowMemory`` gives such a memory
two implementations with the same ports and the same cycle behaviour:

``impl="flat"`` (simulation and co-simulation)
    one ``amaranth.lib.memory.Memory`` with every port. On an FPGA, Yosys can only build it from
    flip-flops plus a read multiplexer per bit and port and a write-enable multiplexer per bit and
    port: about nine LUTs per bit at the ``--fpga-mem`` depths.

``impl="lvt"`` (FPGA builds)
    a live-value-table memory (LaForest and Steffan, "Efficient Multi-Ported Memories for FPGAs",
    FPGA 2010): one bank per (write port, read port) pair, each a memory with one write and one
    read port, which FPGAs have (LUT RAM for combinational reads, block RAM for registered ones
    unless the memory is at most ``LUTRAM_DEPTH`` rows deep);
    a small table of ``clog2(write ports)`` bits per row (the LVT) remembers which write port wrote
    each row last, and every read port picks that port's bank. A write port whose lane enables may
    cover only part of a row (the scalar unit's ``sst``) merges the rest of the row from a
    combinational read port at the same address (``write_port(merge=...)``), so every bank write
    is a whole row.

``impl="lvt-bram"``
    the same, with every registered-read bank in block RAM whatever its depth: a 16-row ACC
    bank takes a few mostly empty block RAMs instead of LUT RAM cells, which frees the logic
    slices that each LUT RAM cell blocks (three per cell on an ECP5: two RAM, one write port).

All implementations: a write lands at the end of its cycle; a combinational read sees every
write of earlier cycles; a registered read returns next cycle what the row held before this
cycle's writes, except for writes of the ports it is ``transparent_for`` (their new data). Two
ports writing one row in the same cycle is a race in the timing contract (section 4) and has no
defined result in either.

``peek(ctx, row)`` / ``poke(ctx, row, value)`` read and write a row's value from an Amaranth
testbench whatever the implementation; ``parts()`` names the memories a Verilog bench dumps to
reassemble the rows (``verify/cosim.py``).
"""

from __future__ import annotations

from amaranth import Cat, Elaboratable, Module, Mux, Signal, unsigned
from amaranth.lib import memory

from isa.ints import clog2

__all__ = ["RowMemory", "IMPLS", "LUTRAM_DEPTH"]

IMPLS = ("flat", "lvt", "lvt-bram")
#: rows of an FPGA LUT RAM cell (ECP5 DPR16X4): registered-read banks this shallow use LUT RAM
LUTRAM_DEPTH = 16


class _WritePort:
    def __init__(self, mem, index: int, merge):
        self.addr = Signal(mem.addr_w, name=f"{mem.name}_w{index}_addr")
        self.data = Signal(mem.row_bits, name=f"{mem.name}_w{index}_data")
        self.en = Signal(mem.lanes, name=f"{mem.name}_w{index}_en")
        self.merge = merge


class _ReadPort:
    def __init__(self, mem, index: int, domain: str, transparent_for):
        self.addr = Signal(mem.addr_w, name=f"{mem.name}_r{index}_addr")
        self.data = Signal(mem.row_bits, name=f"{mem.name}_r{index}_data")
        self.domain = domain
        self.transparent_for = tuple(transparent_for)


class RowMemory(Elaboratable):
    """``depth`` rows of ``lanes`` lanes of ``lane_bits`` bits.

    ``write_port(merge=None)`` -> port with ``addr``, ``data`` (a whole row), ``en`` (one bit per
    lane). In the ``lvt`` implementation a port without ``merge`` must enable all lanes or none
    (``en`` is taken as its bit 0); ``merge``: a combinational read port that reads the same
    address whenever this port writes, whose data fills the lanes not enabled.
    ``read_port(domain="sync"|"comb", transparent_for=())`` -> port with ``addr``, ``data``.
    """

    def __init__(self, name: str, lane_bits: int, lanes: int, depth: int, impl: str = "flat"):
        if impl not in IMPLS:
            raise ValueError(f"memory implementation {impl!r}: one of {', '.join(IMPLS)}")
        self.name, self.lane_bits, self.lanes, self.depth, self.impl = name, lane_bits, lanes, depth, impl
        self.row_bits = lane_bits * lanes
        self.addr_w = clog2(depth)
        # lvt: registered-read banks in block RAM, unless one 16-row LUT RAM cell is deep enough
        # (a block would then be mostly empty); combinational reads are LUT RAM in any case
        self.sync_ram = "distributed" if depth <= LUTRAM_DEPTH and impl != "lvt-bram" else "block"
        self.writes: list[_WritePort] = []
        self.reads: list[_ReadPort] = []
        self._frozen = False
        self.flat = None
        self.lvt = None
        self.banks: dict[tuple[int, int], memory.Memory] = {}

    # -- ports -------------------------------------------------------------------------------
    def write_port(self, merge: "_ReadPort | None" = None) -> _WritePort:
        assert not self._frozen, "ports are added before elaboration"
        if merge is not None and merge.domain != "comb":
            raise ValueError("a merge port must be a combinational read port")
        p = _WritePort(self, len(self.writes), merge)
        self.writes.append(p)
        return p

    def read_port(self, domain: str = "sync", transparent_for=()) -> _ReadPort:
        assert not self._frozen, "ports are added before elaboration"
        assert domain in ("sync", "comb")
        for w in transparent_for:
            assert w in self.writes, "transparent_for names write ports of this memory"
        p = _ReadPort(self, len(self.reads), domain, transparent_for)
        self.reads.append(p)
        return p

    # -- elaboration -------------------------------------------------------------------------
    def elaborate(self, platform):
        self._frozen = True
        m = Module()
        if self.impl == "flat":
            self._flat(m)
        else:
            self._lvt(m)
        return m

    def _flat(self, m):
        mem = self.flat = memory.Memory(shape=unsigned(self.row_bits), depth=self.depth, init=[])
        m.submodules.mem = mem
        wps = {}
        for w in self.writes:
            wp = mem.write_port(granularity=self.lane_bits)
            m.d.comb += [wp.addr.eq(w.addr), wp.data.eq(w.data), wp.en.eq(w.en)]
            wps[id(w)] = wp
        for r in self.reads:
            rp = mem.read_port(domain=r.domain, transparent_for=tuple(wps[id(w)] for w in r.transparent_for))
            m.d.comb += [rp.addr.eq(r.addr), r.data.eq(rp.data)]

    def _lvt(self, m):
        W = len(self.writes)
        sel_w = max(1, clog2(W))
        # what each write port stores: a whole row (merged where only some lanes are enabled)
        wdata, wen = [], []
        for i, w in enumerate(self.writes):
            if w.merge is None:
                wdata.append(w.data)
                wen.append(w.en[0])
            else:
                d = Signal(self.row_bits, name=f"w{i}_merged")
                B = self.lane_bits
                m.d.comb += d.eq(Cat(*[Mux(w.en[k], w.data[k * B:(k + 1) * B], w.merge.data[k * B:(k + 1) * B])
                                       for k in range(self.lanes)]))
                wdata.append(d)
                wen.append(w.en.any())
        # the live value table: which write port wrote each row last
        lvt = self.lvt = memory.Memory(shape=unsigned(sel_w), depth=self.depth, init=[])
        m.submodules.lvt = lvt
        lvt_w = []
        for i, w in enumerate(self.writes):
            wp = lvt.write_port()
            m.d.comb += [wp.addr.eq(w.addr), wp.data.eq(i), wp.en.eq(wen[i])]
            lvt_w.append(wp)
        for j, r in enumerate(self.reads):
            trans = tuple(lvt_w[self.writes.index(w)] for w in r.transparent_for)
            sel = lvt.read_port(domain=r.domain, transparent_for=trans)
            m.d.comb += sel.addr.eq(r.addr)
            outs = []
            for i, w in enumerate(self.writes):
                attrs = {"ram_style": self.sync_ram} if r.domain == "sync" else None
                bank = memory.Memory(shape=unsigned(self.row_bits), depth=self.depth, init=[], attrs=attrs)
                m.submodules[f"bank_w{i}_r{j}"] = bank
                self.banks[i, j] = bank
                bw = bank.write_port()
                m.d.comb += [bw.addr.eq(w.addr), bw.data.eq(wdata[i]), bw.en.eq(wen[i])]
                br = bank.read_port(domain=r.domain, transparent_for=(bw,) if w in r.transparent_for else ())
                m.d.comb += br.addr.eq(r.addr)
                outs.append(br.data)
            if W == 1:
                m.d.comb += r.data.eq(outs[0])
            else:
                with m.Switch(sel.data):
                    for i in range(W):
                        with m.Case(i):
                            m.d.comb += r.data.eq(outs[i])

    # -- test benches ------------------------------------------------------------------------
    def peek(self, ctx, row: int) -> int:
        """The row's value (an Amaranth testbench)."""
        if self.impl == "flat":
            return ctx.get(self.flat.data[row])
        i = ctx.get(self.lvt.data[row]) if len(self.writes) > 1 else 0
        return ctx.get(self.banks[i, 0].data[row])

    def poke(self, ctx, row: int, value: int) -> None:
        """Set the row's value (an Amaranth testbench, while no port writes it)."""
        if self.impl == "flat":
            ctx.set(self.flat.data[row], value)
            return
        if len(self.writes) > 1:
            ctx.set(self.lvt.data[row], 0)
        for j in range(len(self.reads)):
            ctx.set(self.banks[0, j].data[row], value)

    def parts(self) -> dict:
        """Memories a Verilog bench dumps to reassemble the rows: ``{"flat": "mem"}`` or
        ``{"lvt": "lvt", "banks": ["bank_w<i>_r0", ...]}`` (submodule names, in write-port order)."""
        if self.impl == "flat":
            return {"flat": "mem"}
        return {"lvt": "lvt" if len(self.writes) > 1 else None,
                "banks": [f"bank_w{i}_r0" for i in range(len(self.writes))]}

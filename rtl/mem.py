"""Row memories with many ports: SPM and ACC.

The chip's SPM and ACC are read and written by every unit at once (SPM: 4 write ports and 6
registered read ports; ACC: 5 and 5: ``rtl.chip.MEMORY_PORTS``). ``RowMemory`` gives such a
memory several implementations with the same ports and the same cycle behaviour:

``impl="flat"`` (simulation and co-simulation)
    one ``amaranth.lib.memory.Memory`` with every port. On an FPGA, Yosys can only build it from
    flip-flops plus a read multiplexer per bit and port and a write-enable multiplexer per bit and
    port: about nine LUTs per bit at the ``--fpga-mem`` depths.

``impl="lvt"`` (FPGA builds)
    a live-value-table memory (LaForest and Steffan, "Efficient Multi-Ported Memories for FPGAs",
    FPGA 2010): one bank per (write port, read port) pair, each a memory with one write and one
    read port, which FPGAs have (block RAM, or LUT RAM with an output register when the memory is
    at most ``LUTRAM_DEPTH`` rows deep); a small table of ``clog2(write ports)`` bits per row and
    lane (the LVT) remembers which write port wrote each lane of each row last, and every read
    port picks each lane from that port's bank (the table's writes land a cycle late, from a
    register per write port, and the read ports look at those pending writes first). Lanes are
    the unit of the table because a write port may enable only some lanes of a row (the scalar
    unit's ``sst`` writes one): a bank write then writes those lanes alone (byte enables in block
    RAM, a cell's write enable in LUT RAM).

``impl="banked"`` (FPGA builds)
    ``ceil(depth / bank_rows)`` banks of ``bank_rows`` consecutive rows, each kept as one copy per
    read port: a memory with one write and one read port (block RAM, or LUT RAM with an output
    register when a bank is at most ``LUTRAM_DEPTH`` rows deep). A bank's write port takes the
    write port whose row falls in it (an AND-OR of the ports' rows, data and lane enables: no
    table, no priority), except a ``fallback`` port (``sst``'s), whose row and data a bank takes
    whenever no other port writes it, so its enables, the last signals of the issue decision,
    drive only the banks' write enables; a read port takes its copy of the bank its row fell in (the bank number
    registered with the read). LUT RAM banks (``late``) take their writes a cycle late, from a
    register per bank (the AND-OR above ends in flip-flops, not in the LUT RAM cells' write ports
    across the chip), and read late to match: a registered read registers its row and reads the
    LUT RAM asynchronously in the next cycle, when every write of earlier cycles has landed and
    those of its own cycle have not; a port it is ``transparent_for`` gives that cycle's written
    lanes from a register, and a combinational read takes the lanes of its row's pending write.
    Same cycle behaviour as ``flat`` provided that in every cycle at
    most one write port writes a bank, and a read that is ``transparent_for`` a port does not
    meet another port's write of its row: what the timing contract guarantees a program without
    races on a config with these banks (``cfg.spm_bank_rows``, ``cfg.acc_bank_rows``; section 4 of
    docs/microarchitecture.md). Two ports writing one bank in one cycle give the OR of both (with
    the fallback port, the other's row and data under both ports' lane enables): a race with no
    defined result.

``impl="banked-bram"``
    the same, with every registered-read copy in block RAM whatever its depth (see "lvt-bram").

``impl="lvt-bram"``
    the same, with every registered-read bank in block RAM whatever its depth: a 16-row ACC
    bank takes a few mostly empty block RAMs instead of LUT RAM cells, which frees the logic
    slices that each LUT RAM cell blocks (three per cell on an ECP5: two RAM, one write port).

All implementations: a write lands at the end of its cycle; a combinational read sees every
write of earlier cycles; a registered read returns next cycle what the row held before this
cycle's writes, except for writes of the ports it is ``transparent_for`` (their new data). Two
ports writing one lane of a row in the same cycle is a race in the timing contract (section 4)
and has no defined result in either.

``peek(ctx, row)`` / ``poke(ctx, row, value)`` read and write a row's value from an Amaranth
testbench whatever the implementation; ``parts()`` names the memories a Verilog bench dumps to
reassemble the rows (``verify/cosim.py``).
"""

from __future__ import annotations

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal, unsigned
from amaranth.lib import memory

from isa.ints import clog2

from .logic import any_of

__all__ = ["RowMemory", "IMPLS", "BANKED", "FPGA_IMPL", "LUTRAM_DEPTH", "table_bits"]

IMPLS = ("flat", "lvt", "lvt-bram", "banked", "banked-bram")
#: the implementations built from the config's banks of rows (``bank_rows``)
BANKED = ("banked", "banked-bram")
#: what ``tetrachip fpga build/synth`` and bench/fpga.py build SPM and ACC as without ``--mem``: banks
#: of one write port each, no live-value table (a config without banks of its own gets
#: ``rtl.fpga.fit.default_banks``; programs must keep different units' writes in different banks)
FPGA_IMPL = "banked"
#: rows of an FPGA LUT RAM cell (ECP5 DPR16X4): registered-read banks this shallow use LUT RAM
LUTRAM_DEPTH = 16


def table_bits(writes: int) -> int:
    """Bits of one lane's entry in the live-value table of a memory with ``writes`` write ports."""
    return max(1, clog2(writes))


class _WritePort:
    def __init__(self, mem, index: int, fallback: bool = False):
        self.fallback = fallback
        self.addr = Signal(mem.addr_w, name=f"{mem.name}_w{index}_addr")
        self.data = Signal(mem.row_bits, name=f"{mem.name}_w{index}_data")
        self.en = Signal(mem.lanes, name=f"{mem.name}_w{index}_en")


class _ReadPort:
    def __init__(self, mem, index: int, domain: str, transparent_for):
        self.addr = Signal(mem.addr_w, name=f"{mem.name}_r{index}_addr")
        self.data = Signal(mem.row_bits, name=f"{mem.name}_r{index}_data")
        self.domain = domain
        self.transparent_for = tuple(transparent_for)


class RowMemory(Elaboratable):
    """``depth`` rows of ``lanes`` lanes of ``lane_bits`` bits.

    ``write_port()`` -> port with ``addr``, ``data`` (a whole row), ``en`` (one bit per lane: the
    lanes written).
    ``read_port(domain="sync"|"comb", transparent_for=())`` -> port with ``addr``, ``data``.
    """

    def __init__(self, name: str, lane_bits: int, lanes: int, depth: int, impl: str = "flat", bank_rows: int = 1):
        if impl not in IMPLS or bank_rows < 1 or bank_rows & (bank_rows - 1):
            self._MustUse__silence = True       # not built: no "created but never used" warning
        if impl not in IMPLS:
            raise ValueError(f"memory implementation {impl!r}: one of {', '.join(IMPLS)}")
        if bank_rows < 1 or bank_rows & (bank_rows - 1):
            raise ValueError(f"{name}: bank_rows {bank_rows} must be a power of two")
        self.name, self.lane_bits, self.lanes, self.depth, self.impl = name, lane_bits, lanes, depth, impl
        #: rows per bank (the last bank may be partly beyond the depth; one bank when they are >= it)
        self.bank_rows = min(bank_rows, depth)
        self.nbanks = -(-depth // self.bank_rows)
        self.row_bits = lane_bits * lanes
        self.addr_w = clog2(depth)
        self.banked = impl in BANKED
        # registered-read banks (a bank of rows' copies) in block RAM, unless one 16-row LUT RAM cell
        # is deep enough (a block would then be mostly empty) and the impl is not "-bram";
        # combinational reads are LUT RAM in any case
        bank_depth = self.bank_rows if self.banked else depth
        self.sync_ram = "distributed" if bank_depth <= LUTRAM_DEPTH and not impl.endswith("-bram") else "block"
        #: banked in LUT RAM: writes land a cycle late, from registers, and reads read late to match
        #: (the module docstring); block RAM banks read and write in the cycle
        self.late = self.banked and self.sync_ram == "distributed"
        self.writes: list[_WritePort] = []
        self.reads: list[_ReadPort] = []
        self._frozen = False
        self.flat = None
        self.lvt = None
        self.banks: dict[tuple[int, int], memory.Memory] = {}

    # -- ports -------------------------------------------------------------------------------
    def write_port(self, fallback: bool = False) -> _WritePort:
        """``fallback`` (at most one port; used by the banked implementations): a bank takes this
        port's row and data whenever no other port writes it, and only its lane enables otherwise,
        so the port's enables, which may settle late in the cycle, reach a bank's write enables
        alone and not the selection of its row and data (the same writes without races)."""
        assert not self._frozen, "ports are added before elaboration"
        assert not (fallback and any(w.fallback for w in self.writes)), "one fallback write port"
        p = _WritePort(self, len(self.writes), fallback)
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
        elif self.banked:
            self._banked(m)
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

    def _banked(self, m):
        lo = clog2(self.bank_rows)          # row bits within a bank; the bank is the bits above
        nb = self.nbanks

        def bank_of(addr):
            return addr[lo:] if nb > 1 else Const(0, 1)

        def row_of(addr):
            return addr[:lo] if lo else Const(0, 1)

        outs = {}
        self.pending = []
        fallback = next((w for w in self.writes if w.fallback), None)
        for b in range(nb):
            # the bank's write port: the port whose row is in the bank (at most one, without races)
            hits = [Mux(bank_of(w.addr) == b, w.en, 0) for w in self.writes]
            chosen = [(h, w) for h, w in zip(hits, self.writes) if w is not fallback]
            waddr = any_of([Mux(h.any(), w.addr[:lo], 0) for h, w in chosen]) if lo else Const(0, 1)
            wdata = any_of([Mux(h.any(), w.data, 0) for h, w in chosen])
            if fallback is not None:        # its row and data unless another port writes the bank
                taken = any_of([h.any() for h, _ in chosen])
                waddr = Mux(taken, waddr, fallback.addr[:lo]) if lo else waddr
                wdata = Mux(taken, wdata, fallback.data)
            wen = any_of(hits)
            # (late: the pending write, not reset: a write in the cycle before a reset still lands)
            kw = {"reset_less": True} if self.late else {}
            bank_addr = Signal(max(lo, 1), name=f"b{b}_waddr", **kw)
            bank_data = Signal(self.row_bits, name=f"b{b}_wdata", **kw)
            bank_en = Signal(self.lanes, name=f"b{b}_wen", **kw)
            dom = m.d.sync if self.late else m.d.comb
            dom += [bank_addr.eq(waddr), bank_data.eq(wdata), bank_en.eq(wen)]
            self.pending.append((bank_addr, bank_data, bank_en))
            for j, r in enumerate(self.reads):
                attrs = {"ram_style": self.sync_ram} if r.domain == "sync" or self.late else None
                copy = memory.Memory(shape=unsigned(self.row_bits), depth=self.bank_rows, init=[], attrs=attrs)
                m.submodules[f"bank{b}_r{j}"] = copy
                self.banks[b, j] = copy
                cw = copy.write_port(granularity=self.lane_bits)
                m.d.comb += [cw.addr.eq(bank_addr), cw.data.eq(bank_data), cw.en.eq(bank_en)]
                if self.late:
                    outs[b, j] = copy.read_port(domain="comb")
                else:
                    outs[b, j] = copy.read_port(domain=r.domain, transparent_for=(cw,) if r.transparent_for else ())
        L, B = self.lanes, self.lane_bits
        for j, r in enumerate(self.reads):
            sel, row = bank_of(r.addr), row_of(r.addr)
            rows = [row] * nb               # the row each bank's copy reads
            if r.domain == "sync":
                sel_r = Signal(len(sel), name=f"r{j}_bank", reset_less=True)
                m.d.sync += sel_r.eq(sel)
                if self.late:
                    # the row is registered and read from LUT RAM in the next cycle, when the
                    # writes of every earlier cycle have landed (those of the read's own cycle land
                    # at the end of the next: not seen, as in a registered read); a port the read
                    # is transparent for gives its lanes of this cycle's write from registers. Each
                    # bank's copy has its own row register, loaded when the read falls in that bank
                    # (only that copy's data is used): no register drives the LUT RAM cells of
                    # every bank across the chip.
                    for b in range(nb):
                        rows[b] = Signal(len(row), name=f"r{j}_b{b}_row", reset_less=True)
                        with m.If(sel == b):
                            m.d.sync += rows[b].eq(row)
                sel = sel_r
            word = Signal(self.row_bits, name=f"r{j}_word")
            for b in range(nb):
                m.d.comb += outs[b, j].addr.eq(rows[b])
            if nb == 1:
                m.d.comb += word.eq(outs[0, j].data)
            else:
                with m.Switch(sel):
                    for b in range(nb):
                        with m.Case(b):
                            m.d.comb += word.eq(outs[b, j].data)
            # late: lanes that come from a register instead of the bank, a combinational read's of
            # the pending write to its row, a registered read's of a transparent port's write
            lanes = [[] for _ in range(L)]        # per lane: (taken from here, that data)
            if self.late and r.domain == "comb":
                for b, (pa, pd, pe) in enumerate(self.pending):
                    hit = (bank_of(r.addr) == b) & (pa == row)
                    for k in range(L):
                        lanes[k].append((hit & pe[k], pd[k * B:(k + 1) * B]))
            for w in r.transparent_for if self.late else ():
                th = Signal(L, name=f"r{j}_thru", reset_less=True)
                td = Signal(self.row_bits, name=f"r{j}_thru_data", reset_less=True)
                m.d.sync += [th.eq(Mux(w.addr == r.addr, w.en, 0)), td.eq(w.data)]
                for k in range(L):
                    lanes[k].append((th[k], td[k * B:(k + 1) * B]))
            out = []
            for k in range(L):
                v = word[k * B:(k + 1) * B]
                for c, d in lanes[k]:
                    v = Mux(c, d, v)
                out.append(v)
            m.d.comb += r.data.eq(Cat(*out))

    def _lvt(self, m):
        W, L, B = len(self.writes), self.lanes, self.lane_bits
        sel_w = table_bits(W)
        # the live value table: which write port wrote each lane of each row last. Its writes land
        # a cycle late, from registers (``pending``: each port's row and lanes of the previous
        # cycle), so the units' write enables drive a few flip-flops, not the table's row and lane
        # enables across the chip; a read looks at the pending writes for what the table does not
        # hold yet. (Not reset: a write in the cycle before a reset still lands.)
        lvt = self.lvt = memory.Memory(shape=unsigned(sel_w * L), depth=self.depth, init=[])
        m.submodules.lvt = lvt
        self.pending = []
        for i, w in enumerate(self.writes if W > 1 else ()):
            pa = Signal(self.addr_w, name=f"pend{i}_addr", reset_less=True)
            pe = Signal(L, name=f"pend{i}_en", reset_less=True)
            m.d.sync += [pa.eq(w.addr), pe.eq(w.en)]
            wp = lvt.write_port(granularity=sel_w)
            m.d.comb += [wp.addr.eq(pa), wp.data.eq(Cat(*[Const(i, sel_w)] * L)), wp.en.eq(pe)]
            self.pending.append((pa, pe))
        for j, r in enumerate(self.reads):
            sel = lvt.read_port(domain=r.domain)
            m.d.comb += sel.addr.eq(r.addr)
            # lane k's writer not yet in the table: a write of the previous cycle (pending), or
            # one of this cycle by a port the read is transparent for (newer, so it wins)
            lane_sel = []
            for k in range(L if W > 1 else 0):
                cands = [((pa == r.addr) & pe[k], i) for i, (pa, pe) in enumerate(self.pending)]
                if r.domain == "sync":
                    cands += [((w.addr == r.addr) & w.en[k], self.writes.index(w)) for w in r.transparent_for]
                hit, who = Const(0), Const(0, sel_w)
                for c, i in cands:
                    hit, who = hit | c, Mux(c, i, who)
                table = sel.data[k * sel_w:(k + 1) * sel_w]
                if r.domain == "sync":
                    hit_r = Signal(name=f"r{j}_hit{k}")
                    who_r = Signal(sel_w, name=f"r{j}_who{k}")
                    m.d.sync += [hit_r.eq(hit), who_r.eq(who)]
                    hit, who = hit_r, who_r
                lane_sel.append(Mux(hit, who, table))
            outs = []
            for i, w in enumerate(self.writes):
                attrs = {"ram_style": self.sync_ram} if r.domain == "sync" else None
                bank = memory.Memory(shape=unsigned(self.row_bits), depth=self.depth, init=[], attrs=attrs)
                m.submodules[f"bank_w{i}_r{j}"] = bank
                self.banks[i, j] = bank
                bw = bank.write_port(granularity=B)
                m.d.comb += [bw.addr.eq(w.addr), bw.data.eq(w.data), bw.en.eq(w.en)]
                br = bank.read_port(domain=r.domain, transparent_for=(bw,) if w in r.transparent_for else ())
                m.d.comb += br.addr.eq(r.addr)
                outs.append(br.data)
            if W == 1:
                m.d.comb += r.data.eq(outs[0])
                continue
            for k in range(L):
                lane = slice(k * B, (k + 1) * B)
                with m.Switch(lane_sel[k]):
                    for i in range(W):
                        with m.Case(i):
                            m.d.comb += r.data[lane].eq(outs[i][lane])

    # -- test benches ------------------------------------------------------------------------
    def peek(self, ctx, row: int) -> int:
        """The row's value (an Amaranth testbench)."""
        if self.impl == "flat":
            return ctx.get(self.flat.data[row])
        if self.banked:
            b, i = divmod(row, self.bank_rows)
            out = ctx.get(self.banks[b, 0].data[i])
            pa, pd, pe = self.pending[b]
            if self.late and ctx.get(pa) == i:      # written in the previous cycle: lands now
                for k in range(self.lanes):
                    if ctx.get(pe) >> k & 1:
                        mask = ((1 << self.lane_bits) - 1) << (k * self.lane_bits)
                        out = out & ~mask | ctx.get(pd) & mask
            return out
        W, B = len(self.writes), self.lane_bits
        sel_w = table_bits(W)
        sel = ctx.get(self.lvt.data[row]) if W > 1 else 0
        out = 0
        for k in range(self.lanes):
            i = (sel >> (k * sel_w)) & ((1 << sel_w) - 1)
            for p, (pa, pe) in enumerate(self.pending):     # written in the previous cycle
                if ctx.get(pa) == row and ctx.get(pe) >> k & 1:
                    i = p
            out |= ctx.get(self.banks[i, 0].data[row]) & (((1 << B) - 1) << (k * B))
        return out

    def poke(self, ctx, row: int, value: int) -> None:
        """Set the row's value (an Amaranth testbench, while no port writes it)."""
        if self.impl == "flat":
            ctx.set(self.flat.data[row], value)
            return
        if self.banked:
            for j in range(len(self.reads)):
                ctx.set(self.banks[row // self.bank_rows, j].data[row % self.bank_rows], value)
            return
        if len(self.writes) > 1:
            ctx.set(self.lvt.data[row], 0)
        for j in range(len(self.reads)):
            ctx.set(self.banks[0, j].data[row], value)

    def parts(self) -> dict:
        """Memories a Verilog bench dumps to reassemble the rows: ``{"flat": "mem"}`` or
        ``{"lvt": "lvt", "banks": ["bank_w<i>_r0", ...]}`` (submodule names, in write-port order; the
        table holds ``clog2(len(banks))`` bits per lane, lane 0 in the low bits) or
        ``{"banked": ["bank<b>_r0", ...]}`` (the rows in order, ``bank_rows`` per bank)."""
        if self.impl == "flat":
            return {"flat": "mem"}
        if self.banked:
            return {"banked": [f"bank{b}_r0" for b in range(self.nbanks)]}
        return {"lvt": "lvt" if len(self.writes) > 1 else None,
                "banks": [f"bank_w{i}_r0" for i in range(len(self.writes))]}

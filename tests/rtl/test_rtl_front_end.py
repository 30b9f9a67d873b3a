"""The front end's pipeline (rtl/issue.py, docs/rtl.md "The front end's pipeline") at the host
port: a run started in the first cycle after the previous one stopped, and a run whose first word
was rewritten in the cycle before its start, both begin with instruction 0 at cycle 0.

The memory port then holds the word fetched when the last run stopped (here the one two past the
``halt``), not instruction 0: the start must take instruction 0 from the stage's own copy. The
expected registers and cycle counts follow from the contract by hand (three instructions, the
``halt`` at cycle 2: 3 cycles)."""

from __future__ import annotations

from amaranth.sim import Simulator

from isa import ChipConfig, assemble
from rtl.chip import Chip

CFG = ChipConfig.preset("tiny")
PROG = "seti r1, 5\naddi r1, r1, 1\nhalt\nseti r1, 99\nseti r1, 77\n"


def _run_host(script):
    chip = Chip(CFG)
    sim = Simulator(chip)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        h = chip.host

        async def write(addr, word):
            ctx.set(h.imem_we, 1)
            ctx.set(h.imem_addr, addr)
            ctx.set(h.imem_data, word)
            await ctx.tick()
            ctx.set(h.imem_we, 0)

        async def finish():
            """Start now, wait for done; the registers, cycles and error, then the cycle after done."""
            ctx.set(h.start, 1)
            await ctx.tick()
            ctx.set(h.start, 0)
            for _ in range(100):
                if ctx.get(h.done):
                    break
                await ctx.tick()
            ctx.set(h.reg_addr, 1)
            seen.append((ctx.get(h.reg_rdata), ctx.get(h.cycles), ctx.get(h.error)))

        for a, w in enumerate(assemble(PROG, CFG).words()):
            await write(a, w)
        ctx.set(h.prog_len, 5)
        await script(write, finish)

    sim.add_testbench(bench)
    sim.run()
    return seen


def test_restart_in_the_cycle_after_a_stop():
    async def script(write, finish):
        await finish()
        await finish()          # started in the first cycle at which done reads 1
    assert _run_host(script) == [(6, 3, 0), (6, 3, 0)]


def test_first_word_rewritten_just_before_the_start():
    async def script(write, finish):
        await finish()
        await write(0, assemble("seti r1, 40", CFG).words()[0])
        await finish()          # instruction 0 written in the cycle before the start
    assert _run_host(script) == [(6, 3, 0), (41, 3, 0)]

"""The tetris planner: no two live buffers overlap; footprint against the live bound."""
import numpy as np
import pytest

from compiler.lower.planner import ANY, ORDERINGS, Buffer, Plan, check, live_bound, plan


def test_chain_reaches_the_bound():
    # a chain of layers: buffer i lives during steps i..i+1
    bufs = [Buffer(f"b{i}", s, i, i + 1) for i, s in enumerate([100, 400, 50, 300, 20])]
    p = plan(bufs)
    check(p, bufs)
    # live sets: {b0,b1}=500, {b1,b2}=450, {b2,b3}=350, {b3,b4}=320
    assert p.bound == 500 and p.footprint == 500
    assert set(p.per_ordering) == set(ORDERINGS)


@pytest.mark.parametrize("seed", range(5))
def test_random_rectangles_never_overlap(seed):
    rng = np.random.default_rng(seed)
    bufs = []
    for i in range(40):
        s = int(rng.integers(0, 20))
        bufs.append(Buffer(f"b{i}", int(rng.integers(1, 1000)), s, s + int(rng.integers(0, 6))))
    p = plan(bufs, align=64)
    check(p, bufs)
    assert p.footprint >= p.bound == live_bound(bufs, 64)
    assert all(o % 64 == 0 for o in p.offsets.values())
    assert p.footprint == min(p.per_ordering.values())


def test_disjoint_lifetimes_share_memory():
    bufs = [Buffer("a", 1000, 0, 0), Buffer("b", 1000, 1, 1), Buffer("c", 1000, 2, 2)]
    p = plan(bufs)
    assert p.footprint == 1000 and len(set(p.offsets.values())) == 1


def test_capacity_error():
    with pytest.raises(ValueError, match="memory holds 10"):
        plan([Buffer("a", 8, 0, 1), Buffer("b", 8, 1, 2)], 10, memory="spm")


def test_buffers_of_one_writer_share_banks():
    """Banks of 64 rows (two units writing one bank race, docs/microarchitecture.md section 4): the load unit's
    buffers share banks, the VPU's lies in banks the load unit does not write, rows no unit writes go anywhere
    free; without writers every buffer takes whole banks."""
    bufs = [Buffer("A", 100, 0, 1, "load"), Buffer("W", 12, 0, 1, "load"), Buffer("O", 32, 0, 1, "vpu"),
            Buffer("zero", 64, 0, 1, None)]
    p = plan(bufs, align=64)
    check(p, bufs, 64)

    def banks(b):
        return set(range(p.offsets[b.name] // 64, (p.offsets[b.name] + b.size - 1) // 64 + 1))
    assert not banks(bufs[2]) & (banks(bufs[0]) | banks(bufs[1]))
    whole = [Buffer(b.name, b.size, b.start, b.end) for b in bufs]
    assert p.footprint <= 224 < plan(whole, align=64).footprint


@pytest.mark.parametrize("seed", range(5))
def test_random_writers_never_share_a_bank_they_both_write(seed):
    rng = np.random.default_rng(seed)
    writers = ["load", "vpu", "mxu", None, ANY]
    bufs = []
    for i in range(40):
        s = int(rng.integers(0, 20))
        bufs.append(Buffer(f"b{i}", int(rng.integers(1, 100)), s, s + int(rng.integers(0, 6)),
                           writers[int(rng.integers(0, len(writers)))]))
    p = plan(bufs, align=16)
    check(p, bufs, 16)
    assert p.footprint == min(p.per_ordering.values())


def test_check_finds_two_writers_in_one_bank():
    bufs = [Buffer("a", 8, 0, 0, "load"), Buffer("b", 8, 0, 0, "vpu")]
    with pytest.raises(AssertionError, match="share a bank"):
        check(Plan("spm", {"a": 0, "b": 8}, 16, 16, "-"), bufs, 16)
    check(Plan("spm", {"a": 0, "b": 16}, 24, 16, "-"), bufs, 16)

"""Programs longer than instruction memory run as pages (docs/microarchitecture.md, "Programs longer than
imem"): the compiler cuts them between kernel codes, the simulator device runs the pages in turn on one chip
keeping SPM, ACC, DRAM and the scalar registers, and reports the pages' runs plus their load cycles."""
from __future__ import annotations

import numpy as np
import pytest

import tetrachip as tc
from isa.config import ChipConfig
from isa.timing import PAGE_LOAD_CYCLES_PER_WORD
from sim import Chip

TINY = ChipConfig.preset("tiny")


def _chain(layers: int, seed: int = 0):
    """A chain of small GEMM + ReLU layers: each kernel's code is short, the chain's is long."""
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal((8, 8)).astype(np.float32) * 0.5 for _ in range(layers)]

    def model(a):
        for w in ws:
            a = (a @ tc.Tensor(w)).relu()
        return a
    return model, rng.standard_normal((6, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def paged():
    model, x = _chain(30)
    return model, x, tc.compile(model, [x], config="tiny")


def test_a_long_chain_compiles_to_pages_and_runs_bit_exact(paged):
    model, x, cm = paged
    assert len(cm.pages) >= 2
    assert cm.program is cm.pages[0]
    assert all(len(p) <= TINY.imem_words for p in cm.pages)
    assert sum(len(p) for p in cm.pages) > TINY.imem_words
    for p in cm.pages:                          # every page drains and stops on its own
        assert [ins.op for ins in p.instructions[-2:]] == ["fence", "halt"]
    assert cm.program.manifest["pages"] == [len(p) for p in cm.pages]
    assert f"in {len(cm.pages)} pages" in cm.summary()
    res = tc.Device("sim", config="tiny").run(cm, x)
    np.testing.assert_array_equal(res.output, cm.reference(x)[0])
    want = model(tc.Tensor(x)).numpy()                     # the float model, as a sanity bound on the chip
    assert np.abs(res.output - want).max() <= 0.1 * np.abs(want).max() + 1e-6


def test_paged_cycles_are_the_page_runs_plus_their_loads(paged):
    _, x, cm = paged
    res = tc.Device("sim", config="tiny", trace=True).run(cm, x)
    # the same pages run by hand on one chip: load, run, next page (memories and registers stay)
    chip = Chip("tiny")
    for addr, data in cm.dram_writes(cm.feeds([x])):
        chip.write_dram(addr, data)
    runs, instructions, macs = [], 0, 0
    for p in cm.pages:
        chip.load(p)
        st = chip.run()
        runs.append(st.cycles)
        instructions += st.instructions
        macs += st.mxu_macs
    loads = sum(len(p) for p in cm.pages[1:]) * PAGE_LOAD_CYCLES_PER_WORD
    assert res.stats.cycles == sum(runs) + loads
    assert res.stats.instructions == instructions and res.stats.mxu_macs == macs
    out = cm.read_outputs(chip.read_dram)[0][0]
    np.testing.assert_array_equal(out, res.output)
    # the trace: the second page's instances come after the first page's run and the second page's load
    first_page_end = runs[0] + len(cm.pages[1]) * PAGE_LOAD_CYCLES_PER_WORD
    assert len(res.trace.records) > 0
    assert max(r.issue for r in res.trace.records) >= first_page_end
    assert not any(runs[0] <= r.issue < first_page_end for r in res.trace.records)
    # ... and their pcs count on through the pages: a record names its instruction in the pages end to end
    listing = [ins for p in cm.pages for ins in p.instructions]
    later = [r for r in res.trace.records if r.issue >= first_page_end]
    assert later and all(len(cm.pages[0]) <= r.pc < len(listing) for r in later)
    assert all(r.text.split()[0] == listing[r.pc].op for r in res.trace.records)


def test_a_paged_model_serves_several_values_of_its_symbol():
    model, x = _chain(30, seed=1)
    cm = tc.compile(model, [x], config="tiny", dynamic={"N": 6})
    assert len(cm.pages) >= 2
    dev = tc.Device("sim", config="tiny")
    for n in (1, 4, 6):
        res = dev.run(cm, x[:n])
        assert res.output.shape == (n, 8)
        np.testing.assert_array_equal(res.output, cm.reference(x[:n])[0])


def test_a_resident_session_runs_the_pages_every_time():
    model, x = _chain(30, seed=2)
    cm = tc.compile(model, [x], config="tiny", resident_inputs=True)
    assert len(cm.pages) >= 2
    s = tc.Device("sim", config="tiny").backend.session(cm, x)
    first = s.run()
    np.testing.assert_array_equal(first.output, cm.reference(x)[0])
    s.write("x", -x)
    again = s.run()
    np.testing.assert_array_equal(again.output, cm.reference(-x)[0])
    assert again.stats.cycles == tc.Device("sim", config="tiny").run(cm, -x).stats.cycles


def test_programs_that_fit_are_one_page():
    model, x = _chain(4)
    cm = tc.compile(model, [x], config="tiny")
    assert cm.pages == [cm.program] and "pages" not in cm.program.manifest
    assert " pages " not in cm.summary().splitlines()[0]


def test_a_kernel_longer_than_a_page_names_the_kernel():
    x = np.ones((2, 8), np.float32)
    w = np.random.default_rng(0).standard_normal((8, 50)).astype(np.float32)
    few = ChipConfig.preset("small").replace(name="fewwords", imem_words=40)
    with pytest.raises(tc.ChipCompileError, match=r"kernel matmul0: its code needs \d+ instructions.*"
                                                  r"'fewwords' holds 40 \(imem_words\)"):
        tc.compile(lambda a: a @ tc.Tensor(w), [x], config=few)


def test_sim_pages_keep_memories_and_scalar_registers():
    chip = Chip("tiny")
    first = "seti r5, 7\nseti r6, 3\nsst r5, spm[2], 1\nhalt\n"
    second = "add r7, r5, r6\nsst r7, acc[1], 0\nhalt\n"
    st = chip.run_pages([first, second], args={6: 40})
    assert chip.regs[7] == 7 + 40                   # r5 from page 1, r6 rewritten by the host before page 2
    assert chip.spm[2, 1] == 7 and chip.acc[1, 0] == 47
    lengths = [4, 3]
    one = Chip("tiny").load(first).run().cycles
    two = Chip("tiny").load(second).run().cycles
    assert st.cycles == one + two + lengths[1] * PAGE_LOAD_CYCLES_PER_WORD
    assert st.instructions == sum(lengths)


def test_tetrachip_run_reports_the_pages(tmp_path):
    import json

    from click.testing import CliRunner

    from runtime.cli import main
    f = tmp_path / "chain.py"
    f.write_text("import numpy as np\nimport tetrachip as tc\n"
                 "rng = np.random.default_rng(0)\n"
                 "ws = [rng.standard_normal((8, 8)).astype(np.float32) * 0.5 for _ in range(30)]\n"
                 "def model(a):\n    for w in ws:\n        a = (a @ tc.Tensor(w)).relu()\n    return a\n"
                 "inputs = [rng.standard_normal((6, 8)).astype(np.float32)]\n")
    r = CliRunner().invoke(main, ["run", str(f), "--device", "sim", "--config", "tiny",
                                  "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "o.json").read_text())
    assert len(rep["pages"]) >= 2 and all(n <= TINY.imem_words for n in rep["pages"])
    assert rep["max_abs_vs_reference"] == 0.0
    assert rep["stats"]["cycles"] > sum(rep["pages"][1:])


def _long_conv():
    """A 3x3 convolution (its M tiles not translations of each other: 54-row tiles over 16x16 images) whose
    code is longer than tiny's imem, then a short 1x1 one: the first's output is int8 (requantized)."""
    tc.manual_seed(0)
    nn = tc.nn
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1))
    return model, np.random.default_rng(3).standard_normal((4, 4, 16, 16)).astype(np.float32)


def test_a_kernel_longer_than_a_page_runs_in_parts_of_its_m_tiles():
    model, x = _long_conv()
    whole = tc.compile(model, [x], config=TINY.replace(name="manywords", imem_words=1 << 14))
    assert len(whole.pages) == 1
    first = whole.kernels[0].name
    body = whole.asm.split(f"kernel {whole.kernels[1].name}:")[0]   # the first kernel's code, one program
    assert sum(1 for ln in body.splitlines() if ln.startswith(" ") and ln.split()[0][0] != ";") > TINY.imem_words
    cm = tc.compile(model, [x], config="tiny")
    assert all(len(p) <= TINY.imem_words for p in cm.pages)
    texts = cm.asm.split("; ---- page ")[1:]
    assert len(texts) == len(cm.pages) >= 2
    assert sum(f"kernel {first}:" in t for t in texts) >= 2       # the kernel spans pages
    res = tc.Device("sim", config="tiny").run(cm, x)
    np.testing.assert_array_equal(res.output, cm.reference(x)[0])
    np.testing.assert_array_equal(res.output, tc.Device("sim", config=whole.config).run(whole, x).output)


def test_a_kernel_that_no_cut_fits_in_a_page_names_the_kernel():
    model, x = _long_conv()
    few = TINY.replace(name="fewwords", imem_words=60)
    with pytest.raises(tc.ChipCompileError, match=r"kernel conv0: its code needs \d+ instructions.*'fewwords' "
                                                  r"holds 60 \(imem_words\); it cannot be cut into parts"):
        tc.compile(model, [x], config=few)

"""Directed tests of the command line's errors (issue 22): one line each, exit 2 for a usage error found before
any work, 1 for an error in an input's content or in the run, never a traceback, never long work started on
an invalid option, never an output over an input (runtime/cli.py states the rule)."""
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from isa import assemble_file
from isa import semantics as sem
from runtime.cli import EXIT_INTERNAL, main

ROOT = Path(__file__).resolve().parents[2]

MODEL = """
import numpy as np
import tetrachip as tc
w = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
model = lambda x: x @ tc.Tensor(w)
inputs = [np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)]
"""


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(r, status: int, *words: str) -> None:
    """``r`` exited with ``status``, its stderr one line holding every word, no traceback anywhere."""
    assert r.exit_code == status, (r.exit_code, r.output)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture
def reached(monkeypatch):
    """The long entry points (synthesis, board build, Verilog generation, compile) as stubs that record a call."""
    calls = []

    def stub(name):
        def f(*a, **k):
            calls.append(name)
            raise AssertionError(f"{name} started")
        return f
    import compiler.lower.dispatch
    import rtl.fpga.board
    import rtl.fpga.flow
    import rtl.verilog
    monkeypatch.setattr(rtl.fpga.flow, "synth", stub("synth"))
    monkeypatch.setattr(rtl.fpga.board, "build", stub("build"))
    monkeypatch.setattr(rtl.verilog, "generate", stub("generate"))
    monkeypatch.setattr(compiler.lower.dispatch, "compile_model", stub("compile"))
    return calls


@pytest.fixture
def prog(tmp_path):
    src = tmp_path / "x.s"
    shutil.copy(ROOT / "examples" / "vector_loop.s", src)
    binary = tmp_path / "x.bin"
    binary.write_bytes(assemble_file(src).to_bytes())
    return src, binary


@pytest.mark.parametrize("edit,words", [
    (("(4, 6)", "(4, 5)"), ["does not take its inputs", "(4, 5)"]),                 # a shape mismatch
    (("model = lambda x: x @ tc.Tensor(w)", "model = 3"), ["`model` must be", "int"]),      # not a model
    (("inputs = [", "inputs = ['abc'] or ["), ["inputs[0] must be a numeric array"]),        # a bad input
    (("(4, 6)", "(0, 6)"), ["inputs[0] has shape (0, 6): no rows"]),                     # a 0-row input
    (("(4, 6)).astype(np.float32)]", "(4, 6)).astype(np.float32)]\nlabels = [1, 2]"),
     ["`labels` has shape (2,)", "needs shape (4,)"]),                                   # wrong-length labels
    (("(4, 6)).astype(np.float32)]", "(4, 6)).astype(np.float32) * np.nan]"), ["NaN or inf"]),
])
@pytest.mark.parametrize("device", ["numpy", "sim"])
def test_run_refuses_a_bad_model_file_before_compiling(tmp_path, reached, edit, words, device):
    f = tmp_path / "m.py"
    f.write_text(MODEL.replace(*edit))
    assert f.read_text() != MODEL
    one_line(cli("run", f, "--device", device, "--config", "tiny"), 1, str(f), *words)
    assert reached == []                                             # refused before the compile


def test_run_usage_errors(tmp_path, reached):
    f = tmp_path / "m.py"
    f.write_text(MODEL)
    one_line(cli("run", tmp_path / "none.py"), 2, "does not exist")
    one_line(cli("run", tmp_path), 2, "is a directory")
    one_line(cli("run", f, "--json", tmp_path / "nodir" / "r.json"), 2, "--json", "does not exist")
    one_line(cli("run", f, "--json", f), 2, "would overwrite the input")
    one_line(cli("run", f, "--config", "nosuch"), 2, "unknown config 'nosuch'")
    one_line(cli("run", f, "--chips", "0"), 2, "--chips")
    one_line(cli("run", f, "--device", "numpy", "--trace", tmp_path / "t.json"), 2, "records no trace")
    assert reached == [] and not (tmp_path / "t.json").exists()


def test_disasm_into_a_missing_folder(prog, tmp_path):
    _, binary = prog
    one_line(cli("disasm", binary, "-o", tmp_path / "nodir" / "x.s"), 2, "-o", "folder", "does not exist")
    r = cli("disasm", binary, "-o", tmp_path / "back.s")
    assert r.exit_code == 0 and (tmp_path / "back.s").read_text().count("\n") > 5


def test_asm_never_writes_over_its_source(prog, tmp_path):
    src, _ = prog
    text = src.read_text()
    one_line(cli("asm", src, "-o", src), 2, "would overwrite the input")
    assert src.read_text() == text
    as_bin = tmp_path / "y.bin"                     # a source named .bin: the default output is itself
    as_bin.write_text(text)
    one_line(cli("asm", as_bin), 2, "would overwrite the input")
    assert as_bin.read_text() == text
    one_line(cli("asm", tmp_path / "missing.s"), 2, "does not exist")
    one_line(cli("asm", tmp_path), 2, "is a directory")


@pytest.mark.parametrize("args,words", [
    (["--mac", "bogus"], ["--mac", "bogus"]),
    (["--mac", "dsp:-3"], ["--mac", "dsp:-3"]),
    (["--mac", "dsp+reg9"], ["--mac", "+reg"]),
    (["--dram-kib", "3"], ["--dram-kib", "not a power of two"]),
    (["--freq", "-5"], ["--freq", "finite number > 0"]),
    (["--freq", "0"], ["--freq", "finite number > 0"]),
    (["--freq", "nan"], ["--freq"]),
    (["--freq", "inf"], ["--freq"]),
    (["--timeout", "0"], ["--timeout"]),
    (["--json", "NODIR/r.json"], ["--json", "does not exist"]),
    (["--config", "nosuch"], ["unknown config"]),
])
@pytest.mark.parametrize("cmd", ["synth", "build"])
def test_fpga_refuses_bad_options_before_any_tool(tmp_path, reached, args, words, cmd):
    if cmd == "build" and args[0] == "--timeout":         # synth's option; build's own: --baud
        args, words = ["--baud", "5"], ["--baud"]
    args = [str(tmp_path / a) if a.startswith("NODIR") else a for a in args]
    board = ["--board", "ulx3s-85f"] if cmd == "build" else []
    t = time.monotonic()
    one_line(cli("fpga", cmd, *board, *args, "-o", tmp_path / "out"), 2, *words)
    assert time.monotonic() - t < 5 and reached == []                 # in a second, no synthesis started


def test_fpga_build_refuses_a_frequency_the_pll_cannot_make(tmp_path, reached):
    one_line(cli("fpga", "build", "--board", "ulx3s-85f", "--freq", "5000", "-o", tmp_path / "o"), 2, "--freq", "PLL")
    one_line(cli("fpga", "build", "--board", "ulx3s-85f", "--baud", str(10**9), "-o", tmp_path / "o"), 2, "--baud")
    f = tmp_path / "afile"
    f.write_text("")
    one_line(cli("fpga", "synth", "-o", f), 2, "-o")
    assert reached == []


def test_verilog_name_must_be_an_identifier(tmp_path, reached):
    for bad in ("bad name!", "1x", "a-b", ""):
        one_line(cli("verilog", "--name", bad, "-o", tmp_path / "v.v"), 2, "--name", "Verilog identifier")
    one_line(cli("verilog", "-o", tmp_path / "nodir" / "v.v"), 2, "-o", "does not exist")
    assert reached == [] and not (tmp_path / "v.v").exists()


@pytest.mark.parametrize("text,words", [
    ('preset = "tiny"\nspm_rows = 67108864\n', ["spm_rows 67108864", "256 MiB"]),
    ("spm_rows = 67108864\n", ["SPM + ACC + imem"]),
    ("preset = []\n", ["preset must be a preset name"]),
    ('preset = "tiny"\nclock_mhz = inf\n', ["clock_mhz must be a finite number"]),
    ('preset = "tiny"\nclock_mhz = nan\n', ["clock_mhz must be a finite number"]),
    ('preset = "tiny"\ndram_latency = 1099511627776\n', ["dram_latency", "2**32"]),
])
def test_a_config_beyond_the_limits_is_one_line_and_quick(tmp_path, prog, text, words):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    src, _ = prog
    t = time.monotonic()
    one_line(cli("asm", src, "--config", cfg, "-o", tmp_path / "o.bin"), 1, str(cfg), *words)
    assert time.monotonic() - t < 5 and not (tmp_path / "o.bin").exists()


def test_sim_dram_image_must_hold_numeric_arrays(prog, tmp_path):
    _, binary = prog
    np.savez(tmp_path / "obj.npz", **{"0x0": np.array([1, "a"], dtype=object)})
    one_line(cli("sim", binary, "--dram", tmp_path / "obj.npz"), 1, "obj.npz", "'0x0'")
    np.savez(tmp_path / "str.npz", **{"0x0": np.array(["ab"])})
    one_line(cli("sim", binary, "--dram", tmp_path / "str.npz"), 1, "numeric arrays")
    np.save(tmp_path / "one.npy", np.zeros(4, np.uint8))
    one_line(cli("sim", binary, "--dram", tmp_path / "one.npy"), 1, "a DRAM image is an .npz")
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not a zip")
    one_line(cli("sim", binary, "--dram", tmp_path / "junk.npz"), 1, "cannot read DRAM image")
    one_line(cli("sim", binary, "--dram", tmp_path / "none.npz"), 2, "does not exist")


def test_sim_dump_suffix_and_outputs_checked_first(prog, tmp_path):
    _, binary = prog
    foo = tmp_path / "foo"
    one_line(cli("sim", binary, "--dump", foo), 2, "--dump", ".npz")
    assert not foo.exists() and not Path(str(foo) + ".npz").exists()
    r = cli("sim", binary, "--dump", tmp_path / "d.npz", "--json", tmp_path / "s.json")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "d.npz") as d:
        assert set(d.files) == {"dram", "spm", "acc"}
    one_line(cli("sim", binary, "--json", tmp_path / "nodir" / "s.json"), 2, "--json", "does not exist")
    one_line(cli("sim", binary, "--trace", binary), 2, "--trace", "would overwrite the input")
    assert binary.read_bytes()[:4] == assemble_file(prog[0]).to_bytes()[:4]


@pytest.mark.parametrize("value", ["-5", "0", "x"])
def test_sim_max_cycles_must_be_positive(prog, value):
    one_line(cli("sim", prog[1], "--max-cycles", value), 2, "--max-cycles")


def test_sim_args_are_refused_outside_a_register(prog):
    _, binary = prog
    lo, hi = sem.wrap32_int(1 << 31), sem.u32(-1)          # the register's range, from the ISA
    for bad in (f"r1={hi + 1}", f"r1={lo - 1}", "r1=0x10000000000", "r1=2**40", "r1", "rx=1", "r1=1,r1=2",
                "r99=1", "r0=1"):
        one_line(cli("sim", binary, "--args", bad), 2, "--args")
    for good in (f"r9={hi}", f"r9={lo}", "r9=0x10,r10=-7"):          # registers the program does not read
        r = cli("sim", binary, "--args", good)
        assert r.exit_code == 0, (good, r.output)


def test_usage_errors_are_one_line_exit_2(prog, tmp_path):
    src, binary = prog
    one_line(cli("asm", src, "--nope"), 2, "No such option")
    one_line(cli("nosuch"), 2, "No such command")
    one_line(cli("sim"), 2, "Missing argument")
    one_line(cli("disasm", binary, "--config", tmp_path / "none.toml"), 2, "no such config file")
    one_line(cli("disasm", binary, "--config", tmp_path), 2, "is a folder")


def test_an_internal_error_is_one_line_and_status_70(prog, monkeypatch):
    """A bug (an exception that is no TetrachipError) still shows no traceback; TETRACHIP_TRACEBACK shows it."""
    import isa.program

    def boom(self):
        raise RuntimeError("planted")
    monkeypatch.setattr(isa.program.Program, "disassemble", boom)
    monkeypatch.delenv("TETRACHIP_TRACEBACK", raising=False)
    one_line(cli("disasm", prog[1]), EXIT_INTERNAL, "internal error", "RuntimeError: planted")
    monkeypatch.setenv("TETRACHIP_TRACEBACK", "1")
    r = cli("disasm", prog[1])
    assert isinstance(r.exception, RuntimeError)


def test_a_group_alone_shows_its_help():
    for args in ([], ["fpga"]):
        r = cli(*args)
        assert r.exit_code == 2 and "Usage:" in r.output and "Commands:" in r.output and "Traceback" not in r.output


def test_help_states_the_exit_status_rule():
    r = cli("--help")
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "Exit status" in text and "2 a usage error" in text


def test_fpga_memory_options_only_shrink(tmp_path, reached):
    from isa import PRESETS
    rows = PRESETS["tiny"].spm_rows
    one_line(cli("fpga", "synth", "--spm-rows", rows + 1, "-o", tmp_path / "o"), 2, "--spm-rows", "only makes")
    one_line(cli("fpga", "synth", "--imem-words", 10**21, "-o", tmp_path / "o"), 2, "--imem-words")
    assert reached == []


def test_sim_dram_that_is_no_npz(prog, tmp_path):
    _, binary = prog
    one_line(cli("sim", binary, "--dram", binary), 1, "not one")       # not numpy at all: no word of pickles
    assert "pickle" not in cli("sim", binary, "--dram", binary).output


def test_sweep_bounds_and_text(tmp_path):
    import os
    spec = tmp_path / "s.toml"
    spec.write_text('base = "tiny"\nworkloads = ["gemm:8x8x8"]\n')
    one_line(cli("sweep", spec, "--workers", 4 * (os.cpu_count() or 1) + 1), 2, "--workers")
    spec.write_bytes(b"\xff\xfe binary")
    one_line(cli("sweep", spec, "--workers", "0"), 1, "not UTF-8")
    one_line(cli("sweep", spec, "--json", tmp_path / "t.csv"), 2, "--json", ".json")

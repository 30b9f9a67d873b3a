"""`import tetrachip as tc` gives one name for each layer, and they work together."""

import subprocess
import sys

import numpy as np
import pytest

import tetrachip as tc


def test_names_cover_every_layer():
    for name in ["Tensor", "nn", "optim", "Device", "compile", "ChipConfig", "Program", "assemble",
                 "Chip", "System", "Stats", "RtlChip", "RtlRing", "generate_verilog"]:
        assert hasattr(tc, name), name


def test_assemble_and_simulate_through_the_facade():
    prog = tc.assemble(".config tiny\n  seti r1, 5\n  addi r2, r1, 7\n  halt\n")
    chip = tc.Chip(tc.ChipConfig.preset("tiny"))
    chip.load(prog)
    stats = chip.run()
    assert stats.to_dict()["cycles"] >= 3


def test_unknown_device_lists_the_known_ones():
    try:
        tc.Device("abacus")
    except Exception as e:  # noqa: BLE001 - the message is what matters
        msg = str(e)
    else:
        raise AssertionError("Device('abacus') was accepted")
    for known in ("numpy", "sim", "opencl"):
        assert known in msg


def test_tensor_on_numpy():
    x = tc.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert np.allclose((x * 2).sum().numpy(), 30.0)


def test_import_loads_no_rtl_or_gpu_library():
    """The facade loads the RTL and GPU layers on first use only (a fresh interpreter)."""
    heavy = ["amaranth", "rtl", "pyopencl", "cupy", "triton", "torch"]
    code = ("import sys, tetrachip\n"
            f"print(' '.join(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import tetrachip loaded {out.stdout.strip()}"


def test_lazy_names_are_listed_and_resolve_to_their_layer():
    import isa
    import rtl
    import sim
    from compiler.lower.shard import compile as compile_sharded
    assert {"RtlChip", "generate_verilog", "Chip", "compile", "DeviceUnavailable"} <= set(dir(tc))
    assert tc.RtlChip is rtl.Chip and tc.Chip is sim.Chip and tc.ChipConfig is isa.ChipConfig
    assert tc.compile is compile_sharded          # one chip: compiler.lower.dispatch.compile_model
    for name in tc._LAZY:                       # every row of the table names something that exists
        assert getattr(tc, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'abacus'"):
        tc.abacus  # noqa: B018


def test_every_backend_is_found_by_name():
    from runtime.device import BACKENDS, Device
    for name, (module, cls) in BACKENDS.items():
        factory = Device.factory(name)
        assert (factory.__module__, factory.__name__) == (module, cls), name
    assert Device("sim", config="tiny").backend.config.name == "tiny"

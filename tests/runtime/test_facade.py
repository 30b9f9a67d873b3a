"""`import tetrachip as tc` gives one name for each layer, and they work together."""

import numpy as np

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

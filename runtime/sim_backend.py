"""``Device("sim", config=...)``: compiled models on the cycle-level simulator; ``Device("rtl")``.

    cm = tc.compile(model, [x], config="base")
    res = tc.Device("sim", config="base").run(cm, x)
    res.outputs, res.stats, res.trace              # outputs dequantized to float32; sim Stats

A run writes the constants and the quantized inputs into a fresh chip's DRAM (the layout is the
program's manifest), runs the Program, reads the output tensors and dequantizes them. The
integer outputs are in ``res.ints`` for bit-exact comparison with ``cm.reference``.

``execute(outputs, feeds)`` (the interface ``Tensor.realize`` uses) compiles the graph with the
feeds as calibration data and runs it, so ``with tc.Device("sim"):`` works for supported graphs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.config import ChipConfig
from isa.errors import TetrachipError


@dataclass
class RunResult:
    outputs: list
    stats: object
    trace: object = None
    ints: dict | None = None

    @property
    def output(self):
        return self.outputs[0]

    def __iter__(self):          # outputs, stats = dev.run(cm, x)
        return iter((self.outputs if len(self.outputs) != 1 else self.outputs[0], self.stats))


class SimBackend:
    name = "sim"

    def __init__(self, config="base", trace: bool = False, max_cycles: int | None = None):
        self.config = ChipConfig.load(config)
        self.trace, self.max_cycles = trace, max_cycles

    def run_compiled(self, cm, *inputs, trace: bool | None = None) -> RunResult:
        from sim import Chip
        if cm.config.digest() != self.config.digest():
            raise TetrachipError(f"the model was compiled for config {cm.config.name!r}; this device is "
                                 f"{self.config.name!r}")
        feeds = cm.feeds(inputs[0] if len(inputs) == 1 and isinstance(inputs[0], dict) else inputs)
        spec = getattr(cm, "dynamic", None)
        if spec is not None:                     # symbolic dimension: pad to the maximum, n in a register
            from compiler.dynamic import host_feeds
            feeds, n = host_feeds(spec, feeds)
        writes = cm.dram_writes(feeds)           # quantizes and checks the inputs before the chip starts
        chip = Chip(self.config, trace=self.trace if trace is None else trace)
        chip.load(cm.program)
        for addr, data in writes:
            chip.write_dram(addr, data)
        if spec is not None:
            from compiler.dynamic import DYN_REG
            chip.set_args({DYN_REG: n})
        stats = chip.run(self.max_cycles)
        outs, ints = cm.read_outputs(chip.read_dram)
        if spec is not None:
            from compiler.dynamic import cut
            outs = cut(spec, outs, n)
        return RunResult(outs, stats, chip.trace, ints)

    def execute(self, outputs, feeds) -> list[np.ndarray]:
        from compiler.lower import compile_model
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        cm = compile_model(_Graph(list(outputs)), feeds, self.config)
        return self.run_compiled(cm, feeds).outputs


class _Graph:
    """A callable that ignores its placeholders and returns a prebuilt graph's outputs."""

    def __init__(self, nodes):
        self.nodes = nodes

    def __call__(self, *phs):
        from compiler.tensor import Tensor
        out = []
        for n in self.nodes:
            t = Tensor.__new__(Tensor)
            t.node = n
            out.append(t)
        return out


class RtlBackend:
    name = "rtl"

    def __init__(self, config="base", **_):
        raise TetrachipError(
            "Device('rtl') needs the RTL co-simulation runner (a cocotb/Verilator harness in tests/cosim that "
            "loads a Program and a DRAM image into the generated Verilog and returns the final DRAM and cycle "
            "count); it does not exist yet. Run compiled models with Device('sim') meanwhile.")


def _register() -> None:
    from .device import Device
    Device.register("sim", SimBackend)
    Device.register("rtl", RtlBackend)


_register()

"""What every compiled model is: the ``Compiled`` protocol (a leaf: the lowerers and the runtime
import it, it imports none of them).

Each kind of compiled model — a kernel sequence (``compiler.lower.pipeline.CompiledModel``, with a
symbolic dimension or not), control flow (``compiler.lower.control_lower.ControlModel``), a
transformer block (``compiler.lower.transformer.CompiledTransformer``) — implements it:

* for the user: ``run_on(device, *inputs)`` (what ``Device.run(compiled, *inputs)`` calls),
  ``reference(*inputs)`` (the integer model's outputs, dequantized: what the chip returns bit for
  bit), ``float_reference(*inputs)`` (the float model the integer one approximates), ``summary()``;
* for a device backend (``runtime.sim_backend``): ``config`` and ``program``, ``feeds(inputs)``
  (the inputs by name), ``dynamic`` (a ``compiler.lower.dynamic.DynSpec`` or None: then the
  backend pads the inputs and writes the symbol's value into its register), ``dram_writes(feeds)``
  (what the host writes to DRAM before launch) and ``read_outputs(read)`` (the dequantized outputs
  and the integers, from DRAM after the run).

``inputs`` are the model's inputs in order, or one dict by input name.
"""
from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

import numpy as np

from isa.config import ChipConfig
from isa.errors import TetrachipError
from isa.program import Program


@runtime_checkable
class Compiled(Protocol):
    config: ChipConfig
    program: Program
    input_names: list
    dynamic: object

    def feeds(self, inputs) -> dict:
        """The inputs (a sequence in order, or a dict) as numpy arrays by input name."""
        ...

    def dram_writes(self, feeds: dict) -> list[tuple[int, np.ndarray]]:
        """(address, bytes) the host writes before launch: constants, then the quantized inputs."""
        ...

    def read_outputs(self, read: Callable) -> tuple[list[np.ndarray], dict]:
        """``read(addr, n, dtype)`` reads DRAM after the run; the dequantized outputs and the integers."""
        ...

    def reference(self, *inputs) -> list[np.ndarray]:
        """The integer model in numpy, dequantized: what the chip must return, bit for bit."""
        ...

    def float_reference(self, *inputs) -> list[np.ndarray]:
        """The float model the integer one approximates (float32)."""
        ...

    def summary(self) -> str:
        ...

    def run_on(self, device, *inputs, **kw):
        """``Device.run(compiled, *inputs)`` lands here: the device's backend runs the program."""
        runner = getattr(device.backend, "run_compiled", None)
        if runner is None:
            raise TetrachipError(f"device {device.name!r} cannot run a compiled chip program")
        return runner(self, *inputs, **kw)


def named_feeds(input_names: list, inputs) -> dict:
    """``inputs`` (a sequence in the order of ``input_names``, or a dict by name) as numpy arrays of numbers
    (anything else: ``TetrachipError`` naming the input)."""
    if isinstance(inputs, dict):
        return {k: _numbers(k, v) for k, v in inputs.items()}
    if len(inputs) != len(input_names):
        raise TetrachipError(f"the model takes {len(input_names)} input(s), given {len(inputs)}")
    return {n: _numbers(n, v) for n, v in zip(input_names, inputs)}


def _numbers(name, v) -> np.ndarray:
    try:
        a = np.asarray(v.numpy() if hasattr(v, "numpy") and callable(v.numpy) else v)
    except (TypeError, ValueError) as e:
        raise TetrachipError(f"input {name!r}: not an array of numbers ({e})") from None
    if a.dtype.kind not in "biuf":
        raise TetrachipError(f"input {name!r}: must be numbers (bool, int or float), got numpy dtype {a.dtype}")
    return a


def unpack_inputs(inputs: tuple):
    """The ``*inputs`` of ``reference``/``float_reference``: one dict stays a dict, else the sequence."""
    return inputs[0] if len(inputs) == 1 and isinstance(inputs[0], dict) else inputs


def check_finite(feeds: dict) -> dict:
    """``feeds`` (input name -> array) for a chip run: an input that is not numbers, or a float input holding NaN or
    inf, is refused, naming it
    (the chip, and the integer reference, quantize to int8, where NaN has no value; a numpy float run
    keeps NaN). Returns ``feeds``."""
    for name, a in feeds.items():
        a = np.asarray(a)
        if a.dtype.kind not in "biuf":
            raise TetrachipError(f"input {name!r}: must be numbers (bool, int or float), got numpy dtype {a.dtype}")
        why = nonfinite(a)
        if why:
            raise TetrachipError(f"input {name!r}: {why}; a chip run quantizes its inputs to integers and needs "
                                 "finite values")
    return feeds


def nonfinite(a: np.ndarray) -> str | None:
    """None if ``a`` holds no NaN or inf, else what it holds: how many, and the first with its index
    (the one wording of every check that a chip input is finite)."""
    if a.dtype.kind != "f" or not a.size or np.isfinite(a).all():
        return None
    bad = ~np.isfinite(a)
    i = tuple(int(v) for v in np.argwhere(bad)[0])
    return f"holds {int(bad.sum())} NaN or inf value(s), the first {a[i]} at index {i}"

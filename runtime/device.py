"""``Device``: where a graph runs. Backends are found by name.

``BACKENDS`` names the module and class of every backend the project ships; ``Device(name)``
imports that module the first time the device is built, so importing the runtime does not load
the simulator's RTL side or a GPU library. ``Device("numpy")`` is the reference backend and the
default. Another backend is one call::

    Device.register("mine", MyBackend)   # a class (or factory) with execute(outputs, feeds)

``execute(outputs: list[compiler.ir.graph.Node], feeds: dict[str, np.ndarray]) ->
list[np.ndarray]`` receives a graph that the compiler's pass list has already
run on and verified. Importing this module makes ``Device("numpy")`` the
default device that ``Tensor.realize()`` uses (``compiler.ir.engine`` holds the
hook, since ``compiler`` never imports ``runtime``).
"""
from __future__ import annotations

import inspect
from importlib import import_module
from typing import Callable

import numpy as np

from isa.errors import TetrachipError

from compiler.ir import engine
from compiler.lower.compiled import Compiled


# device name -> (module, class): each module's docstring says what the device is
BACKENDS: dict[str, tuple[str, str]] = {
    "numpy": ("runtime.numpy_backend", "NumpyBackend"),      # the reference semantics, float
    "sim": ("runtime.sim_backend", "SimBackend"),            # compiled models on the cycle-level simulator
    "rtl": ("runtime.sim_backend", "RtlBackend"),            # compiled models on the Verilog under cocotb
    "opencl": ("runtime.opencl_backend", "OpenCLBackend"),   # fused kernels via pyopencl
    "cuda": ("runtime.cuda_backend", "CudaBackend"),         # the same kernels via cupy/NVRTC
    "triton": ("runtime.triton_backend", "TritonBackend"),   # matrix products as Triton kernels
}


class DeviceError(TetrachipError, ValueError):
    """An unknown device name, or options its backend does not take (a ``ValueError`` too)."""


class Device:
    _backends: dict[str, Callable] = {}      # registered factories, and BACKENDS entries once loaded

    @classmethod
    def register(cls, name: str, factory: Callable) -> None:
        """Make ``Device(name)`` build its backend with ``factory()``."""
        cls._backends[name] = factory

    @classmethod
    def known(cls) -> list[str]:
        return sorted(set(BACKENDS) | set(cls._backends))

    @classmethod
    def factory(cls, name: str) -> Callable:
        """The backend class of ``name``, importing its module on first use."""
        if not isinstance(name, str) or name not in cls._backends and name not in BACKENDS:
            raise DeviceError(f"unknown device {name!r}; known devices: {', '.join(cls.known())}")
        if name not in cls._backends:
            module, attr = BACKENDS[name]
            cls._backends[name] = getattr(import_module(module), attr)
        return cls._backends[name]

    def __init__(self, name: str = "numpy", **options):
        factory = self.factory(name)
        try:
            sig = inspect.signature(factory)
        except (TypeError, ValueError):          # a factory without a signature: the call decides
            sig = None
        if sig is not None:
            try:
                sig.bind(**options)
            except TypeError:
                takes = [p for p, v in sig.parameters.items() if v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY)]
                raise DeviceError(f"Device({name!r}) does not take option(s) {', '.join(sorted(options))}; it takes "
                                  f"{', '.join(takes) if takes else 'none'}") from None
        self.name = name
        self.backend = factory(**options)

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    def execute(self, outputs, feeds) -> list[np.ndarray]:
        return self.backend.execute(list(outputs), dict(feeds))

    def run(self, *tensors, feeds: dict | None = None, **kw):
        """Values of ``tensors`` computed on this device (nothing cached on the tensors).

        ``run(compiled_model, *inputs)`` runs a chip program (``tc.compile``; any
        ``compiler.lower.compiled.Compiled``, or a model sharded over chips: ``compiler.lower.shard``) instead."""
        if tensors and (isinstance(tensors[0], Compiled) or hasattr(tensors[0], "run_on")):
            runner = getattr(self.backend, "run_compiled", None)      # run_sharded takes the same options
            if kw and runner is not None:
                try:
                    inspect.signature(runner).bind(tensors[0], *tensors[1:], **kw)
                except TypeError:
                    raise DeviceError(f"Device({self.name!r}).run of a compiled model does not take option(s) "
                                      f"{', '.join(sorted(kw))}") from None
            return tensors[0].run_on(self, *tensors[1:], **kw)
        if kw:
            raise DeviceError(f"Device.run: option(s) {', '.join(sorted(kw))} apply to a compiled model only "
                              "(run(compiled, *inputs, ...))")
        for i, t in enumerate(tensors):
            if not hasattr(t, "node"):
                raise DeviceError(f"Device.run: argument {i} is a {type(t).__name__}; give Tensors, or a compiled "
                                  "model (tc.compile) and its inputs")
        if feeds is not None and not isinstance(feeds, dict):
            raise DeviceError(f"Device.run: feeds must be a dict of input name -> array, got {type(feeds).__name__}")
        return engine.compute([t.node for t in tensors], feeds, self)

    def set_default(self) -> "Device":
        engine.set_default_device(self)
        return self

    def __enter__(self) -> "Device":
        self._prev = engine.current_default_device()
        engine.set_default_device(self)
        return self

    def __exit__(self, *exc) -> None:
        if self._prev is not None:
            engine.set_default_device(self._prev)


def default_device() -> Device:
    return engine.get_default_device()


if engine.current_default_device() is None:
    engine.set_default_device(Device("numpy"))

"""``Device``: where a graph runs. Backends are registered by name.

``Device("numpy")`` is the reference backend. A new backend is one call::

    Device.register("sim", SimBackend)   # a class (or factory) with execute(outputs, feeds)

``execute(outputs: list[compiler.ir.graph.Node], feeds: dict[str, np.ndarray]) ->
list[np.ndarray]`` receives a graph that the compiler's pass list has already
run on and verified. Importing this module registers "numpy" and makes it the
default device that ``Tensor.realize()`` uses (``compiler.ir.engine`` holds the
hook, since ``compiler`` never imports ``runtime``).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from compiler.ir import engine


class Device:
    _backends: dict[str, Callable] = {}

    @classmethod
    def register(cls, name: str, factory: Callable) -> None:
        """Make ``Device(name)`` build its backend with ``factory()``."""
        cls._backends[name] = factory

    @classmethod
    def known(cls) -> list[str]:
        return sorted(cls._backends)

    def __init__(self, name: str = "numpy", **options):
        if name not in self._backends:
            raise ValueError(f"unknown device {name!r}; known devices: {', '.join(self.known())}")
        self.name = name
        self.backend = self._backends[name](**options)

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    def execute(self, outputs, feeds) -> list[np.ndarray]:
        return self.backend.execute(list(outputs), dict(feeds))

    def run(self, *tensors, feeds: dict | None = None, **kw):
        """Values of ``tensors`` computed on this device (nothing cached on the tensors).

        ``run(compiled_model, *inputs)`` runs a chip program (``tc.compile``) instead."""
        if tensors and hasattr(tensors[0], "run_on"):
            return tensors[0].run_on(self, *tensors[1:], **kw)
        return engine.compute([t.node for t in tensors], feeds, self)

    def set_default(self) -> "Device":
        engine.set_default_device(self)
        return self

    def __enter__(self) -> "Device":
        self._prev = engine._default_device[0]
        engine.set_default_device(self)
        return self

    def __exit__(self, *exc) -> None:
        engine._default_device[0] = self._prev


def default_device() -> Device:
    return engine.get_default_device()


from .numpy_backend import NumpyBackend  # noqa: E402  (registers the reference backend)

Device.register("numpy", NumpyBackend)
if engine._default_device[0] is None:
    engine.set_default_device(Device("numpy"))

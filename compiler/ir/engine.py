"""How a lazy graph gets computed: passes, then a device's ``execute``.

``compiler`` never imports ``runtime`` (docs/architecture.md). Instead the runtime
registers the default device here when it is imported (``runtime/device.py``
does so for the numpy reference backend; ``import tetrachip`` imports it).
A device is any object with ``execute(outputs: list[Node], feeds: dict) ->
list[np.ndarray]``. Without one, realizing a tensor raises a RuntimeError that
says what to import.

Realized nodes are remembered (weakly): a graph built before a tensor was
realized reuses the computed array instead of recomputing it.
"""
from __future__ import annotations

import weakref

import numpy as np

from compiler.ir.graph import Node, Ops, inputs_of, substitute, toposort
from compiler.ir.passes import run_passes

_default_device = [None]
_realized: "weakref.WeakKeyDictionary[Node, np.ndarray]" = weakref.WeakKeyDictionary()


def set_default_device(device) -> None:
    """Make ``device`` (an object with ``execute``) the one ``Tensor.realize`` uses."""
    if not hasattr(device, "execute"):
        raise TypeError(f"a device needs an execute(outputs, feeds) method, got {device!r}")
    _default_device[0] = device


def current_default_device():
    """The device ``Tensor.realize`` uses, or None when none is registered yet."""
    return _default_device[0]


def get_default_device():
    if _default_device[0] is None:
        raise RuntimeError("no device is registered to compute tensors: `import tetrachip` "
                           "(or runtime.device) registers the numpy reference backend")
    return _default_device[0]


def _substitute_realized(outputs: list[Node]) -> list[Node]:
    """Replace nodes computed by an earlier realize with BUFFERs holding their values."""
    if not len(_realized):
        return outputs
    known = {}
    for nd in toposort(outputs):
        arr = _realized.get(nd)
        if arr is not None:
            known[id(nd)] = Node(Ops.BUFFER, nd.dtype, (), arr)
    return substitute(outputs, known)


def prepare(outputs: list[Node]) -> list[Node]:
    """The graph a device (or the chip compiler) receives: known values substituted, then the
    pass list run with the checker between passes."""
    return run_passes(_substitute_realized(list(outputs)))


def compute(outputs: list[Node], feeds: dict | None = None, device=None) -> list[np.ndarray]:
    """Values of ``outputs``: ``prepare`` the graph, then execute it on a device."""
    graph = prepare(outputs)
    dev = device if device is not None else get_default_device()
    return dev.execute(graph, dict(feeds or {}))


def realize(tensors, feeds: dict | None = None, device=None) -> None:
    """Compute several tensors in one graph execution (shared subgraphs run once); each tensor then
    holds its value as a BUFFER node. Tensors whose graph has INPUT placeholders keep their graph."""
    tensors = [t for t in tensors if t.node.op is not Ops.BUFFER]
    if not tensors:
        return
    values = compute([t.node for t in tensors], feeds, device)
    has_inputs = bool(inputs_of([t.node for t in tensors]))
    for t, v in zip(tensors, values):
        if has_inputs and inputs_of([t.node]):
            continue
        v = np.array(v, order="C", copy=True)
        v.setflags(write=False)
        _realized[t.node] = v
        t.node = Node(Ops.BUFFER, t.node.dtype, (), v)

"""What the GPU comparison backends share: a clear error when a platform is missing, binding the
dynamic dims of a graph's inputs, and the host side of control flow (IF/LOOP bodies run by
re-entering the backend)."""
from __future__ import annotations

import numpy as np

from compiler import semantics
from compiler.ir import Node, Ops, inputs_of


class DeviceUnavailable(RuntimeError):
    """A backend whose library or hardware is missing; the message names what to install."""


def bind(outputs: list[Node], feeds: dict) -> tuple[dict, dict]:
    """(INPUT node id -> array, dim name -> size) for a top-level graph fed by name."""
    named = inputs_of(outputs)
    arrays = semantics.bind_inputs(named, feeds)
    return {id(n): arrays[name] for name, n in named.items()}, _dims(named.values(), arrays.values())


def _dims(nodes, arrays) -> dict:
    dims = {}
    for n, a in zip(nodes, arrays):
        for want, got in zip(n.shape, np.shape(a)):
            if isinstance(want, str):
                dims[want] = got
    return dims


def run_control(backend, n: Node, args: list[np.ndarray]) -> np.ndarray:
    """Value of an IF or LOOP node, its bodies executed on ``backend`` (via ``execute_bound``)."""
    def body(g, vals):
        bound = {id(i): np.asarray(v, dtype=i.dtype.np) for i, v in zip(g.inputs, vals)}
        return backend.execute_bound([g.output], bound, _dims(g.inputs, vals))[0]

    if n.op is Ops.IF:
        pred, *rest = args
        return body(n.arg[0] if bool(pred) else n.arg[1], rest)
    g, k = n.arg
    carry, scans, rest = args[0], args[1:1 + k], args[1 + k:]
    for i in range(scans[0].shape[0]):
        carry = body(g, [carry, *(s[i] for s in scans), *rest])
    return np.asarray(carry, dtype=n.dtype.np)

"""What the GPU comparison backends share: a clear error when a platform is missing, binding the
dynamic dims of a graph's inputs, and the host side of control flow (IF/LOOP bodies run by
re-entering the backend)."""
from __future__ import annotations

import numpy as np

from compiler.ir import semantics
from compiler.ir.graph import Node, Ops, inputs_of


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


def run_schedule(backend, render, outputs, bound: dict, dims: dict) -> list[np.ndarray]:
    """Execute a graph on a kernel backend: schedule, render, compile what is new, upload sources,
    launch each kernel (host steps for control flow), read the outputs back. The backend provides
    ``compile(rendered)``, ``upload(arr)``, ``alloc(nbytes)``, ``launch(rendered, n, args)``,
    ``download(buf, arr)`` and counts ``launches`` / ``log``."""
    from compiler.render.schedule import HostStep, schedule  # noqa: PLC0415
    s = schedule(outputs, dims)
    rendered = {id(k): render(k) for k in s.kernels()}
    backend.compile(rendered.values())
    bufs: dict[int, object] = {}
    host: dict[int, np.ndarray] = {}

    def read(bid) -> np.ndarray:
        if bid not in host:
            dt, shape = s.buffers[bid]
            arr = np.empty(shape, dtype=dt.np)
            if arr.size:
                backend.download(bufs[bid], arr)
            host[bid] = arr
        return host[bid]

    for bid, node in s.sources.items():
        arr = np.ascontiguousarray(bound[id(node)] if node.op is Ops.INPUT else node.arg)
        host[bid], bufs[bid] = arr, backend.upload(arr)
    for step in s.steps:
        dt, shape = s.buffers[step.out]
        if isinstance(step, HostStep):
            val = np.ascontiguousarray(run_control(backend, step.node, [read(b) for b in step.inputs]), dtype=dt.np)
            host[step.out], bufs[step.out] = val, backend.upload(val)
            continue
        n = int(np.prod(shape))
        bufs[step.out] = backend.alloc(n * dt.itemsize)
        if n == 0:
            continue
        r = rendered[id(step)]
        backend.launch(r, n, [bufs[v] if kind == "buf" else v for kind, v in r.args])
        backend.launches += 1
        backend.log.append(r.name)
    out = []
    for o in s.outputs:
        if o[0] == "const":
            node = o[1]
            out.append(np.full(tuple(dims.get(d, d) for d in node.shape), node.arg, dtype=node.dtype.np))
        else:
            out.append(read(o[0]).reshape(o[1]).copy())
    return out

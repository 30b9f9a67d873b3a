"""``Device("triton")`` and the Triton kernels' Python API: ``matmul``, ``flash_attention``,
``flash_attention_backward`` (numpy arrays in and out).

Triton needs torch (tensors and the launcher); both are optional: the ``torch`` extra
brings both (``pip install -e '.[torch]'``; on a GPU machine a torch build for its CUDA). With no CUDA
device the kernels run under Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``, set here before the kernels are defined): slow, but the
same kernel code, which is how the tests check them on machines without a GPU.

The device runs a graph on the numpy reference backend except its matrix
products (a SUM over a broadcast MUL, the frontend's matmul), which run as the
Triton matmul kernel.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

from isa.ints import cdiv

from compiler.ir.graph import Node, Ops
from compiler.ir.passes import rewrite
from runtime.gpu_common import DeviceUnavailable

INSTALL_HINT = ("install triton and torch: `pip install -e '.[gpu]'` and a torch build for this machine "
                "(`pip install torch`); without a CUDA GPU the kernels run under TRITON_INTERPRET=1 on the CPU")
_state: dict = {}


def load():
    """(torch, kernels module, torch device name); DeviceUnavailable when triton or torch is missing."""
    if "kernels" in _state:
        return _state["torch"], _state["kernels"], _state["device"]
    try:
        import torch  # noqa: PLC0415 (optional)
    except ImportError:
        raise DeviceUnavailable(f"Device('triton') needs torch, which is not installed; {INSTALL_HINT}") from None
    gpu = torch.cuda.is_available()
    if not gpu:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise DeviceUnavailable("Device('triton'): no CUDA GPU, and triton was imported before "
                                    "TRITON_INTERPRET=1 could be set: set it in the environment to run "
                                    "the kernels on the CPU")
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton  # noqa: F401,PLC0415
        from runtime import triton_kernels  # noqa: PLC0415
    except ImportError as e:
        raise DeviceUnavailable(f"Device('triton') needs triton ({e}); {INSTALL_HINT}") from None
    _state.update(torch=torch, kernels=triton_kernels, device="cuda" if gpu else "cpu")
    return torch, triton_kernels, _state["device"]


def interpreted() -> bool:
    load()
    return _state["device"] == "cpu"


def _t(x):
    torch, _, dev = load()
    x = np.ascontiguousarray(x, dtype=np.float32)
    return torch.as_tensor(x if x.flags.writeable else x.copy(), device=dev)


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def matmul(a: np.ndarray, b: np.ndarray, block=(32, 32, 16), precision: str = "ieee") -> np.ndarray:
    """(..., M, K) @ (..., K, N) in fp32 with the tiled Triton kernel; batch dims broadcast."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a3 = _t(np.broadcast_to(a, batch + a.shape[-2:]).reshape(-1, *a.shape[-2:]))
    b3 = _t(np.broadcast_to(b, batch + b.shape[-2:]).reshape(-1, *b.shape[-2:]))
    return _np(matmul_torch(a3, b3, block, precision)).reshape(batch + (a.shape[-2], b.shape[-1]))


def matmul_torch(a3, b3, block=(32, 32, 16), precision: str = "ieee"):
    """The matmul kernel on torch tensors already on the kernel's device: (B, M, K) @ (B, K, N)."""
    torch, K, _ = load()
    nb, m, k = a3.shape
    n = b3.shape[-1]
    c = torch.empty((nb, m, n), dtype=torch.float32, device=a3.device)
    bm, bn, bk = block
    grid = (cdiv(m, bm), cdiv(n, bn), nb)
    K.matmul_kernel[grid](a3, b3, c, m, n, k, *a3.stride(), *b3.stride(), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                          DOT=precision)
    return c


def _blocks(d: int, block_m: int, block_n: int):
    return block_m, block_n, max(16, 1 << (d - 1).bit_length())


def flash_attention(q, k, v, causal: bool = False, block_m: int = 32, block_n: int = 32, precision: str = "ieee"):
    """softmax(q k^T / sqrt(d)) v over (..., N, d) arrays. Returns (O, L): L is the saved log-sum-exp
    per query row that the backward pass recomputes P from."""
    d = q.shape[-1]
    qt, kt, vt = (_t(x.reshape(-1, x.shape[-2], d)) for x in (q, k, v))
    o, lse = flash_attention_torch(qt, kt, vt, causal, block_m, block_n, precision)
    return _np(o).reshape(q.shape), _np(lse).reshape(q.shape[:-1])


def flash_attention_torch(qt, kt, vt, causal: bool = False, block_m: int = 32, block_n: int = 32,
                          precision: str = "ieee"):
    """The forward kernel on contiguous float32 torch tensors (BH, N, d) on the kernel's device:
    (O, L) as tensors. ``precision``: each dot's input precision, ``"ieee"`` or ``"tf32"``."""
    torch, K, _ = load()
    bh, nq, d = qt.shape
    o = torch.empty_like(qt)
    lse = torch.empty((bh, nq), dtype=torch.float32, device=qt.device)
    bm, bn, bd = _blocks(d, block_m, block_n)
    K.attn_fwd_kernel[(cdiv(nq, bm), bh)](qt, kt, vt, o, lse, 1.0 / math.sqrt(d), nq, kt.shape[1], d,
                                          BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, CAUSAL=causal, DOT=precision)
    return o, lse


def flash_attention_backward(q, k, v, o, lse, do, causal: bool = False, block_m: int = 32, block_n: int = 32,
                             precision: str = "ieee"):
    """(dq, dk, dv) of ``sum(O * do)``, recomputing score blocks from q, k and the saved L."""
    d, nq = q.shape[-1], q.shape[-2]
    qt, kt, vt, ot, dot = (_t(x.reshape(-1, x.shape[-2], d)) for x in (q, k, v, o, do))
    grads = flash_attention_backward_torch(qt, kt, vt, ot, _t(np.reshape(lse, (-1, nq))), dot, causal,
                                           block_m, block_n, precision)
    return tuple(_np(g).reshape(x.shape) for g, x in zip(grads, (q, k, v)))


def flash_attention_backward_torch(qt, kt, vt, ot, lt, dot, causal: bool = False, block_m: int = 32,
                                   block_n: int = 32, precision: str = "ieee"):
    """The backward kernels on torch tensors (as :func:`flash_attention_torch`): (dQ, dK, dV)."""
    torch, K, _ = load()
    bh, nq, d = qt.shape
    nk = kt.shape[1]
    delta = (ot * dot).sum(-1).contiguous()
    dq, dk, dv = torch.empty_like(qt), torch.empty_like(kt), torch.empty_like(vt)
    bm, bn, bd = _blocks(d, block_m, block_n)
    scale = 1.0 / math.sqrt(d)
    K.attn_bwd_dkdv_kernel[(cdiv(nk, bn), bh)](qt, kt, vt, dot, lt, delta, dk, dv, scale, nq, nk, d,
                                               BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, CAUSAL=causal, DOT=precision)
    K.attn_bwd_dq_kernel[(cdiv(nq, bm), bh)](qt, kt, vt, dot, lt, delta, dq, scale, nq, nk, d,
                                             BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, CAUSAL=causal, DOT=precision)
    return dq, dk, dv


# ---------------------------------------------------------------------------- the Device

def _matmul_operands(n: Node):
    """(a, b) when ``n`` is SUM over axis -2 of MUL(a' expanded along N, b' expanded along M) in float32."""
    if n.op is not Ops.SUM or len(n.arg) != 1 or n.dtype.name != "float32" or n.src[0].op is not Ops.MUL:
        return None
    mul = n.src[0]
    r = len(mul.shape)
    if r < 3 or n.arg[0] != r - 2 or not all(isinstance(s, int) for s in mul.shape):
        return None
    a, b = (s.src[0] if s.op is Ops.EXPAND else s for s in mul.src)
    if a.shape[-1] != 1 or b.shape[-3] != 1 or a.shape[-2] != mul.shape[-2] or b.shape[-2] != mul.shape[-2]:
        return None
    return a, b


class TritonBackend:
    name = "triton"

    def __init__(self):
        load()
        from runtime.numpy_backend import NumpyBackend  # noqa: PLC0415
        self.ref = NumpyBackend()
        self.launches = 0

    def execute(self, outputs: list[Node], feeds: dict) -> list[np.ndarray]:
        def rule(n: Node):
            ops = _matmul_operands(n)
            if ops is None:
                return None
            a, b = self.ref.execute(list(ops), feeds)
            mul = n.src[0]
            full = mul.shape
            a = np.broadcast_to(a.reshape(a.shape[:-1]), full[:-3] + (full[-3], full[-2]))   # (..., M, K)
            b = np.broadcast_to(b.reshape(b.shape[:-3] + b.shape[-2:]), full[:-3] + (full[-2], full[-1]))
            self.launches += 1
            out = matmul(a, b).reshape(n.shape).astype(np.float32)
            return Node(Ops.BUFFER, n.dtype, (), out)
        return self.ref.execute(rewrite(outputs, rule), feeds)


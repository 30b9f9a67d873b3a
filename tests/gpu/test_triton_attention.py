"""Triton kernels against numpy: FlashAttention forward and gradients, the matmul, Device("triton").
Needs triton and torch (the `torch` extra): skipped otherwise. Without a CUDA GPU the
kernels run under TRITON_INTERPRET=1 on the CPU."""
import math
import os

import numpy as np
import pytest

import tetrachip as tc
from tests.gpu.gpu_helpers import device_or_skip

torch = pytest.importorskip("torch", reason="torch is not installed (Triton needs it; pip install torch)")
if not torch.cuda.is_available():  # before triton is imported: it reads the switch then
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[gpu]')")
from runtime import triton_backend as TB  # noqa: E402


def attention_ref(q, k, v, causal):
    """Direct float64 attention and its gradients for the loss sum(O * dO)."""
    d = q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v, p


def attention_grads(q, k, v, do, causal):
    d = q.shape[-1]
    o, p = attention_ref(q, k, v, causal)
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return ds @ k / math.sqrt(d), np.swapaxes(ds, -1, -2) @ q / math.sqrt(d), dv


@pytest.mark.parametrize("shape,causal,blocks", [((2, 3, 37, 24), False, (16, 16)), ((1, 2, 50, 16), True, (16, 16)),
                                                 ((1, 1, 16, 8), False, (16, 16)),
                                                 # causal block skipping with unequal blocks, both ways round
                                                 ((1, 2, 70, 16), True, (32, 16)), ((1, 1, 45, 16), True, (16, 32))])
def test_flash_attention_forward_and_backward(shape, causal, blocks):
    rng = np.random.default_rng(sum(shape))
    q, k, v, do = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    bm, bn = blocks
    o, lse = TB.flash_attention(q, k, v, causal=causal, block_m=bm, block_n=bn)
    want, _ = attention_ref(*(x.astype(np.float64) for x in (q, k, v)), causal)
    np.testing.assert_allclose(o, want, rtol=1e-4, atol=1e-4)
    grads = TB.flash_attention_backward(q, k, v, o, lse, do, causal=causal, block_m=bm, block_n=bn)
    wants = attention_grads(*(x.astype(np.float64) for x in (q, k, v, do)), causal)
    for name, g, w in zip("qkv", grads, wants):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3, err_msg=f"d{name}")


def test_triton_matmul_and_device():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 19, 33)).astype(np.float32), rng.standard_normal((33, 21)).astype(np.float32)
    np.testing.assert_allclose(TB.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
    dev = device_or_skip("triton")
    x, w = tc.Tensor(a), tc.Tensor(b)
    (got,) = dev.run(((x @ w).relu() @ tc.Tensor(b.T)).sum(-1))
    np.testing.assert_allclose(got, (np.maximum(a @ b, 0) @ b.T).sum(-1), rtol=1e-4, atol=1e-3)
    assert dev.backend.launches == 2


def test_flash_attention_bench_quick_json(tmp_path):
    """bench/flash_attention.py --quick writes its rows; every implementation agrees with float64 attention."""
    import importlib.util
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("bench_flash_attention", root / "bench" / "flash_attention.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "fa.json"
    r = subprocess.run([sys.executable, str(root / "bench" / "flash_attention.py"), "--quick", "--reps", "1",
                        "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert [row["causal"] for row in data["rows"]] == [False, True]
    for row in data["rows"]:
        assert set(row["fwd_ms"]) == set(bench.IMPLS), data["notes"]
        for name, errs in row["max_abs_err"].items():
            tol = 1e-2 if name == "triton tf32" else 1e-4
            assert max(errs.values()) < tol, (row["shape"], name, errs)

"""FlashAttention, the Triton kernels of runtime/triton_kernels.py, next to torch on the same device:
forward and forward+backward time, TFLOP/s, and the error against float64 attention.

    python bench/flash_attention.py [--quick] [--json FILE] [--reps N]

Implementations (float32 in and out, tensors resident on the device, kernels only):
- ``triton ieee``: the FlashAttention kernels with full-fp32 dots (what the tests check against numpy);
- ``triton tf32``: the same kernels with TF32 tensor-core dots;
- ``torch sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` in float32 (the kernel torch picks);
- ``torch naive``: matmul, softmax, matmul, the whole score matrix in memory (autograd for the backward).

Each Triton row is the fastest of a few block sizes (the blocks are recorded). Backward is the gradient of
``sum(O * dO)``; FLOPs count 4·N_q·N_k·d per head forward (halved when causal) and 2.5 times that backward.
Errors: the largest absolute difference from float64 attention computed by torch on the same device, for O
and for each of dQ, dK, dV. On a CUDA GPU times are ``triton.testing.do_bench`` medians; without one the
Triton kernels run under ``TRITON_INTERPRET=1`` on the CPU, so only ``--quick`` (one small shape) is sensible
and its times say nothing about speed.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from isa.outputs import check_outputs, write_atomic  # noqa: E402

from runtime.gpu_common import DeviceUnavailable  # noqa: E402

#: (batch, heads, N, d) of the full run; each runs non-causal and causal
SHAPES_FULL = [(4, 16, 1024, 64), (2, 16, 4096, 64), (2, 16, 2048, 128)]
SHAPES_QUICK = [(1, 2, 64, 16)]
BLOCKS_GPU = [(32, 32), (64, 64)]
BLOCKS_CPU = [(16, 16)]
IMPLS = ["triton ieee", "triton tf32", "torch sdpa", "torch naive"]


def _flops(shape, causal: bool) -> float:
    b, h, n, d = shape
    return 4.0 * b * h * n * n * d / (2 if causal else 1)


def _timer(cuda: bool, reps: int):
    """fn -> milliseconds: ``do_bench``'s median on a GPU, else bench/gpu_compare.py's median of warm runs."""
    if cuda:
        from triton.testing import do_bench  # noqa: PLC0415
        return lambda fn: do_bench(fn, warmup=10, rep=max(25, 10 * reps), return_mode="median")
    from bench.gpu_compare import median_seconds  # noqa: PLC0415
    return lambda fn: 1e3 * median_seconds(fn, reps)


def _naive(torch, q, k, v, causal):
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def _impls(torch, TB, causal: bool, blocks):
    """name -> (forward(q, k, v), forward_and_backward(q, k, v, do) -> (o, dq, dk, dv))."""
    F = torch.nn.functional

    def triton(precision):
        def fwd(q, k, v):
            return TB.flash_attention_torch(q, k, v, causal, *blocks, precision)[0]

        def both(q, k, v, do):
            o, lse = TB.flash_attention_torch(q, k, v, causal, *blocks, precision)
            return (o, *TB.flash_attention_backward_torch(q, k, v, o, lse, do, causal, *blocks, precision))
        return fwd, both

    def autograd(f):
        def both(q, k, v, do):
            q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
            o = f(q, k, v)
            return (o.detach(), *torch.autograd.grad(o, (q, k, v), do))
        return f, both

    return {"triton ieee": triton("ieee"), "triton tf32": triton("tf32"),
            "torch sdpa": autograd(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
            "torch naive": autograd(lambda q, k, v: _naive(torch, q, k, v, causal))}


def _row(torch, TB, shape, causal, dev, timer, blocks_list, notes):
    b, h, n, d = shape
    g = torch.Generator(device="cpu").manual_seed(n + d + causal)
    q, k, v, do = (torch.randn(b * h, n, d, generator=g).to(dev) for _ in range(4))
    ref = _impls(torch, TB, causal, blocks_list[0])["torch naive"][1](*(x.double() for x in (q, k, v, do)))
    flops = _flops(shape, causal)
    row = {"shape": list(shape), "causal": causal, "fwd_ms": {}, "fwdbwd_ms": {}, "fwd_tflops": {},
           "fwdbwd_tflops": {}, "max_abs_err": {}, "blocks": {}}
    for name in IMPLS:
        best = None
        for blocks in (blocks_list if name.startswith("triton") else blocks_list[:1]):
            fwd, both = _impls(torch, TB, causal, blocks)[name]
            try:
                got = both(q, k, v, do)
                t_f = timer(lambda fwd=fwd: fwd(q, k, v))
                t_b = timer(lambda both=both: both(q, k, v, do))
            except Exception as e:  # noqa: BLE001  (a block size that does not fit, a kernel torch lacks)
                notes[f"{name} {shape} causal={causal} blocks={blocks}"] = f"{type(e).__name__}: {str(e)[:300]}"
                continue
            if best is None or t_b < best[1]:
                best = (t_f, t_b, blocks, got)
        if best is None:
            continue
        t_f, t_b, blocks, got = best
        row["fwd_ms"][name], row["fwdbwd_ms"][name] = t_f, t_b
        row["fwd_tflops"][name] = flops / t_f / 1e9
        row["fwdbwd_tflops"][name] = 3.5 * flops / t_b / 1e9
        row["max_abs_err"][name] = {x: float((a.double() - r).abs().max()) for x, a, r in zip(("o", "dq", "dk", "dv"),
                                                                                              got, ref)}
        if name.startswith("triton"):
            row["blocks"][name] = list(blocks)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small shape (what runs on a CPU, interpreted)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--reps", type=int, default=3, help="timed runs per measurement without a GPU")
    args = ap.parse_args(argv)
    check_outputs(ap, args.json)
    from runtime import triton_backend as TB  # noqa: PLC0415
    try:
        torch, _, dev = TB.load()
    except DeviceUnavailable as e:
        print(f"flash_attention: {e}", file=sys.stderr)
        return 2
    import triton  # noqa: PLC0415
    cuda = dev == "cuda"
    if not cuda and not args.quick:
        print("flash_attention: no CUDA GPU (the Triton kernels would run interpreted); use --quick",
              file=sys.stderr)
        return 2
    timer = _timer(cuda, args.reps)
    blocks = BLOCKS_GPU if cuda else BLOCKS_CPU
    notes: dict[str, str] = {}
    device = torch.cuda.get_device_name() if cuda else "cpu (Triton interpreter)"
    rows: list[dict] = []
    t0 = time.perf_counter()
    for shape in (SHAPES_QUICK if args.quick else SHAPES_FULL):
        for causal in (False, True):
            rows.append(_row(torch, TB, shape, causal, dev, timer, blocks, notes))
            print(f"[{time.perf_counter() - t0:6.1f} s] {shape} causal={causal}", file=sys.stderr, flush=True)
            if args.json:       # after every row: a run cut short keeps what it measured
                write_atomic(args.json, json.dumps({"device": device, "torch": torch.__version__,
                                                    "triton": triton.__version__, "rows": rows, "notes": notes},
                                                   indent=2))
    _print(rows, device, notes)
    return 0


def _print(rows, device, notes):
    print(f"FlashAttention on {device}: forward / forward+backward, ms and TFLOP/s (float32)")
    head = f"{'B,H,N,d':18s}{'causal':>7s}  " + "".join(f"{n:>26s}" for n in IMPLS)
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = []
        for n in IMPLS:
            if n in r["fwd_ms"]:
                cells.append(f"{r['fwd_ms'][n]:7.3f}/{r['fwdbwd_ms'][n]:7.3f} "
                             f"{r['fwd_tflops'][n]:4.1f}/{r['fwdbwd_tflops'][n]:4.1f}")
            else:
                cells.append("-")
        print(f"{','.join(map(str, r['shape'])):18s}{str(r['causal']):>7s}  " + "".join(f"{c:>26s}" for c in cells))
    print("max |error| vs float64 (O, dQ, dK, dV):")
    for r in rows:
        errs = "  ".join(f"{n}: " + ",".join(f"{e:.1e}" for e in r["max_abs_err"][n].values())
                         for n in IMPLS if n in r["max_abs_err"])
        print(f"  {','.join(map(str, r['shape']))} causal={r['causal']}: {errs}")
    for k, v in notes.items():
        print(f"note [{k}]: {v}")


if __name__ == "__main__":
    sys.exit(main())

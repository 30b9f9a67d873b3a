"""``make demo``: a real model on the virtual chip, then the ISA examples.

Part 1, the main job: train the digits MLP (scikit-learn's bundled digits) on the numpy
reference backend, quantize it to int8, compile it for ``base``, run the whole test set on the
cycle-level simulator, and print float vs chip accuracy, cycles, MXU utilization and DRAM
traffic; the chip's outputs are checked bit for bit against the quantized reference, and a
Perfetto trace of the run is written to ``out/digits_mlp.trace.json``.

Part 1b: a transformer block (d_model 64, 4 heads, GELU MLP) compiled once with a symbolic
sequence length T <= 64 and run from the same binary for T = 1, 17, 64: integer LayerNorm,
GELU and a fused online-softmax attention on the VPU, checked bit for bit against the integer
numpy model and compared with the float block.

Part 1c: a real network through the general compiler: ResNet-18 in its ImageNet layout
(``examples/zoo.py``: 7x7/2 stem, BatchNorm folded into the convolutions, max-pool, residual
blocks, global average pooling, classifier; random weights) at 64x64 on ``base``, checked bit for
bit against the quantized reference, with cycles, MXU utilization and the error against float.

Part 1d: text generation on the chip: the character-level GPT of ``examples/charlm.py`` (trained here on the
repository's docs) compiled once as a decode step with its key/value cache in the chip's DRAM, generating
greedily one token per step on one resident simulated chip; the chip's tokens are checked against the integer
reference's and compared with the float model's.

Part 1e: a model from another framework: the GPT-2-style decoder of the ONNX zoo (``examples/onnx_zoo.py``,
written with ``onnx.helper``) imported with ``tc.onnx.load``, checked against onnxruntime on the numpy device
and compiled for ``base``, bit for bit against the quantized reference on the simulated chip.

Part 1f: many chips: ResNet-18 at 32x32 (batch 4) sharded over a ring of 4 simulated chips, tensor parallel
(``tc.compile(..., chips=4, parallel="tensor")``, docs/sharding.md): each chip computes its share of every layer
and an all-gather over the links shares the results; bit for bit the single chip's reference, with the speed-up.

Part 2 (short): the example assembly programs round-trip through the assembler and run on the
simulator, checked against numpy, and a generated GEMM on ``base``.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

from isa import Program, assemble, assemble_file
from isa.errors import TetrachipError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["gemm_tiled.s", "vector_loop.s"]


def _example(name: str):
    """The module ``examples/<name>.py`` (a user's script: it imports the ``tetrachip`` facade)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _digits(out: Path) -> bool:
    """Part 1: the digits MLP trained, quantized, compiled and run on the simulated chip."""
    from tqdm import tqdm

    from compiler.lower.dispatch import compile_model
    from runtime.device import Device
    digits = _example("digits")
    t0 = time.perf_counter()
    print("== digits MLP (64-64-10) on the simulated chip, config base")
    with tqdm(total=10, desc="train (numpy reference)", unit="epoch") as bar:
        def progress(ep, loss):
            bar.set_postfix(loss=f"{loss:.3f}")
            bar.update()
        model, (Xtr, Xte, ytr, yte), _, float_acc = digits.trained("mlp", epochs=10, progress=progress)
    steps = tqdm(["quantize + compile", "simulate", "check"], desc="chip", unit="step")
    cm = compile_model(model, [Xte], config="base", calibration=[[Xtr[:len(Xte)]]])
    steps.update()
    res = Device("sim", config="base", trace=True).run(cm, Xte)
    steps.update()
    exact = bool(np.array_equal(res.outputs[0], cm.reference(Xte)[0]))
    steps.update()
    steps.close()
    chip_acc = digits.accuracy(res.outputs[0], yte)
    st = res.stats
    trace = out / "digits_mlp.trace.json"
    res.trace.save_chrome(trace)
    print(cm.summary())
    print(f"test set: {len(Xte)} images in one batch")
    print(f"accuracy: float (numpy) {100 * float_acc:.2f}%   int8 chip {100 * chip_acc:.2f}%   "
          f"(chip == quantized reference bit for bit: {'yes' if exact else 'NO'})")
    print(f"cycles {st.cycles} ({st.time_us:.1f} us at {st.clock_mhz:g} MHz, "
          f"{st.cycles / len(Xte):.1f} cycles/image), MXU utilization {100 * st.mxu_utilization:.1f}%")
    print(f"DRAM traffic: {st.bytes['dram_read']} bytes read, {st.bytes['dram_write']} bytes written")
    print(f"trace: {trace.relative_to(ROOT)} (open in https://ui.perfetto.dev)")
    print(f"part 1 took {time.perf_counter() - t0:.1f} s\n")
    return exact and abs(chip_acc - float_acc) <= 0.01


def _transformer() -> bool:
    """Part 1b: one binary of a transformer block run for several sequence lengths."""
    import hashlib

    from compiler.frontend import nn
    from compiler.frontend.random import manual_seed
    from compiler.lower.dispatch import compile_model
    from runtime.device import Device
    t0 = time.perf_counter()
    d, heads, tmax = 64, 4, 64
    print(f"== transformer block (d_model {d}, {heads} heads) on base, T symbolic (<= {tmax})")
    manual_seed(0)
    block = nn.TransformerBlock(d, heads)
    rng = np.random.default_rng(0)
    calib = [[rng.standard_normal((1, tmax, d)).astype(np.float32)] for _ in range(2)]
    cm = compile_model(block, calib[0][0], config="base", calibration=calib, dynamic={"T": tmax})
    sha = hashlib.sha256(cm.program.to_bytes()).hexdigest()
    ok = True
    for T in (1, 17, 64):
        x = rng.standard_normal((1, T, d)).astype(np.float32)
        res = Device("sim", config="base").run(cm, x)
        exact = bool(np.array_equal(res.ints["out"][:, :T], cm.reference_int(x)))
        same = hashlib.sha256(cm.program.to_bytes()).hexdigest() == sha
        err = np.abs(res.outputs[0] - cm.float_reference(x)[0])
        st = res.stats
        ok &= exact and same
        print(f"T={T:>2}: chip == integer reference: {'yes' if exact else 'NO'}, same binary: "
              f"{'yes' if same else 'NO'}, |chip - float| max {err.max():.3f} mean {err.mean():.3f}, "
              f"{st.cycles} cycles, DRAM {st.bytes['dram_read'] + st.bytes['dram_write']} bytes")
    print(f"part 1b took {time.perf_counter() - t0:.1f} s\n")
    return ok


def _roundtrip(out: Path, verbose: bool = False) -> bool:
    for name in EXAMPLES:
        src = ROOT / "examples" / name
        prog = assemble_file(src)
        print(f"== {name}: {len(prog)} instructions for config {prog.config.name}")
        if verbose:
            print(prog.listing(), end="")
        binary = out / src.with_suffix(".bin").name
        prog.save(binary)
        back = Program.load(binary)
        text = back.disassemble()
        again = assemble(text, back.config, f"{binary} (disassembled)")
        same = again.code_bytes() == prog.code_bytes()
        if verbose:
            print(f"-- disassembly of {binary.relative_to(ROOT)}:")
            print(text, end="")
        print(f"-- binary {binary.relative_to(ROOT)}, disassembled and re-assembled: "
              f"{'identical' if same else 'DIFFERENT'} ({len(prog.code_bytes())} bytes of code)")
        if not same:
            return False
    return True


def _simulate(out: Path) -> bool:
    from sim import Chip
    from sim.programs import run_gemm
    rng = np.random.default_rng(0)
    ok = True

    # gemm_tiled.s: C (8x8 int32) = A (8x8 int8) @ B (8x8 int8)
    chip = Chip("tiny", trace=True)
    chip.load(ROOT / "examples" / "gemm_tiled.s")
    A = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    B = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    chip.write_dram(0x0000, A)
    chip.write_dram(0x0400, B)
    stats = chip.run()
    C = chip.read_dram(0x0800, 64, np.int32).reshape(8, 8)
    good = bool((C == A.astype(np.int32) @ B.astype(np.int32)).all())
    ok &= good
    chip.trace.save_chrome(out / "gemm_tiled.trace.json")
    (out / "gemm_tiled.lines.txt").write_text(chip.trace.line_trace())
    print(f"== simulate gemm_tiled.s on tiny: C == A @ B: {'yes' if good else 'NO'}, {stats.cycles} cycles")
    print(f"-- trace: {(out / 'gemm_tiled.trace.json').relative_to(ROOT)} (Perfetto), "
          f"{(out / 'gemm_tiled.lines.txt').relative_to(ROOT)} (line trace)\n")

    # vector_loop.s: y = relu(3x + bias) for N rows; N and bias are run-time arguments
    chip = Chip("tiny")
    chip.load(ROOT / "examples" / "vector_loop.s")
    n, bias = 37, -20
    x = rng.integers(-128, 128, (n, 4), dtype=np.int8)
    chip.write_dram(0x000, x)
    chip.set_args(r1=n, r2=bias)
    stats = chip.run()
    y = chip.read_dram(0x800, n * 4, np.int8).reshape(n, 4)
    good = bool((y == np.clip(np.maximum(x.astype(np.int64) * 3 + bias, 0), -128, 127)).all())
    ok &= good
    print(f"== simulate vector_loop.s on tiny with N={n} (r1), bias={bias} (r2): y correct: {'yes' if good else 'NO'}, "
          f"{stats.cycles} cycles")

    # a generated GEMM on base: bit-exact, and the MXU utilization of the schedule
    M, K, N = 256, 256, 256
    A = rng.integers(-128, 128, (M, K), dtype=np.int8)
    B = rng.integers(-128, 128, (K, N), dtype=np.int8)
    C, stats, _ = run_gemm(A, B, "base")
    good = bool((C == A.astype(np.int32) @ B.astype(np.int32)).all())
    ok &= good
    print(f"== generated GEMM {M}x{K}x{N} on base: C == A @ B: {'yes' if good else 'NO'}, "
          f"{stats.cycles} cycles, MXU utilization {100 * stats.mxu_utilization:.1f}%")
    return ok


def _resnet() -> bool:
    """Part 1c: ResNet-18 (ImageNet layout) from examples/zoo.py through tc.compile."""
    from compiler.frontend.tensor import Tensor
    from compiler.lower.dispatch import compile_model
    from runtime.device import Device
    zoo = _example("zoo")
    t0 = time.perf_counter()
    size = 64
    print(f"== ResNet-18 (ImageNet layout, random weights) at {size}x{size} on base")
    model, x = zoo.resnet18(), zoo.image(size)
    cm = compile_model(model, x, config="base")
    t1 = time.perf_counter()
    res = Device("sim", config="base").run(cm, x)
    exact = bool(np.array_equal(res.outputs[0], cm.reference(x)[0]))
    want = model(Tensor(x)).numpy()
    err = float(np.abs(res.outputs[0] - want).max() / np.abs(want).max())
    st = res.stats
    print(f"{len(cm.kernels)} kernels, {len(cm.program)} instructions, compiled in {t1 - t0:.1f} s; "
          f"chip == integer reference: {'yes' if exact else 'NO'}; |chip - float| {100 * err:.2f}% of the "
          f"largest logit; {st.cycles} cycles, MXU utilization {100 * st.mxu_utilization:.1f}%")
    print(f"part 1c took {time.perf_counter() - t0:.1f} s\n")
    return exact


def _generate() -> bool:
    """Part 1d: the character model of examples/charlm.py generating on the chip (KV cache in DRAM)."""
    charlm = _example("charlm")
    t0 = time.perf_counter()
    print("== text generation: a character-level GPT (2 layers, d_model 64) with a KV cache, one decode step "
          "per token on base")
    try:
        charlm.run(charlm.PROMPT, 24, 0.0, None, 0, "base")
    except SystemExit as e:                      # the example's own check: chip tokens != reference tokens
        print(e)
        return False
    print(f"part 1d took {time.perf_counter() - t0:.1f} s\n")
    return True


def _onnx() -> bool:
    """Part 1e: an ONNX model (the zoo's GPT-2-style decoder) imported and run on numpy and on the chip."""
    import onnxruntime as ort

    from compiler.importers.onnx_import import load
    from compiler.lower.dispatch import compile_model
    from runtime.device import Device
    onnx_zoo = _example("onnx_zoo")
    t0 = time.perf_counter()
    kw = dict(layers=2, d_model=64, heads=2, vocab=256, seq=32)
    print(f"== ONNX import: a GPT-2-style decoder ({kw['layers']} layers, d_model {kw['d_model']}, T {kw['seq']}; "
          "built with onnx.helper) on base")
    proto = onnx_zoo.gpt2_decoder(**kw)
    feeds = onnx_zoo.example_inputs(proto)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    model = load(proto)
    with Device("numpy"):
        got = model(**feeds).numpy()
    close = bool(np.allclose(got, want, rtol=1e-4, atol=1e-4))
    inputs = list(feeds.values())
    cm = compile_model(model, inputs, config="base")
    res = Device("sim", config="base").run(cm, *inputs)
    exact = bool(np.array_equal(res.outputs[0], cm.reference(*inputs)[0]))
    err = float(np.abs(res.outputs[0] - want).max() / np.abs(want).max())
    print(f"numpy device == onnxruntime (1e-4): {'yes' if close else 'NO'}; chip == integer reference: "
          f"{'yes' if exact else 'NO'}; |chip - onnxruntime| {100 * err:.2f}% of the largest logit; "
          f"{res.stats.cycles} cycles, MXU utilization {100 * res.stats.mxu_utilization:.1f}%")
    print(f"part 1e took {time.perf_counter() - t0:.1f} s\n")
    return close and exact


def _chips() -> bool:
    """Part 1f: ResNet-18 at 32x32, a batch of 4, sharded over 4 chips of a ring (tensor parallel)."""
    from compiler.lower.shard import compile as compile_sharded
    from runtime.device import Device
    zoo = _example("zoo")
    t0 = time.perf_counter()
    print("== many chips: ResNet-18 (10 classes) at 32x32, batch 4, over 4 base chips in a ring, tensor parallel")
    model, x = zoo.resnet18(num_classes=10), zoo.image(32, batch=4)
    one = compile_sharded(model, x, "base")
    single = Device("sim", config="base").run(one, x).stats.cycles
    sm = compile_sharded(model, x, "base", chips=4, parallel="tensor")
    res = Device("sim", config="base", chips=4).run(sm, x)
    exact = all(np.array_equal(a, b) for a, b in zip(res.outputs, one.reference(x)))
    st = res.stats
    print(f"4 chips == the single chip's integer reference: {'yes' if exact else 'NO'}; {st.cycles} cycles against "
          f"{single} on one chip: speed-up {single / st.cycles:.2f}, efficiency {100 * single / (4 * st.cycles):.1f}%; "
          f"{st.link_bytes} bytes over the links")
    print(f"part 1f took {time.perf_counter() - t0:.1f} s\n")
    return exact


def main() -> int:
    out = ROOT / "out"
    out.mkdir(exist_ok=True)
    ok = _digits(out)
    ok &= _transformer()
    ok &= _resnet()
    ok &= _generate()
    ok &= _onnx()
    ok &= _chips()
    print("== part 2: the ISA examples")
    if not _roundtrip(out, verbose="-v" in sys.argv):
        return 1
    return 0 if (_simulate(out) and ok) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TetrachipError as e:
        print(e, file=sys.stderr)
        sys.exit(1)

"""A zoo of ONNX models built in the repository (no download): real architectures with seeded random weights,
and the digits models trained here, for ``tc.onnx.load``, its tests and ``bench/models.py``.

Every builder returns an ``onnx.ModelProto`` that passed ``onnx.checker.check_model(..., full_check=True)``
(shapes inferred and stored), at opset 17 unless ``opset=`` names another one in 13..21:

* ``resnet18(num_classes=1000, image=224)``: torchvision's layout: 7x7/2 stem Conv, BatchNormalization, Relu,
  3x3/2 MaxPool, four stages of two basic blocks (64, 128, 256, 512 channels; a 1x1/2 Conv + BatchNormalization
  projection where the shape changes), GlobalAveragePool, Flatten, Gemm. Input ``input`` (1, 3, image, image).
* ``mobilenet_v2(num_classes=1000, image=224)``: width 1.0; 3x3/2 stem, 17 inverted residuals (1x1 expand,
  3x3 depthwise Conv with ``group`` = channels, Clip(0, 6) as ReLU6, 1x1 linear projection, Add where the shape
  allows), 1x1 Conv to 1280, GlobalAveragePool, Flatten, Gemm.
* ``bert_encoder(layers=4, d_model=256, heads=4, vocab=1000, seq=32)``: ``input_ids`` (1, seq) int64; word
  embeddings (Gather) plus position embeddings (Gather on a constant Range), LayerNormalization, then post-LN
  encoder layers: MatMul/Add projections, head split by Reshape to a shape computed with
  Shape/Gather/Unsqueeze/Concat (as exporters write it) and Transpose, scaled scores, Softmax, output projection,
  residual, LayerNormalization, a GELU MLP (``Gelu`` at opset >= 20, else the Erf form), residual,
  LayerNormalization. Output ``last_hidden_state`` (1, seq, d_model), and ``pooler_output`` (1, d_model) with
  ``pooled=True``.
* ``gpt2_decoder(layers=6, d_model=384, heads=6, vocab=1000, seq=64)``: token and position embeddings (Gather,
  the positions an int64 initializer), pre-LN blocks: fused qkv MatMul split by Split, causal self-attention
  (``mask="where"``: Where on a constant lower-triangular bool mask with -inf; ``mask="add"``: an added
  constant 0 / -1e9 mask), GPT-2's tanh GELU written with Pow/Mul/Tanh, residuals; final LayerNormalization and
  an LM head MatMul. Output ``logits`` (1, seq, vocab).
* ``digits_mlp()``, ``digits_cnn()``, ``digits_bncnn()``: the digits models of examples/digits.py, trained here
  on the reference backend (``epochs=``; the MLP takes about 3 s, the CNN 9 s, the BatchNorm CNN 17 s at the
  default 10 epochs), exported from the trained modules' parameters. Input ``input`` (batch, 64) or
  (batch, 1, 8, 8) with a symbolic batch; the float test accuracy is in the model's metadata
  (``float_accuracy``). ``export_digits(model, kind)`` exports any such module.

The transformers take ``positions="input"`` to make the position ids a second int64 input ``position_ids``
(as Hugging Face's models take them). Below opset 17 LayerNormalization is written out as torch.onnx.export
writes it. docs/zoo.md describes the zoo and what its tests check.

BatchNormalization layers get random running statistics and affine parameters (as a trained network has), so
folding them is not an identity. Node names are readable and scoped (``layer2.0.conv1``,
``encoder.layer.1.attention.self.query``), as are initializers (``layer2.0.conv1.weight``).

Write models out (``--list`` names them)::

    python -m examples.onnx_zoo --out models/ [NAME ...] [--opset 17] [--small]
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_OPSET = 17
MIN_OPSET, MAX_OPSET = 13, 21


class GraphBuilder:
    """Builds one ONNX graph: scoped readable names, seeded random initializers, a method per layer.

    Every method returns the name of the tensor it produced. Tensor, node and initializer names share the
    scope (``with g.scope("layer1.0"):``) and are made unique by a numeric suffix where a name repeats."""

    def __init__(self, name: str, opset: int = DEFAULT_OPSET, seed: int = 0):
        if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
            raise ValueError(f"{name}: opset must be an int in {MIN_OPSET}..{MAX_OPSET}, got {opset!r}")
        self.name, self.opset = name, opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._used: set[str] = set()
        self._scope: list[str] = []
        self._consts: dict[tuple, str] = {}

    # --- names, inputs, initializers ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name: str):
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def unique(self, base: str) -> str:
        name = ".".join([*self._scope, base])
        out, i = name, 1
        while out in self._used:
            out, i = f"{name}_{i}", i + 1
        self._used.add(out)
        return out

    def input(self, name: str, shape, dtype=np.float32) -> str:
        self._used.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                                         list(shape)))
        return name

    def init(self, base: str, array: np.ndarray) -> str:
        name = self.unique(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def const(self, value, dtype=np.int64) -> str:
        """A small constant initializer (a shape, axes, a scalar), one per distinct value, named by its value."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            text = "_".join(str(v) for v in arr.ravel()[:6]) if arr.size else "empty"
            saved, self._scope = self._scope, []
            self._consts[key] = self.init(f"const.{arr.dtype.name}.{text}", arr)
            self._scope = saved
        return self._consts[key]

    def normal(self, base: str, shape, std: float, mean: float = 0.0) -> str:
        return self.init(base, (mean + std * self.rng.standard_normal(shape)).astype(np.float32))

    def uniform(self, base: str, shape, lo: float, hi: float) -> str:
        return self.init(base, self.rng.uniform(lo, hi, shape).astype(np.float32))

    def node(self, op: str, inputs, base: str | None = None, outputs: int = 1, **attrs):
        """One node; its name is ``base`` (default: the op type) in the current scope; so is its output
        (``NAME.0``, ``NAME.1``, ... when it has several)."""
        name = self.unique(base or op.lower())
        outs = [name] if outputs == 1 else [self.unique(f"{name.rsplit('.', 1)[-1]}.{i}") for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    # --- layers ---------------------------------------------------------------------------------------------
    def conv(self, x, cin, cout, k, stride=1, groups=1, bias=False, name="conv") -> str:
        with self.scope(name):
            w = self.normal("weight", (cout, cin // groups, k, k), math.sqrt(2.0 / (cin // groups * k * k)))
            ins = [x, w] + ([self.uniform("bias", (cout,), -0.1, 0.1)] if bias else [])
        p = k // 2
        return self.node("Conv", ins, name, kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p],
                         group=groups)

    def batch_norm(self, x, c, name="bn", eps=1e-5) -> str:
        with self.scope(name):
            ins = [x, self.uniform("weight", (c,), 0.5, 1.5), self.uniform("bias", (c,), -0.2, 0.2),
                   self.uniform("running_mean", (c,), -0.2, 0.2), self.uniform("running_var", (c,), 0.5, 2.0)]
        return self.node("BatchNormalization", ins, name, epsilon=eps)

    def relu(self, x, name="relu") -> str:
        return self.node("Relu", [x], name)

    def relu6(self, x, name="relu6") -> str:
        return self.node("Clip", [x, self.const(0.0, np.float32), self.const(6.0, np.float32)], name)

    def add(self, a, b, name="add") -> str:
        return self.node("Add", [a, b], name)

    def mul(self, a, b, name="mul") -> str:
        return self.node("Mul", [a, b], name)

    def gemm(self, x, fin, fout, name="fc") -> str:
        """``x @ W^T + b`` with W (fout, fin), as a PyTorch Linear exports."""
        with self.scope(name):
            ins = [x, self.normal("weight", (fout, fin), 1 / math.sqrt(fin)),
                   self.uniform("bias", (fout,), -0.1, 0.1)]
        return self.node("Gemm", ins, name, transB=1)

    def linear(self, x, fin, fout, name="dense", bias=True, std=None) -> str:
        """``x @ W + b`` as MatMul then Add, W (fin, fout), as transformer exports write projections."""
        with self.scope(name):
            w = self.normal("weight", (fin, fout), std if std is not None else 1 / math.sqrt(fin))
            b = self.uniform("bias", (fout,), -0.1, 0.1) if bias else None
        y = self.node("MatMul", [x, w], name + ".matmul" if bias else name)
        return self.node("Add", [y, b], name) if bias else y

    def reduce_mean(self, x, axes, name="reduce_mean") -> str:
        if self.opset >= 18:
            return self.node("ReduceMean", [x, self.const(list(axes))], name, keepdims=1)
        return self.node("ReduceMean", [x], name, axes=list(axes), keepdims=1)

    def layer_norm(self, x, d, eps=1e-5, name="LayerNorm") -> str:
        """LayerNormalization over the last axis (opset >= 17), else its decomposition as torch.onnx.export writes
        it (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)."""
        with self.scope(name):
            w = self.normal("weight", (d,), 0.1, mean=1.0)
            b = self.normal("bias", (d,), 0.1)
        if self.opset >= 17:
            return self.node("LayerNormalization", [x, w, b], name, axis=-1, epsilon=eps)
        with self.scope(name):
            c = self.node("Sub", [x, self.reduce_mean(x, [-1], "mean")], "center")
            var = self.reduce_mean(self.node("Pow", [c, self.const(2.0, np.float32)], "square"), [-1], "var")
            std = self.node("Sqrt", [self.node("Add", [var, self.const(eps, np.float32)], "var_eps")], "std")
            y = self.node("Div", [c, std], "normalized")
            y = self.node("Mul", [y, w], "scaled")
        return self.node("Add", [y, b], name)

    def gelu_erf(self, x, name="gelu") -> str:
        """``0.5 x (1 + erf(x / sqrt 2))``: the ``Gelu`` operator at opset >= 20, else written with Erf."""
        if self.opset >= 20:
            return self.node("Gelu", [x], name)
        with self.scope(name):
            e = self.node("Erf", [self.node("Div", [x, self.const(math.sqrt(2.0), np.float32)], "div")], "erf")
            e = self.node("Add", [e, self.const(1.0, np.float32)], "add")
            h = self.node("Mul", [x, e], "mul")
        return self.node("Mul", [h, self.const(0.5, np.float32)], name)

    def gelu_tanh(self, x, name="gelu") -> str:
        """GPT-2's ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` with Pow, Mul, Add and Tanh."""
        with self.scope(name):
            cube = self.node("Pow", [x, self.const(3.0, np.float32)], "pow")
            inner = self.node("Add", [x, self.node("Mul", [cube, self.const(0.044715, np.float32)], "mul_c")],
                              "add_x")
            t = self.node("Tanh", [self.node("Mul", [inner, self.const(math.sqrt(2 / math.pi), np.float32)],
                                             "mul_s")], "tanh")
            t = self.node("Add", [t, self.const(1.0, np.float32)], "add_1")
            h = self.node("Mul", [x, self.const(0.5, np.float32)], "half")
        return self.node("Mul", [h, t], name)

    def reshape(self, x, shape, name="reshape") -> str:
        return self.node("Reshape", [x, shape if isinstance(shape, str) else self.const(list(shape))], name)

    def transpose(self, x, perm, name="transpose") -> str:
        return self.node("Transpose", [x], name, perm=list(perm))

    # --- the model ------------------------------------------------------------------------------------------
    def build(self, outputs, doc: str = "", metadata: dict | None = None) -> onnx.ModelProto:
        """The checked model. ``outputs``: tensor names, or (name, shape) pairs; an output's type and shape are
        inferred, the given shape standing where inference cannot reach (a Reshape to a computed shape at
        opset 13, whose Unsqueeze does not propagate data). Inferred shapes are stored as value_info."""
        outputs = [(o, None) if isinstance(o, str) else tuple(o) for o in outputs]
        graph = helper.make_graph(self.nodes, self.name, self.inputs,
                                  [helper.make_empty_tensor_value_info(o) for o, _ in outputs], self.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="tetrachip.examples.onnx_zoo",
                                  ir_version=helper.find_min_ir_version_for(opsets), doc_string=doc)
        if metadata:
            helper.set_model_props(model, {k: str(v) for k, v in metadata.items()})
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        info = {v.name: v for v in model.graph.value_info}
        for o, (name, shape) in zip(model.graph.output, outputs):
            o.CopyFrom(info[name])
            t = o.type.tensor_type
            if not t.HasField("shape"):
                if shape is None:
                    raise ValueError(f"{self.name}: the shape of output {name!r} cannot be inferred; give it")
                o.CopyFrom(helper.make_tensor_value_info(name, t.elem_type, list(shape)))
        names = {n for n, _ in outputs}
        keep = [v for v in model.graph.value_info if v.name not in names and v.type.tensor_type.HasField("shape")]
        del model.graph.value_info[:]
        model.graph.value_info.extend(keep)
        onnx.checker.check_model(model, full_check=True)
        return model


# --- convolutional networks ---------------------------------------------------------------------------------
def _check_image(name, image, least):
    if not isinstance(image, int) or image < least:
        raise ValueError(f"{name}: image must be an int >= {least}, got {image!r}")


def _check_positive(name, **values):
    for k, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: {k} must be a positive int, got {v!r}")


def resnet18(num_classes: int = 1000, image: int = 224, opset: int = DEFAULT_OPSET, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 in torchvision's layout; input ``input`` (1, 3, image, image), output ``logits``."""
    _check_positive("resnet18", num_classes=num_classes)
    _check_image("resnet18", image, 32)
    g = GraphBuilder("resnet18", opset, seed)
    x = g.input("input", (1, 3, image, image))
    y = g.relu(g.batch_norm(g.conv(x, 3, 64, 7, 2, name="conv1"), 64, "bn1"), "relu")
    y = g.node("MaxPool", [y], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, c in enumerate([64, 128, 256, 512], start=1):
        for i in range(2):
            stride = 2 if stage > 1 and i == 0 else 1
            with g.scope(f"layer{stage}.{i}"):
                h = g.relu(g.batch_norm(g.conv(y, cin, c, 3, stride, name="conv1"), c, "bn1"), "relu1")
                h = g.batch_norm(g.conv(h, c, c, 3, name="conv2"), c, "bn2")
                short = y
                if stride != 1 or cin != c:
                    with g.scope("downsample"):
                        short = g.batch_norm(g.conv(y, cin, c, 1, stride, name="0"), c, "1")
                y = g.relu(g.add(h, short, "add"), "relu2")
            cin = c
    y = g.node("Flatten", [g.node("GlobalAveragePool", [y], "avgpool")], "flatten", axis=1)
    y = g.gemm(y, 512, num_classes, "fc")
    y = g.node("Identity", [y], "logits")
    return g.build([y], doc=f"ResNet-18 (torchvision layout), {image}x{image}, {num_classes} classes, random weights")


#: MobileNetV2's (expansion t, channels c, repeats n, first stride s), the paper's Table 2
MOBILENET_V2_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                         (6, 320, 1, 1)]


def mobilenet_v2(num_classes: int = 1000, image: int = 224, opset: int = DEFAULT_OPSET,
                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0) in torchvision's layout; input ``input`` (1, 3, image, image), output ``logits``."""
    _check_positive("mobilenet_v2", num_classes=num_classes)
    _check_image("mobilenet_v2", image, 32)
    g = GraphBuilder("mobilenet_v2", opset, seed)

    def conv_bn(x, cin, cout, k, stride=1, groups=1, name="0"):
        """Conv, BatchNormalization, ReLU6 (torchvision's Conv2dNormActivation: NAME.0, NAME.1)."""
        with g.scope(name):
            y = g.batch_norm(g.conv(x, cin, cout, k, stride, groups, name="0"), cout, "1")
        return g.relu6(y, name + ".2")

    x = g.input("input", (1, 3, image, image))
    y = conv_bn(x, 3, 32, 3, 2, name="features.0")
    cin, idx = 32, 1
    for t, c, n, s in MOBILENET_V2_SETTINGS:
        for i in range(n):
            stride, hid = (s if i == 0 else 1), cin * t
            with g.scope(f"features.{idx}.conv"):
                h, j = y, 0
                if t != 1:
                    h, j = conv_bn(h, cin, hid, 1, name="0"), 1
                h = conv_bn(h, hid, hid, 3, stride, groups=hid, name=str(j))
                # the linear projection: a bare Conv then BatchNormalization, named as torchvision does
                h = g.batch_norm(g.conv(h, hid, c, 1, name=str(j + 1)), c, str(j + 2))
            y = g.add(y, h, f"features.{idx}.add") if stride == 1 and cin == c else h
            cin, idx = c, idx + 1
    y = conv_bn(y, cin, 1280, 1, name=f"features.{idx}")
    y = g.node("Flatten", [g.node("GlobalAveragePool", [y], "avgpool")], "flatten", axis=1)
    y = g.node("Identity", [g.gemm(y, 1280, num_classes, "classifier.1")], "logits")
    return g.build([y], doc=f"MobileNetV2 (width 1.0), {image}x{image}, {num_classes} classes, random weights")


# --- transformers -------------------------------------------------------------------------------------------
def _check_transformer(name, layers, d_model, heads, vocab, seq, positions):
    _check_positive(name, layers=layers, d_model=d_model, heads=heads, vocab=vocab, seq=seq)
    if positions not in ("constant", "input"):
        raise ValueError(f"{name}: positions must be 'constant' or 'input', got {positions!r}")
    if d_model % heads:
        raise ValueError(f"{name}: d_model ({d_model}) must be a multiple of heads ({heads})")


def bert_encoder(layers: int = 4, d_model: int = 256, heads: int = 4, vocab: int = 1000, seq: int = 32,
                 pooled: bool = False, positions: str = "constant", opset: int = DEFAULT_OPSET,
                 seed: int = 0) -> onnx.ModelProto:
    """A BERT encoder (post-LN); input ``input_ids`` (1, seq) int64, output ``last_hidden_state`` (1, seq, d_model)
    and, with ``pooled``, ``pooler_output`` (1, d_model): tanh(dense(hidden state of token 0)). ``positions``:
    ``"constant"`` (the position ids a Range) or ``"input"`` (a second input ``position_ids`` (1, seq) int64)."""
    _check_transformer("bert_encoder", layers, d_model, heads, vocab, seq, positions)
    g = GraphBuilder("bert_encoder", opset, seed)
    hd = d_model // heads
    ids = g.input("input_ids", (1, seq), np.int64)
    with g.scope("embeddings"):
        words = g.node("Gather", [g.normal("word_embeddings.weight", (vocab, d_model), 1.0), ids],
                       "word_embeddings", axis=0)
        if positions == "input":
            pos_ids = g.input("position_ids", (1, seq), np.int64)
        else:
            pos_ids = g.node("Range", [g.const(0), g.const(seq), g.const(1)], "position_ids")
        pos = g.node("Gather", [g.normal("position_embeddings.weight", (seq, d_model), 0.5), pos_ids],
                     "position_embeddings", axis=0)
        x = g.layer_norm(g.add(words, pos, "add"), d_model, 1e-12, "LayerNorm")

    # the head-split shape (batch, seq, heads, head size) from the input's Shape, as exporters write it
    with g.scope("shape"):
        shp = g.node("Shape", [ids], "input_shape")
        dims = [g.node("Unsqueeze", [g.node("Gather", [shp, g.const(i)], f"dim{i}", axis=0), g.const([0])],
                       f"dim{i}.unsqueeze") for i in range(2)]
        split_shape = g.node("Concat", [*dims, g.const([heads]), g.const([hd])], "split_heads", axis=0)
        merge_shape = g.node("Concat", [*dims, g.const([d_model])], "merge_heads", axis=0)
    scale = g.const(math.sqrt(hd), np.float32)

    for layer in range(layers):
        with g.scope(f"encoder.layer.{layer}"):
            with g.scope("attention.self"):
                q, k, v = (g.reshape(g.linear(x, d_model, d_model, n), split_shape, n + ".reshape")
                           for n in ("query", "key", "value"))
                q = g.transpose(q, (0, 2, 1, 3), "query.transpose")
                k = g.transpose(k, (0, 2, 3, 1), "key.transpose")
                v = g.transpose(v, (0, 2, 1, 3), "value.transpose")
                s = g.node("Div", [g.node("MatMul", [q, k], "scores"), scale], "scores.scaled")
                p = g.node("Softmax", [s], "softmax", axis=-1)
                ctx = g.transpose(g.node("MatMul", [p, v], "context"), (0, 2, 1, 3), "context.transpose")
                ctx = g.reshape(ctx, merge_shape, "context.reshape")
            with g.scope("attention.output"):
                a = g.linear(ctx, d_model, d_model, "dense")
                x = g.layer_norm(g.add(a, x, "residual"), d_model, 1e-12, "LayerNorm")
            h = g.gelu_erf(g.linear(x, d_model, 4 * d_model, "intermediate.dense"), "intermediate.gelu")
            with g.scope("output"):
                h = g.linear(h, 4 * d_model, d_model, "dense")
                x = g.layer_norm(g.add(h, x, "residual"), d_model, 1e-12, "LayerNorm")
    outs = [(g.node("Identity", [x], "last_hidden_state"), (1, seq, d_model))]
    if pooled:
        with g.scope("pooler"):
            first = g.node("Gather", [x, g.const(0)], "first_token", axis=1)
            pooled_y = g.node("Tanh", [g.linear(first, d_model, d_model, "dense")], "tanh")
        outs.append((g.node("Identity", [pooled_y], "pooler_output"), (1, d_model)))
    return g.build(outs, doc=f"BERT encoder: {layers} post-LN layers, d_model {d_model}, {heads} heads, "
                             f"vocab {vocab}, seq {seq}, random weights")


def gpt2_decoder(layers: int = 6, d_model: int = 384, heads: int = 6, vocab: int = 1000, seq: int = 64,
                 mask: str = "where", positions: str = "constant", opset: int = DEFAULT_OPSET,
                 seed: int = 0) -> onnx.ModelProto:
    """A GPT-2 decoder (pre-LN, causal); input ``input_ids`` (1, seq) int64, output ``logits`` (1, seq, vocab).
    ``mask``: ``"where"`` (Where on a constant lower-triangular bool mask, -inf elsewhere) or ``"add"``
    (a constant additive mask: 0 on and below the diagonal, -1e9 above). ``positions``: ``"constant"`` (the
    position ids an initializer) or ``"input"`` (a second input ``position_ids`` (1, seq) int64)."""
    _check_transformer("gpt2_decoder", layers, d_model, heads, vocab, seq, positions)
    if mask not in ("where", "add"):
        raise ValueError(f"gpt2_decoder: mask must be 'where' or 'add', got {mask!r}")
    g = GraphBuilder("gpt2_decoder", opset, seed)
    hd = d_model // heads
    ids = g.input("input_ids", (1, seq), np.int64)
    wte_w = (0.5 * g.rng.standard_normal((vocab, d_model))).astype(np.float32)
    wte = g.init("wte.weight", wte_w)
    wpe = g.normal("wpe.weight", (seq, d_model), 0.2)
    pos_ids = g.input("position_ids", (1, seq), np.int64) if positions == "input" else \
        g.init("position_ids", np.arange(seq))
    x = g.add(g.node("Gather", [wte, ids], "wte", axis=0), g.node("Gather", [wpe, pos_ids], "wpe", axis=0),
              "embeddings")
    causal = np.tril(np.ones((seq, seq), bool)).reshape(1, 1, seq, seq)
    if mask == "where":
        bias, neg = g.init("causal_mask", causal), g.const(-np.inf, np.float32)
    else:
        bias = g.init("causal_mask", np.where(causal, 0.0, -1e9).astype(np.float32))
    heads_shape = g.const([1, -1, heads, hd])
    merge_shape = g.const([1, -1, d_model])
    scale = g.const(math.sqrt(hd), np.float32)
    for layer in range(layers):
        with g.scope(f"h.{layer}"):
            a = g.layer_norm(x, d_model, 1e-5, "ln_1")
            with g.scope("attn"):
                qkv = g.linear(a, d_model, 3 * d_model, "c_attn")
                q, k, v = g.node("Split", [qkv, g.const([d_model] * 3)], "split", outputs=3, axis=-1)
                q = g.transpose(g.reshape(q, heads_shape, "q.reshape"), (0, 2, 1, 3), "q.transpose")
                k = g.transpose(g.reshape(k, heads_shape, "k.reshape"), (0, 2, 3, 1), "k.transpose")
                v = g.transpose(g.reshape(v, heads_shape, "v.reshape"), (0, 2, 1, 3), "v.transpose")
                s = g.node("Div", [g.node("MatMul", [q, k], "scores"), scale], "scores.scaled")
                s = g.node("Where", [bias, s, neg], "masked") if mask == "where" else g.add(s, bias, "masked")
                p = g.node("Softmax", [s], "softmax", axis=-1)
                o = g.transpose(g.node("MatMul", [p, v], "context"), (0, 2, 1, 3), "context.transpose")
                o = g.linear(g.reshape(o, merge_shape, "context.reshape"), d_model, d_model, "c_proj",
                             std=0.5 / math.sqrt(d_model))
            x = g.add(x, o, "residual_1")
            h = g.layer_norm(x, d_model, 1e-5, "ln_2")
            with g.scope("mlp"):
                h = g.gelu_tanh(g.linear(h, d_model, 4 * d_model, "c_fc"), "gelu")
                h = g.linear(h, 4 * d_model, d_model, "c_proj", std=0.5 / math.sqrt(4 * d_model))
            x = g.add(x, h, "residual_2")
    x = g.layer_norm(x, d_model, 1e-5, "ln_f")
    # the LM head is tied to the token embedding (stored transposed, scaled as a projection)
    logits = g.node("MatMul", [x, g.init("lm_head.weight", wte_w.T / math.sqrt(d_model))], "logits")
    return g.build([logits], doc=f"GPT-2 decoder: {layers} pre-LN causal layers, d_model {d_model}, {heads} heads, "
                                 f"vocab {vocab}, seq {seq}, mask {mask}, random weights")


# --- the digits models, trained here -----------------------------------------------------------------------
DIGITS_KINDS = ("mlp", "cnn", "bncnn")


@functools.lru_cache(maxsize=None)
def trained_digits(kind: str, epochs: int = 10):
    """examples/digits.py ``trained(kind, epochs)``, once per process: (model, data, input shape, accuracy)."""
    if kind not in DIGITS_KINDS:
        raise ValueError(f"digits kind must be one of {', '.join(DIGITS_KINDS)}, got {kind!r}")
    _check_positive("trained_digits", epochs=epochs)
    from examples import digits
    return digits.trained(kind, epochs)


def export_digits(model, kind: str, opset: int = DEFAULT_OPSET, metadata: dict | None = None) -> onnx.ModelProto:
    """The ONNX graph of a digits module of examples/digits.py (``mlp()``, ``CNN()`` or ``BNCNN()``) with its
    current parameters; input ``input`` (batch, 64) for the MLP, else (batch, 1, 8, 8); output ``logits``."""
    if kind not in DIGITS_KINDS:
        raise ValueError(f"digits kind must be one of {', '.join(DIGITS_KINDS)}, got {kind!r}")
    g = GraphBuilder(f"digits_{kind}", opset)

    def arr(t):
        return np.asarray(t.numpy(), np.float32)

    def gemm(x, lin, name):
        ins = [x, g.init(name + ".weight", arr(lin.weight)), g.init(name + ".bias", arr(lin.bias))]
        return g.node("Gemm", ins, name, transB=1)

    def conv(x, c, name):
        ins = [x, g.init(name + ".weight", arr(c.weight))] + ([g.init(name + ".bias", arr(c.bias))]
                                                             if c.bias is not None else [])
        k, p = c.weight.shape[-1], c.padding
        return g.node("Conv", ins, name, kernel_shape=[k, k], strides=[c.stride] * 2, pads=[p] * 4, group=c.groups)

    def bn(x, b, name):
        ins = [x] + [g.init(f"{name}.{n}", arr(getattr(b, n))) for n in ("weight", "bias", "running_mean",
                                                                        "running_var")]
        return g.node("BatchNormalization", ins, name, epsilon=b.eps)

    if kind == "mlp":
        x = g.input("input", ("batch", 64))
        y = gemm(g.relu(gemm(x, model[0], "layers.0"), "layers.1"), model[2], "layers.2")
    elif kind == "cnn":
        x = g.input("input", ("batch", 1, 8, 8))
        y = g.relu(conv(x, model.c1, "c1"), "c1.relu")
        y = g.relu(conv(y, model.c2, "c2"), "c2.relu")
        y = gemm(g.node("Flatten", [y], "flatten", axis=1), model.fc, "fc")
    else:
        x = g.input("input", ("batch", 1, 8, 8))
        y = g.relu(bn(conv(x, model.c1, "c1"), model.b1, "b1"), "b1.relu")
        y = g.node("MaxPool", [y], "pool1", kernel_shape=[2, 2], strides=[2, 2])
        y = g.relu(bn(conv(y, model.c2, "c2"), model.b2, "b2"), "b2.relu")
        y = g.node("AveragePool", [y], "pool2", kernel_shape=[2, 2], strides=[2, 2])
        y = gemm(g.node("Flatten", [y], "flatten", axis=1), model.fc, "fc")
    y = g.node("Identity", [y], "logits")
    return g.build([y], doc=f"digits {kind} (scikit-learn's 8x8 digits), trained with tetrachip", metadata=metadata)


def _digits(kind, epochs, opset):
    model, _data, _shape, acc = trained_digits(kind, epochs)
    return export_digits(model, kind, opset, metadata={"float_accuracy": f"{acc:.4f}", "epochs": epochs})


def digits_mlp(epochs: int = 10, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The digits MLP (64 -> 64 ReLU -> 10), trained here for ``epochs``."""
    return _digits("mlp", epochs, opset)


def digits_cnn(epochs: int = 10, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The digits CNN (conv 1->16 ReLU, conv 16->32 /2 ReLU, linear 512 -> 10), trained here for ``epochs``."""
    return _digits("cnn", epochs, opset)


def digits_bncnn(epochs: int = 10, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The digits BatchNorm CNN (conv+BN+ReLU, max-pool, conv+BN+ReLU, average pool, linear), trained here."""
    return _digits("bncnn", epochs, opset)


# --- registry and command line ------------------------------------------------------------------------------
#: name -> (builder, keyword arguments at full size, keyword arguments of a small version for quick checks)
MODELS = {
    "resnet18": (resnet18, {}, {"num_classes": 10, "image": 32}),
    "mobilenet_v2": (mobilenet_v2, {}, {"num_classes": 10, "image": 32}),
    "bert_encoder": (bert_encoder, {}, {"layers": 2, "d_model": 64, "heads": 2, "vocab": 100, "seq": 16}),
    "gpt2_decoder": (gpt2_decoder, {}, {"layers": 2, "d_model": 64, "heads": 2, "vocab": 100, "seq": 16}),
    "digits_mlp": (digits_mlp, {}, {"epochs": 1}),
    "digits_cnn": (digits_cnn, {}, {"epochs": 1}),
    "digits_bncnn": (digits_bncnn, {}, {"epochs": 1}),
}


def build(name: str, small: bool = False, **kw) -> onnx.ModelProto:
    """The zoo model ``name`` at full size (or its ``small`` version), ``kw`` overriding its arguments."""
    if name not in MODELS:
        raise ValueError(f"unknown zoo model {name!r}; the zoo has {', '.join(MODELS)}")
    fn, full, little = MODELS[name]
    return fn(**{**(little if small else full), **kw})


def example_inputs(model: onnx.ModelProto, seed: int = 0, batch: int = 4) -> dict[str, np.ndarray]:
    """Random feeds for a model's graph inputs: standard normal floats; for an int64 input, ids below the row
    count of the table it indexes (0, 1, ... for ``position_ids``); a symbolic dimension takes ``batch``."""
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in model.graph.initializer}
    feeds = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in t.shape.dim]
        if v.name == "position_ids":
            feeds[v.name] = np.broadcast_to(np.arange(shape[-1], dtype=np.int64), shape).copy()
        elif t.elem_type == TensorProto.INT64:
            rows = min((inits[n.input[0]].dims[0] for n in model.graph.node
                        if n.op_type == "Gather" and n.input[1] == v.name and n.input[0] in inits), default=2)
            feeds[v.name] = rng.integers(0, rows, shape).astype(np.int64)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(helper.tensor_dtype_to_np_dtype(t.elem_type))
    return feeds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Write the ONNX model zoo's models as NAME.onnx files.")
    ap.add_argument("names", nargs="*", help="models to write (default: all)")
    ap.add_argument("--out", type=Path, help="folder to write NAME.onnx into")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"{MIN_OPSET}..{MAX_OPSET}")
    ap.add_argument("--small", action="store_true", help="the small versions the tests use")
    args = ap.parse_args(argv)
    if args.list:
        for name, (fn, _, little) in MODELS.items():
            print(f"{name:<14}{fn.__doc__.splitlines()[0]}  (--small: {little})")
        return 0
    if args.out is None:
        ap.error("--out DIR is needed (or --list)")
    bad = [n for n in args.names if n not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {', '.join(bad)}; the zoo has {', '.join(MODELS)}")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for name in args.names or list(MODELS):
            model = build(name, args.small, opset=args.opset)
            path = args.out / f"{name}.onnx"
            onnx.save(model, path)
            print(f"{path}  {path.stat().st_size / 1e6:.2f} MB, {len(model.graph.node)} nodes, opset {args.opset}")
    except (ValueError, OSError) as e:
        print(f"onnx_zoo: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

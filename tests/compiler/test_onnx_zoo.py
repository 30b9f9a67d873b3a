"""The ONNX model zoo (examples/onnx_zoo.py) at small sizes.

Without the importer: every model passes the checker and runs under onnxruntime at opsets 13, 17 and 21; the
architectures compute what they claim (onnxruntime against a PyTorch functional re-implementation that reads
the initializers by their torchvision / Hugging Face names, and uses every one of them); GPT-2 is causal and
BERT is not; the exported digits models equal the tetrachip modules they come from, and the trained ones keep
their accuracy.

With ``tc.onnx.load`` (compiler/importers/onnx_import.py): every zoo model on ``Device("numpy")`` matches
onnxruntime to rtol = atol = 1e-4, and compiled for the chip (``tc.compile``) runs on ``Device("sim")``
bit-exact to ``cm.reference``; where the chip compiler refuses a model, its ChipCompileError names the
operator."""
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tetrachip as tc  # noqa: E402
from examples import onnx_zoo as zoo  # noqa: E402

#: the architectures' small versions (``zoo.build(name, small=True)``) the tests use
SMALL = {name: zoo.MODELS[name][2] for name in ("resnet18", "mobilenet_v2", "bert_encoder", "gpt2_decoder")}
#: the output shapes they must have (10 classes; 16 tokens, d_model 64, a vocabulary of 100)
SHAPES = {"resnet18": [(1, 10)], "mobilenet_v2": [(1, 10)], "bert_encoder": [(1, 16, 64)],
          "gpt2_decoder": [(1, 16, 100)]}


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _weights(model):
    """The model's initializers as float32/int64 torch tensors, by name; ``used`` records the names read."""
    torch = pytest.importorskip("torch")

    class W(dict):
        used: set = set()

        def __getitem__(self, k):
            self.used.add(k)
            return super().__getitem__(k)

    w = W({t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy()) for t in model.graph.initializer})
    w.used = set()
    return w


def _params(model):
    """The initializers that are weights (not the small shape/axes/scalar constants)."""
    return {t.name for t in model.graph.initializer if not t.name.startswith("const.")}


# --- PyTorch functional references, written from the papers' / torchvision's / Hugging Face's layouts ---------
def _torch_resnet18(w, x):
    import torch.nn.functional as F

    def conv_bn(x, conv, bn, stride, pad):
        y = F.conv2d(x, w[conv + ".weight"], stride=stride, padding=pad)
        return F.batch_norm(y, w[bn + ".running_mean"], w[bn + ".running_var"], w[bn + ".weight"], w[bn + ".bias"],
                            False, 0.0, 1e-5)

    y = F.max_pool2d(F.relu(conv_bn(x, "conv1", "bn1", 2, 3)), 3, 2, 1)
    for stage in range(1, 5):
        for i in range(2):
            p, s = f"layer{stage}.{i}", 2 if stage > 1 and i == 0 else 1
            h = conv_bn(F.relu(conv_bn(y, p + ".conv1", p + ".bn1", s, 1)), p + ".conv2", p + ".bn2", 1, 1)
            short = conv_bn(y, p + ".downsample.0", p + ".downsample.1", s, 0) if stage > 1 and i == 0 else y
            y = F.relu(h + short)
    return F.linear(y.mean((2, 3)), w["fc.weight"], w["fc.bias"])


def _torch_mobilenet_v2(w, x):
    import torch.nn.functional as F

    def cna(x, p, stride=1, groups=1, act=True):
        k = w[p + ".0.weight"].shape[-1]
        y = F.conv2d(x, w[p + ".0.weight"], stride=stride, padding=k // 2, groups=groups)
        y = F.batch_norm(y, w[p + ".1.running_mean"], w[p + ".1.running_var"], w[p + ".1.weight"],
                         w[p + ".1.bias"], False, 0.0, 1e-5)
        return F.relu6(y) if act else y

    y, cin, idx = cna(x, "features.0", 2), 32, 1
    # Sandler et al. 2018, Table 2: expansion t, channels c, repeats n, first stride s
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]:
        for i in range(n):
            stride, p = (s if i == 0 else 1), f"features.{idx}.conv"
            h, j = (y, 0) if t == 1 else (cna(y, p + ".0"), 1)
            h = cna(h, f"{p}.{j}", stride, groups=cin * t)
            h = F.conv2d(h, w[f"{p}.{j + 1}.weight"])
            h = F.batch_norm(h, *(w[f"{p}.{j + 2}.{n_}"] for n_ in ("running_mean", "running_var", "weight", "bias")),
                             False, 0.0, 1e-5)
            y = y + h if stride == 1 and cin == c else h
            cin, idx = c, idx + 1
    y = cna(y, f"features.{idx}")
    return F.linear(y.mean((2, 3)), w["classifier.1.weight"], w["classifier.1.bias"])


def _ln_lin(w, d, eps):
    """A transformer's LayerNorm and Linear by parameter prefix (``p.weight``, ``p.bias``), in torch."""
    import torch.nn.functional as F

    def ln(x, p):
        return F.layer_norm(x, (d,), w[p + ".weight"], w[p + ".bias"], eps)

    def lin(x, p):
        return x @ w[p + ".weight"] + w[p + ".bias"]
    return ln, lin


def _torch_bert(w, ids, layers, heads):
    import torch
    import torch.nn.functional as F
    d = w["embeddings.word_embeddings.weight"].shape[1]
    T = ids.shape[1]

    ln, lin = _ln_lin(w, d, 1e-12)

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T]
    x = ln(x, "embeddings.LayerNorm")
    for i in range(layers):
        p = f"encoder.layer.{i}"
        q, k, v = (lin(x, f"{p}.attention.self.{n}").reshape(1, T, heads, d // heads).transpose(1, 2)
                   for n in ("query", "key", "value"))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads), -1) @ v
        a = lin(a.transpose(1, 2).reshape(1, T, d), f"{p}.attention.output.dense")
        x = ln(a + x, f"{p}.attention.output.LayerNorm")
        h = lin(F.gelu(lin(x, f"{p}.intermediate.dense")), f"{p}.output.dense")
        x = ln(h + x, f"{p}.output.LayerNorm")
    return x


def _torch_gpt2(w, ids, layers, heads):
    import torch
    import torch.nn.functional as F
    d = w["wte.weight"].shape[1]
    T = ids.shape[1]

    ln, lin = _ln_lin(w, d, 1e-5)

    x = w["wte.weight"][ids] + w["wpe.weight"][w["position_ids"]]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(layers):
        p = f"h.{i}"
        q, k, v = (z.reshape(1, T, heads, d // heads).transpose(1, 2)
                   for z in lin(ln(x, p + ".ln_1"), p + ".attn.c_attn").split(d, -1))
        s = (q @ k.transpose(-1, -2) / math.sqrt(d // heads)).masked_fill(~causal, -math.inf)
        a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(1, T, d)
        x = x + lin(a, p + ".attn.c_proj")
        x = x + lin(F.gelu(lin(ln(x, p + ".ln_2"), p + ".mlp.c_fc"), approximate="tanh"), p + ".mlp.c_proj")
    return ln(x, "ln_f") @ w["lm_head.weight"]


# --- the zoo without the importer -----------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [13, 17, 21])
@pytest.mark.parametrize("name", list(SMALL))
def test_checked_and_runs_under_onnxruntime(name, opset):
    model = zoo.build(name, small=True, opset=opset)
    assert model.opset_import[0].version == opset
    onnx.checker.check_model(onnx.load_from_string(model.SerializeToString()), full_check=True)
    outs = _ort(model, zoo.example_inputs(model))
    assert [o.shape for o in outs] == SHAPES[name]
    assert all(np.isfinite(o).all() and o.std() > 1e-3 for o in outs)
    # node names are unique, readable and scoped
    names = [n.name for n in model.graph.node]
    assert len(set(names)) == len(names) and all(names)


def test_weights_are_seeded():
    a, b = (zoo.build("gpt2_decoder", True).SerializeToString() for _ in range(2))
    assert a == b
    w0, w1 = ({t.name: onnx.numpy_helper.to_array(t) for t in zoo.build("resnet18", True, seed=s).graph.initializer}
              for s in (0, 1))
    assert w0.keys() == w1.keys() and not np.array_equal(w0["conv1.weight"], w1["conv1.weight"])
    var = w0["layer3.0.bn2.running_var"]
    assert var.min() > 0 and var.std() > 0.1          # BatchNorm statistics are not the identity's


def test_opset_spellings():
    """LayerNormalization from opset 17 (a decomposition before), Gelu from 20 (Erf before), ReduceMean's axes an
    input from 18; the same weights give the same outputs in every spelling."""
    ops = {o: {n.op_type for n in zoo.build("bert_encoder", True, opset=o).graph.node} for o in (13, 17, 20)}
    assert "LayerNormalization" not in ops[13] and "ReduceMean" in ops[13] and "Erf" in ops[13]
    assert "LayerNormalization" in ops[17] and "Gelu" not in ops[17] and "Erf" in ops[17]
    assert "Gelu" in ops[20] and "Erf" not in ops[20]
    reduce_18 = [n for n in zoo.build("gpt2_decoder", True, opset=13).graph.node if n.op_type == "ReduceMean"]
    assert reduce_18 and all(len(n.input) == 1 for n in reduce_18)
    for name in ("bert_encoder", "gpt2_decoder"):
        m13 = zoo.build(name, True, opset=13)
        feeds = zoo.example_inputs(m13)
        want = _ort(m13, feeds)[0]
        for o in (16, 18, 20, 21):
            np.testing.assert_allclose(_ort(zoo.build(name, True, opset=o), feeds)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(SMALL))
def test_matches_a_pytorch_reference(name):
    """onnxruntime's output equals a PyTorch functional model of the named architecture that reads every weight."""
    torch = pytest.importorskip("torch")
    kw = SMALL[name]
    model = zoo.build(name, small=True, seed=3)
    feeds = zoo.example_inputs(model, seed=1)
    w = _weights(model)
    x = torch.from_numpy(next(iter(feeds.values())))
    with torch.no_grad():
        if name == "resnet18":
            want = _torch_resnet18(w, x)
        elif name == "mobilenet_v2":
            want = _torch_mobilenet_v2(w, x)
        elif name == "bert_encoder":
            want = _torch_bert(w, x, kw["layers"], kw["heads"])
        else:
            want = _torch_gpt2(w, x, kw["layers"], kw["heads"])
    want = want.numpy()
    got = _ort(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    # every weight is read (the causal mask is the reference's own: test_gpt2_is_causal_and_bert_is_not checks it)
    assert _params(model) - w.used - {"causal_mask"} == set(), "weights the reference does not use"


def test_full_size_layouts():
    """At full size: torchvision's ResNet-18 and MobileNetV2 parameter counts; the requested transformer sizes."""
    counts = {}
    for name, want in (("resnet18", 11_689_512), ("mobilenet_v2", 3_504_872)):
        model = zoo.build(name)
        counts[name] = sum(math.prod(t.dims) for t in model.graph.initializer if t.name in _params(model)
                           and not t.name.endswith(("running_mean", "running_var")))
        assert counts[name] == want, name
        assert [tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in model.graph.output] == [(1, 1000)]
    bert = zoo.bert_encoder(layers=1, d_model=32, heads=4, vocab=50, seq=8, pooled=True)
    assert [o.name for o in bert.graph.output] == ["last_hidden_state", "pooler_output"]
    assert [o.shape for o in _ort(bert, zoo.example_inputs(bert))] == [(1, 8, 32), (1, 32)]


def test_gpt2_is_causal_and_bert_is_not():
    for name, mask in (("gpt2_decoder", "where"), ("gpt2_decoder", "add"), ("bert_encoder", None)):
        model = zoo.build(name, True, **({"mask": mask} if mask else {}))
        feeds = zoo.example_inputs(model)
        ids = feeds["input_ids"]
        changed = ids.copy()
        changed[0, 10] = (ids[0, 10] + 1) % 100
        a, b = _ort(model, feeds)[0], _ort(model, {"input_ids": changed})[0]
        same = np.all(a == b, axis=-1)[0]
        if name == "gpt2_decoder":
            assert same[:10].all() and not same[10:].any(), (mask, same)
        else:
            assert not same.any()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="opset must be an int in 13..21"):
        zoo.resnet18(opset=12)
    with pytest.raises(ValueError, match="image must be an int >= 32"):
        zoo.mobilenet_v2(image=16)
    with pytest.raises(ValueError, match=r"d_model \(30\) must be a multiple of heads \(4\)"):
        zoo.bert_encoder(d_model=30, heads=4)
    with pytest.raises(ValueError, match="mask must be 'where' or 'add'"):
        zoo.gpt2_decoder(mask="none")
    with pytest.raises(ValueError, match="positions must be 'constant' or 'input'"):
        zoo.bert_encoder(positions="learned")
    with pytest.raises(ValueError, match="layers must be a positive int"):
        zoo.gpt2_decoder(layers=0)
    with pytest.raises(ValueError, match="unknown zoo model 'vgg'"):
        zoo.build("vgg")
    with pytest.raises(ValueError, match="digits kind must be one of"):
        zoo.export_digits(None, "rnn")


@pytest.mark.parametrize("kind", zoo.DIGITS_KINDS)
def test_digits_export_equals_the_module(kind):
    """An exported digits module (untrained: random weights, BatchNorm statistics set) computes what the module
    computes on the reference backend."""
    from examples import digits
    tc.manual_seed(7)
    module = {"mlp": digits.mlp, "cnn": digits.CNN, "bncnn": digits.BNCNN}[kind]().eval()
    if kind == "bncnn":
        rng = np.random.default_rng(0)
        for b in (module.b1, module.b2):
            c = b.weight.shape[0]
            b.running_mean = tc.Tensor(rng.uniform(-0.3, 0.3, c).astype(np.float32))
            b.running_var = tc.Tensor(rng.uniform(0.5, 2.0, c).astype(np.float32))
            b.weight = tc.Tensor(rng.uniform(0.5, 1.5, c).astype(np.float32))
    x = np.random.default_rng(1).standard_normal((5, 64) if kind == "mlp" else (5, 1, 8, 8)).astype(np.float32)
    with tc.Device("numpy"):
        want = module(tc.Tensor(x)).numpy()
    model = zoo.export_digits(module, kind, opset=15)
    np.testing.assert_allclose(_ort(model, {"input": x})[0], want, rtol=1e-4, atol=1e-5)


def test_trained_digits_keep_their_accuracy():
    """digits_mlp trained for 1 epoch: onnxruntime classifies the held-out digits as the float model did."""
    from examples import digits
    model = zoo.digits_mlp(epochs=1)
    acc = float({p.key: p.value for p in model.metadata_props}["float_accuracy"])
    _, Xte, _, yte = digits.load()
    got = digits.accuracy(_ort(model, {"input": Xte})[0], yte)
    assert got > 0.85 and abs(got - acc) < 1e-3


def test_command_line_writes_models(tmp_path, capsys):
    assert zoo.main(["--out", str(tmp_path), "--small", "--opset", "13", "gpt2_decoder", "digits_mlp"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits_mlp.onnx", "gpt2_decoder.onnx"]
    model = onnx.load(tmp_path / "gpt2_decoder.onnx")
    assert model.opset_import[0].version == 13 and [o.name for o in model.graph.output] == ["logits"]
    assert zoo.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(n in listed for n in zoo.MODELS)
    with pytest.raises(SystemExit):
        zoo.main(["--out", str(tmp_path), "vgg"])
    assert zoo.main(["--out", str(tmp_path), "--opset", "99", "resnet18"]) == 1
    assert "opset must be an int in 13..21" in capsys.readouterr().err


# --- through the importer -----------------------------------------------------------------------------------
#: (test id, zoo model, its arguments beyond the small size, the chip compiler's refusal or None): every model
#: and every spelling compiles: the transformers' constant position embeddings (one constant (seq, d) tensor
#: added to the token embeddings) and position ids as an input; GPT-2's Where(mask, scores, -inf) with the -inf
#: an initializer or a Constant node, and its additive mask; opset 13's written-out LayerNormalization
#: ((x - mean) / sqrt(var + eps), as torch.onnx.export writes it) and opset 21's Gelu operator and ReduceMean
#: axes input. A refusal would be asserted to name the operator.
CHIP_CASES = [
    ("resnet18", "resnet18", {}, None),
    ("mobilenet_v2", "mobilenet_v2", {}, None),
    ("digits_mlp", "digits_mlp", {}, None),
    ("digits_cnn", "digits_cnn", {}, None),
    ("digits_bncnn", "digits_bncnn", {}, None),
    ("bert_encoder", "bert_encoder", {}, None),
    ("bert_encoder-positions_input", "bert_encoder", {"positions": "input"}, None),
    ("gpt2_decoder", "gpt2_decoder", {}, None),
    ("gpt2_decoder-positions_input-mask_add", "gpt2_decoder", {"positions": "input", "mask": "add"}, None),
    ("gpt2_decoder-positions_input", "gpt2_decoder", {"positions": "input"}, None),
    ("gpt2_decoder-positions_input-inf_constant_node", "gpt2_decoder", {"positions": "input"}, None),
    ("bert_encoder-opset21-positions_input", "bert_encoder", {"positions": "input", "opset": 21}, None),
    ("gpt2_decoder-opset21-positions_input-mask_add", "gpt2_decoder",
     {"positions": "input", "mask": "add", "opset": 21}, None),
    ("bert_encoder-opset13", "bert_encoder", {"opset": 13}, None),
]
#: the chip configuration every case compiles for
CHIP_CONFIG = "base"
#: chip against onnxruntime, relative to the largest float output: int8 quantization of every layer (measured:
#: ResNet-18 2.1%, the digits models 0.5% to 1.2%, BERT 2.9%, GPT-2 2.6%; MobileNetV2's 17 blocks of random
#: depthwise and pointwise weights 14.7%)
FLOAT_BOUND = {"mobilenet_v2": 0.25}
FLOAT_BOUND_DEFAULT = 0.08


def _loader():
    return pytest.importorskip("compiler.importers.onnx_import")


def _as_constant_node(model, name):
    """The model with initializer ``name`` turned into a Constant node (as some exporters write scalars)."""
    init = next(t for t in model.graph.initializer if t.name == name)
    model.graph.initializer.remove(init)
    model.graph.node.insert(0, onnx.helper.make_node("Constant", [], [name], name=name + ".constant", value=init))
    onnx.checker.check_model(model, full_check=True)
    return model


def _case(case, name, kw):
    model = zoo.build(name, small=True, **kw)
    if case.endswith("inf_constant_node"):
        model = _as_constant_node(model, "const.float32.-inf")
    if name.startswith("digits_"):
        from examples import digits
        _, Xte, _, _ = digits.load()
        return model, {"input": Xte[:32].reshape((-1, 64) if name == "digits_mlp" else (-1, 1, 8, 8))}
    return model, zoo.example_inputs(model, seed=2)


def _params_of(cases):
    return [c if hasattr(c, "marks") else pytest.param(*c, id=c[0]) for c in cases]


@pytest.mark.parametrize("case,name,kw,refusal", _params_of(CHIP_CASES))
def test_imported_matches_onnxruntime(case, name, kw, refusal):
    _loader()
    model, feeds = _case(case, name, kw)
    want = _ort(model, feeds)
    imported = tc.onnx.load(model)
    with tc.Device("numpy"):
        got = imported(**feeds)
        got = [t.numpy() for t in (got if isinstance(got, tuple) else (got,))]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert_encoder", "gpt2_decoder", "digits_cnn"])
def test_imported_matches_onnxruntime_on_opencl(name):
    """The same imported models on Device("opencl") (the generated OpenCL kernels; PoCL on the CPU here)."""
    _loader()
    from tests.gpu.gpu_helpers import device_or_skip
    dev = device_or_skip("opencl")
    model, feeds = _case(name, name, {})
    want = _ort(model, feeds)
    before = dev.backend.launches
    got = dev.run(*(lambda o: o if isinstance(o, tuple) else (o,))(tc.onnx.load(model)(**feeds)))
    assert dev.backend.launches > before
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case,name,kw,refusal", _params_of(CHIP_CASES))
def test_imported_on_the_chip_is_bit_exact(case, name, kw, refusal):
    _loader()
    model, feeds = _case(case, name, kw)
    inputs = list(feeds.values())
    imported = tc.onnx.load(model)
    if refusal:
        with pytest.raises(tc.ChipCompileError, match=refusal):
            tc.compile(imported, inputs, config=CHIP_CONFIG)
        return
    cm = tc.compile(imported, inputs, config=CHIP_CONFIG)
    res = tc.Device("sim", config=CHIP_CONFIG).run(cm, *inputs)
    ref = cm.reference(*inputs)
    assert len(res.outputs) == len(ref)
    for a, b in zip(res.outputs, ref):
        assert np.array_equal(a, b)
    want = _ort(model, feeds)[0]
    err = float(np.abs(res.outputs[0] - want).max() / np.abs(want).max())
    print(f"{case}: {res.stats.cycles} cycles, {100 * err:.2f}% from onnxruntime")
    assert err < FLOAT_BOUND.get(case, FLOAT_BOUND_DEFAULT), err

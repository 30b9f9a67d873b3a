"""Scheduling and fusion: the checked primitive graph grouped into chip kernels.

The frontend composes everything from ~30 primitives, so a linear layer is
``SUM(MUL(EXPAND(x), EXPAND(PERMUTE(W))))`` and a convolution is the same
contraction over a sliding-window view built from a dozen movement ops. This pass
walks the graph once and recognises, without caring how the views were spelled:

* **contraction kernels**: ``SUM(MUL(view(activation), view(constant)))``. Every
  movement op on an activation is applied to an *index array* (the position of each
  element in its tensor), so any chain of reshapes, expands, pads, shrinks and
  permutes becomes one gather map ``G[m, k]``: the kernel is ``A @ W`` with
  ``A[m, k] = x[G[m, k]]`` (an im2col the DMA performs, see ``compiler.lower.tiling``).
  Output axes along which the constant varies are the GEMM's N axes, those along
  which the activation varies its M axes, the summed axes its K axes.
* **fused epilogues**: ``+ bias`` (a constant varying along N only), ``* scale`` (a constant
  varying along N only: the weight columns and bias scale, which is how an eval-mode
  BatchNorm folds into the convolution before it), ReLU (``WHERE(0 < y, y, 0)``) and a
  clip (ReLU6, ``clamp``: the requantizer's lo/hi) folded into the producing kernel, which
  then runs matmul, bias, activation and requantization as one kernel.
* **elementwise kernels** (``EwKernel``, the VPU): ``a + b`` and ``max(a, b)`` of activations
  (scaled sources summed or maxed lane-wise; a NEG or scalar MUL of the result scales the
  coefficients, so ``minimum`` is a min kernel); a MAX reduction over window views (max
  pooling) is a max over one view per window position.
* **lookup tables**: a chain of elementwise ops whose only non-constant input is one
  activation (sigmoid, tanh, GELU, SiLU = ``x * sigmoid(x)``, ELU, ``x * c + d``, ...) is kept
  as a float function ``_Fn`` of that tensor and becomes one ``lut`` kernel when something else
  reads it: the quantizer tabulates it over the 256 int8 inputs (``vlut``).
* **sums of activation views** without a weight (average pooling, ``mean``) are contractions
  with a constant weight (ones; N = 1), and the ``* 1/count`` after them folds into it.
* **diagonal GEMMs**: a scale or shift that varies along some axes of an activation no kernel
  owns (a BatchNorm after an add, on an input, after pooling) is a GEMM whose weight is that
  constant's diagonal (or identity weights and the shift as bias); later epilogues fold into it.
* **pads** of an activation become zero borders of its DRAM layout (the producer
  writes the interior; the reader's strided DMA reads the border as zeros). Max pooling's
  ``-inf`` padding reads that zero border too when the input is never negative (after ReLU,
  a clip at 0, a non-negative table); otherwise each border read is moved to the window's
  nearest element inside the tensor (the same max).
* **norm kernels**: LayerNorm, RMSNorm and softmax over the last axis, found as composites by
  ``compiler.ir.patterns.recognise`` (run first), become one ``NormKernel`` each (a VPU kernel:
  ``compiler.lower.norms``), a softmax maybe with a constant mask; an attention composite
  (``softmax(mask(q k^T * scale)) v``) of three activations an ``AttnKernel`` (the fused attention:
  ``compiler.lower.attention``) when it fits, else a batched matmul, a masked softmax and a batched
  matmul (``_attn_compose``).

Anything else that touches an activation raises ``ChipCompileError`` naming the op
and its shapes, before anything is emitted or simulated. Constant subgraphs are
evaluated here with numpy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from isa.errors import TetrachipError

from compiler.ir import semantics
from compiler.ir.graph import Node, Ops, fmt_shape, fmt_site, is_static, toposort
from compiler.ir.patterns import Composite, masked, recognise
from compiler.lower.bmm import BmmKernel, bmm_float, gathers, split_axes, to_base, varies
from compiler.lower import gather as gth
from compiler.lower.gather import GatherKernel

#: Largest margin (per axis, each side) of the index space an activation view may reach through PAD
#: (``cat`` pads each piece by the length of the others); axes of size 1 have none, and a tensor with
#: many axes gets less so that its margin-space indices fit in int64 (``TensorInfo.margin``).
MARGIN = 1 << 16
#: Views one max kernel reads at most (a longer max reduction chains kernels; below the emitter's
#: ``EW_MAX_INPUTS``)
MAX_TERMS = 9


class ChipCompileError(TetrachipError):
    """A graph, shape or config the chip compiler cannot handle; names the op or dimension."""


def _op_err(n: Node, msg: str) -> ChipCompileError:
    """The error for node ``n``: its op, type and operand shapes, ``msg``, and the user's source line."""
    shapes = ", ".join(fmt_shape(s.shape) for s in n.src)
    return ChipCompileError(f"{n.op.name} {n.dtype}{fmt_shape(n.shape)} (operands {shapes or '-'}): {msg}"
                            f"{_site_text(n)}")


def _site_text(n: Node) -> str:
    """`` at model.py:12``: where the frontend built ``n`` (``Node.site``), or nothing."""
    return f" at {fmt_site(n.site)}" if n.site else ""


# ---------------------------------------------------------------------------------------------- tensors

def _ravel(coords, shape) -> np.ndarray:
    """Flat C-order index of coordinate arrays (plain arithmetic: numpy 2.4's ravel/unravel_index
    give wrong results on some many-dimensional inputs)."""
    out = np.zeros(np.shape(coords[0]), np.int64)
    for c, d in zip(coords, shape):
        out = out * d + c
    return out


def _unravel(idx, shape) -> tuple:
    rest = np.asarray(idx, np.int64)
    out = []
    for d in reversed(shape):
        out.append(rest % d)
        rest = rest // d
    return tuple(reversed(out))


@dataclass
class TensorInfo:
    """A tensor kept in DRAM: a graph input or a kernel's output.

    ``shape`` is its base (logical) shape; ``perm`` the order of axes in memory (outermost
    first); ``pads`` a zero border per base axis, grown by the readers that pad it; ``wide`` the
    axes of size 1 that have a margin all the same (a copy made to be padded along them).
    """
    name: str
    shape: tuple
    perm: tuple
    kind: str                       # "input" | "kernel"
    producer: int | None = None
    pads: list = field(default_factory=list)
    wide: tuple = ()
    #: a constant the graph adds to an activation, kept as an input the host writes (its float value;
    #: quantized with its own scale like any input): None for the graph's inputs and kernel outputs
    value: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if not self.pads:
            self.pads = [[0, 0] for _ in self.shape]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def mshape(self) -> tuple:
        """Shape of the margin index space (``margin(a)`` extra positions each side of axis ``a``)."""
        return tuple(d + 2 * self.margin(a) for a, d in enumerate(self.shape))

    def margin(self, axis: int) -> int:
        d = self.shape[axis]
        if d <= 1 and axis not in self.wide:
            return 0
        # the product of mshape stays below 2**62
        bits = 62 // sum(1 for a, e in enumerate(self.shape) if e > 1 or a in self.wide)
        return max(0, min(MARGIN, ((1 << bits) - d) // 2))

    @property
    def phys_shape(self) -> tuple:
        return tuple(self.shape[a] + sum(self.pads[a]) for a in self.perm)

    @property
    def phys_size(self) -> int:
        return math.prod(self.phys_shape)

    @property
    def padded(self) -> bool:
        return any(p != [0, 0] for p in self.pads)

    def identity(self) -> np.ndarray:
        """Margin-space index of every element, in base shape (the C-order ravel of each element's
        coordinates shifted by the margins, summed axis by axis over broadcast ranges)."""
        ms = self.mshape
        out = np.zeros(self.shape, np.int64)
        stride = 1
        for a in reversed(range(len(self.shape))):
            d = self.shape[a]
            if d > 1 or self.margin(a):
                view = [1] * len(self.shape)
                view[a] = d
                out += ((np.arange(d, dtype=np.int64) + self.margin(a)) * stride).reshape(view)
            stride *= ms[a]
        return out

    def is_identity(self, midx: np.ndarray) -> bool:
        """Are the margin-space indices ``midx`` this tensor's own elements in base order (in any shape of as
        many elements, e.g. an output read without the tensor's unit axes)? (Its first and last elements are
        compared first: most other gathers fail there.)"""
        if np.size(midx) != self.numel or not self.numel:
            return False
        m = np.asarray(midx).reshape(self.shape)
        ms = self.mshape
        first = last = 0
        for a, d in enumerate(self.shape):
            first = first * ms[a] + self.margin(a)
            last = last * ms[a] + self.margin(a) + d - 1
        if int(m.flat[0]) != first or int(m.flat[-1]) != last:
            return False
        return bool(np.array_equal(m, self.identity()))

    def phys_offsets(self, midx: np.ndarray) -> np.ndarray:
        """Element offsets in the DRAM buffer of margin-space indices (which must lie in the layout)."""
        coords = _unravel(np.asarray(midx, np.int64), self.mshape)
        pshape = self.phys_shape
        strides = [math.prod(pshape[i + 1:]) for i in range(len(pshape))]
        off = np.zeros(np.shape(midx), np.int64)
        for i, a in enumerate(self.perm):
            c = coords[a] - self.margin(a) + self.pads[a][0]
            if c.size and (c.min() < 0 or c.max() >= pshape[i]):
                raise ChipCompileError(f"tensor {self.name}: a read reaches beyond its zero border on axis {a}")
            off += c * strides[i]
        return off

    def to_phys(self, base: np.ndarray) -> np.ndarray:
        """The DRAM image (flat, zero border) of a base-shape array."""
        out = np.zeros(self.phys_shape, base.dtype)
        inner = tuple(slice(self.pads[a][0], self.pads[a][0] + self.shape[a]) for a in self.perm)
        out[inner] = np.transpose(base, self.perm)
        return out.reshape(-1)

    def from_phys(self, flat: np.ndarray) -> np.ndarray:
        arr = np.asarray(flat).reshape(self.phys_shape)
        inner = tuple(slice(self.pads[a][0], self.pads[a][0] + self.shape[a]) for a in self.perm)
        return np.transpose(arr[inner], np.argsort(self.perm))


def gather_base(x: np.ndarray, t: TensorInfo, midx: np.ndarray) -> np.ndarray:
    """Values of base-shape array ``x`` (tensor ``t``) at margin-space indices; zero outside it."""
    if t.is_identity(midx):                     # the tensor itself (a GEMM's plain input, an output)
        return np.array(np.asarray(x).reshape(np.shape(midx)))
    coords = _unravel(midx, t.mshape)
    inside = np.ones(np.shape(midx), bool)
    base = []
    for a, (c, d) in enumerate(zip(coords, t.shape)):
        c = c - t.margin(a)
        inside &= (c >= 0) & (c < d)
        base.append(c)
    flat = np.where(inside, _ravel(tuple(base), t.shape), 0)
    return np.where(inside, np.asarray(x).reshape(-1)[flat], np.zeros((), x.dtype))


# ---------------------------------------------------------------------------------------------- kernels

@dataclass
class Kernel:
    """``out[m, n] = act(sum_k x[G[m, k]] * W[k, n] + bias[n])`` with its DRAM in/out tensors."""
    name: str
    src: int                        # index of the input TensorInfo
    out: int                        # index of the output TensorInfo
    gather: np.ndarray              # (M, K) margin-space indices into the input tensor
    weight: np.ndarray              # (K, N) float
    bias: np.ndarray | None         # (N,) float
    relu: bool
    m_axes: tuple                   # output base axes making up M (row-major), then N axes
    n_axes: tuple
    op_text: str = ""
    #: (K, N) structural nonzeros of ``weight`` (a grouped contraction's block diagonal); None: dense
    wmask: np.ndarray | None = None
    clamp: tuple | None = None      # (lo, hi) float: a clip folded into the requantization clamp

    @property
    def M(self) -> int:
        return self.gather.shape[0]

    @property
    def K(self) -> int:
        return self.gather.shape[1]

    @property
    def N(self) -> int:
        return self.weight.shape[1]

    @property
    def macs(self) -> int:
        """Useful multiply-accumulates (the block diagonal's zeros not counted)."""
        return self.M * (self.K * self.N if self.wmask is None else int(np.count_nonzero(self.wmask)))


@dataclass
class EwKernel:
    """``out = act(op_i coef_i * x_i)`` elementwise over views of several tensors: one VPU pass.

    ``op`` is ``"sum"``, ``"max"`` or ``"min"`` (lane-wise over the scaled sources), or ``"lut"``:
    ``out = fn(x_0)``, one source, an elementwise float function the quantizer turns into the
    VPU's 256-entry lookup table."""
    name: str
    srcs: list                      # (tensor index, margin-space index array of the output's shape)
    coefs: list                     # float coefficient of each source
    out: int
    relu: bool = False
    macs: int = 0
    op: str = "sum"
    fn: object = None               # "lut": float array -> float array, elementwise (graph semantics)
    clamp: tuple | None = None      # (lo, hi) float: a clip folded into the requantization clamp

    @property
    def src(self) -> int:
        return self.srcs[0][0]


@dataclass
class NormKernel:
    """``out[r, :] = comp(x[idx[r, :]]) * weight + bias`` row by row over the last axis: LayerNorm,
    RMSNorm or softmax (``comp``, axes (1,)), or an elementwise ``comp`` (GELU, SiLU, sigmoid, tanh,
    erf); one VPU kernel (``compiler.lower.norms``)."""
    name: str
    src: int
    idx: np.ndarray                 # (rows, d) margin-space indices into the input tensor
    out: int                        # its tensor: the node's shape, rows contiguous
    comp: Composite
    weight: np.ndarray | None       # (d,) float
    bias: np.ndarray | None
    relu: bool = False
    clamp: tuple | None = None
    macs: int = 0
    mask: np.ndarray | None = None  # a masked softmax (``comp.mask == "add"``): (rows, d) float added to x

    def run(self, x: np.ndarray) -> np.ndarray:
        """The float rows (``x`` gathered, (rows, d))."""
        y = self.comp.evaluate(x) if self.mask is None else self.comp.evaluate(x, self.mask)
        y = y * self.weight if self.weight is not None else y
        return y + self.bias if self.bias is not None else y


@dataclass
class AttnKernel:
    """``out[b, h] = softmax(scale q k^T (causal)) v`` per batch element ``b`` and head ``h`` from views
    of three tensors (``srcs``: (tensor, (B, H, L, dh) margin-space indices) for q, k, v): the
    transformer block's fused attention (``compiler.lower.attention``)."""
    name: str
    srcs: list
    out: int                        # (..., L, dh), rows contiguous
    comp: Composite
    relu: bool = False
    clamp: tuple | None = None
    macs: int = 0

    @property
    def src(self) -> int:
        return self.srcs[0][0]


def kernel_inputs(k) -> list[int]:
    """The tensors a kernel reads."""
    if isinstance(k, BmmKernel):
        return k.reads()
    return [t for t, _ in k.srcs] if isinstance(k, (EwKernel, AttnKernel)) else [k.src]


@dataclass
class Schedule:
    tensors: list[TensorInfo]
    kernels: list
    inputs: dict                    # input name -> tensor index
    outputs: list                   # (tensor index, margin-space index array of the output's shape)

    def summary(self) -> str:
        lines = []
        for i, k in enumerate(self.kernels):
            t_in, t_out = self.tensors[k.src], self.tensors[k.out]
            if isinstance(k, BmmKernel):
                t_b = self.tensors[k.b]
                lines.append(f"k{i} {k.name}: {t_in.name}{fmt_shape(t_in.shape)} x {t_b.name}{fmt_shape(t_b.shape)} "
                             f"-> {t_out.name}{fmt_shape(t_out.shape)} {k.S} GEMMs {k.M}x{k.K}x{k.N}"
                             f"{'+relu' if k.relu else ''}")
                continue
            if isinstance(k, GatherKernel):
                lines.append(f"k{i} {k.name}: {t_in.name}{fmt_shape(t_in.shape)} -> {t_out.name}"
                             f"{fmt_shape(t_out.shape)} table lookup, {k.V} rows of {k.d}")
                continue
            if isinstance(k, (NormKernel, AttnKernel)):
                lines.append(f"k{i} {k.name}: {t_in.name} -> {t_out.name}{fmt_shape(t_out.shape)} {k.comp} (VPU)")
                continue
            if isinstance(k, EwKernel):
                names = " + ".join(self.tensors[t].name for t, _ in k.srcs)
                lines.append(f"k{i} {k.name}: {names} -> {self.tensors[k.out].name} elementwise"
                             f"{'+relu' if k.relu else ''}")
                continue
            ep = "+bias" if k.bias is not None else ""
            ep += "+relu" if k.relu else ""
            lines.append(f"k{i} {k.name}: {t_in.name}{fmt_shape(t_in.shape)} -> {t_out.name}{fmt_shape(t_out.shape)} "
                         f"GEMM {k.M}x{k.K}x{k.N}{ep}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- lifting

@dataclass
class _Act:
    t: int                 # tensor index
    idx: np.ndarray        # margin-space index per element (may be a broadcast view)
    fusable: bool = False  # an unconsumed, unpadded view of a kernel output that may still gain an epilogue
    floor: bool = False    # its zero-border reads stand for -inf (max pooling's padding): only RMAX may read it


@dataclass
class _Prod:
    """``act * const``: a contraction's operand when a SUM reads it, else an elementwise product."""
    act: _Act
    const: np.ndarray
    node: Node
    anode: Node | None = None       # the activation operand's node
    done: object = None             # its value as an elementwise product, once resolved


@dataclass
class _Prod2:
    """A product of two activation views: the operand of a batched matmul's SUM."""
    a: _Act
    b: _Act
    node: Node


@dataclass
class _Fn:
    """``f(x)`` elementwise, ``x`` one activation view (tensor ``t`` at ``idx``): a chain of elementwise
    nodes whose only non-constant input is ``x`` (every constant in it uniform), composed with the
    graph's own semantics; it becomes a lookup-table kernel (``_materialize``) when read otherwise."""
    t: int
    idx: np.ndarray
    f: object                       # float array -> array, elementwise
    lin: float | None               # f(v) == lin * v, when it is
    base: Node                      # the node of x
    uses: int                       # reads of ``base`` inside the chain
    fusable: bool                   # x is an unconsumed view of a kernel output
    solo: bool = True               # every intermediate node of the chain has one reader
    cmp0: Node | None = None        # the chain is exactly ``0 < cmp0`` (ReLU's condition)
    mat: list = field(default_factory=list)   # the tensor computed for it, shared by its views
    clip: bool = True               # only max with a constant, negation, * +-1: a clip of +-x, if anything


def _move(n: Node, x: np.ndarray, fill=0) -> np.ndarray:
    """Apply one movement op to any array (index arrays included: no dtype cast)."""
    op, arg = n.op, n.arg
    if op is Ops.RESHAPE:
        return np.reshape(x, n.shape)
    if op is Ops.PERMUTE:
        return np.transpose(x, arg)
    if op is Ops.EXPAND:
        return np.broadcast_to(x, n.shape)
    if op is Ops.PAD:
        return np.pad(x, arg, constant_values=fill)
    if op is Ops.SHRINK:
        return x[tuple(slice(b, e) for b, e in arg)]
    if op is Ops.FLIP:
        return np.flip(x, arg)
    raise AssertionError(op)


def _varies(x: np.ndarray, axis: int) -> bool:
    """``bmm.varies`` for an array of any size: compared with its first slice along ``axis`` a few million
    elements at a time (views, no copies), stopping at the first difference (the answer must not depend on
    the batch: a per-channel constant of a large activation still folds into its kernel). Broadcast axes
    (stride 0) hold one value each: only their first index is compared."""
    x = x[tuple(slice(0, 1) if d != axis and x.strides[d] == 0 else slice(None) for d in range(x.ndim))]
    n = x.shape[axis]
    if x.size <= _VARIES_CHUNK or n <= 1 or x.strides[axis] == 0:
        return varies(x, axis)
    at: list = [slice(None)] * x.ndim
    at[axis] = slice(0, 1)
    first = x[tuple(at)]
    step = max(1, _VARIES_CHUNK // max(1, first.size))
    for i in range(1, n, step):
        at[axis] = slice(i, min(i + step, n))
        if (x[tuple(at)] != first).any():
            return True
    return False


#: elements ``_varies`` compares at once
_VARIES_CHUNK = 1 << 22


def _pure_view(act: _Act, t: TensorInfo) -> bool:
    """The view is a reshape of the whole tensor (every element once, in order)."""
    return act.idx.size == t.numel and np.array_equal(np.ravel(act.idx), np.ravel(t.identity()))


def lift(outputs: list[Node], input_perm=None, attention_fits=None) -> Schedule:
    """Group a prepared graph into kernels; raises ChipCompileError for anything the chip cannot run.
    ``attention_fits(comp, q, k, v shapes)``: why the fused attention cannot take those shapes on the
    target config, or None (``compiler.lower.attention.fused_unfit``); such attention is composed of
    batched matmuls and a softmax instead (``_attn_compose``)."""
    outputs = recognise(outputs)
    order, lookups = _lookups(toposort(outputs), outputs)
    users: dict[int, int] = {}
    for n in order:
        for s in (lookups[id(n)].inp,) if id(n) in lookups else n.src:
            users[id(s)] = users.get(id(s), 0) + 1
    for o in outputs:
        users[id(o)] = users.get(id(o), 0) + 1
    tensors: list[TensorInfo] = []
    kernels: list[Kernel] = []
    inputs: dict = {}
    val: dict[int, object] = {}

    for n in order:
        if n.op in (Ops.IF, Ops.LOOP):
            raise _op_err(n, "control flow is not supported by the chip compiler yet (issue 8)")
        if not is_static(n.shape):
            raise _op_err(n, "dynamic dimensions are not supported by the chip compiler yet (issue 8)")
        if id(n) in lookups:                                       # compiler.lower.gather: W[idx]
            val[id(n)] = _gather_kernel(n, lookups[id(n)], val, tensors, kernels)
            continue
        for s in n.src:
            _index_only(s)
        srcv = [val[id(s)] for s in n.src]
        if n.op is Ops.INPUT:
            name, shape = n.arg
            perm = tuple(input_perm(shape)) if input_perm else default_perm(shape)
            tensors.append(TensorInfo(name, tuple(shape), perm, "input"))
            inputs[name] = len(tensors) - 1
            val[id(n)] = _Act(len(tensors) - 1, tensors[-1].identity())
            continue
        if n.op in (Ops.CONST, Ops.BUFFER):
            val[id(n)] = semantics.source_value(n, {})
            continue
        if all(isinstance(v, np.ndarray) for v in srcv):          # constant subgraph: fold now
            val[id(n)] = _move(n, srcv[0]) if n.op in _MOVES else \
                np.asarray(semantics.apply(n, *srcv))
            continue
        if n.op is Ops.COMPOSITE and n.arg.kind == "attention":
            srcv = [_as_act(n, v, users, tensors, kernels) if isinstance(v, (_Fn, _Prod)) else v for v in srcv]
            val[id(n)] = _attn_kernel(n, srcv, tensors, kernels, attention_fits)
            continue
        for sv, sn in zip(srcv, n.src):
            if isinstance(sv, _Prod2) and n.op is not Ops.SUM:
                raise _op_err(sn, "an elementwise product of two activations is not supported on the chip "
                                  "(a product of two activations runs only as a matmul: summed over an axis)")
        val[id(n)] = _lift_node(n, srcv, users, tensors, kernels)

    outs = []
    for o in outputs:
        v = val[id(o)]
        if isinstance(v, _Prod2):
            raise _op_err(o, "an elementwise product of two activations is not supported on the chip")
        v = _as_act(o, v, users, tensors, kernels)
        if not isinstance(v, _Act) or v.floor:
            raise _op_err(o, "a graph output must be computed from the inputs by chip kernels")
        outs.append((v.t, np.ascontiguousarray(v.idx)))
    if not kernels:
        raise ChipCompileError("the graph has no matmul or convolution: nothing to run on the chip")
    for o in outputs:
        _index_only(o)
    inputs.update({t.name: ti for ti, t in enumerate(tensors) if t.value is not None})
    return Schedule(tensors, kernels, inputs, outs)


def _lookups(order: list[Node], outputs: list[Node]) -> tuple[list[Node], dict]:
    """The table lookups of the graph (``compiler.lower.gather.match``) and the nodes left to lift:
    a lookup reads only its index input (its one-hot chain is not lifted)."""
    memo: dict = {}
    found = {id(n): m for n in order if n.op is Ops.SUM for m in [gth.match(n, memo)] if m is not None}
    if not found:
        return order, found
    keep, stack = set(), list(outputs)
    while stack:
        n = stack.pop()
        if id(n) in keep:
            continue
        keep.add(id(n))
        stack.extend((found[id(n)].inp,) if id(n) in found else n.src)
    return [n for n in order if id(n) in keep], found


def _gather_kernel(n: Node, m, val: dict, tensors, kernels) -> _Act:
    """A ``GatherKernel`` for the lookup ``m`` (its output: the SUM node's shape, row-major)."""
    src = val[id(m.inp)].t                                      # the input's tensor (its identity view)
    tensors.append(TensorInfo(f"t{len(tensors)}", tuple(n.shape), tuple(range(len(n.shape))), "kernel", len(kernels)))
    kernels.append(GatherKernel(f"k{len(kernels)}", src, len(tensors) - 1,
                                tensors[src].identity().reshape(-1)[m.pos], m.table))
    return _Act(len(tensors) - 1, tensors[-1].identity())


def _index_only(n: Node) -> None:
    """An integer input may only index a constant table (a ``GatherKernel``): raise for any other reader."""
    if n.op is Ops.INPUT and np.dtype(n.dtype.np).kind in "iu":
        raise _op_err(n, f"the integer input {n.arg[0]!r} is read other than as the index of a constant table "
                         "(W[idx], nn.Embedding); the chip runs integer inputs only as embedding lookups")


_MOVES = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}


def default_perm(shape) -> tuple:
    # 4-D inputs are images (N, C, H, W): stored channel-last so that a convolution's window
    # rows are contiguous bytes (NHWC), which the DMA reads as im2col rows.
    return (0, 2, 3, 1) if len(shape) == 4 else tuple(range(len(shape)))


def _is_zero(v) -> bool:
    return isinstance(v, np.ndarray) and v.size > 0 and not np.any(v)


_ELEMENTWISE = {Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.EXP, Ops.LOG, Ops.SIN, Ops.ATAN, Ops.CAST, Ops.ADD, Ops.MUL,
                Ops.MAX, Ops.CMPLT, Ops.CMPEQ, Ops.WHERE}


def _lift_node(n: Node, srcv, users, tensors, kernels):  # noqa: C901 (one table of cases)
    op = n.op
    if op is not Ops.SUM:
        srcv = [_resolve(v, users, tensors, kernels) if isinstance(v, _Prod) else v for v in srcv]
    if any(isinstance(v, _Act) and v.floor for v in srcv) and op not in _MOVES and op is not Ops.RMAX:
        raise _op_err(n, "a tensor padded with -inf (max pooling) may only be read by a max reduction")
    if op is Ops.CAST:
        a = srcv[0]
        if isinstance(a, _Act) and n.dtype.is_float and n.src[0].dtype.is_float:
            return a
        if isinstance(a, _Fn) or (isinstance(a, _Act) and n.src[0].dtype.is_float):
            return _compose(n, srcv, users)
        raise _op_err(n, "casts of activations are not supported on the chip")
    if op in _MOVES:
        a = srcv[0]
        if isinstance(a, _Fn):
            if op is not Ops.PAD:
                return _Fn(a.t, _move(n, a.idx), a.f, a.lin, a.base, a.uses, a.fusable, a.solo, None, a.mat,
                       a.clip)
            if a.lin is not None and _unborderable(n, _Act(a.t, a.idx), tensors[a.t]) is None:
                # c * pad(x): the border stays zero; c may fold into a weight
                return _Fn(a.t, _border_view(n, _Act(a.t, a.idx), tensors[a.t]), a.f, a.lin, a.base, a.uses,
                           False, a.solo)
            a = _Act(_materialize(n, a, users, tensors, kernels), a.idx)
        if not isinstance(a, _Act):
            raise _op_err(n, "unsupported operand")
        # a single-use view of a kernel output may still gain a ReLU (it commutes with movement; a bias
        # and further sum terms check for a whole, in-order view themselves)
        fus = a.fusable and users.get(id(n.src[0]), 0) == 1
        if op is Ops.PAD:
            if a.floor:
                raise _op_err(n, "padding a tensor already padded with -inf is not supported on the chip")
            return _pad_act(n, a, tensors, kernels)
        return _Act(a.t, _move(n, a.idx), fus, a.floor)
    if op is Ops.SUM:
        p = srcv[0]
        if isinstance(p, _Prod2) and users.get(id(n.src[0]), 0) == 1:
            return _bmm_contraction(n, p, tensors, kernels)
        if isinstance(p, _Prod) and users.get(id(n.src[0]), 0) == 1:
            return _contraction(n, p, tensors, kernels)
        if isinstance(p, _Prod):                 # the product is read elsewhere too: elementwise, then summed
            p = _resolve(p, users, tensors, kernels)
        if isinstance(p, (_Act, _Fn)):          # a sum of an activation view
            a, lin = _term(n, p, users, tensors, kernels)
            if 1 < math.prod(n.src[0].shape[x] for x in n.arg) <= MAX_TERMS:
                return _sum_views(n, a, lin, tensors, kernels)    # a pooling window: one VPU pass
            return _contraction(n, _Prod(a, np.asarray(lin, np.float64), n), tensors, kernels)  # with ones
        raise _op_err(n, "only a sum of a product with a constant (matmul, convolution) or of two activations "
                         "(a batched matmul) runs on the chip")
    if op is Ops.COMPOSITE:
        return _composite(n, srcv, users, tensors, kernels)
    if op is Ops.RMAX:
        return _max_reduce(n, srcv[0], users, tensors, kernels)
    if op not in _ELEMENTWISE:
        raise _op_err(n, f"{op.name} of an activation is not supported on the chip")
    acts = [i for i, v in enumerate(srcv) if isinstance(v, (_Act, _Fn))]
    if op is Ops.MUL and len(acts) == 1 and isinstance(srcv[acts[0]], _Fn) and _uniform(srcv[1 - acts[0]]) is None:
        g = srcv[acts[0]]                      # a chain read by a matmul: its table, or its factor in the weight
        if g.lin is not None:
            return _Prod(_Act(g.t, g.idx), _times(srcv[1 - acts[0]], g.lin), n, n.src[acts[0]])
        srcv[acts[0]] = _act_of(n, g, users, tensors, kernels)
    if op is Ops.MUL and len(acts) == 2 and not _same_view(srcv[0], srcv[1]):     # a batched matmul's product
        return _Prod2(*[_act_of(n, v, users, tensors, kernels) for v in srcv], n)
    if op is Ops.MUL and len(acts) == 1 and isinstance(srcv[acts[0]], _Act):
        return _Prod(srcv[acts[0]], srcv[1 - acts[0]], n, n.src[acts[0]])
    if op is Ops.NEG and isinstance(srcv[0], _Act):
        return _scale(n, srcv[0], n.src[0], np.asarray(-1.0), users, tensors, kernels)
    if op is Ops.ADD and len(acts) == 1 and isinstance(srcv[acts[0]], _Fn) and _uniform(srcv[1 - acts[0]]) is None:
        srcv[acts[0]] = _act_of(n, srcv[acts[0]], users, tensors, kernels)     # then a per-channel shift
    if op is Ops.ADD and len(acts) == 1 and isinstance(srcv[acts[0]], _Act):
        a, b = srcv[acts[0]], srcv[1 - acts[0]]
        k = kernels[tensors[a.t].producer] if tensors[a.t].producer is not None else None
        vec = None
        if isinstance(k, Kernel) and a.fusable and users.get(id(n.src[acts[0]]), 0) == 1 and not k.relu \
                and k.clamp is None and _pure_view(a, tensors[a.t]):
            vec = _per_n(n, k, tensors[a.t], b)
        if vec is not None:                  # a per-N constant on a GEMM's whole, unconsumed output: its bias
            k.bias = vec if k.bias is None else k.bias + vec
            return _Act(a.t, a.idx, True)
        if _uniform(b) is None and not a.floor:          # a per-channel shift of any activation
            if _diag_size(b, n.shape) <= DIAG_MAX:
                return _diagonal(n, a, None, b, tensors, kernels)
            srcv[1 - acts[0]] = _const_tensor(b, n.shape, tensors)   # a constant that varies per element
            acts = [0, 1]
    if op is Ops.WHERE:
        v = _where_special(n, srcv, users, tensors, kernels)
        if v is not None:
            return v
    if len(acts) == 2 and op in (Ops.ADD, Ops.MAX) and not _same_view(srcv[acts[0]], srcv[acts[1]]):
        return _ew_combine(n, "sum" if op is Ops.ADD else "max", srcv, users, tensors, kernels)
    return _compose(n, srcv, users)


def _times(c: np.ndarray, s: float) -> np.ndarray:
    """``c * s`` keeping ``c``'s broadcast (stride-0) axes broadcast (``_varies`` reads them cheaply)."""
    c = np.asarray(c)
    compact = c[tuple(slice(0, 1) if st == 0 else slice(None) for st in c.strides)]
    return np.broadcast_to(compact * s, c.shape)


def _same_view(a, b) -> bool:
    return a.t == b.t and a.idx.shape == b.idx.shape and np.array_equal(a.idx, b.idx)


def _uniform(c: np.ndarray):
    """A constant every element of which is the same: that value (0-d, its dtype), else None."""
    c = np.asarray(c)
    if c.size == 0:
        return None
    c = c[tuple(slice(0, 1) if st == 0 else slice(None) for st in c.strides)]     # broadcast axes once
    v = c.reshape(-1)[0]
    if not (np.all(c == v) or (np.isnan(v) and np.all(np.isnan(c)))):
        return None
    return np.asarray(v, c.dtype)


def _identity(x):
    return x


@dataclass(frozen=True)
class _Apply:
    """One elementwise node of a chain, applied with the graph's semantics to the values of its
    operands: a chain's function (``parts[i]`` of x) or a uniform constant (``consts[i]``). Plain data,
    so a compiled model holding it pickles (``compiler.lower.search`` caches compiled models)."""
    op: Ops
    dtype: object
    parts: tuple
    consts: tuple
    shape: tuple = ()
    arg: object = None

    def __call__(self, x):
        return semantics.apply(self, *[c if p is None else p(x) for p, c in zip(self.parts, self.consts)])


@dataclass(frozen=True)
class _Then:
    """``second(first(x))``: a chain continued after a lookup-table kernel (picklable, as ``_Apply``)."""
    first: object
    second: object

    def __call__(self, x):
        return self.second(self.first(x))


def _fn_of(v, node: Node) -> _Fn:
    if isinstance(v, _Fn):
        return v
    return _Fn(v.t, v.idx, _identity, 1.0, node, 1, v.fusable)


def _compose(n: Node, srcv, users) -> _Fn:
    """One more elementwise node on a single-activation chain (every other operand a uniform constant)."""
    fns = {i: _fn_of(v, n.src[i]) for i, v in enumerate(srcv) if isinstance(v, (_Act, _Fn))}
    first = next(iter(fns.values()))
    if any(not _same_view(g, first) for g in fns.values()):
        if n.op is Ops.MUL:
            raise _op_err(n, "a product of two activations (attention-style batched matmul) is not supported on "
                             "the chip yet; one operand must be a constant (weights)")
        raise _op_err(n, f"{n.op.name} of two different activations is not supported on the chip (one operand "
                         "must be a constant, or both must read the same tensor elementwise)")
    consts = {}
    for i, v in enumerate(srcv):
        if i not in fns:
            u = _uniform(v)
            if u is None:
                raise _op_err(n, "an elementwise op with a constant that varies per element is supported only as a "
                                 "bias or scale folded into a matmul/convolution")
            consts[i] = u
    f = _Apply(n.op, n.dtype, tuple(fns[i].f if i in fns else None for i in range(len(srcv))),
               tuple(consts.get(i) for i in range(len(srcv))))
    lin = None
    ls = [g.lin for g in fns.values()]
    if len(fns) == 1 and ls[0] is not None:
        if n.op is Ops.MUL:
            lin = ls[0] * float(next(iter(consts.values())))
        elif n.op is Ops.NEG:
            lin = -ls[0]
        elif n.op is Ops.CAST and n.dtype.is_float and n.src[0].dtype.is_float:
            lin = ls[0]
    elif n.op is Ops.ADD and len(fns) == 2 and None not in ls:
        lin = ls[0] + ls[1]
    solo = all(g.solo and (g.f is _identity or users.get(id(n.src[i]), 0) == 1) for i, g in fns.items())
    solo = solo and all(g.base is first.base for g in fns.values())
    cmp0 = None
    if n.op is Ops.CMPLT and 0 in consts and not np.any(consts[0]) and 1 in fns and fns[1].f is _identity:
        cmp0 = n.src[1]
    clip = len(fns) == 1 and first.clip and (
        n.op in (Ops.MAX, Ops.NEG) or (n.op is Ops.MUL and lin is not None and abs(lin) == abs(ls[0]))
        or (n.op is Ops.CAST and n.dtype.is_float and n.src[0].dtype.is_float))
    return _Fn(first.t, first.idx, f, lin, first.base, sum(g.uses for g in fns.values()),
               first.fusable, solo, cmp0, clip=clip)


def _resolve(p: _Prod, users, tensors, kernels):
    """``act * const`` read as an elementwise product (once: folding mutates kernels)."""
    if p.done is None:
        p.done = _scale(p.node, p.act, p.anode, p.const, users, tensors, kernels)
    return p.done


def _scale(n: Node, a: _Act, anode: Node, c: np.ndarray, users, tensors, kernels):
    """``a * c`` (``n`` is the MUL or NEG): folded into the producing kernel when ``a`` is its unconsumed
    output (a GEMM's weight columns and bias scale by a per-N constant, e.g. an eval-mode BatchNorm;
    an elementwise sum's or max's coefficients by a scalar), else one step of an elementwise chain."""
    t = tensors[a.t]
    k = kernels[t.producer] if t.producer is not None else None
    own = a.fusable and users.get(id(anode), 0) == 1 and _pure_view(a, t)
    if own and isinstance(k, Kernel) and not k.relu and k.clamp is None:
        vec = _per_n(n, k, t, c)
        if vec is not None:
            k.weight = k.weight * vec[None, :]
            k.bias = None if k.bias is None else k.bias * vec
            return _Act(a.t, a.idx, True)
    u = _uniform(c)
    if own and isinstance(k, BmmKernel) and not k.relu and u is not None:
        k.mult *= float(u)                              # attention's scores * 1/sqrt(d)
        return _Act(a.t, a.idx, True)
    if own and isinstance(k, EwKernel) and k.op != "lut" and not k.relu and k.clamp is None and u is not None:
        k.coefs = [x * float(u) for x in k.coefs]
        if float(u) < 0 and k.op in ("max", "min"):
            k.op = "min" if k.op == "max" else "max"
        return _Act(a.t, a.idx, True)
    if u is None:                                        # a per-channel scale of any activation
        return _diagonal(n, a, c, None, tensors, kernels)
    srcv = [a if s is anode else c for s in n.src]
    return _compose(n, srcv, users)


#: Largest N of a diagonal GEMM (a per-channel scale or shift of an activation no kernel owns)
DIAG_MAX = 128


def _diag_size(c, shape) -> int:
    """N of ``_diagonal``'s GEMM for the constant ``c``: its number of values along the axes it varies on."""
    c = np.broadcast_to(c, shape)
    return math.prod(d for ax, d in enumerate(shape) if _varies(c, ax))


def _const_tensor(c, shape, tensors) -> _Act:
    """A constant that varies along more than ``DIAG_MAX`` values (a position embedding added to token
    embeddings) as a tensor in DRAM that the host writes with the inputs: the add reads two tensors."""
    tensors.append(TensorInfo(f"const{len(tensors)}", tuple(shape), default_perm(tuple(shape)), "input",
                              value=np.ascontiguousarray(np.broadcast_to(c, shape), np.float64)))
    return _Act(len(tensors) - 1, tensors[-1].identity())


def _diagonal(n: Node, a: _Act, scale, shift, tensors, kernels) -> _Act:
    """``a * scale`` or ``a + shift`` with a constant that varies along some axes (a BatchNorm not right
    after a GEMM, ``avg_pool2d(count_include_pad=False)``'s divisor): a GEMM whose weight is the
    diagonal of the constant over those axes (its N axes; K = N, ``A[m, k]`` the element itself), or
    identity weights and the shift as its bias; later scales, shifts and ReLU fold into it."""
    c = np.broadcast_to(scale if scale is not None else shift, n.shape)
    shape = tuple(n.shape)
    n_axes = [ax for ax in range(len(shape)) if _varies(c, ax)]
    m_axes = [ax for ax in range(len(shape)) if ax not in n_axes]
    M, N = math.prod(shape[ax] for ax in m_axes), math.prod(shape[ax] for ax in n_axes)
    if N > DIAG_MAX:
        raise _op_err(n, f"an elementwise op with a constant that varies per element ({N} values along axes "
                         f"{tuple(n_axes)}; at most {DIAG_MAX} as a diagonal GEMM) is not supported on the chip")
    idx = np.broadcast_to(a.idx, shape)
    gather = np.ascontiguousarray(np.transpose(idx, m_axes + n_axes)).reshape(M, N)
    vec = np.transpose(c[tuple(slice(None) if ax in n_axes else 0 for ax in range(len(shape)))],
                       [sorted(n_axes).index(ax) for ax in n_axes]).reshape(-1).astype(np.float64)
    weight = np.diag(vec if scale is not None else np.ones(N))
    tensors.append(TensorInfo(f"t{len(tensors)}", shape, tuple(m_axes + n_axes), "kernel", producer=len(kernels)))
    ti = len(tensors) - 1
    kernels.append(Kernel(f"diag{len(kernels)}", a.t, ti, gather, weight, None if scale is not None else vec,
                          False, tuple(m_axes), tuple(n_axes), op_text=f"{n.op.name}{fmt_shape(shape)} per {n_axes}"))
    return _Act(ti, tensors[ti].identity(), True)


def _where_special(n: Node, srcv, users, tensors, kernels):
    """ReLU (``where(0 < x, x, 0)``) folded into the kernel producing ``x``; ``where(mask, pad(x), -inf)``
    (max pooling's padding) as a view whose border reads stand for -inf. None: neither."""
    c, x, z = srcv
    cn, xn = n.src[0], n.src[1]
    if isinstance(c, _Fn) and c.cmp0 is xn and isinstance(x, _Act) and _is_zero(z) and x.fusable \
            and users.get(id(xn), 0) == 2 and users.get(id(cn), 0) == 1:
        k = kernels[tensors[x.t].producer]
        if getattr(k, "clamp", None) is None and getattr(k, "op", None) != "lut":
            k.relu = True
            return _Act(x.t, x.idx, True)
    if isinstance(c, np.ndarray) and isinstance(x, (_Act, _Fn)) and isinstance(z, np.ndarray):
        u = _uniform(z)
        if u is not None and np.isneginf(u) \
                and np.array_equal(np.broadcast_to(c, n.shape).astype(bool), _interior(x.idx, tensors[x.t])):
            x = _act_of(n, x, users, tensors, kernels)         # (a table keeps its source's border)
            return _Act(x.t, x.idx, False, True)
    return None


def _interior(idx: np.ndarray, t: TensorInfo) -> np.ndarray:
    """Which margin-space indices lie inside the tensor (not on its zero border)."""
    coords = _unravel(idx, t.mshape)
    ok = np.ones(np.shape(idx), bool)
    for a, cax in enumerate(coords):
        ok &= (cax >= t.margin(a)) & (cax < t.margin(a) + t.shape[a])
    return ok


def _materialize(n: Node, fn: _Fn, users, tensors, kernels) -> int:
    """The tensor holding ``fn.f`` of the whole of tensor ``fn.t``: folded into its producer when the
    chain owns that output (a lookup-table kernel's function grows; a GEMM gains a clamp), else a new
    lookup-table kernel."""
    if fn.mat:
        return fn.mat[0]
    t = tensors[fn.t]
    with np.errstate(all="ignore"):
        y0 = np.asarray(fn.f(np.zeros(1, np.float32)))
    if y0.dtype.kind != "f":
        raise _op_err(n, f"an elementwise chain ending in a {y0.dtype} value (a comparison) is not supported on "
                         "the chip; only float results are")
    reach = not bool(np.all(_interior(fn.idx, t)))
    if reach and y0[0] != 0:
        raise _op_err(n, "an elementwise function with f(0) != 0 of a zero-padded view is not supported on the chip")
    k = kernels[t.producer] if t.producer is not None else None
    owned = fn.fusable and fn.solo and fn.uses == users.get(id(fn.base), 0)
    if owned and isinstance(k, EwKernel) and k.op == "lut" and not k.relu:
        k.fn = _Then(k.fn, fn.f)
        ti = fn.t
    elif owned and fn.clip and isinstance(k, Kernel) and not k.relu and k.clamp is None \
            and _as_clamp(fn.f) is not None:
        sign, k.clamp = _as_clamp(fn.f)
        k.weight = k.weight * sign
        k.bias = None if k.bias is None else k.bias * sign
        ti = fn.t
    elif owned and fn.clip and isinstance(k, EwKernel) and k.op != "lut" and not k.relu and k.clamp is None \
            and _as_clamp(fn.f) is not None:
        sign, k.clamp = _as_clamp(fn.f)
        k.coefs = [c * sign for c in k.coefs]
        if sign < 0 and k.op != "sum":
            k.op = "min" if k.op == "max" else "max"
        ti = fn.t
    else:
        tensors.append(TensorInfo(f"t{len(tensors)}", t.shape, t.perm, "kernel", producer=len(kernels),
                                  pads=[list(p) for p in t.pads] if reach else []))
        ti = len(tensors) - 1
        kernels.append(EwKernel(f"lut{len(kernels)}", [(fn.t, t.identity())], [1.0], ti, op="lut", fn=fn.f))
    fn.mat.append(ti)
    return ti


#: probe values for recognising a clamp (``_as_clamp``)
_PROBE = np.concatenate([np.linspace(-1000.0, 1000.0, 40001), [-1e30, 1e30]]).astype(np.float32)


def _as_clamp(f) -> tuple | None:
    """``(sign, (lo, hi))`` when ``f`` is ``clip(sign * x, lo, hi)`` with sign +-1 (an infinite bound for a
    missing side; a minimum alone is spelled ``-max(-x, -hi)``), else None. ``f`` is a chain of maxima
    with constants and negations (``_Fn.clip``), which is always such a clip or a constant: its
    values at the ends of the probe are its bounds, the probe tells which."""
    with np.errstate(all="ignore"):
        y = np.asarray(f(_PROBE), np.float64)
    lo, hi = sorted((float(y[-2]), float(y[-1])))
    lo = -np.inf if lo <= -1e29 else lo
    hi = np.inf if hi >= 1e29 else hi
    if np.isinf(lo) and np.isinf(hi):
        return None
    for sign in (1.0, -1.0):
        if np.array_equal(y, np.clip(sign * _PROBE.astype(np.float64), lo, hi)):
            return sign, (lo, hi)
    return None


def _act_of(n: Node, v, users, tensors, kernels) -> _Act:
    """An activation value as a plain view (a chain becomes its tensor)."""
    if isinstance(v, _Fn):
        ti = _materialize(n, v, users, tensors, kernels)
        return _Act(ti, v.idx, _pure_view(_Act(ti, v.idx), tensors[ti]))
    return v


def _as_act(n: Node, v, users, tensors, kernels):
    if isinstance(v, _Prod):
        v = _resolve(v, users, tensors, kernels)
    return _act_of(n, v, users, tensors, kernels) if isinstance(v, _Fn) else v


def _term(n: Node, v, users, tensors, kernels) -> tuple[_Act, float]:
    """An operand of a sum/max kernel: a view and its coefficient (a linear chain keeps its factor)."""
    if isinstance(v, _Fn) and v.lin is not None:
        return _Act(v.t, v.idx), v.lin
    return _act_of(n, v, users, tensors, kernels), 1.0


def _sum_views(n: Node, a: _Act, c: float, tensors, kernels) -> _Act:
    """``c * sum`` over a few reduced axes of an activation view (average pooling's window): an
    elementwise sum kernel over one view per reduced position (channels in lanes), where a contraction
    with ones would use one MXU column and a DMA row per output element."""
    red = tuple(n.arg)
    nd = a.idx.ndim
    moved = np.moveaxis(a.idx, red, list(range(nd - len(red), nd)))
    flat = moved.reshape(moved.shape[:nd - len(red)] + (-1,))
    views = [np.ascontiguousarray(flat[..., i].reshape(n.shape)) for i in range(flat.shape[-1])]
    ti = _ew_out(_Act(a.t, views[0]), n.shape, tensors, kernels)
    kernels.append(EwKernel(f"sum{len(kernels)}", [(a.t, w) for w in views], [float(c)] * len(views), ti))
    return _Act(ti, tensors[ti].identity(), True)


def _ew_out(a: _Act, shape: tuple, tensors, kernels) -> int:
    """A new elementwise kernel's output tensor, stored in the axis order of ``a``'s memory layout."""
    shape = tuple(shape)
    p0 = tensors[a.t].phys_offsets(np.ascontiguousarray(a.idx)) if a.idx.size else None
    strides = [0 if d == 1 or p0 is None else abs(int(np.take(p0, [1], axis=ax).flat[0] - p0.flat[0]))
               for ax, d in enumerate(shape)]
    perm = tuple(sorted(range(len(shape)), key=lambda ax: -strides[ax]))
    tensors.append(TensorInfo(f"t{len(tensors)}", shape, perm, "kernel", producer=len(kernels)))
    return len(tensors) - 1


def _ew_combine(n: Node, op: str, srcv, users, tensors, kernels) -> _Act:
    """``a + b`` or ``max(a, b)`` of two activations: a new elementwise kernel, or one more term of the
    kernel (same op) that produced ``a`` (or ``b``) when nothing else reads that intermediate value."""
    terms = [_term(n, v, users, tensors, kernels) for v in srcv]
    for i in (0, 1):
        (a, _), (other, oc) = terms[i], terms[1 - i]
        t = tensors[a.t]
        k = kernels[t.producer] if t.producer is not None else None
        if isinstance(k, EwKernel) and k.op == op and isinstance(srcv[i], _Act) and srcv[i].fusable \
                and not k.relu and k.clamp is None and users.get(id(n.src[i]), 0) == 1 and _pure_view(a, t) \
                and _before(tensors[other.t], t.producer):
            k.srcs.append((other.t, np.ascontiguousarray(np.reshape(other.idx, t.shape))))
            k.coefs.append(oc)
            return _Act(a.t, a.idx, True)
    (a, ca), (b, cb) = terms
    ti = _ew_out(a, n.shape, tensors, kernels)
    kernels.append(EwKernel(f"{'add' if op == 'sum' else op}{len(kernels)}",
                            [(a.t, np.ascontiguousarray(a.idx)), (b.t, np.ascontiguousarray(b.idx))],
                            [ca, cb], ti, op=op))
    return _Act(ti, tensors[ti].identity(), True)


def _before(t: TensorInfo, kernel: int) -> bool:
    """Is tensor ``t`` available before kernel number ``kernel`` runs (an input, or produced earlier)?"""
    return t.producer is None or t.producer < kernel


def _nonneg(k) -> bool:
    """Does kernel ``k``'s output never go below zero (its requantization clamps at 0)?"""
    if k.relu or (k.clamp is not None and k.clamp[0] >= 0):
        return True
    if isinstance(k, EwKernel) and k.op == "lut":
        with np.errstate(all="ignore"):
            return bool(np.all(np.asarray(k.fn(_PROBE)) >= 0))
    return False


def _max_reduce(n: Node, v, users, tensors, kernels) -> _Act:
    """``max`` over axes of an activation view (max pooling): an elementwise max kernel over one view
    per reduced position."""
    if not isinstance(v, (_Act, _Fn)):
        raise _op_err(n, "unsupported operand")
    a, c = (_Act(v.t, v.idx), 1.0) if isinstance(v, _Act) and v.floor else _term(n, v, users, tensors, kernels)
    red = tuple(n.arg)
    nd = a.idx.ndim
    moved = np.moveaxis(a.idx, red, list(range(nd - len(red), nd)))
    flat = moved.reshape(moved.shape[:nd - len(red)] + (-1,))
    t = tensors[a.t]
    if isinstance(v, _Act) and v.floor:      # -inf padding
        if not _interior(flat, t).any(axis=-1).all():
            raise _op_err(n, "a max over a window of -inf padding only (no element of the input) is not supported")
        if t.producer is None or not _nonneg(kernels[t.producer]):
            flat = _clamp_inside(flat, t)      # a value that may be negative (else the zero border serves)
            if flat is None:
                raise _op_err(n, "max pooling with -inf padding of a value that may be negative: cannot read the "
                                 "border as an element of the same window")
    views = [np.ascontiguousarray(flat[..., i].reshape(n.shape)) for i in range(flat.shape[-1])]
    if len(views) == 1 and c == 1.0:
        return _Act(a.t, views[0])
    srcs, coefs = [(a.t, w) for w in views], [c] * len(views)
    while True:                 # a long reduction (global max pooling): a chain of kernels
        ti = _ew_out(_Act(*srcs[0]), n.shape, tensors, kernels)
        kernels.append(EwKernel(f"max{len(kernels)}", srcs[:MAX_TERMS], coefs[:MAX_TERMS], ti, op="max"))
        srcs, coefs = srcs[MAX_TERMS:], coefs[MAX_TERMS:]
        if not srcs:
            return _Act(ti, tensors[ti].identity(), True)
        srcs, coefs = [(ti, tensors[ti].identity())] + srcs, [1.0] + coefs


def _clamp_inside(groups: np.ndarray, t: TensorInfo) -> np.ndarray | None:
    """Border reads of max-reduction groups (``(..., R)`` margin-space indices) moved to the nearest
    element inside the tensor, axis by axis (replicate padding), when that element is itself read by
    the same group: then the group's max is that of its inside elements, the max under -inf padding.
    None when some group's clamped read is not among its own inside reads."""
    coords = _unravel(groups, t.mshape)
    cl = _ravel(tuple(np.clip(c, t.margin(a), t.margin(a) + t.shape[a] - 1) for a, c in enumerate(coords)),
                t.mshape)
    g = groups.reshape(-1, groups.shape[-1])
    cand = np.where(_interior(g, t), g, -1)              # (groups, R) inside reads; R is a window's size
    want = cl.reshape(g.shape)
    return cl if bool((want[:, :, None] == cand[:, None, :]).any(axis=2).all()) else None


#: composites that run as a NormKernel: reductions over the last axis, and elementwise functions (a lookup table)
NORM_KINDS = ("layernorm", "rmsnorm", "softmax")
LUT_KINDS = ("gelu", "silu", "sigmoid", "tanh", "erf")


@dataclass(frozen=True)
class _CompositeFn:
    """An elementwise composite's float meaning as a chain function (picklable, as ``_Apply``)."""
    comp: Composite

    def __call__(self, x):
        return self.comp.evaluate(x)


def _composite(n: Node, srcv, users, tensors, kernels):
    """A composite node (``compiler.ir.patterns``): an elementwise one (GELU, SiLU, sigmoid, tanh, erf)
    continues the single-activation chain of its input (a lookup-table kernel once read: ``_Fn``);
    norms, softmax and attention become their kernels (``_norm_kernel``)."""
    c: Composite = n.arg
    if c.kind in LUT_KINDS and len(srcv) == 1 and isinstance(srcv[0], (_Act, _Fn)):
        g = _fn_of(srcv[0], n.src[0])
        solo = g.solo and (g.f is _identity or users.get(id(n.src[0]), 0) == 1)
        return _Fn(g.t, g.idx, _Then(g.f, _CompositeFn(c)), None, g.base, g.uses, g.fusable, solo, clip=False)
    srcv = [_act_of(n, v, users, tensors, kernels) if isinstance(v, _Fn) else v for v in srcv]
    return _norm_kernel(n, srcv, tensors, kernels)


def _norm_kernel(n: Node, srcv, tensors, kernels) -> _Act:
    """A LayerNorm/RMSNorm/softmax composite over the last axis of an activation, with constant
    weight and bias varying along that axis only (a softmax maybe with a constant mask), or an
    elementwise composite (GELU, SiLU, ...): a ``NormKernel``."""
    c: Composite = n.arg
    x, consts = srcv[0], srcv[1:]
    if c.kind not in NORM_KINDS or not isinstance(x, _Act) \
            or not all(isinstance(v, np.ndarray) for v in consts):
        raise _op_err(n, f"{c} is not supported on the chip (supported: LayerNorm, RMSNorm and softmax of an "
                         "activation over its last axis, with a constant weight and bias, a softmax with a constant "
                         "mask; GELU, SiLU, sigmoid, tanh, erf of an activation; attention of three activations "
                         "with a constant mask or none)")
    if c.kind in NORM_KINDS and tuple(c.axes) != (len(n.shape) - 1,):
        raise _op_err(n, f"{c}: only a norm or softmax over the last axis (the features) runs on the chip")
    d = n.shape[-1]
    rows = math.prod(n.shape) // d
    mask = None
    if c.kind == "softmax" and c.mask:
        mask = masked(np.zeros(n.shape), np.broadcast_to(consts[0], n.shape), c.mask).reshape(rows, d)
        consts = consts[1:]
    wb = [np.broadcast_to(v, n.shape).reshape(rows, d) for v in consts]
    if any(np.any(v != v[:1]) for v in wb):
        raise _op_err(n, f"{c}: the weight and bias must vary along the last axis only")
    it = iter(v[0].astype(np.float64) for v in wb)
    w, b = (next(it) if f else None for f in c.affine)
    return _row_kernel(x, tuple(n.shape), c, w, b, mask, tensors, kernels)


def _row_kernel(x: _Act, shape: tuple, c: Composite, w, b, mask, tensors, kernels) -> _Act:
    """A ``NormKernel`` of ``c`` over the last axis of the view ``x`` (of ``shape``); its output tensor.
    A view whose rows are not contiguous features at one stride (a norm over the W axis of an NHWC
    image, a transposed view) is first copied row-major by an elementwise kernel."""
    d = shape[-1]
    rows = math.prod(shape) // d
    full = np.ascontiguousarray(np.broadcast_to(x.idx, shape))
    if rows_at_one_stride(tensors[x.t].phys_offsets(full.reshape(rows, d))) is None:
        tensors.append(TensorInfo(f"t{len(tensors)}", shape, tuple(range(len(shape))), "kernel",
                                  producer=len(kernels)))
        ci = len(tensors) - 1
        kernels.append(EwKernel(f"copy{len(kernels)}", [(x.t, full)], [1.0], ci))
        x = _Act(ci, tensors[ci].identity())
    tensors.append(TensorInfo(f"t{len(tensors)}", shape, tuple(range(len(shape))), "kernel",
                              producer=len(kernels)))
    ti = len(tensors) - 1
    comp = replace(c, axes=(1,) if c.axes else (), affine=(False, False), mask="add" if mask is not None else "")
    kernels.append(NormKernel(f"{c.kind}{len(kernels)}", x.t, np.ascontiguousarray(np.reshape(x.idx, (rows, d))),
                              ti, comp, w, b, mask=mask))
    return _Act(ti, tensors[ti].identity(), False)


def _attn_kernel(n: Node, srcv, tensors, kernels, fits=None) -> _Act:
    """An attention composite of three activations (and a constant mask): the fused attention (an
    ``AttnKernel`` over (batch, head) pairs, the leading axes: the last one the heads, the others the
    batch) when it can take it (``_fused_unfit``), else composed of a batched matmul for the scores,
    a masked softmax and a batched matmul with v (``_attn_compose``)."""
    c: Composite = n.arg
    if not all(isinstance(v, _Act) for v in srcv[:3]) or not all(isinstance(v, np.ndarray) for v in srcv[3:]):
        raise _op_err(n, f"{c}: attention runs on the chip for three activations and a constant mask (or none)")
    why = _fused_unfit(n, srcv, tensors, fits)
    if why is not None:
        return _attn_compose(n, srcv, tensors, kernels, why)
    *lead, L, dh = n.src[0].shape
    H = lead[-1] if lead else 1
    B = math.prod(lead) // H
    tensors.append(TensorInfo(f"t{len(tensors)}", tuple(n.shape), tuple(range(len(n.shape))), "kernel",
                              producer=len(kernels)))
    ti = len(tensors) - 1
    srcs = [(a.t, np.ascontiguousarray(np.broadcast_to(a.idx, s.shape)).reshape(B, H, *s.shape[-2:]))
            for a, s in zip(srcv, n.src)]
    kernels.append(AttnKernel(f"attention{len(kernels)}", srcs, ti, n.arg))
    return _Act(ti, tensors[ti].identity(), False)


def _fused_unfit(n: Node, srcv, tensors, fits) -> str | None:
    """Why the fused attention cannot take this composite (None: it can). ``fits(comp, q, k, v shapes)``
    (``lift``'s ``attention_fits``, bound to a config) says whether the shapes fit the config; without it
    every composite without a mask (or a causal one) is taken, as the config is unknown."""
    c: Composite = n.arg
    if c.mask:
        return f"mask {c.mask!r}"
    if fits is not None:
        why = fits(c, *(tuple(s.shape) for s in n.src[:3]))
        if why is not None:
            return why
    for a, s in zip(srcv[:3], n.src[:3]):
        if rows_at_one_stride(tensors[a.t].phys_offsets(np.broadcast_to(a.idx, s.shape))) is None:
            return "rows of q, k or v are not contiguous at one stride in DRAM"
    return None


def rows_at_one_stride(off: np.ndarray) -> int | None:
    """The row stride of element offsets ``off (..., L, d)`` whose rows (last axis) are contiguous and follow
    one another at one stride along axis -2 (``d`` when ``L == 1``); None otherwise."""
    first = off[..., 0]
    L = off.shape[-2]
    rs = int(first.reshape(-1, L)[0, 1] - first.reshape(-1, L)[0, 0]) if L > 1 else off.shape[-1]
    if np.any(np.diff(off, axis=-1) != 1) or np.any(first != first[..., :1] + rs * np.arange(L)):
        return None
    return rs


def _attn_compose(n: Node, srcv, tensors, kernels, why: str = "") -> _Act:
    """``softmax(mask(scale q k^T)) v`` as three kernels: the scores ``q k^T`` (a batched matmul, the scale
    folded into it), a softmax over the keys with the causal or constant mask (a ``NormKernel``), the
    product with ``v`` (a batched matmul). ``why``: why not the fused attention (in the kernels' text)."""
    c: Composite = n.arg
    qa, ka, va = srcv[:3]
    qs, ks, vs = (tuple(s.shape) for s in n.src[:3])
    lead, (Lq, dh), Lk, dv = qs[:-2], qs[-2:], ks[-2], vs[-1]
    nl = len(lead)
    text = f"{c}{_site_text(n)}" + (f" (composed: {why})" if why else "")
    full = lead + (Lq, Lk, dh)
    qi = np.broadcast_to(np.broadcast_to(qa.idx, qs)[..., :, None, :], full)
    ki = np.broadcast_to(np.broadcast_to(ka.idx, ks)[..., None, :, :], full)
    sc = _bmm_kernel(qa.t, qi, ka.t, ki, (nl + 2,), lead + (Lq, Lk, 1), tensors, kernels,
                     f"scores of {text}", c.scale)
    sshape = lead + (Lq, Lk)
    mask = None
    if c.causal:
        mask = np.where(np.tril(np.ones((Lq, Lk), bool)), 0.0, -np.inf)
    if c.mask:
        mask = masked(np.zeros(sshape) if mask is None else mask, srcv[3], c.mask)
    if mask is not None:
        mask = np.broadcast_to(mask, sshape).reshape(-1, Lk)
    p = _row_kernel(_Act(sc.t, sc.idx.reshape(sshape)), sshape, Composite("softmax", (nl + 1,)), None, None,
                    mask, tensors, kernels)
    full = lead + (Lq, Lk, dv)
    pi = np.broadcast_to(p.idx[..., None], full)
    vi = np.broadcast_to(np.broadcast_to(va.idx, vs)[..., None, :, :], full)
    o = _bmm_kernel(p.t, pi, va.t, vi, (nl + 1,), lead + (Lq, 1, dv), tensors, kernels, f"p @ v of {text}")
    return _Act(o.t, o.idx.reshape(n.shape), False)


def _pad_act(n: Node, a: _Act, tensors, kernels) -> _Act:
    """A PAD of an activation view: the tensor gains a zero border that the padded indices reach into
    (``_border_view``). A view that cannot reach a border (a slice padded along its sliced axis, as
    ``cat`` of slices does, or a new axis of size 1, as ``stack`` pads) is first copied into a tensor
    of its own by an elementwise kernel."""
    t = tensors[a.t]
    if _unborderable(n, a, t) is None:
        return _Act(a.t, _border_view(n, a, t), False)
    shape = tuple(n.src[0].shape)
    wide = tuple(v for v, (lo, hi) in enumerate(n.arg) if (lo or hi) and shape[v] == 1)
    tensors.append(TensorInfo(f"t{len(tensors)}", shape, default_perm(shape), "kernel", producer=len(kernels),
                              wide=wide))
    ti = len(tensors) - 1
    kernels.append(EwKernel(f"copy{len(kernels)}", [(a.t, np.ascontiguousarray(a.idx))], [1.0], ti))
    c = _Act(ti, tensors[ti].identity())
    why = _unborderable(n, c, tensors[ti], own=True)
    if why is not None:
        raise _op_err(n, f"cannot pad a copy of the view: {why}")
    return _Act(ti, _border_view(n, c, tensors[ti], own=True), False)


def _walk(coords: tuple, t: TensorInfo, v: int, own: bool = False) -> tuple[int, int] | None:
    """``(tensor axis, step)`` when view axis ``v`` walks one whole axis of ``t`` in steps of +1 or -1
    with every other coordinate fixed; else None. ``own``: the view is ``t`` itself (its copy), so a
    view axis of size 1 is the tensor's own axis ``v`` (in ``t.wide``)."""
    moving = [ta for ta, c in enumerate(coords) if c.shape[v] > 1 and np.any(np.diff(c, axis=v))]
    if own and not moving and v in t.wide:
        return v, 1
    if len(moving) != 1:
        return None
    ta = moving[0]
    d = np.diff(coords[ta], axis=v)
    step = int(d.flat[0])
    if step not in (1, -1) or np.any(d != step) or coords[ta].shape[v] != t.shape[ta]:
        return None
    return ta, step


def _unborderable(n: Node, a: _Act, t: TensorInfo, own: bool = False) -> str | None:
    """Why the padded positions of this view cannot read a zero border of ``t`` (None: they can)."""
    coords = _unravel(a.idx, t.mshape)
    for v, (lo, hi) in enumerate(n.arg):
        if not (lo or hi):
            continue
        w = _walk(coords, t, v, own)
        if w is None:
            return f"view axis {v} is not a whole axis of tensor {t.name}{fmt_shape(t.shape)}"
        if max(lo, hi) > t.margin(w[0]):
            raise _op_err(n, f"padding {lo, hi} exceeds the {t.margin(w[0])} per side that axis {w[0]} of tensor "
                             f"{t.name}{fmt_shape(t.shape)} supports")
    return None


def _border_view(n: Node, a: _Act, t: TensorInfo, own: bool = False) -> np.ndarray:
    """Margin-space indices of the padded view: each padded view axis extends the tensor axis it walks
    (``_walk``) into the tensor's zero border, which grows to cover it."""
    coords = list(_unravel(a.idx, t.mshape))
    for v, (lo, hi) in enumerate(n.arg):
        if not (lo or hi):
            continue
        ta, step = _walk(tuple(coords), t, v, own)
        width = [(lo, hi) if i == v else (0, 0) for i in range(len(n.arg))]
        coords = [np.pad(c, width, mode="edge") for c in coords]
        pos = np.arange(-lo, coords[ta].shape[v] - lo)
        beyond = (pos - np.clip(pos, 0, coords[ta].shape[v] - lo - hi - 1)).reshape(
            [-1 if i == v else 1 for i in range(len(n.arg))])
        coords[ta] = coords[ta] + step * beyond
        before, after = (lo, hi) if step == 1 else (hi, lo)
        t.pads[ta][0] = max(t.pads[ta][0], before)
        t.pads[ta][1] = max(t.pads[ta][1], after)
    return _ravel(tuple(coords), t.mshape).astype(np.int64)


#: Largest block-diagonal weight (K x N elements) a grouped contraction may expand to.
GROUPED_MAX = 1 << 25


def _contraction(n: Node, p: _Prod, tensors, kernels) -> _Act:
    """``SUM(MUL(view(x), view(W)))`` as one GEMM kernel. An output axis along which both the activation
    and the weights vary (the group axis of a grouped or depthwise convolution) is folded into K and N
    with a block-diagonal weight ``W'[(g, k), (g', n)] = delta(g, g') W[g, k, n]``; ``Kernel.wmask``
    marks its structural nonzeros (``compiler.lower.pipeline`` runs only those blocks)."""
    red = tuple(n.arg)
    full = n.src[0].shape
    outax = [i for i in range(len(full)) if i not in red]
    a, c = p.act.idx, np.broadcast_to(p.const, full)
    n_axes, m_axes, g_axes = [], [], []
    for ax in outax:
        cv, av = _varies(c, ax), _varies(a, ax)
        if cv and av:
            g_axes.append(ax)
        (n_axes if cv else m_axes).append(ax)
    G = math.prod(full[ax] for ax in g_axes)
    # A[m, (g, k)]: the activation with the other N axes fixed at 0; W[k, n]: the constant with M axes at 0
    a0 = a[tuple(0 if ax in n_axes and ax not in g_axes else slice(None) for ax in range(len(full)))]
    rest = [ax for ax in range(len(full)) if ax not in n_axes or ax in g_axes]
    a_perm = [rest.index(ax) for ax in m_axes] + [rest.index(ax) for ax in g_axes] + [rest.index(ax) for ax in red]
    M = math.prod(full[ax] for ax in m_axes)
    K = math.prod(full[ax] for ax in red)
    N = math.prod(full[ax] for ax in n_axes)
    if G > 1 and G * K * N > GROUPED_MAX:
        raise _op_err(n, f"axes {tuple(g_axes)} index both the activation and the weights (groups of a grouped "
                         f"contraction); their block-diagonal weight ({G * K} x {N}) exceeds {GROUPED_MAX} elements")
    gather = np.ascontiguousarray(np.transpose(a0, a_perm)).reshape(M, G * K)
    c0 = c[tuple(0 if ax in m_axes else slice(None) for ax in range(len(full)))]
    rest_c = [ax for ax in range(len(full)) if ax not in m_axes]
    c_perm = [rest_c.index(ax) for ax in red] + [rest_c.index(ax) for ax in n_axes]
    weight = np.ascontiguousarray(np.transpose(c0, c_perm)).reshape(K, N).astype(np.float64)
    wmask = None
    if G > 1:
        weight, wmask = _block_diagonal(weight, [full[ax] for ax in n_axes], [n_axes.index(ax) for ax in g_axes])
    shape = n.shape
    tensors.append(TensorInfo(f"t{len(tensors)}", tuple(shape), tuple(list(red) + m_axes + n_axes), "kernel",
                              producer=len(kernels)))
    ti = len(tensors) - 1
    kind = "conv" if len(full) > 3 else "matmul"
    text = f"SUM{fmt_shape(full)} over {red}" + (f", groups {G} on axes {tuple(g_axes)}" if G > 1 else "")
    kernels.append(Kernel(f"{kind}{len(kernels)}", p.act.t, ti, gather, weight, None, False,
                          tuple(m_axes), tuple(n_axes), op_text=text + _site_text(n), wmask=wmask))
    return _Act(ti, tensors[ti].identity(), True)


def _bmm_contraction(n: Node, p: _Prod2, tensors, kernels) -> _Act:
    """``SUM(MUL(view(a), view(b)))`` of two activations: a batched matmul (compiler.lower.bmm)."""
    full = n.src[0].shape
    return _bmm_kernel(p.a.t, p.a.idx, p.b.t, p.b.idx, tuple(n.arg), tuple(n.shape), tensors, kernels,
                       f"SUM{fmt_shape(full)} over {tuple(n.arg)} of two activations")


def _bmm_kernel(ta: int, a_idx, tb: int, b_idx, red: tuple, out_shape: tuple, tensors, kernels, text: str,
                mult: float = 1.0) -> _Act:
    """A ``BmmKernel``: ``out = mult * SUM(a * b)`` over the axes ``red`` of the two index arrays (broadcast to
    one full shape); ``out_shape`` is the full shape with the summed axes of size 1."""
    a, b = np.broadcast_arrays(a_idx, b_idx)
    s_axes, m_axes, n_axes = split_axes(a, b, red)
    ga, gb = gathers(a, b, red, s_axes, m_axes, n_axes)
    tensors.append(TensorInfo(f"t{len(tensors)}", out_shape, tuple(list(red) + s_axes + m_axes + n_axes),
                              "kernel", producer=len(kernels)))
    ti = len(tensors) - 1
    kernels.append(BmmKernel(f"bmm{len(kernels)}", ta, tb, ga, gb, ti, tuple(s_axes), tuple(m_axes),
                             tuple(n_axes), mult=mult, op_text=text))
    return _Act(ti, tensors[ti].identity(), True)


def _block_diagonal(w: np.ndarray, n_shape: list, g_pos: list) -> tuple[np.ndarray, np.ndarray]:
    """``(K, N)`` weights whose columns belong to groups (the N coordinates at ``g_pos`` of ``n_shape``)
    as the ``(G * K, N)`` block-diagonal weight with rows ``(g, k)``, and its structural mask."""
    K, N = w.shape
    coords = np.indices(n_shape, dtype=np.int64).reshape(len(n_shape), N)
    g_of_n = _ravel(tuple(coords[i] for i in g_pos), [n_shape[i] for i in g_pos])
    G = math.prod(n_shape[i] for i in g_pos)
    mask = np.zeros((G, K, N), bool)
    mask[g_of_n, :, np.arange(N)] = True
    mask = mask.reshape(G * K, N)
    return np.where(mask, np.tile(w, (G, 1)), 0.0), mask


def _per_n(n: Node, k: Kernel, t: TensorInfo, c: np.ndarray) -> np.ndarray | None:
    """A constant (broadcast to ``n``'s shape, a view of kernel ``k``'s output ``t``) as a vector over
    the kernel's N columns, or None when it varies along an M axis."""
    cc = np.broadcast_to(c, n.shape).reshape(t.shape)
    if any(_varies(cc, ax) for ax in k.m_axes):
        return None
    c0 = cc[tuple(slice(None) if ax in k.n_axes else 0 for ax in range(len(t.shape)))]
    srt = sorted(k.n_axes)
    return np.transpose(c0, [srt.index(ax) for ax in k.n_axes]).reshape(-1).astype(np.float64)


# ---------------------------------------------------------------------------------------------- float evaluation

def run_float(s: Schedule, feeds: dict, collect: dict | None = None) -> list[np.ndarray]:
    """Evaluate the kernel schedule in float64 (the calibration pass); ``collect`` gets every tensor."""
    vals: dict[int, np.ndarray] = {}
    for name, ti in s.inputs.items():
        value = s.tensors[ti].value
        if value is None and name not in feeds:
            raise ChipCompileError(f"no value for input {name!r}")
        vals[ti] = np.asarray(feeds[name] if value is None else value, np.float64).reshape(s.tensors[ti].shape)
    for k in s.kernels:
        if isinstance(k, GatherKernel):
            idx = gather_base(vals[k.src], s.tensors[k.src], k.pos)
            table = np.concatenate([k.table, np.zeros((1, k.d))])
            vals[k.out] = gth.gather_values(table, k, idx, s.tensors[k.out].shape)
            continue
        if isinstance(k, BmmKernel):
            av = gather_base(vals[k.a], s.tensors[k.a], k.ga)
            bv = gather_base(vals[k.b], s.tensors[k.b], k.gb)
            vals[k.out] = to_base(bmm_float(k, av, bv), s.tensors[k.out].shape, k)
            continue
        if isinstance(k, AttnKernel):
            qkv = [gather_base(vals[t], s.tensors[t], idx) for t, idx in k.srcs]
            vals[k.out] = k.comp.evaluate(*qkv).reshape(s.tensors[k.out].shape)
            continue
        if isinstance(k, NormKernel):
            x = gather_base(vals[k.src], s.tensors[k.src], k.idx)
            vals[k.out] = k.run(x).reshape(s.tensors[k.out].shape)
            continue
        if isinstance(k, EwKernel):
            terms = [c * gather_base(vals[t], s.tensors[t], idx) for (t, idx), c in zip(k.srcs, k.coefs)]
            y = ew_float(k, terms)
            y = np.maximum(y, 0) if k.relu else y
            vals[k.out] = y if k.clamp is None else np.clip(y, *k.clamp)
            continue
        A = gather_base(vals[k.src], s.tensors[k.src], k.gather)
        y = A @ k.weight
        if k.bias is not None:
            y = y + k.bias
        if k.relu:
            y = np.maximum(y, 0)
        if k.clamp is not None:
            y = np.clip(y, *k.clamp)
        vals[k.out] = mn_to_base(y, s.tensors[k.out], k)
    if collect is not None:
        collect.update(vals)
    return [gather_base(vals[t], s.tensors[t], idx) for t, idx in s.outputs]


def ew_float(k: EwKernel, terms: list) -> np.ndarray:
    """An elementwise kernel's float result from its scaled source views (before ReLU)."""
    if k.op == "lut":
        with np.errstate(all="ignore"):
            return np.asarray(k.fn(np.asarray(terms[0], np.float32)), np.float64)
    if k.op == "sum":
        return sum(terms)
    return (np.maximum if k.op == "max" else np.minimum).reduce(np.stack(terms))


def mn_to_base(y: np.ndarray, t: TensorInfo, k: Kernel) -> np.ndarray:
    """A kernel's (M, N) result as its output tensor's base-shape array (summed axes have size 1)."""
    order = list(k.m_axes) + list(k.n_axes)
    srt = sorted(order)
    y = np.transpose(np.reshape(y, [t.shape[a] for a in order]), [order.index(a) for a in srt])
    return y.reshape(t.shape)


def base_to_mn(x: np.ndarray, t: TensorInfo, k: Kernel) -> np.ndarray:
    order = list(k.m_axes) + list(k.n_axes)
    srt = sorted(order)
    x = np.reshape(x, [t.shape[a] for a in srt])
    return np.transpose(x, [srt.index(a) for a in order]).reshape(k.M, k.N)

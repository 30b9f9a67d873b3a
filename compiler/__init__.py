"""The tetrachip compiler, one folder per layer in processing order:

* ``frontend/`` — what users call: the lazy ``Tensor``, autograd, ``nn``, ``optim``,
  ``functional``, ``random`` and control flow (``cond``, ``loop``, ``while_loop``);
* ``ir/`` — the graph IR: nodes and ops, dtypes, passes, the reference semantics of each op and
  the evaluator that realizes a graph;
* ``lower/`` — lowering to the chip: the dispatcher (``dispatch.compile_model``), the protocol every
  compiled model implements (``compiled.Compiled``), then fusion and scheduling, quantization,
  tiling, the memory planner, emission, search, dynamic shapes, control flow and the transformer
  kernels;
* ``render/`` — the graph rendered as GPU kernels for the comparison backends.
"""

"""The IR: frozen nodes with inferred shapes, printable graphs, the checker and the pass list."""
import dataclasses

import numpy as np
import pytest

import tetrachip as tc
from compiler.ir import dtypes
from compiler.ir import passes
from compiler.ir.graph import IRError, Node, Ops, toposort, verify


def const(v, dt=dtypes.float32):
    return Node(Ops.CONST, dt, (), v)


def test_node_is_frozen_and_typed():
    c = const(1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.op = Ops.ADD
    r = Node(Ops.EXPAND, dtypes.float32, (Node(Ops.RESHAPE, dtypes.float32, (c,), (1, 1)),), (3, 5))
    assert r.shape == (3, 5) and r.dtype == dtypes.float32


@pytest.mark.parametrize("build, msg", [
    (lambda: Node(Ops.ADD, dtypes.float32, (Node(Ops.BUFFER, dtypes.float32, (), np.zeros((2, 3), np.float32)),
                                            Node(Ops.BUFFER, dtypes.float32, (), np.zeros((3, 2), np.float32)))),
     r"ADD: operand shapes differ .*\(2, 3\), \(3, 2\)"),
    (lambda: Node(Ops.EXP, dtypes.int32, (const(1, dtypes.int32),)), "EXP: needs a float operand"),
    (lambda: Node(Ops.CMPLT, dtypes.float32, (const(1.0), const(2.0))), "CMPLT: result dtype must be bool"),
    (lambda: Node(Ops.RESHAPE, dtypes.float32, (Node(Ops.BUFFER, dtypes.float32, (), np.zeros(6, np.float32)),),
                  (4,)), r"RESHAPE: cannot reshape to \(4,\)"),
    (lambda: Node(Ops.SUM, dtypes.float32, (const(1.0),), (0,)), "SUM: axes"),
    (lambda: Node(Ops.WHERE, dtypes.float32, (const(1.0), const(1.0), const(2.0))), "condition must be bool"),
])
def test_malformed_nodes_are_rejected_naming_op_and_shapes(build, msg):
    with pytest.raises(IRError, match=msg):
        build()


def test_graph_prints_one_line_per_node():
    x = tc.Tensor(np.ones((2, 3), np.float32))
    y = (x * 2).sum(1)
    text = y.graph()
    lines = text.splitlines()
    assert lines[-1].startswith("return %")
    assert len(lines) == len(toposort([y.node])) + 1
    assert any(" MUL float32(2, 3) " in ln for ln in lines)
    assert any(" SUM float32(2, 1) " in ln for ln in lines)


def test_checker_catches_a_corrupted_node():
    x = tc.Tensor(np.ones((2, 3), np.float32)).sum(0)
    bad = x.node
    object.__setattr__(bad, "shape", (7,))
    with pytest.raises(IRError, match="disagrees"):
        verify([bad])


def test_checker_rejects_body_with_foreign_input():
    outer = Node(Ops.INPUT, dtypes.float32, (), ("outer", (3,)))
    from compiler.ir.graph import Graph
    carry = Node(Ops.INPUT, dtypes.float32, (), ("c", (3,)))
    row = Node(Ops.INPUT, dtypes.float32, (), ("r", (3,)))
    body = Graph((carry, row), Node(Ops.ADD, dtypes.float32, (carry, outer)))
    loop = Node(Ops.LOOP, dtypes.float32, (const_vec(), Node(Ops.INPUT, dtypes.float32, (), ("xs", ("N", 3)))),
                (body, 1))
    with pytest.raises(IRError, match="not its own"):
        verify([loop])


def const_vec():
    return Node(Ops.BUFFER, dtypes.float32, (), np.zeros(3, np.float32))


def test_pass_list_is_named_and_simplifies():
    assert [name for name, _ in passes.PASSES] == ["fold_constants", "simplify_movement"]
    x = Node(Ops.BUFFER, dtypes.float32, (), np.arange(6, dtype=np.float32))
    r = Node(Ops.RESHAPE, dtypes.float32, (Node(Ops.RESHAPE, dtypes.float32, (x,), (2, 3)),), (3, 2))
    p = Node(Ops.PERMUTE, dtypes.float32, (Node(Ops.PERMUTE, dtypes.float32, (r,), (1, 0)),), (1, 0))
    noop = Node(Ops.RESHAPE, dtypes.float32, (p,), (3, 2))
    folded = Node(Ops.ADD, dtypes.float32, (const(2.0), const(3.0)))
    (out, c) = passes.run_passes([noop, folded])
    assert out.op is Ops.RESHAPE and out.src[0] is x  # reshape(reshape) merged, permute pair and no-op gone
    assert c.op is Ops.CONST and c.arg == 5.0
    np.testing.assert_array_equal(tc.Device("numpy").execute([out], {})[0], np.arange(6).reshape(3, 2))


def test_pass_that_breaks_the_graph_is_named():
    def bad_rule(n):  # drops a reduction: the replacement has another shape
        return n.src[0] if n.op is Ops.SUM else None
    x = tc.Tensor(np.ones((2, 3), np.float32)).sum(0)
    with pytest.raises(ValueError, match="after pass 'bad'"):
        passes.run_passes([x.node], passes=[("bad", bad_rule)])


def test_prepare_gives_the_checked_graph_a_device_receives():
    from compiler.ir import engine
    x = tc.Tensor(np.arange(6, dtype=np.float32)).reshape(2, 3).reshape(3, 2)
    y = (x * 1.0 + x).sum(0)
    (out,) = engine.prepare([y.node])
    nodes = toposort([out])
    reshapes = [n for n in nodes if n.op is Ops.RESHAPE and n.src[0].op is Ops.RESHAPE]
    assert not reshapes  # merged by simplify_movement
    verify([out])
    np.testing.assert_allclose(tc.Device("numpy").execute([out], {})[0], y.numpy())

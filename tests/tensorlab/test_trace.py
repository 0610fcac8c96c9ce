"""trace_backward: one line per op, each op once, in the order backward runs them; small
tensors by their signed entries, larger ones by their norms."""

import io

import numpy as np
import pytest

import tensorlab as tl
from tensorlab.autograd import topological_order


def mlp_loss():
    tl.manual_seed(0)
    x = tl.randn(4, 3)
    w1 = tl.randn(3, 5, requires_grad=True)
    w2 = tl.randn(5, 2, requires_grad=True)
    h = (x @ w1).tanh()
    return ((h @ w2).log_softmax()[:, 0] + h.sum(axis=1)).mean()  # h is used twice


def test_every_op_once_in_reverse_topological_order():
    loss = mlp_loss()
    ops = [n for n in reversed(topological_order([loss._ctx])) if not isinstance(n, tl.Tensor)]
    buf = io.StringIO()
    with tl.trace_backward(file=buf) as trace:
        loss.backward()
    assert [s.op for s in trace.steps] == [n.name for n in ops]
    assert len(buf.getvalue().strip().splitlines()) == len(ops)
    # every consumer of a node is traced before the node itself
    position = {id(n): i for i, n in enumerate(ops)}
    for n in ops:
        for t in n.parents:  # freed graph: structure kept in .parents
            if not isinstance(t, tl.Tensor):
                assert position[id(t)] > position[id(n)]


def test_steps_record_shapes_and_norms():
    x = tl.tensor(np.array([[1.0, -2.0]]), requires_grad=True)
    y = (x * 3).sum()
    with tl.trace_backward(quiet=True) as trace:
        y.backward()
    sum_step, mul_step = trace.steps
    assert (sum_step.op, sum_step.grad_shape, sum_step.grad_norm) == ("Sum", (), 1.0)
    assert mul_step.input_shapes == [(1, 2), ()]
    assert mul_step.sent[0] == ((1, 2), np.sqrt(18.0))  # 3 * ones, norm √(9+9)
    assert mul_step.sent[1] is None  # the constant 3 needs no gradient
    w = tl.tensor(np.ones((2, 3)), requires_grad=True)
    with tl.trace_backward(quiet=True) as trace:
        (tl.tensor(np.ones((4, 2))) @ w).sum().backward()
    matmul_step = trace.steps[-1]
    assert matmul_step.op == "MatMul" and matmul_step.sent[1] == ((2, 3), np.sqrt(96.0))
    assert matmul_step.sent[0] is None  # a constant left operand: no gradient is sent to it


def test_tracing_is_off_outside_the_block():
    loss = mlp_loss()
    with tl.trace_backward(quiet=True) as trace:
        pass
    loss.backward()
    assert trace.steps == []


def test_an_op_whose_backward_returns_arrays_is_traced():
    """Fused ops (nn's LinearFn, ...) return raw arrays from backward; the trace sees them as
    Tensors in the inputs' shapes (it once crashed on them)."""

    class ArrayMatMul(tl.Function):
        def forward(ctx, a, b):
            return a @ b

        def backward(ctx, g):
            a, b = (t.data for t in ctx.inputs)
            return g.data @ b.T, a.T @ g.data

    x = tl.randn(4, 3, requires_grad=True)
    W = tl.randn(3, 2, requires_grad=True)
    with tl.trace_backward(quiet=True) as trace:
        ArrayMatMul.apply(x, W).sum().backward()
    (step,) = [s for s in trace.steps if s.op == "ArrayMatMul"]
    assert step.sent[0][0] == (4, 3) and step.sent[1][0] == (3, 2)
    assert step.sent[1][1] == pytest.approx(float(np.linalg.norm(W.grad.numpy())), rel=1e-6)


def test_small_tensors_show_their_entries_with_signs():
    """A gradient of at most 6 entries is printed entry by entry, so its signs show (a norm
    hides them); a larger one by its norm."""
    x = tl.tensor(np.array([[1.0, -2.0]]), requires_grad=True)
    buf = io.StringIO()
    with tl.trace_backward(file=buf) as trace:
        (x * -3.0).sum().backward()
    sum_line, mul_line = buf.getvalue().splitlines()
    assert "receives () [1]  sends (1,2) [1, 1]" in sum_line
    assert "receives (1,2) [1, 1]  sends (1,2) [-3, -3], -" in mul_line
    mul = trace.steps[1]
    assert mul.grad_entries == (1.0, 1.0) and mul.sent_entries == [(-3.0, -3.0), None]
    assert mul.sent[0] == ((1, 2), np.sqrt(18.0))  # the norm is still recorded
    w = tl.tensor(np.full(7, -1.0), requires_grad=True)
    buf = io.StringIO()
    with tl.trace_backward(file=buf) as trace:
        (w * 2.0).sum().backward()
    assert "sends (7,) |5.29|, -" in buf.getvalue()  # 7 entries of -2: the norm √28
    assert trace.steps[1].sent_entries == [None, None]

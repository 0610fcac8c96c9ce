"""A 15-line tour of tensorlab: a tensor, backward, a custom op checked by gradcheck, a graph.

python examples/tour.py
"""

import tensorlab as tl

x = tl.tensor([[1.0, 2.0]], requires_grad=True)
y = (x @ x.T).tanh().sum()
y.backward()
print("x.grad =", x.grad)  # d tanh(x·x)/dx = (1 - tanh²(x·x)) · 2x


class Cube(tl.Function):
    """y = a³;  da = g · 3a²."""

    def forward(ctx, a):
        return a**3

    def backward(ctx, g):
        (a,) = ctx.inputs
        return g * 3 * a**2


a = tl.randn(3, dtype="float64", requires_grad=True)
print("gradcheck(Cube):", tl.gradcheck(Cube.apply, [a]))
print(tl.draw(y).source.count("->"), "edges in the graph of y; tl.draw(y) is a graphviz.Digraph")

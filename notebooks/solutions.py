"""Reference solutions to the exercises of the course (``notebooks/grader.py``).

Kept out of the student notebooks on purpose: try each exercise first. Every function here is
what ``check(name, ...)`` accepts; ``tests/test_grader.py`` holds each one to its
exercise.  ``SOLUTIONS[name]`` is the backward, ``FORWARDS[name]`` the forward where the
notebook asks for one.
"""

from __future__ import annotations

import math

import numpy as np

import tensorlab as tl


def mul_backward(g, a, b):
    return g * b, g * a


def tanh_backward(g, a):
    return g * (1 - np.tanh(a) ** 2)


def log_backward(g, a):
    return g / a


def sub_backward(g, a, b):
    return g, -g


def add_broadcast_backward(g, a, b):
    return g, g.sum(axis=0)  # b (3,) was copied along axis 0 of the (4, 3) output


def sum_rows_backward(g, a):
    return np.broadcast_to(g[:, None], a.shape)


def matmul_backward(g, a, b):
    return g @ b.T, a.T @ g


def softmax_forward(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_backward(g, s):
    y = softmax_forward(s)
    return y * (g - (g * y).sum(axis=-1, keepdims=True))


def linear_backward(g, x, W, b):
    return g @ W.T, x.T @ g, g.sum(axis=0)


def cross_entropy_forward(logits, targets):
    p = softmax_forward(logits)
    return -np.log(p[np.arange(len(targets)), targets]).mean()


def cross_entropy_backward(g, logits, targets):
    d = softmax_forward(logits)
    d[np.arange(len(targets)), targets] -= 1.0
    return g * d / len(targets)


def layer_norm_forward(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    sigma = np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    return (x - mu) / sigma * gamma + beta


def layer_norm_backward(g, x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    sigma = np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) / sigma
    gh = g * gamma
    dx = gh - gh.mean(axis=-1, keepdims=True) - xhat * (gh * xhat).mean(axis=-1, keepdims=True)
    return dx / sigma, (g * xhat).sum(axis=0), g.sum(axis=0)


_C, _K = math.sqrt(2 / math.pi), 0.044715


def gelu_tanh_forward(x):
    return 0.5 * x * (1 + np.tanh(_C * (x + _K * x**3)))


def gelu_tanh_backward(g, x):
    t = np.tanh(_C * (x + _K * x**3))
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * _C * (1 + 3 * _K * x**2))


def attention_forward(q, k, v):
    T = q.shape[0]
    s = q @ k.T / math.sqrt(q.shape[-1])
    s = np.where(np.tri(T, dtype=bool), s, -np.inf)
    return softmax_forward(s) @ v


def attention_backward(g, q, k, v):
    T, scale = q.shape[0], 1 / math.sqrt(q.shape[-1])
    A = softmax_forward(np.where(np.tri(T, dtype=bool), q @ k.T * scale, -np.inf))
    dv = A.T @ g
    dA = g @ v.T
    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))
    return dS @ k * scale, dS.T @ q * scale, dv


# ---------------------------------------------------------------------- notebook 2: the engine
class Value:
    """A number that remembers how it was made: its parents and, for each, the local
    derivative of this value with respect to that parent."""

    def __init__(self, data, parents=(), local=()):
        self.data, self.grad = float(data), 0.0
        self.parents, self.local = parents, local

    def __add__(self, other):
        return Value(self.data + other.data, (self, other), (1.0, 1.0))

    def __mul__(self, other):
        return Value(self.data * other.data, (self, other), (other.data, self.data))

    def tanh(self):
        t = math.tanh(self.data)
        return Value(t, (self,), (1 - t * t,))

    def backward(self):
        order, seen = [], set()

        def visit(node):  # (recursive: fine for the small graphs here)
            if id(node) not in seen:
                seen.add(id(node))
                for p in node.parents:
                    visit(p)
                order.append(node)

        visit(self)
        self.grad = 1.0
        for node in reversed(order):
            for p, local in zip(node.parents, node.local):
                p.grad += node.grad * local


def sum_to(g, shape):
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead)))
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=ones, keepdims=True) if ones else g


class Array:
    """Value for arrays: each parent's vjp turns the output's gradient into that parent's
    share, in the shape of the output (before any sum back to a broadcast parent)."""

    def __init__(self, data, parents=(), vjps=()):
        self.data = np.asarray(data, dtype=np.float64)
        self.grad = np.zeros_like(self.data)
        self.parents, self.vjps = parents, vjps

    def __add__(self, other):
        return Array(self.data + other.data, (self, other), (lambda g: g, lambda g: g))

    def __mul__(self, other):
        a, b = self.data, other.data
        return Array(a * b, (self, other), (lambda g: g * b, lambda g: g * a))

    def __matmul__(self, other):
        a, b = self.data, other.data
        return Array(a @ b, (self, other), (lambda g: g @ b.T, lambda g: a.T @ g))

    def tanh(self):
        t = np.tanh(self.data)
        return Array(t, (self,), (lambda g: g * (1 - t * t),))

    def sum(self):
        shape = self.data.shape
        return Array(self.data.sum(), (self,), (lambda g: np.broadcast_to(g, shape),))

    def backward(self):
        order, seen = [], set()

        def visit(node):
            if id(node) not in seen:
                seen.add(id(node))
                for p in node.parents:
                    visit(p)
                order.append(node)

        visit(self)
        self.grad = np.ones_like(self.data)
        for node in reversed(order):
            for p, vjp in zip(node.parents, node.vjps):
                p.grad += sum_to(vjp(node.grad), p.data.shape)


# ---------------------------------------------------------------------- notebook 6: a GPT block
def _ln(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return (x - mu) / ((((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps) ** 0.5) * w + b


def _gelu(x):
    return 0.5 * x * (1 + (_C * (x + _K * x**3)).tanh())


def block_forward(x, p):
    """One pre-norm GPT block on x (T, d_model), from engine ops on Tensors."""
    T = x.shape[0]
    H, dh = p["attn.W_O"].shape[:2]
    h = _ln(x, p["ln1.w"], p["ln1.b"])
    q, k, v = (
        ((h @ p[f"attn.W_{c}"].reshape(-1, H * dh)) + p[f"attn.b_{c}"]).reshape(T, H, dh)
        for c in "qkv"
    )
    q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (H, T, dh)
    s = q @ k.mT / math.sqrt(dh)
    s = tl.where(np.tri(T, dtype=bool), s, -np.inf)
    z = (s.softmax(axis=-1) @ v).transpose(0, 1).reshape(T, H * dh)
    x = x + z @ p["attn.W_O"].reshape(H * dh, -1) + p["attn.b_O"]
    h = _ln(x, p["ln2.w"], p["ln2.b"])
    return x + _gelu(h @ p["mlp.W_in"] + p["mlp.b_in"]) @ p["mlp.W_out"] + p["mlp.b_out"]


def mlp_backward(g, x, W_in, b_in, W_out, b_out):
    h = x @ W_in + b_in
    a = gelu_tanh_forward(h)
    da = g @ W_out.T
    dh = gelu_tanh_backward(da, h)
    return dh @ W_in.T, x.T @ dh, dh.sum(axis=0), a.T @ g, g.sum(axis=0)


def heads_backward(g, x, W_q, W_k, W_v, W_O):
    q, k, v = (np.einsum("td,dhe->hte", x, W) for W in (W_q, W_k, W_v))
    z = np.stack([attention_forward(*qkv) for qkv in zip(q, k, v)])  # (H, T, d_head)
    dz = np.einsum("td,hed->hte", g, W_O)
    dW_O = np.einsum("hte,td->hed", z, g)
    dq, dk, dv = (np.stack(d) for d in zip(*map(attention_backward, dz, q, k, v)))
    dWs = [np.einsum("td,hte->dhe", x, d) for d in (dq, dk, dv)]
    dx = sum(np.einsum("hte,dhe->td", d, W) for d, W in zip((dq, dk, dv), (W_q, W_k, W_v)))
    return (dx, *dWs, dW_O)


# ---------------------------------------------------------------------- notebook 7: the step
def adamw_step(w, g, m, v, t, lr, betas, eps, weight_decay):
    b1, b2 = betas
    w = w * (1 - lr * weight_decay)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
    return w - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def clip_grad_norm(grads, max_norm):
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
    scale = min(1.0, max_norm / (norm + 1e-6))
    return [g * scale for g in grads], norm


# ---------------------------------------------------------------------- notebook 8: circuits
def head_attributions(model, cache, tokens):
    """Each head's direct logit attribution to the logit of ``tokens`` (B, T): (layers ·
    heads, B, T), layer-major."""
    W_U = model.W_U.numpy().astype(np.float64) * model.ln_final.w.numpy()[:, None]
    directions = W_U.T[tokens]  # (B, T, d): the column of each position's token
    sigma = cache["ln_final.hook_scale"]  # (B, T, 1)
    out = []
    for layer in range(len(model.blocks)):
        result = cache[f"blocks.{layer}.attn.hook_result"]  # (B, T, H, d)
        for h in range(result.shape[2]):
            r = result[:, :, h]
            r = (r - r.mean(axis=-1, keepdims=True)) / sigma
            out.append((r * directions).sum(axis=-1))
    return np.stack(out)


_here = dict(globals())
SOLUTIONS = {n.removesuffix("_backward"): f for n, f in _here.items() if n.endswith("_backward")}
FORWARDS = {n.removesuffix("_forward"): f for n, f in _here.items() if n.endswith("_forward")}
# the answers that are not one op's backward (each graded by its exercise's own cases)
SOLUTIONS.update(
    value=Value,
    sum_to=sum_to,
    array=Array,
    gpt_block=block_forward,
    adamw=adamw_step,
    clip=clip_grad_norm,
    dla=head_attributions,
)
del FORWARDS["block"]

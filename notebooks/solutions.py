"""Reference solutions to the exercises of the course (``notebooks/grader.py``).

Kept out of the student notebooks on purpose: try each exercise first. Every function here is
what ``check(name, ...)`` accepts; ``tests/test_grader.py`` holds each one to its
exercise.  ``SOLUTIONS[name]`` is the backward, ``FORWARDS[name]`` the forward where the
notebook asks for one.
"""

from __future__ import annotations

import math

import numpy as np


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


_here = dict(globals())
SOLUTIONS = {n.removesuffix("_backward"): f for n, f in _here.items() if n.endswith("_backward")}
FORWARDS = {n.removesuffix("_forward"): f for n, f in _here.items() if n.endswith("_forward")}

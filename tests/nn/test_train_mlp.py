"""End to end: a small MLP built from nn.Parameter learns the two-spirals problem with AdamW.

Everything here is the library's: Parameters and Modules, the engine's backward, nn.init,
AdamW with decay groups, gradient clipping and the cosine schedule.
"""

import math
import time

import numpy as np

import nn
import tensorlab as tl
from nn import init
from nn.optim import AdamW, clip_grad_norm_, cosine_with_warmup, param_groups_for_decay


def two_spirals(n_per_class: int, noise: float, seed: int):
    """Two interleaved spirals in the plane; class 0 and class 1 (x: (2n, 2) float32)."""
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.random(n_per_class)) * 3 * math.pi  # angle: 1.5 turns
    arm = np.stack([t * np.cos(t), t * np.sin(t)], axis=1) / (3 * math.pi)
    x = np.concatenate([arm, -arm]) + noise * rng.standard_normal((2 * n_per_class, 2))
    y = np.concatenate([np.zeros(n_per_class), np.ones(n_per_class)]).astype(np.int64)
    return x.astype(np.float32), y


class Linear(nn.Module):
    """y = x @ W + b, W of shape (d_in, d_out), Kaiming-uniform like PyTorch's default."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.W = nn.Parameter(tl.zeros((d_in, d_out)))
        self.b = nn.Parameter(tl.zeros(d_out))
        init.xavier_uniform_(self.W, gain=init.calculate_gain("tanh"))

    def forward(self, x):
        return x @ self.W + self.b


class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = nn.ModuleList([Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])])

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = layer(x).tanh()
        return self.layers[-1](x)


def cross_entropy(logits, targets: np.ndarray):
    """mean over i of −log softmax(logits_i)[y_i]."""
    logp = logits.log_softmax(axis=-1)
    return -logp[np.arange(len(targets)), targets].mean()


def test_mlp_learns_two_spirals():
    tl.manual_seed(0)
    x_np, y = two_spirals(n_per_class=100, noise=0.02, seed=0)
    x = tl.tensor(x_np)
    model = MLP([2, 32, 32, 2])
    steps = 600
    opt = AdamW(param_groups_for_decay(model, weight_decay=1e-4), lr=0.03)

    start = time.perf_counter()
    first_loss = None
    for it in range(steps):
        for group in opt.param_groups:  # warmup, then cosine decay to a tenth
            group["lr"] = cosine_with_warmup(it, 20, steps, 0.03, 0.003)
        loss = cross_entropy(model(x), y)
        first_loss = first_loss if first_loss is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
    seconds = time.perf_counter() - start

    x_test, y_test = two_spirals(n_per_class=200, noise=0.02, seed=1)  # unseen points
    with tl.no_grad():
        train_acc = float((model(x).numpy().argmax(axis=1) == y).mean())
        test_acc = float((model(tl.tensor(x_test)).numpy().argmax(axis=1) == y_test).mean())
    assert first_loss > 0.6 and loss.item() < 0.15, (first_loss, loss.item())
    assert train_acc >= 0.98, (
        f"train accuracy {train_acc:.3f} after {steps} steps ({seconds:.1f} s)"
    )
    assert test_acc >= 0.95, f"held-out accuracy {test_acc:.3f}"

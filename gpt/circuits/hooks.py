"""Hook points by name: activation caching (``run_with_cache``, with the gradient at each hook
point when ``incl_bwd``) and interventions (``run_with_hooks``, ``hooks``) on a model's
:class:`~nn.module.HookPoint` modules, and the per-token loss of the logits they return
(``token_losses``)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable

import numpy as np

import nn
import tensorlab as tl
from gpt.circuits.factored import _arr
from nn.attention import attention_results, composed_attention
from nn.module import HookPoint
from nn.norm import composed_norms
from tensorlab import Tensor, log_softmax_array

HookSpec = tuple[str | Callable[[str], bool], Callable]


def hook_names(model) -> list[str]:
    """The names of every :class:`~nn.module.HookPoint` in ``model`` (module order)."""
    return [name for name, m in model.named_modules() if isinstance(m, HookPoint)]


def _select(model, names) -> dict[str, object]:
    """Modules chosen by ``names``: None (every hook point), one name, a list of names (any
    submodule, e.g. ``"blocks.0.ln1"``), or a predicate over the hook point names."""
    modules = dict(model.named_modules())
    points = hook_names(model)
    if names is None:
        chosen = points
    elif callable(names):
        chosen = [n for n in points if names(n)]
    else:
        chosen = [names] if isinstance(names, str) else list(names)
        unknown = [n for n in chosen if n not in modules or n == ""]
        if unknown:
            raise KeyError(
                f"no module named {', '.join(map(repr, unknown))}; the hook points are: "
                + ", ".join(points)
            )
    return {n: modules[n] for n in chosen}


def _as_tokens(tokens, device: str | None = None) -> Tensor:
    """Token ids as a (B, T) Tensor, on ``device`` (a model's: ``_device_of``) or the default."""
    if isinstance(tokens, Tensor):
        return tokens
    a = np.asarray(tokens, dtype=np.int64)
    return tl.tensor(a[None] if a.ndim == 1 else a, device=device)


def _device_of(model) -> str:
    return model.parameters()[0].device


# Hook points closed on the training path, by name ending, and the block that opens them.
_OPENERS = (
    (("hook_attn_scores", "hook_pattern"), composed_attention),
    (("hook_result",), attention_results),
    (("hook_scale", "hook_normalized"), composed_norms),
)


@contextlib.contextmanager
def hooks(model, fwd_hooks: Iterable[HookSpec] = (), bwd_hooks: Iterable[HookSpec] = ()):
    """Register hooks by name for the duration of a ``with`` block (removed on exit, also
    when the block raises).

    ``fwd_hooks``: pairs ``(name, fn)``, name a module name (usually a hook point) or a
    predicate over hook point names; ``fn(activation)``, or ``fn(activation, name)`` when it
    takes two required positional parameters, returns a replacement Tensor (or array: a
    constant, through which no gradient flows back) or None to leave it as it is.
    ``bwd_hooks``: pairs whose ``fn(grad)`` (or ``fn(grad, name)``) sees, and may replace, the
    gradient at that activation in a backward pass (the forward needs ``grad=True``). Hook
    points closed on the training path are opened for the block when hooked (``_OPENERS``;
    docs/interpretability.md, section 1)."""
    fwd_hooks, bwd_hooks = _pairs(fwd_hooks, "fwd_hooks"), _pairs(bwd_hooks, "bwd_hooks")
    chosen = [
        (n, m, wrap(fn, n))
        for specs, wrap in ((fwd_hooks, _forward_hook), (bwd_hooks, _backward_hook))
        for name, fn in specs
        for n, m in _select(model, name).items()
    ]
    closed = [n for n, m, _ in chosen if getattr(m, "closed", None)]
    with contextlib.ExitStack() as undo:  # the hooks removed, then the openers closed
        for names, opener in _OPENERS:
            if any(n.endswith(names) for n in closed):
                undo.enter_context(opener(model))
        for _, module, hook in chosen:
            undo.callback(module.register_forward_hook(hook).remove)
        yield model


def _pairs(specs, arg: str) -> list:
    """``specs`` as a list of (name, fn) pairs (one pair without its list would otherwise
    unpack the name's characters)."""
    specs = list(specs)
    for spec in specs:
        if not (isinstance(spec, tuple | list) and len(spec) == 2 and callable(spec[1])):
            raise TypeError(
                f"{arg} must be a list of (name, fn) pairs with fn callable, got {spec!r} in "
                f"it (one pair: [(name, fn)])"
            )
    return specs


def _caller(fn: Callable, name: str) -> Callable:
    """``fn`` called as ``fn(x)``, or ``fn(x, name)`` when it takes two required positional
    parameters; a returned array becomes a Tensor like ``x``."""
    try:
        params = inspect.signature(fn).parameters.values()
        n_pos = sum(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
            for p in params
        )
        varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    except (TypeError, ValueError):
        n_pos, varargs = 1, False
    two = varargs or n_pos >= 2

    def call(x):
        out = fn(x, name) if two else fn(x)
        if out is None:
            return None
        if not isinstance(out, Tensor):
            out = tl.tensor(np.asarray(out, dtype=x.dtype), device=x.device)
        if out.shape != x.shape:  # else the error comes from a later layer, naming no hook
            raise ValueError(
                f"hook on {name} returned shape {out.shape} for an activation of shape "
                f"{x.shape}; return a replacement of the same shape, or None"
            )
        return out

    return call


def _forward_hook(fn: Callable, name: str):
    call = _caller(fn, name)
    return lambda module, inputs, output: call(output)


def _backward_hook(fn: Callable, name: str):
    call = _caller(fn, name)

    def hook(module, inputs, output):
        if not tl.is_grad_enabled():
            raise RuntimeError(
                f"backward hook on {name}: the activation records no graph; run with grad=True"
            )
        output = _differentiable(output)
        output.register_hook(call)
        return output

    return hook


def _differentiable(act: Tensor) -> Tensor:
    """``act``, or where it depends on no parameter (sinusoidal positions) a leaf of the same
    value, so that the gradient reaches it too."""
    return act if act.requires_grad else act.detach().requires_grad_()


def run_with_cache(
    model,
    tokens,
    names=None,
    *,
    grad: bool = False,
    incl_bwd: bool = False,
    metric: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, dict[str, np.ndarray]]:
    """Run ``model`` on ``tokens`` (B, T) (or one sequence (T,)) and record activations.

    Returns ``(logits, cache)``: the logits Tensor (B, T, vocab) and a dict from hook name to a
    NumPy copy of the activation, e.g. ``cache["blocks.1.attn.hook_pattern"]`` (B, H, T, T).
    ``names`` selects what to record: None (every hook point, ``hook_result`` included: on a
    large model, name what you need), a name or list of names, or a predicate over names.

    ``incl_bwd``: also the gradient of ``metric(logits)`` (default :func:`mean_token_loss`) at
    every recorded activation, under ``name + "_grad"`` (TransformerLens's keys), taken with
    ``tl.grad`` (the parameters' ``.grad`` are not touched).

    Eval mode (restored afterwards), no graph unless ``grad`` or ``incl_bwd``; the hooks are
    removed afterwards, also on an error. Caching only residual-stream hooks keeps the fast
    path (see :func:`hooks`).
    """
    cache: dict[str, np.ndarray] = {}
    acts: dict[str, Tensor] = {}

    def record(name):
        def fn(act):
            cache[name] = act.numpy().copy()  # a copy, not the run's own array
            if incl_bwd:
                acts[name] = act = _differentiable(act)
                return act

        return fn

    selected = _select(model, names)
    tokens = _as_tokens(tokens, _device_of(model))
    with hooks(model, [(n, record(n)) for n in selected]):
        with nn.evaluating(model, grad=grad or incl_bwd):
            logits, _ = model(tokens)
            if incl_bwd:
                out = mean_token_loss(logits, tokens) if metric is None else metric(logits)
                if out.size != 1:
                    raise ValueError(f"incl_bwd: the metric must be a scalar, got {out.shape}")
                grads = tl.grad(out, list(acts.values()), allow_unused=True)
                for n, g in zip(acts, grads):  # None: the metric does not depend on it
                    cache[n + "_grad"] = np.zeros_like(cache[n]) if g is None else g.numpy().copy()
    return logits, cache


def mean_token_loss(logits: Tensor, tokens) -> Tensor:
    """The mean next-token cross-entropy of ``logits`` (B, T, vocab) on ``tokens`` (B, T), as a
    Tensor (position t predicts token t+1): the default metric of ``incl_bwd``."""
    tok = _as_tokens(tokens, logits.device)
    if tok.shape[1] < 2:  # no next token to predict: the mean of nothing
        raise ValueError(
            f"mean_token_loss needs at least 2 positions, got tokens of shape {tok.shape}; "
            "pass incl_bwd a metric of your own"
        )
    return nn.functional.cross_entropy(logits[:, :-1], tok[:, 1:])


def run_with_hooks(
    model,
    tokens,
    fwd_hooks: Iterable[HookSpec] = (),
    bwd_hooks: Iterable[HookSpec] = (),
    *,
    grad: bool = False,
) -> Tensor:
    """Run ``model`` on ``tokens`` with temporary hooks (:func:`hooks`) and return the logits
    (B, T, vocab). Eval mode, no graph unless ``grad`` or ``bwd_hooks``."""
    bwd_hooks = list(bwd_hooks)
    with hooks(model, fwd_hooks, bwd_hooks), nn.evaluating(model, grad=grad or bool(bwd_hooks)):
        logits, _ = model(_as_tokens(tokens, _device_of(model)))
    return logits


def token_losses(logits, tokens) -> np.ndarray:
    """Per-token cross-entropy (B, T-1): position t predicts token t+1."""
    logp = log_softmax_array(_arr(logits)[:, :-1], axis=-1)
    tok = _as_tokens(tokens).numpy()
    return -np.take_along_axis(logp, tok[:, 1:, None], axis=-1)[..., 0]

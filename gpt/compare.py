"""The divergence finder: run two models on the same tokens, and name the first hook point, in
forward order, whose activation differs, and the first parameter whose gradient of the mean
next-token loss differs, in backward order (from the loss back: where a wrong backward starts).

    result = gpt.compare(model, reference, tokens)
    print(result)              # the first differences, and what agreed before them
    print(result.table())      # every hook point and parameter

``reference`` is another tensorlab model (before and after a code change; or ``model`` itself
under other settings, ``contexts=(None, tl.autocast("bfloat16"))``) or a ``transformers``
GPT-2 or Llama-family model of the same shape: its modules' forward hooks are read as our hook
points (``HF_HOOKS``), its gradients renamed by :mod:`gpt.hf`'s weight tables.

A difference is relative to the tensor's scale, max |a - b| / max |b| (b the reference's).
Correct float32 implementations that sum in other orders differ by float32's unit roundoff
(6e-8) grown over long sums and a few layers: measured ≤ 1e-6 on activations and ≤ 3e-6 on
gradients against transformers' GPT-2 and Llama; a wrong weight or op moves activations by 1e-2
or more. bfloat16 keeps 8 bits (unit roundoff 2e-3): measured ≤ 7e-3 and ≤ 1.2e-2 under
``tl.autocast``. ``RTOL`` leaves room above each.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

import nn
import tensorlab as tl
from gpt.circuits.hooks import hook_names, hooks, mean_token_loss

RTOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
FLOOR = 1e-3  # no tensor is compared at a scale finer than this share of the largest one

# Our hook points as modules of a transformers GPT-2 and Llama: "<m" is m's first input, "m"
# its output, "m/0" the first third of it (GPT-2's c_attn computes q | k | v at once).
HF_HOOKS = {
    "hook_embed": ("wte", "embed_tokens"),
    "hook_pos_embed": ("wpe", None),
    "blocks.{i}.hook_resid_pre": ("<h.{i}", "<layers.{i}"),
    "blocks.{i}.attn.hook_q": ("h.{i}.attn.c_attn/0", "layers.{i}.self_attn.q_proj"),
    "blocks.{i}.attn.hook_k": ("h.{i}.attn.c_attn/1", "layers.{i}.self_attn.k_proj"),
    "blocks.{i}.attn.hook_v": ("h.{i}.attn.c_attn/2", "layers.{i}.self_attn.v_proj"),
    "blocks.{i}.attn.hook_z": ("<h.{i}.attn.c_proj", "<layers.{i}.self_attn.o_proj"),
    "blocks.{i}.hook_attn_out": ("h.{i}.attn", "layers.{i}.self_attn"),
    "blocks.{i}.hook_resid_mid": ("<h.{i}.ln_2", "<layers.{i}.post_attention_layernorm"),
    "blocks.{i}.mlp.hook_pre": ("h.{i}.mlp.c_fc", "layers.{i}.mlp.gate_proj"),
    "blocks.{i}.mlp.hook_pre_linear": (None, "layers.{i}.mlp.up_proj"),
    "blocks.{i}.mlp.hook_post": ("<h.{i}.mlp.c_proj", "<layers.{i}.mlp.down_proj"),
    "blocks.{i}.hook_mlp_out": ("h.{i}.mlp", "layers.{i}.mlp"),
    "blocks.{i}.hook_resid_post": ("h.{i}", "layers.{i}"),
}


class Difference(NamedTuple):
    name: str
    max_abs: float  # max |a - b|
    relative: float  # max_abs over the scale (inf when the shapes differ)


@dataclass
class Comparison:
    """What :func:`compare` found: ``first`` and ``first_gradient`` (a :class:`Difference`
    beyond its tolerance, or None), and every row."""

    activations: list[Difference]  # forward order, the logits last
    gradients: list[Difference]  # backward order
    rtol: float
    grad_rtol: float

    def __post_init__(self):  # (NaN is not ≤ a tolerance: a difference)
        self.first = next((r for r in self.activations if not r.relative <= self.rtol), None)
        self.first_gradient = next(
            (r for r in self.gradients if not r.relative <= self.grad_rtol), None
        )

    def __str__(self) -> str:
        lines = []
        for what, rows, tol, first in (
            ("activations (forward order)", self.activations, self.rtol, self.first),
            ("gradients (backward order)", self.gradients, self.grad_rtol, self.first_gradient),
        ):
            if first is None:
                top = max(rows, key=lambda r: r.relative, default=Difference("-", 0, 0))
                at = f"largest relative difference {top.relative:.1e}, at {top.name}"
                lines.append(f"{what}: all {len(rows)} agree within rtol {tol:.0e}; {at}")
                continue
            k = rows.index(first)
            agreed = f"{k} before it agree ({rows[0].name} … {rows[k - 1].name})" if k else ""
            lines.append(
                f"{what}: first difference at {first.name}: max |a-b| {first.max_abs:.3g}, "
                f"relative {first.relative:.3g} > rtol {tol:.0e}; {agreed or 'the first compared'}"
            )
        if self.first and self.first_gradient:  # a forward difference reaches the loss
            lines[-1] += " (the forward already differs)"
        return "\n".join(lines)

    def table(self) -> str:
        """Every compared activation and gradient, one line each; ✗ marks a difference."""
        lines = [f"{'':<40} {'max |a-b|':>10} {'relative':>10}"]
        for rows, tol in ((self.activations, self.rtol), (self.gradients, self.grad_rtol)):
            for r in rows:
                mark = "" if r.relative <= tol else " ✗"
                lines.append(f"{r.name:<40} {r.max_abs:>10.2e} {r.relative:>10.2e}{mark}")
        return "\n".join(lines)


def _largest(x) -> float:
    return float(x.max()) if x.size else 0.0  # (NaN when x holds one)


def _differences(pairs) -> list[Difference]:
    """Each (name, a, b) compared at b's scale max |b|, floored at ``FLOOR`` times the largest
    scale among ``pairs``: a sum that cancels to zero (a key bias's gradient, zero in exact
    arithmetic as softmax ignores a shift) holds only the rounding noise of its terms."""
    rows = []
    for name, a, b in pairs:
        a, b = a.astype(np.float64), b.astype(np.float64)
        if a.shape != b.shape:  # transformers' (B, T, H·d_head) is our (B, T, H, d_head), and
            b = b.reshape(a.shape) if a.size == b.size else b.repeat(len(a), axis=0)  # (1, T, d)
        if a.shape != b.shape:
            rows.append((name, np.inf, 0.0))
            continue
        diff = a - b
        diff[a == b] = 0.0  # equal infinities (masked scores) agree
        rows.append((name, _largest(abs(diff)), _largest(abs(b)[abs(b) < np.inf])))
    floor = max(FLOOR * max((s for *_, s in rows), default=0.0), np.finfo(np.float32).tiny)
    return [Difference(n, d, d / max(s, floor)) for n, d, s in rows]


def compare(
    model,
    reference,
    tokens,
    *,
    rtol: float = RTOL["float32"],
    grad_rtol: float | None = None,
    contexts=(None, None),
    names=None,
) -> Comparison:
    """Run ``model`` (a tensorlab GPT) and ``reference`` (a tensorlab GPT, or a transformers
    GPT-2 or Llama-family model) on ``tokens`` (B, T) or (T,) in eval mode and compare the
    activations at every hook point both pass and the logits, then every parameter's gradient
    (``grad_rtol``, default ``rtol``). ``contexts``: a context manager (or None) for each side,
    entered around its forward, e.g. ``tl.autocast("bfloat16")``. ``names``: the hook points
    to compare (default: those open on each side's current path: a fused attention has no
    pattern to compare)."""
    tokens = np.asarray(tokens, dtype=np.int64)  # host: token ids from Python
    tokens = tokens[None] if tokens.ndim == 1 else tokens
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"compare needs tokens (B, T) with T ≥ 2, got shape {tokens.shape}")
    acts_a, grads_a = _run_tensorlab(model, tokens, names, contexts[0])
    if isinstance(reference, nn.Module):
        acts_b, grads_b = _run_tensorlab(reference, tokens, names, contexts[1])
    else:
        acts_b, grads_b = _run_transformers(reference, model, tokens, names, contexts[1])
    activations = _differences((n, a, acts_b[n]) for n, a in acts_a.items() if n in acts_b)
    params = reversed([n for n, _ in model.named_parameters()])
    gradients = _differences((n, grads_a[n], grads_b[n]) for n in params if n in grads_b)
    return Comparison(activations, gradients, rtol, rtol if grad_rtol is None else grad_rtol)


def _run_tensorlab(model, tokens, names, context):
    """The activations at ``names`` in the order the forward passes them, then the logits;
    and every parameter's gradient (by ``tl.grad``: ``.grad`` is not touched)."""
    acts = {}
    record = lambda act, name: acts.__setitem__(name, act.numpy().astype(np.float32))  # noqa: E731
    ids = tl.tensor(tokens, device=next(iter(model.parameters())).device)
    with context or contextlib.nullcontext():  # first: it may open or close hook points
        modules = dict(model.named_modules())
        if names is None:  # those the model's path passes (hooking a closed one opens it)
            names = [n for n in hook_names(model) if not modules[n].closed]
        record_at = [(n, record) for n in names if n in modules]
        with hooks(model, record_at), nn.evaluating(model, grad=True):
            logits, _ = model(ids)
            loss = mean_token_loss(logits, ids)
    acts["logits"] = logits.numpy().astype(np.float32)
    params = dict(model.named_parameters())
    grads = tl.grad(loss, list(params.values()), allow_unused=True)
    grads = [tl.zeros_like(p) if g is None else g for p, g in zip(params.values(), grads)]
    return acts, {n: g.numpy() for n, g in zip(params, grads)}


def _run_transformers(reference, model, tokens, names, context):
    """:func:`_run_tensorlab` of a transformers model: its modules' inputs or outputs by
    ``HF_HOOKS``, its gradients under our names (:func:`gpt.hf.tensors_from_hf`)."""
    import torch

    from gpt.hf import FAMILIES, tensors_from_hf

    family = FAMILIES[reference.config.model_type]
    column = ("GPT-2", "Llama").index(family.NAME)
    points = {
        ours.format(i=i): where[column].format(i=i)
        for i in range(model.config.n_layer)
        for ours, where in HF_HOOKS.items()
        if where[column] is not None
    }
    acts = {}
    numpy = lambda x: x.detach().float().cpu().numpy()  # noqa: E731

    def recorder(name, where):
        def record(module, args, kwargs, out):
            if where.startswith("<"):
                x = numpy(args[0] if args else kwargs["hidden_states"])
            else:
                x = numpy(out[0] if isinstance(out, tuple) else out)
            acts[name] = x.reshape(*x.shape[:-1], 3, -1)[..., int(third), :] if third else x

        module, _, third = where.lstrip("<").partition("/")
        return reference.base_model.get_submodule(module), record

    with contextlib.ExitStack() as undo:
        for name in points if names is None else [n for n in names if n in points]:
            module, record = recorder(name, points[name])
            undo.callback(module.register_forward_hook(record, with_kwargs=True).remove)
        undo.callback(reference.train, reference.training)
        reference.eval()
        ids = torch.as_tensor(tokens, device=reference.device)
        with torch.enable_grad(), context or contextlib.nullcontext():
            logits = reference(ids).logits
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten()
            )
    acts["logits"] = numpy(logits)
    params = dict(reference.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    state = {n: numpy(p * 0 if g is None else g) for (n, p), g in zip(params.items(), grads)}
    return acts, tensors_from_hf(state, family, model, strict=False)


def add_parser(sub) -> None:
    """``python -m gpt compare A B --text ...``."""
    p = sub.add_parser(
        "compare",
        help="name the first hook point where two models differ",
        description="Run A and B on one text; name the first hook point whose activations "
        "differ and the first parameter whose gradient differs (gpt.compare). A Hugging Face "
        "folder as B runs in transformers, the reference of a port. Exit code 1: they differ.",
    )
    p.add_argument("a", help="a run folder or a Hugging Face folder")
    p.add_argument("b", help="the reference: a run folder or a Hugging Face folder")
    p.add_argument("--text", required=True, help="what both read (cut to the block size)")
    p.add_argument(
        "--rtol", type=float, default=RTOL["float32"], help="(default: %(default)g; bfloat16: 5e-2)"
    )
    p.add_argument("--table", action="store_true", help="every hook point and parameter")
    p.set_defaults(func=_command)


def _command(args) -> int:
    from gpt.hf import from_pretrained, tokenizer_from_pretrained
    from gpt.run_folder import RunError, RunFolder
    from gpt.run_folder import load as load_run
    from nn.checks import bad_value

    def load(path, in_transformers):
        if RunFolder(path).ckpt.exists():
            return load_run(path)
        if in_transformers:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(path)
        else:
            model = from_pretrained(path)
        with contextlib.suppress(FileNotFoundError):
            return model, tokenizer_from_pretrained(path)
        return model, None

    (a, tok), (b, tok_b) = load(args.a, False), load(args.b, True)
    tok = tok if tok is not None else tok_b
    if tok is None:
        raise RunError(f"neither {args.a} nor {args.b} has a tokenizer to encode --text")
    ids = tok.encode(args.text)[: a.config.block_size]
    if len(ids) < 2:
        raise bad_value("text", args.text, "is under 2 tokens (each predicts the next)")
    result = compare(a, b, ids, rtol=args.rtol)
    print(f"{result.table()}\n\n{result}" if args.table else result)
    return 0 if result.first is None and result.first_gradient is None else 1

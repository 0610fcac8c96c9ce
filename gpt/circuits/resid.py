"""The residual stream taken apart: the final stream as the sum of what every component wrote,
the stream before each layer and its logits (the logit lens), and each component's term in a
logit (direct logit attribution), from a cache of :func:`~gpt.circuits.run_with_cache`, as
float64 stacks (n, B, T, d_model) with TransformerLens's labels (``return_labels=True``). Why
the parts sum to the whole (in a pre-norm model) and how a norm is folded (σ frozen at this
run's value, the gain into W_U): docs/interpretability.md, section 4.
"""

from __future__ import annotations

import numpy as np

import nn
import tensorlab as tl
from gpt.circuits.factored import _arr


def _check_pre_norm(model) -> None:
    placement = model.config.norm_placement
    if placement != "pre":
        raise ValueError(
            f"the residual stream has no additive decomposition with norm_placement="
            f"{placement!r} (a norm inside each block); use a 'pre' model"
        )


def _get(cache: dict, name: str) -> np.ndarray:
    if name not in cache:
        raise KeyError(
            f"{name!r} is not in the cache; run run_with_cache(model, tokens) with it (or with "
            "names=None for every hook point)"
        )
    return _arr(cache[name])


def _embed_parts(model, cache: dict) -> tuple[list[np.ndarray], list[str]]:
    """``hook_embed`` and, for learned or sinusoidal positions, ``hook_pos_embed``."""
    parts, labels = [_get(cache, "hook_embed")], ["embed"]
    if model.pos is not None:
        parts.append(_get(cache, "hook_pos_embed"))
        labels.append("pos_embed")
    return parts, labels


def final_resid(model, cache: dict) -> np.ndarray:
    """The stream the final norm reads, (B, T, d) (the embeddings for a model of no layers)."""
    _check_pre_norm(model)
    L = len(model.blocks)
    if L:
        return _get(cache, f"blocks.{L - 1}.hook_resid_post")
    parts, _ = _embed_parts(model, cache)
    return sum(parts)


def _layer_range(model, layer: int | None) -> int:
    L = len(model.blocks)
    if layer is None:
        return L
    if not 0 <= layer <= L:
        raise IndexError(f"layer {layer} is out of range [0, {L}] for a model of {L} layers")
    return layer


def _norm_scale(norm, resid: np.ndarray) -> np.ndarray | None:
    """The divisor σ (..., 1) that ``norm`` computes for streams ``resid``; None for a norm
    that does not normalize (none, or no final norm)."""
    if isinstance(norm, nn.LayerNorm):
        return np.sqrt(resid.var(-1, keepdims=True) + norm.eps)
    if isinstance(norm, nn.RMSNorm):
        return np.sqrt((resid**2).mean(-1, keepdims=True) + norm.eps)
    return None


def _centre(norm, stack: np.ndarray) -> np.ndarray:
    return stack - stack.mean(-1, keepdims=True) if isinstance(norm, nn.LayerNorm) else stack


class NormedStack(np.ndarray):
    """A plain NumPy array marked as normalized already (``apply_ln=True``), so that
    :func:`apply_ln_to_stack` and :func:`logit_attrs` refuse to divide it by σ a second time."""


def _reading_norm(model, cache: dict, layer: int | None, mlp_input: bool = False):
    """(norm, the stream (B, T, d) it reads, its name) before ``layer``: block ``layer``'s ln1,
    the final norm for None and n_layer, block ``layer``'s ln2 with ``mlp_input``."""
    _check_pre_norm(model)
    layer = _layer_range(model, layer)
    if mlp_input:
        if layer == len(model.blocks):
            raise ValueError(
                f"mlp_input=True needs a layer below n_layer={layer}: it is the stream that "
                "block's MLP reads"
            )
        block = model.blocks[layer]
        if block.mlp is None or block.parallel:
            kind = "has no MLP" if block.mlp is None else "is parallel (its MLP reads resid_pre)"
            raise ValueError(f"mlp_input=True: block {layer} {kind}; there is no MLP input")
        return block.ln2, _get(cache, f"blocks.{layer}.hook_resid_mid"), f"blocks.{layer}.ln2"
    if layer == len(model.blocks):
        return model.ln_final, final_resid(model, cache), "ln_final"
    name = f"blocks.{layer}.ln1"
    return model.blocks[layer].ln1, _get(cache, f"blocks.{layer}.hook_resid_pre"), name


def _check_cut(arg: str, value) -> None:
    if isinstance(value, tuple):  # TransformerLens reads (start, stop), NumPy two indices
        raise TypeError(f"{arg}={value!r}: pass slice(start, stop) or a list of indices")


def _slice_scale(scale: np.ndarray, pos_slice, batch_slice) -> np.ndarray:
    """σ (B, T, 1) cut by positions, then by batch (NumPy would pair two index lists up)."""
    _check_cut("pos_slice", pos_slice)
    _check_cut("batch_slice", batch_slice)
    if pos_slice is not None:
        scale = scale[:, pos_slice]
    if batch_slice is not None:
        scale = scale[batch_slice]
    return scale


def apply_ln_to_stack(
    model,
    cache: dict,
    stack,
    *,
    layer: int | None = None,
    recompute_ln: bool = False,
    pos_slice=None,
    batch_slice=None,
    mlp_input: bool = False,
) -> NormedStack:
    """Every component of ``stack`` (n, *batch_and_pos, d) centred (LayerNorm) and divided by
    the σ of the stream that the norm before ``layer`` reads (:func:`_reading_norm`), without
    the gain and bias (:func:`folded_unembed`), so the results still sum to the normalized
    stream. σ is the norm's cached ``hook_scale`` (a run that patched σ is decomposed with the
    σ it used), else computed from the cached stream; ``pos_slice`` and ``batch_slice`` (an
    int, a slice or a list of indices) cut it as the stack was cut. ``recompute_ln=True``
    divides each entry by its own σ instead (the logit lens; the parts no longer add up)."""
    if isinstance(stack, NormedStack):
        raise ValueError(
            "this stack is already normalized (apply_ln=True or apply_ln_to_stack); pass the "
            "stack made with apply_ln=False, or its norm would be applied twice"
        )
    stack = _arr(stack)
    norm, resid, name = _reading_norm(model, cache, layer, mlp_input)
    if stack.ndim < 2 or stack.shape[-1] != resid.shape[-1]:
        raise ValueError(
            f"stack must be (components, ..., d_model={resid.shape[-1]}), got shape {stack.shape}"
        )
    if recompute_ln:
        scale = _norm_scale(norm, stack)
    else:  # σ of the stream, cut like the stack (checked also where there is no σ)
        axes = _slice_scale(resid[..., :1], pos_slice, batch_slice).shape[:-1]
        if stack.shape[1:-1] != axes:
            raise ValueError(
                f"stack of shape {stack.shape} has batch/position axes {stack.shape[1:-1]} but "
                f"the cached stream, cut by pos_slice={pos_slice!r} and "
                f"batch_slice={batch_slice!r}, has {axes}; pass the pos_slice/batch_slice the "
                "stack was cut with"
            )
        cached = cache.get(f"{name}.hook_scale")  # σ as the run had it (none without a norm)
        scale = _norm_scale(norm, resid) if cached is None else _arr(cached)
        scale = None if scale is None else _slice_scale(scale, pos_slice, batch_slice)
    stack = _centre(norm, stack)
    return np.asarray(stack if scale is None else stack / scale).view(NormedStack)


def folded_unembed(model) -> tuple[np.ndarray, np.ndarray]:
    """The unembedding with the final norm's affine part folded in: (W_U' (d, vocab), b_U
    (vocab,)) with W_U' = diag(w) W_U and b_U = b W_U (zeros without a gain or a bias), so
    that ``logits = apply_ln(resid_final) @ W_U' + b_U``."""
    W_U = _arr(model.W_U)
    w = getattr(model.ln_final, "w", None)  # None: no final norm, or norm="none"
    b = getattr(model.ln_final, "b", None)
    b_U = np.zeros(W_U.shape[1]) if b is None else _arr(b) @ W_U
    return (W_U if w is None else _arr(w)[:, None] * W_U), b_U


def decompose_resid(
    model,
    cache: dict,
    layer: int | None = None,
    mode: str = "all",
    incl_embeds: bool = True,
    apply_ln: bool = False,
    return_labels: bool = False,
    pos_slice=None,
    mlp_input: bool = False,
):
    """What each layer wrote, stacked (n, B, T, d): "embed", "pos_embed" (learned or
    sinusoidal positions only), then "{i}_attn_out" and "{i}_mlp_out" for the layers before
    ``layer`` (default all; ``mode`` "attn" or "mlp" keeps one kind); they sum to the stream
    ``layer`` reads. ``mlp_input`` adds block ``layer``'s "{layer}_attn_out" (the sum is then
    the stream its MLP reads). In every stacking function here ``apply_ln`` normalizes by the
    norm reading the stream the parts sum to (:func:`apply_ln_to_stack`), and ``pos_slice``
    (an int, a slice or a list of indices) keeps those positions."""
    if mode not in ("all", "attn", "mlp"):
        raise ValueError(f"mode must be 'all', 'attn' or 'mlp', got {mode!r}")
    _check_pre_norm(model)
    parts, labels = _embed_parts(model, cache) if incl_embeds else ([], [])
    for i in range(_layer_range(model, layer)):
        if mode in ("all", "attn"):
            parts.append(_get(cache, f"blocks.{i}.hook_attn_out"))
            labels.append(f"{i}_attn_out")
        if mode in ("all", "mlp") and model.blocks[i].mlp is not None:
            parts.append(_get(cache, f"blocks.{i}.hook_mlp_out"))
            labels.append(f"{i}_mlp_out")
    if mlp_input:
        _reading_norm(model, cache, layer, mlp_input)  # (refuses a layer without MLP input)
        if mode in ("all", "attn"):
            parts.append(_get(cache, f"blocks.{layer}.hook_attn_out"))
            labels.append(f"{layer}_attn_out")
    return _finish(
        model, cache, parts, labels, apply_ln, return_labels, layer, pos_slice, mlp_input
    )


def stack_head_results(
    model,
    cache: dict,
    layer: int | None = None,
    apply_ln: bool = False,
    return_labels: bool = False,
    pos_slice=None,
):
    """Every head's output in the residual basis (``hook_result``, without b_O), stacked
    (layers·heads, B, T, d) layer-major, labelled "L{l}H{h}", for the layers before
    ``layer`` (default all)."""
    _check_pre_norm(model)
    parts, labels = [], []
    for i in range(_layer_range(model, layer)):
        result = _get(cache, f"blocks.{i}.attn.hook_result")  # (B, T, H, d)
        for h in range(result.shape[2]):
            parts.append(result[:, :, h])
            labels.append(f"L{i}H{h}")
    return _finish(model, cache, parts, labels, apply_ln, return_labels, layer, pos_slice)


def stack_neuron_results(
    model,
    cache: dict,
    layer: int | None = None,
    apply_ln: bool = False,
    return_labels: bool = False,
    pos_slice=None,
):
    """Every MLP neuron's output in the residual basis, post_n · W_out[n] (``mlp.hook_post``
    times a row of W_out, without b_out), stacked (layers·d_ff, B, T, d) layer-major, labelled
    "L{l}N{n}", for the layers before ``layer`` (default all). Per layer they sum to
    ``hook_mlp_out`` minus b_out."""
    _check_pre_norm(model)
    parts, labels = [], []
    for i in range(_layer_range(model, layer)):
        p, lab = _neurons(model, cache, i)
        parts, labels = parts + p, labels + lab
    return _finish(model, cache, parts, labels, apply_ln, return_labels, layer, pos_slice)


def _neurons(model, cache: dict, i: int) -> tuple[list[np.ndarray], list[str]]:
    """Layer i's neuron outputs post_n · W_out[n], (B, T, d) each (none without an MLP)."""
    mlp = model.blocks[i].mlp
    if mlp is None:
        return [], []
    post = _get(cache, f"blocks.{i}.mlp.hook_post")  # (B, T, d_ff)
    W_out = _arr(mlp.W_out)
    neurons = range(len(W_out))
    return [post[..., n, None] * W_out[n] for n in neurons], [f"L{i}N{n}" for n in neurons]


def full_resid_decomposition(
    model,
    cache: dict,
    apply_ln: bool = False,
    expand_neurons: bool = False,
    return_labels: bool = False,
    pos_slice=None,
):
    """The final stream split as finely as the hook points allow, (n, B, T, d), in
    TransformerLens's order: each head "L{l}H{h}", each MLP "{l}_mlp_out" (or, with
    ``expand_neurons``, each of its neurons "L{l}N{n}"), "embed", "pos_embed", and "bias" (Σ
    of the attention output biases b_O, which belong to no head, and with ``expand_neurons``
    the MLP output biases b_out). The parts sum to the final stream."""
    _check_pre_norm(model)
    heads, labels = stack_head_results(model, cache, return_labels=True)
    parts = list(heads)
    bias = np.zeros(model.config.d_model)
    for i, block in enumerate(model.blocks):
        if block.attn.b_O is not None:
            bias = bias + _arr(block.attn.b_O)
        if block.mlp is None:
            continue
        if expand_neurons:
            neurons, neuron_labels = _neurons(model, cache, i)
            parts, labels = parts + neurons, labels + neuron_labels
            if block.mlp.b_out is not None:
                bias = bias + _arr(block.mlp.b_out)
        else:
            parts.append(_get(cache, f"blocks.{i}.hook_mlp_out"))
            labels.append(f"{i}_mlp_out")
    embeds, embed_labels = _embed_parts(model, cache)
    parts, labels = parts + embeds, labels + embed_labels
    parts.append(np.broadcast_to(bias, _get(cache, "hook_embed").shape))
    labels.append("bias")
    return _finish(model, cache, parts, labels, apply_ln, return_labels, None, pos_slice)


def accumulated_resid(
    model,
    cache: dict,
    layer: int | None = None,
    incl_mid: bool = False,
    apply_ln: bool = False,
    return_labels: bool = False,
    pos_slice=None,
    mlp_input: bool = False,
):
    """The stream as it stood before each layer, stacked (n, B, T, d): "{i}_pre" for the
    layers up to and including ``layer`` ("{i}_mid" too, between attention and MLP, with
    ``incl_mid``), and "final_post" in place of "{n_layer}_pre": TransformerLens's
    ``accumulated_resid``; the last entry is the sum of ``decompose_resid(..., layer)``.
    ``mlp_input`` adds "{layer}_mid" last. ``apply_ln`` as TransformerLens: after the last
    layer each stream is normalized by its own statistics (the logit lens); before it, with
    the scale the reading norm computed in this run (:func:`apply_ln_to_stack`)."""
    _check_pre_norm(model)
    L = len(model.blocks)
    n = _layer_range(model, layer)
    if mlp_input:
        _reading_norm(model, cache, n, mlp_input)  # (refuses a layer without MLP input)
    parts, labels = [], []
    for i in range(n + 1):
        if i == L:
            parts.append(final_resid(model, cache))
            labels.append("final_post")
            continue
        parts.append(_get(cache, f"blocks.{i}.hook_resid_pre"))
        labels.append(f"{i}_pre")
        if (incl_mid and i < n and not model.blocks[i].parallel) or (mlp_input and i == n):
            parts.append(_get(cache, f"blocks.{i}.hook_resid_mid"))
            labels.append(f"{i}_mid")
    # after the last layer, the logit lens: each stream normalized by its own statistics
    return _finish(
        model, cache, parts, labels, apply_ln, return_labels, n, pos_slice, mlp_input, n == L
    )


def logit_lens(model, cache: dict, incl_mid: bool = False, return_labels: bool = False):
    """Logits (n, B, T, vocab) read off the stream before each layer and at the end, as if the
    model stopped there: the final norm (own statistics) and W_U applied to every stream of
    :func:`accumulated_resid`. The last entry ("final_post") is the model's logits."""
    stack, labels = accumulated_resid(
        model, cache, incl_mid=incl_mid, apply_ln=True, return_labels=True
    )
    W_U, b_U = folded_unembed(model)
    logits = np.asarray(stack) @ W_U + b_U
    return (logits, labels) if return_labels else logits


def _token_array(model, tokens, arg: str = "tokens") -> np.ndarray:
    """``tokens`` (an int, a list, an array or a Tensor) as int64 ids checked to be integers
    in the vocabulary (a float would be truncated, a negative id index from the end)."""
    a = np.asarray(tokens.numpy() if isinstance(tokens, tl.Tensor) else tokens)
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{arg} must be integer token ids, got dtype {a.dtype}")
    V = model.config.vocab_size
    if a.size and not (0 <= a.min() and a.max() < V):
        raise ValueError(f"{arg} must be in [0, {V}), got values in [{a.min()}, {a.max()}]")
    return a.astype(np.int64)


def residual_directions(model, tokens) -> np.ndarray:
    """The folded unembedding's column of each token, ``tokens.shape + (d,)``: the direction
    in the (normalized) stream that raises that token's logit."""
    W_U, _ = folded_unembed(model)
    return W_U.T[_token_array(model, tokens)]


def _check_token_shape(tokens: np.ndarray, axes: tuple, arg: str) -> None:
    """``tokens`` must have shape (), ``axes`` or ``axes`` with 1 on an axis to repeat along;
    NumPy would line a (B,) up with the positions of a (B, T) stack without a word."""
    ok = tokens.ndim == 0 or (
        tokens.ndim == len(axes) and all(t in (1, a) for t, a in zip(tokens.shape, axes))
    )
    if not ok:
        raise ValueError(
            f"{arg} of shape {tokens.shape} does not fit the stack's batch/position axes {axes}: "
            f"pass one token (shape ()), {axes} (one per entry) or size 1 on an axis to repeat "
            "along it, e.g. tokens[:, None] for one per sequence"
        )


def logit_attrs(
    model, cache: dict, stack, tokens, incorrect_tokens=None, *, pos_slice=None, batch_slice=None
) -> np.ndarray:
    """Direct logit attribution (TransformerLens's ``cache.logit_attrs``): each component's
    term (n, *batch_and_pos) in the logit of ``tokens`` (one per entry of the batch and
    position axes, see :func:`_check_token_shape`), or with ``incorrect_tokens`` in
    logit(tokens) - logit(incorrect_tokens). ``stack`` is made with ``apply_ln=False``: the
    final norm is applied here (:func:`apply_ln_to_stack`; ``pos_slice``, ``batch_slice``: how
    the stack was cut). Σ over :func:`full_resid_decomposition` plus b_U is the logit."""
    if not isinstance(cache, dict):
        raise TypeError(
            f"logit_attrs(model, cache, stack, tokens): cache must be the dict from "
            f"run_with_cache, got {type(cache).__name__}"
        )
    normed = apply_ln_to_stack(model, cache, stack, pos_slice=pos_slice, batch_slice=batch_slice)
    axes = normed.shape[1:-1]
    tokens = _token_array(model, tokens)
    _check_token_shape(tokens, axes, "tokens")
    dirs = residual_directions(model, tokens)
    if incorrect_tokens is not None:
        incorrect = _token_array(model, incorrect_tokens, "incorrect_tokens")
        if incorrect.shape != tokens.shape:
            raise ValueError(
                f"tokens and incorrect_tokens must have the same shape, got {tokens.shape} "
                f"and {incorrect.shape}"
            )
        dirs = dirs - residual_directions(model, incorrect)
    return np.einsum(
        "n...d,...d->n...", np.asarray(normed), np.broadcast_to(dirs, axes + dirs.shape[-1:])
    )


def _finish(
    model,
    cache,
    parts,
    labels,
    apply_ln: bool,
    return_labels: bool,
    layer=None,
    pos_slice=None,
    mlp_input: bool = False,
    recompute_ln: bool = False,
):
    """The parts stacked at ``pos_slice``, normalized when ``apply_ln``, with their labels
    when ``return_labels`` (the stacking functions' common end)."""
    embed = _cut(_get(cache, "hook_embed"), pos_slice)
    stack = np.stack([_cut(p, pos_slice) for p in parts]) if parts else np.zeros((0,) + embed.shape)
    if apply_ln:
        stack = apply_ln_to_stack(
            model,
            cache,
            stack,
            layer=layer,
            recompute_ln=recompute_ln,
            pos_slice=pos_slice,
            mlp_input=mlp_input,
        )
    return (stack, labels) if return_labels else stack


def _cut(part: np.ndarray, pos_slice) -> np.ndarray:
    """A (B, T, ...) part at the positions ``pos_slice`` keeps (all for None)."""
    _check_cut("pos_slice", pos_slice)
    return part if pos_slice is None else part[:, pos_slice]

"""The residual stream taken apart: the final stream as the sum of what every component wrote
(``decompose_resid``, ``stack_head_results``, ``full_resid_decomposition``), the stream after
each layer (``accumulated_resid``) and its logits (``logit_lens``), and what each component
adds to a logit or a logit difference (``logit_attrs``: direct logit attribution).

Everything reads a cache from :func:`~gpt.circuits.run_with_cache` (every hook point by
default, ``hook_result`` included) and returns float64 arrays stacked on a first "component"
axis, (n, B, T, d_model), with TransformerLens's labels when ``return_labels=True``. With
``apply_ln=True`` the stack comes back normalized, as a :class:`NormedStack` (an ndarray
marked so that no function normalizes it twice); :func:`logit_attrs`, like TransformerLens's
``cache.logit_attrs``, takes the stack made with ``apply_ln=False`` and applies the final norm
itself.

Why the parts sum to the whole. In a pre-norm model the stream only ever grows by addition::

    resid_final = embed + pos_embed + Σ_layers (attn_out + mlp_out),
    attn_out = Σ_heads result^h + b_O,

so the stacks below sum to the final stream exactly (float rounding aside). The logits are
``ln_final(resid_final) @ W_U``. A LayerNorm centres its input and divides it by a per-position
scale σ = √(var + eps) (RMSNorm: by √(mean(x²) + eps)), then multiplies by the gain γ (the
parameter ``w``) and adds the shift β (``b``), as in docs/README.md's notation. Centring is
linear; dividing by σ is not, but σ is one number per position, so with σ read from this
run (frozen) the norm is linear in each component. That is
TransformerLens's folding: :func:`apply_ln_to_stack` centres each component and divides it by
the cached σ; the gain goes into the unembedding (:func:`folded_unembed`, γ ⊙ W_U) and
β @ W_U is a constant that belongs to no component. Then, for this input,

    logits = Σ_components apply_ln(component) @ (γ ⊙ W_U) + β @ W_U

up to float rounding. What is approximate is the reading, not the sum: σ depends on every
component, so a component's term is what it adds *at this σ*, not what removing it would
change (that is activation patching, :mod:`gpt.circuits.patching`).

Only models whose stream is a plain sum have a decomposition: norm_placement "pre" (a
"post" or "sandwich" model normalizes inside each block).
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
    """The token embeddings (B, T, d) and, for learned or sinusoidal positions, the position
    vectors (B, T, d): ``hook_embed`` and ``hook_pos_embed``."""
    parts, labels = [_get(cache, "hook_embed")], ["embed"]
    if model.pos is not None:
        parts.append(_get(cache, "hook_pos_embed"))
        labels.append("pos_embed")
    return parts, labels


def final_resid(model, cache: dict) -> np.ndarray:
    """The stream the final norm reads, (B, T, d): the last block's ``hook_resid_post`` (the
    embeddings for a model of no layers)."""
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
    """A stack that a norm has already been applied to (what the stacking functions return
    with ``apply_ln=True``, and :func:`apply_ln_to_stack`). In every other way a plain NumPy
    array; its slices, sums and products keep the type. It is there so that
    :func:`apply_ln_to_stack` and :func:`logit_attrs` can refuse to normalize a stack a second
    time: dividing by σ twice gives numbers of the right shape and the wrong size."""


def _reading_norm(model, cache: dict, layer: int | None, mlp_input: bool = False):
    """The norm that reads the stream before ``layer``, that stream (B, T, d) and the norm's
    name: block ``layer``'s ln1 and its ``hook_resid_pre``, or for None (and n_layer) the
    final norm and the final stream; with ``mlp_input``, block ``layer``'s ln2 and its
    ``hook_resid_mid`` (the stream its MLP reads). TransformerLens's
    ``apply_ln_to_stack(layer, mlp_input)``."""
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
    """σ (B, T, 1) cut like the stack: positions first, then the batch, one after the other
    (NumPy would pair two index lists up element by element)."""
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
    """A norm applied to every component of ``stack`` (n, *batch_and_pos, d) without its gain
    and bias (the final norm's are in :func:`folded_unembed`): centred (LayerNorm) and divided
    by σ. The norm is the one reading the stream before ``layer``: block ``layer``'s ln1, or the
    final norm for None (default) and n_layer, as in TransformerLens; with ``mlp_input``, block
    ``layer``'s ln2, which reads the stream between its attention and its MLP.

    σ is that stream's, the same for every component, so the results still sum to the
    normalized stream: the frozen-scale linearization of the module docstring. It is the
    norm's ``hook_scale`` where ``cache`` holds it (as TransformerLens reads it: a run that
    patched σ is decomposed with the σ it used), else computed from the cached stream. A stack
    cut to some positions or batch entries needs the same cut of σ: ``pos_slice`` and
    ``batch_slice`` (an int, a slice or a list of indices, as applied to the stack's position
    and batch axes); the stack's middle axes must then match σ's, else a ValueError.
    ``recompute_ln=True`` instead divides each entry by its own σ, as if it were the stream
    (the logit lens; the results then no longer add up). A stack already normalized
    (:class:`NormedStack`) is refused."""
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
    ``layer`` (default all; ``mode`` "attn" or "mlp" keeps one kind). With every part and all
    layers, the sum is the final stream; ``apply_ln`` normalizes them by the norm that reads
    the stream they sum to (:func:`apply_ln_to_stack` with ``layer``: the final norm, or
    block ``layer``'s ln1). ``pos_slice`` (an int, a slice or a list of indices) keeps those
    positions only, normalized by their own σ (as in every stacking function here).
    ``mlp_input`` adds block ``layer``'s "{layer}_attn_out": the parts then sum to the stream
    its MLP reads, and ``apply_ln`` uses that block's ln2."""
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
    ``layer`` (default all). ``apply_ln`` normalizes them by the norm that reads the stream
    before ``layer`` (:func:`apply_ln_to_stack`; the final norm by default)."""
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
    ``hook_mlp_out`` minus b_out. ``apply_ln`` normalizes them by the norm that reads the
    stream before ``layer`` (:func:`apply_ln_to_stack`; the final norm by default)."""
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
    the MLP output biases b_out). The parts sum to the final stream; ``apply_ln`` folds the
    final norm (:func:`apply_ln_to_stack`); ``pos_slice`` keeps those positions."""
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
    layers up to and including ``layer`` (the stream ``layer`` reads; "{i}_mid" too, between
    attention and MLP, when ``incl_mid``, for the layers before ``layer``), and "final_post"
    in place of "{n_layer}_pre" when ``layer`` is None or n_layer: TransformerLens's
    ``accumulated_resid``, so the last entry is the sum of ``decompose_resid(..., layer)``.
    ``apply_ln``, as TransformerLens: with ``layer`` None (or n_layer) the final norm
    normalizes each stream with its own statistics, as if the model stopped there (the logit
    lens); with ``layer`` < n_layer, block ``layer``'s ln1 applies the scale it computed in
    this run to every stream (:func:`apply_ln_to_stack`). ``pos_slice`` keeps those
    positions. ``mlp_input`` adds "{layer}_mid", the stream block ``layer``'s MLP reads, last,
    and ``apply_ln`` then uses that block's ln2."""
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
    """``tokens`` (an int, a list, an array or a Tensor) as an int64 array, or a ValueError
    naming the argument: floats would be truncated and a negative id would index from the end
    of the vocabulary, both without a word."""
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
    """``tokens`` must be one token (shape ()) or one per entry of the stack's batch and
    position axes ``axes``: that shape, or with 1 for an axis to repeat along it ((B, 1): one
    token per sequence). Anything else, (B,) against (B, T) in particular, is refused: NumPy
    would line (B,) up with the positions, and with B == T say nothing."""
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
    model,
    cache: dict,
    stack,
    tokens,
    incorrect_tokens=None,
    *,
    pos_slice=None,
    batch_slice=None,
) -> np.ndarray:
    """Direct logit attribution (TransformerLens's ``cache.logit_attrs``): each component's
    term in the logit of ``tokens``, (n, *batch_and_pos), from ``stack`` (n, *batch_and_pos,
    d) as the stacking functions return it with ``apply_ln=False``. The final norm is applied
    here with the scale from ``cache`` (:func:`apply_ln_to_stack`; ``pos_slice`` and
    ``batch_slice`` say how the stack was cut, e.g. ``stack[:, :, -1]`` with ``pos_slice=-1``);
    a stack already normalized is refused.

    ``tokens``: per entry of the batch and position axes the token whose logit to read (e.g.
    the next token): one token (shape ()), the axes' shape, or size 1 on an axis to repeat
    along it; other shapes raise a ValueError. With ``incorrect_tokens`` (same shape as
    ``tokens``, as TransformerLens requires) the term in the logit difference
    logit(tokens) - logit(incorrect_tokens). Σ over the components of
    :func:`full_resid_decomposition` (plus ``folded_unembed``'s b_U entries) is the model's
    logit (difference)."""
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
    """The parts stacked at the positions ``pos_slice`` keeps, normalized by the norm that
    reads the stream before ``layer`` (they sum to that stream) when ``apply_ln``, with their
    labels when ``return_labels``. ``recompute_ln`` as for :func:`apply_ln_to_stack`."""
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

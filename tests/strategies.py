"""Hypothesis strategies shared by all tests: shapes, broadcastable shape pairs, arrays.

Values are drawn well-conditioned for finite differences: bounded in magnitude, and kept
away from the kinks of non-smooth ops by the tests that need it (see ``away_from``).

The nn op tests also share from here their float64 helpers and the four checks every fused op
passes against its composed form (``check_fused_op``).
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl
from tensorlab import c_runner

# Small dimensions keep full-Jacobian gradchecks cheap (one backward per output entry).
small_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
shapes_with_empty = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3)
nonscalar_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)
# Rows of every width around the C runner's vector of 16 (tensorlab/c_runner.py: _Writer.loop):
# shorter, whole vectors, and whole vectors and a tail.
wide_rows = st.tuples(st.integers(1, 3), st.sampled_from([1, 5, 15, 16, 17, 32, 33, 47, 65]))


def values(shape, low: float = -2.0, high: float = 2.0, dtype=np.float64):
    """A strategy for arrays of ``shape`` with finite values in [low, high]."""
    return hnp.arrays(
        dtype, shape, elements=st.floats(low, high, allow_nan=False, allow_infinity=False, width=64)
    )


@st.composite
def axis_for(draw, ndim: int, allow_tuple: bool = True):
    """An axis argument valid for ``ndim`` dims: None, an int (maybe negative) or a tuple."""
    if ndim == 0:
        return None
    options = [st.none(), st.integers(-ndim, ndim - 1)]
    if allow_tuple:
        options.append(
            st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(
                lambda axes: tuple(a - ndim if i % 2 else a for i, a in enumerate(axes))
            )
        )
    return draw(st.one_of(*options))


def away_from(x: np.ndarray, points, margin: float = 1e-3) -> np.ndarray:
    """Nudge entries of ``x`` that lie within ``margin`` of a kink (e.g. 0 for relu/abs) so
    that finite differences with eps ≪ margin never straddle it."""
    x = x.copy()
    for p in points:
        close = np.abs(x - p) < margin
        x[close] = p + np.where(x[close] >= p, margin, -margin) * 2
    return x


def distinct(x: np.ndarray, gap: float = 1e-3) -> np.ndarray:
    """Entries made pairwise distinct (no ties for max/min/sort-like ops) by a tiny ramp."""
    flat = x.ravel().copy()
    order = np.argsort(flat, kind="stable")
    flat[order] += np.arange(flat.size) * gap
    return flat.reshape(x.shape)


# ---------------------------------------------------------------- additions for op tests
def positive(shape, low: float = 0.2, high: float = 3.0):
    """Arrays with entries in [low, high] (log, sqrt, the base of pow)."""
    return values(shape, low, high)


def nonzero(shape, low: float = 0.3, high: float = 2.0):
    """Arrays with |entries| in [low, high] and either sign (divisors)."""
    return st.tuples(values(shape, low, high), hnp.arrays(np.bool_, shape)).map(
        lambda t: np.where(t[1], -t[0], t[0])
    )


@st.composite
def broadcast_shapes(
    draw, num_shapes: int = 2, min_dims: int = 0, max_dims: int = 3, min_side: int = 1
):
    """``num_shapes`` shapes that broadcast together; ``min_side=0`` allows empty axes."""
    shapes = draw(
        hnp.mutually_broadcastable_shapes(
            num_shapes=num_shapes,
            min_dims=min_dims,
            max_dims=max_dims,
            min_side=min_side,
            max_side=4 if min_side else 3,
        )
    )
    return shapes.input_shapes


# (n?,k),(k,m?): 1-D, 2-D and batched products whose batch axes broadcast (``@`` semantics).
matmul_shapes = hnp.mutually_broadcastable_shapes(
    signature=np.matmul.signature, max_dims=2, max_side=3
).map(lambda s: s.input_shapes)


@st.composite
def bool_mask(draw, shape):
    """A boolean array of ``shape`` (a mask for indexing or masked_fill)."""
    return draw(hnp.arrays(np.bool_, shape))


# ---------------------------------------------------------------- additions for nn op tests
# Rows of a last axis (norms, softmax-like ops): at least 2 features, a few leading axes.
rows_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4)
# Leading axes of an input whose last axis a layer acts on (none, one or two).
lead_shapes = hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)


def spread_rows(x: np.ndarray, min_std: float = 0.3) -> np.ndarray:
    """Rows (last axis) with a standard deviation below ``min_std`` get a ramp from -1 to 1
    added. The ramp's own deviation is √((d+1)/(3(d-1))) ≥ 0.577, so every row ends with
    deviation ≥ 0.577 - 0.3 > 0.27: layer norm's 1/σ stays ≤ 3.7, and its derivatives (∝ 1/σ,
    1/σ², 1/σ³) stay small enough for finite differences of the second order."""
    ramp = np.linspace(-1.0, 1.0, x.shape[-1])
    return np.where(x.std(axis=-1, keepdims=True) < min_std, x + ramp, x)


def rms_rows(x: np.ndarray, min_rms: float = 0.3) -> np.ndarray:
    """Rows whose root mean square is below ``min_rms`` get 1 added to every entry, which
    leaves them with rms ≥ 1 - 0.3 (the triangle inequality): RMS norm's 1/σ stays ≤ 1.5."""
    rms = np.sqrt((x * x).mean(axis=-1, keepdims=True))
    return np.where(rms < min_rms, x + 1.0, x)


def t64(a, requires_grad: bool = True) -> tl.Tensor:
    """A float64 Tensor of ``a`` (by default a variable: requires grad)."""
    return tl.tensor(np.asarray(a, dtype=np.float64), dtype=np.float64, requires_grad=requires_grad)


def rand64(rng: np.random.Generator, *shape, requires_grad: bool = True) -> tl.Tensor:
    """A float64 Tensor of standard normal entries drawn from ``rng``."""
    return t64(rng.standard_normal(shape), requires_grad)


def grads(fn, inputs, g=None, create_graph: bool = False):
    """Gradients of sum(fn(*inputs) * g) with respect to every input that requires grad."""
    out = fn(*inputs)
    if g is None:
        g = np.random.default_rng(1).standard_normal(out.shape)
    xs = [x for x in inputs if x.requires_grad]
    return tl.grad(out, xs, grad_outputs=t64(g, False), create_graph=create_graph)


def assert_same(fused, composed, inputs, atol: float = 1e-10):
    """Same values and same gradients (first order, and through the create_graph branch)."""
    np.testing.assert_allclose(fused(*inputs).data, composed(*inputs).data, atol=atol, rtol=0)
    for create_graph in (False, True):
        for a, b in zip(grads(fused, inputs, create_graph=create_graph), grads(composed, inputs)):
            np.testing.assert_allclose(a.data, b.data, atol=atol, rtol=0)


def second_order(fn, inputs, g: np.ndarray, us) -> list[np.ndarray]:
    """With f = fn(*inputs) and the variables xᵢ (the inputs that require grad): the
    derivatives of s = Σᵢ uᵢ · ∂(g · f)/∂xᵢ, the first-order gradients taken with
    create_graph=True, with respect to every xᵢ (the Hessian-vector product H u of g · f) and
    to g (the Jacobian-vector product J u). Arrays; zeros where nothing depends."""
    xs = [x for x in inputs if x.requires_grad]
    gt = t64(g)
    first = tl.grad(fn(*inputs), xs, grad_outputs=gt, create_graph=True, allow_unused=True)
    terms = [(f * t64(u, False)).sum() for f, u in zip(first, us) if f is not None]
    terms = [t for t in terms if t.requires_grad]
    wrt = xs + [gt]
    if not terms:
        return [np.zeros(t.shape) for t in wrt]
    s = terms[0]
    for t in terms[1:]:
        s = s + t
    out = tl.grad(s, wrt, allow_unused=True)
    return [np.zeros(t.shape) if d is None else d.numpy() for t, d in zip(wrt, out)]


def check_fused_op(
    fused, composed, inputs, atol: float = 1e-10, seed: int = 0, finite_differences: bool = True
) -> None:
    """The four checks of a fused op, in float64. ``fused`` and ``composed`` take all of
    ``inputs`` (Tensors; those that require grad are the variables):

    (a) forward: fused(*inputs) equals composed(*inputs) within ``atol`` (absolute);
    (c) first order: the gradients of g · fused (its hand-written backward on arrays) equal
        those of g · composed, and those of the fused op taken with create_graph=True (where
        the engine differentiates its composed form), within ``atol``;
    (b) tl.gradcheck and tl.gradgradcheck of ``fused`` against central differences (their
        default tolerances, atol 1e-5 and rtol 1e-3);
    (d) second order: Hessian- and Jacobian-vector products (:func:`second_order`) through
        the fused op equal those through the composed form, within ``atol``.
    """
    assert_same(fused, composed, inputs, atol=atol)  # (a), (c)
    if finite_differences:  # (b) (left out at kinks, where a one-sided slope is no derivative)
        tl.gradcheck(fused, inputs)
        tl.gradgradcheck(fused, inputs)
    rng = np.random.default_rng(seed)  # (d)
    g = rng.standard_normal(fused(*inputs).shape)
    us = [rng.standard_normal(x.shape) for x in inputs if x.requires_grad]
    for a, b in zip(second_order(fused, inputs, g, us), second_order(composed, inputs, g, us)):
        np.testing.assert_allclose(a, b, atol=atol, rtol=0)


# Edge shapes for nn ops: (batch, time, features) with an empty batch, no positions, or one
# feature among them.
edge_btd = st.tuples(
    st.sampled_from([0, 1, 2]), st.sampled_from([0, 1, 3]), st.sampled_from([1, 4])
)


# One row of next-token logits, its entries pairwise distinct (so "the k largest" is one set)
# and shuffled (hypothesis likes arrays of one value, which ``distinct`` turns into a sorted
# ramp: any selection algorithm finds the k-th largest of a sorted row). Up to 120 entries:
# NumPy's partition sorts rows of a few dozen outright, so a wrong index into its result
# shows only on longer rows.
@st.composite
def logit_rows(draw, max_size: int = 120):
    n = draw(st.integers(1, max_size))
    row = distinct(draw(hnp.arrays(np.float64, n, elements=st.floats(-6, 6))))
    return row[draw(st.permutations(range(n)))]


# ---------------------------------------------------------------- model configurations
@st.composite
def gpt_configs(draw, max_layers: int = 2):
    """A small GPTConfig with every architectural switch drawn (norm, its placement, parallel
    blocks, attention-only, activation, positions and RoPE's layout, heads and key/value heads,
    a sliding window, biases, tying)."""
    from gpt.config import ACTIVATIONS, NORMS, PLACEMENTS, POSITIONAL, GPTConfig

    n_head = draw(st.sampled_from([1, 2, 4]))
    attn_only = draw(st.booleans())
    parallel = not attn_only and draw(st.booleans())
    placements = [p for p in PLACEMENTS if not (parallel and p == "post")]
    positional = draw(st.sampled_from(POSITIONAL))
    d_heads = [2] if positional == "rope" else [None, 2]  # RoPE rotates pairs: d_head even
    return GPTConfig(
        vocab_size=draw(st.integers(2, 9)),
        block_size=draw(st.integers(1, 6)),
        n_layer=draw(st.integers(0, max_layers)),
        n_head=n_head,
        n_kv_head=draw(st.sampled_from([k for k in (1, 2, 4) if n_head % k == 0])),
        d_model=4 * draw(st.integers(1, 3)),
        d_head=draw(st.sampled_from(d_heads)),
        d_ff=draw(st.sampled_from([None, 5])),
        activation=draw(st.sampled_from(ACTIVATIONS)),
        norm=draw(st.sampled_from(NORMS)),
        norm_placement=draw(st.sampled_from(placements)),
        parallel=parallel,
        attn_only=attn_only,
        positional=positional,
        max_relative_distance=draw(st.integers(1, 3)),
        rope_layout=draw(st.sampled_from(["interleaved", "half"])),
        sliding_window=draw(st.sampled_from([None, 1, 2, 3])),
        bias=draw(st.booleans()),
        qkv_bias=draw(st.sampled_from([None, True, False])),
        tie_weights=draw(st.booleans()),
        final_norm=draw(st.booleans()),
    )


@st.composite
def seq2seq_configs(draw):
    """A small Seq2SeqConfig with every switch that changes the parameter count drawn."""
    from gpt.config import GATED, PLACEMENTS, Seq2SeqConfig

    vocab = draw(st.integers(3, 9))
    share = draw(st.booleans())
    return Seq2SeqConfig(
        src_vocab_size=vocab if share else draw(st.integers(3, 9)),
        tgt_vocab_size=vocab,
        max_len=draw(st.integers(1, 6)),
        n_encoder_layer=draw(st.integers(1, 2)),
        n_decoder_layer=draw(st.integers(1, 2)),
        n_head=2,
        d_model=4,
        d_ff=draw(st.sampled_from([None, 3])),
        activation=draw(st.sampled_from(["relu", *GATED])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        norm_placement=draw(st.sampled_from(PLACEMENTS)),
        final_norm=draw(st.sampled_from([None, True, False])),
        positional=draw(st.sampled_from(["sinusoidal", "learned"])),
        bias=draw(st.booleans()),
        tie_weights=draw(st.booleans()),
        share_embeddings=share,
    )


# ---------------------------------------------------------------- fused ops' inputs
PER_FEATURE = {"w", "b", "gain", "weight", "bias"}
CLASSES = {"t"}  # class indices, one per row (cross-entropy's targets)


def signature(op):
    """(names of the array inputs, the numbers with their defaults) of ``op.forward_math``:
    the parameters without a default and the per-feature ones are arrays, those with a number
    for default are numbers (a hook point's default, the identity, is left alone)."""
    params = list(inspect.signature(op.forward_math).parameters.values())[1:]  # after xp
    empty = inspect.Parameter.empty
    arrays = [p.name for p in params if p.default is empty or p.name in PER_FEATURE]
    numbers = {
        p.name: p.default
        for p in params
        if p.name not in arrays and isinstance(p.default, int | float)
    }
    return arrays, numbers


# Values with the kinks and ties in: 0 exactly, and a few repeated numbers.
kinky = st.one_of(st.sampled_from([0.0, 0.0, 1.0, -1.0]), st.floats(-4, 4, width=64))
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)
# Rows of every width around the C runner's vector of 16 (tensorlab/c_runner.py: _Writer.loop):
# shorter, whole vectors, and whole vectors and a tail.
wide_rows = st.tuples(st.integers(1, 3), st.sampled_from([1, 5, 15, 16, 17, 32, 33, 47, 65]))


def fused_op_inputs(draw, op, away: bool, dtype=np.float64, of_shapes=shapes):
    """Inputs of a fused op (tensorlab/fused_op.py) read from its ``forward_math`` signature
    (:func:`signature`): Tensors of one shape drawn ``of_shapes`` (per-feature ones of its last
    axis, class indices one per row), valued with the kinks and ties in, or nudged ``away``
    from 0; and the op's numbers at their defaults."""
    arrays, numbers = signature(op)
    shape = draw(of_shapes)
    inputs = []
    for name in arrays:
        if name in CLASSES:  # one class index per row, some of them the ignored -100
            classes = st.integers(-1, shape[-1] - 1).map(lambda c: -100 if c < 0 else c)
            inputs.append(tl.tensor(draw(hnp.arrays(np.int64, shape[:-1], elements=classes))))
            continue
        s = shape[-1:] if name in PER_FEATURE else shape
        x = draw(hnp.arrays(np.float64, s, elements=kinky)).astype(dtype)
        inputs.append(tl.tensor(away_from(x, [0.0], 1e-2) if away else x, requires_grad=True))
    return inputs, numbers


@contextlib.contextmanager
def cpu_runner(name: str):
    """Kernels on NumPy arrays run by ``name``: "compiled" (the C runner, as chosen at
    start) or "numpy" (tensorlab.fused.run_numpy)."""
    kept = c_runner.available
    if name == "numpy":
        c_runner.available = lambda: False
    try:
        yield
    finally:
        c_runner.available = kept

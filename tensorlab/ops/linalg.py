"""Matrix products: matmul and einsum.

For y = a @ b (matrices), y_ij = Σ_k a_ik b_kj, so dL/da_ik = Σ_j g_ij b_kj and
dL/db_kj = Σ_i a_ik g_ij: da = g bᵀ and db = aᵀ g. Batched products apply this per batch
entry; batch axes that were broadcast are summed back by the engine's ``sum_to``, except when
``MatMul`` folds a batch into one 2-D product, whose backward then sums that batch itself.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from tensorlab.backend import acc_dtype, is_float, matmul, xp_of
from tensorlab.function import Function, modes


class MatMul(Function):
    """y = a @ b (NumPy semantics: 1-D, 2-D and batched, batch axes broadcast);
    da = g bᵀ,  db = aᵀ g  (ᵀ swaps the last two axes).

    A 1-D ``a`` is treated as a row (1, n) and a 1-D ``b`` as a column (n, 1); the backward
    restores those axes in ``g`` before the products and removes them after.
    """

    def forward(ctx, a, b):
        return matmul(a, b)  # half inputs: products summed in float32 (backend.matmul)

    def backward(ctx, g):
        a, b = ctx.inputs
        a_vec, b_vec = a.ndim == 1, b.ndim == 1
        if a_vec:
            a = a.reshape(1, -1)
        if b_vec:
            b = b.reshape(-1, 1)
        if a_vec and b_vec:  # a dot product: g is 0-d, the (1, 1) product of row and column
            g = g.reshape(1, 1)
        elif a_vec:
            g = g.unsqueeze(-2)
        elif b_vec:
            g = g.unsqueeze(-1)
        need_a, need_b = ctx.inputs[0].requires_grad, ctx.inputs[1].requires_grad
        ga, gb = matmul_grads(a, b, g, need_a, need_b)
        if a_vec and need_a:
            ga = ga.reshape(ga.shape[:-2] + ga.shape[-1:]).sum_to(ctx.inputs[0].shape)
        if b_vec and need_b:
            gb = gb.reshape(gb.shape[:-1]).sum_to(ctx.inputs[1].shape)
        return ga, gb


def matmul_grads(a, b, g, need_a: bool, need_b: bool, products=(operator.matmul,) * 2):
    """da = g bᵀ and db = aᵀ g for y = a @ b, with a (..., n, k), b (k, m) or (..., k, m) and
    g (..., n, m): :class:`MatMul`'s backward on Tensors, and ``nn``'s LinearFn's on arrays
    (``products``: the matrix products that give da and db, ``backend.matmul`` with each
    gradient's dtype for arrays). A stack of rows times one matrix b gets db as one product
    over all rows, the batch folded into the rows (one GEMM, not a batch of products then
    summed). None for a gradient not needed."""
    product_a, product_b = products
    da = product_a(g, b.mT) if need_a else None
    if not need_b:
        return da, None
    if b.ndim == 2 and a.ndim > 2:  # (the row count spelled out: with k or m 0, -1 is any size)
        rows, k, m = math.prod(a.shape[:-1]), a.shape[-1], g.shape[-1]
        return da, product_b(a.reshape(rows, k).mT, g.reshape(rows, m))
    return da, product_b(a.mT, g)


class Einsum(Function):
    """y = einsum(spec, a₁, a₂, ...), e.g. ``"bij,bjk->bik"``.

    Each output entry is a sum of products, so dL/daᵢ is another einsum: the gradient g
    contracted with every other operand, indexed by aᵢ's letters. Letters that appear only in
    aᵢ (summed away within aᵢ alone) get g broadcast along them.
    Repeated letters within one operand (diagonals) and ``...`` are not supported.
    """

    def forward(ctx, *arrays, spec):
        ins, out = _parse(spec, len(arrays))
        ctx.ins, ctx.out = ins, out
        acc = acc_dtype(arrays[0]) if all(acc_dtype(a) for a in arrays) else None
        y = xp_of(arrays[0]).einsum(f"{','.join(ins)}->{out}", *arrays, dtype=acc)
        return y if acc is None else y.astype(arrays[0].dtype)

    def backward(ctx, g):
        grads = []
        for i, t in enumerate(ctx.inputs):
            if not t.requires_grad:
                grads.append(None)
                continue
            others = [ctx.inputs[j] for j in range(len(ctx.inputs)) if j != i]
            other_subs = [ctx.ins[j] for j in range(len(ctx.ins)) if j != i]
            known = set(ctx.out).union(*other_subs)
            target = "".join(c for c in ctx.ins[i] if c in known)
            spec = ",".join([ctx.out, *other_subs]) + "->" + target
            gi = Einsum.apply(g, *others, spec=spec)
            if target != ctx.ins[i]:  # put back the axes summed inside operand i alone
                shape = tuple(n if c in known else 1 for c, n in zip(ctx.ins[i], t.shape))
                gi = gi.reshape(shape).expand(t.shape)
            grads.append(gi)
        return tuple(grads)


def _parse(spec: str, n: int) -> tuple[list[str], str]:
    spec = spec.replace(" ", "")
    if "." in spec:
        raise ValueError(f"einsum: '...' is not supported in {spec!r}; name every axis")
    lhs, _, out = spec.partition("->")
    ins = lhs.split(",")
    if len(ins) != n:
        raise ValueError(f"einsum: {spec!r} names {len(ins)} operands but {n} were given")
    if not _:
        letters = "".join(ins)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    for s in ins:
        if len(set(s)) != len(s):
            raise ValueError(
                f"einsum: repeated letter in operand {s!r} of {spec!r} (diagonals "
                "are not supported)"
            )
    return ins, out


def einsum(spec: str, *operands):
    """Differentiable ``einsum`` over Tensors, e.g. ``einsum("ij,jk->ik", a, b)``."""
    if modes.autocast is not None:
        operands = autocast_inputs(*operands)
    return Einsum.apply(*operands, spec=spec)


def autocasts(dtype, to) -> bool:
    """Whether ``tl.autocast(to)`` rounds an operand of ``dtype`` to ``to`` for a matrix
    product: float32 and the other half type do; ``to`` itself, float64 (asked for on purpose,
    as in PyTorch's autocast) and integers do not. Mixed precision is this one rule
    (docs/gpu.md), taken on Tensors by :func:`autocast_inputs` and on arrays by
    :func:`autocast_array` (LinearFn rounds its operands itself)."""
    return dtype != to and dtype != np.float64 and is_float(dtype)


def autocast_array(a, to):
    """The array ``a`` as a matrix product inside ``tl.autocast(to)`` reads it."""
    return a.astype(to) if autocasts(a.dtype, to) else a


def autocast_inputs(*tensors, dtype=None):
    """The operands of a matrix product inside ``tl.autocast(dtype)`` (default: the autocast
    in force): each one the rule rounds goes through a Cast node (so the gradient returns to a
    float32 parameter as float32); others, and None, unchanged."""
    to = modes.autocast if dtype is None else dtype
    return tuple(t.to(to) if t is not None and autocasts(t.dtype, to) else t for t in tensors)

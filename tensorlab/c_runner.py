"""The C runner: a kernel's formula traced once, written as one C loop over rows, compiled.

NumPy runs a formula one operation at a time: GELU's forward is about ten passes over memory,
each a separate ufunc call, and NumPy has no vectorised ``erf`` or ``tanh`` for float32. A C
compiler does what ``cupy.fuse`` does on a GPU: given the formula as one loop, it keeps every
intermediate number in a register, computes a float ``exp`` inline (``tl_expf`` below) and
calls the C library's vector ``erff``/``tanhf``/``logf`` (glibc's libmvec, 16 numbers at a time
with AVX-512). This file makes that loop from the same Python function the other runners run,
so no op is written twice:

1. **Trace.** ``math(TRACE, *args)`` is called with :class:`Sym` stand-ins for the arrays and
   numbers. Each arithmetic operation, comparison, ``xp.exp`` ... on them records a
   :class:`Node` instead of computing. In-place updates (``m *= b``, ``xp.exp(S, out=S)``,
   ``xp.put_along_axis``) rebind the stand-in, so what the function leaves in an argument is
   written back to it.
2. **Write C.** Every array is seen as rows: (R, d), d the last axis. A node is either one
   number per element or one number per row (a row's sum, mean or max over the last axis, a
   per-row input such as a norm's 1/σ, an element picked by ``take_along_axis``). The function
   becomes, per row: the row values in the order the formula made them, each reduction one
   ``for j`` loop, and a last loop that computes and stores the outputs. Elementwise work is
   recomputed inside each loop that needs it (cheaper than a trip through memory).
3. **Compile once.** The C source is compiled by the system's C compiler (``$CC``, else
   ``cc``) into a shared library, cached on disk by the hash of its source and the machine
   (``$TENSORLAB_CACHE``, else ``~/.cache/tensorlab``), and called through ``ctypes``.

On a GPU the same per-row program is written as CUDA by a subclass of this file's writer
(:mod:`tensorlab.cuda_rows`), through the same trace and plans (``writer=``); the C form takes
float16/bfloat16 arrays widened (C has no half arithmetic), the CUDA form reads them itself.

:func:`run_each` and :func:`run_each_sum` run a kernel over many tensors in one call (an
optimizer's update of every parameter, clipping's sum of squares of every gradient): the same
C function, called from a loop in C over a table of the tensors' addresses.

A trace is kept per *signature*: the arrays' dtypes and layouts (full, one per row, broadcast
along the row) and the numbers' types. Numbers are the kernel's runtime arguments, so a new
learning rate or ε does not compile anything; where the formula branches on one
(``if label_smoothing:``), the branch taken is recorded as a guard of that trace, and the other
branch gets its own trace on first use.

The runner is chosen once: :func:`available` is true when a C compiler builds and loads a
probe kernel, and ``TENSORLAB_CPU_KERNELS=numpy`` turns it off (the tests run both runners).
A formula that uses something :class:`Sym` does not write (a dtype other than float32/64,
int32/64 and bool, another axis, a reshape) raises :class:`Untraceable` once per signature, and
that signature runs on NumPy (:func:`tensorlab.fused.run_numpy`).

NaN and ∞ follow NumPy: the code is compiled without most of ``-ffast-math`` (without
``errno`` and traps, which lets the compiler call the vector functions, and with sums
regrouped over the vector's lanes), and a row's maximum propagates NaN. A formula compiled here
may differ from NumPy's result in the last bits (summation order, vector ``expf``); the tests
hold the two runners to float32's and float64's rounding.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tensorlab import backend


class Untraceable(Exception):
    """The formula does something the C runner does not write (it then runs on NumPy)."""


# ----------------------------------------------------------------------- the trace: nodes
# Types: "b" bool, "i" int64, "f" float32, "d" float64; "wi" and "wf" are Python's int and
# float (weak: they take the other operand's type, as NumPy's Python scalars do).
_C = {"b": "unsigned char", "i": "long long", "f": "float", "d": "double"}
_C.update(wi="long long", wf="double")
_DTYPE = {"b": np.bool_, "i": np.int64, "f": np.float32, "d": np.float64}
_OF_DTYPE = {
    np.dtype(np.bool_): ("b", "unsigned char"),
    np.dtype(np.int32): ("i", "int"),
    np.dtype(np.int64): ("i", "long long"),
    np.dtype(np.float32): ("f", "float"),
    np.dtype(np.float64): ("d", "double"),
}
_RANK = {"b": 0, "i": 1, "f": 2, "d": 3}


def _promote(a: str, b: str) -> str:
    """The type of ``a op b`` under NumPy's rules (NEP 50: Python numbers are weak)."""
    if a.startswith("w") and b.startswith("w"):
        return "wf" if "wf" in (a, b) else "wi"
    if b.startswith("w"):
        a, b = b, a
    if a == "wi":
        return "i" if b == "b" else b
    if a == "wf":
        return b if b in ("f", "d") else "d"
    if {a, b} == {"i", "f"}:
        return "d"  # int64 with float32: float64, as NumPy
    return a if _RANK[a] >= _RANK[b] else b


def _strong(t: str) -> str:
    return {"wi": "i", "wf": "d"}.get(t, t)


class Node:
    """One operation of the trace: ``op`` on ``args`` (nodes), of C type ``t``; ``row`` is True
    for one number per row, False for one per element. ``n`` orders the nodes as made."""

    __slots__ = ("op", "args", "t", "row", "value", "n")
    count = 0

    def __init__(self, op: str, args: tuple, t: str, row: bool, value=None):
        self.op, self.args, self.t, self.row, self.value = op, args, t, row, value
        Node.count += 1
        self.n = Node.count


def _node(op: str, args: tuple, t: str, value=None) -> Node:
    row = all(a.row for a in args) if args else True
    return Node(op, args, t, row, value)


# A Sym's shape kind: "E" the full shape (..., d), "K" one per row with the last axis kept
# (..., 1), "F" one per row without it (...), "S" a single number (broadcasts with any).
def _kind(*kinds: str) -> str:
    found = {k for k in kinds if k != "S"}
    if not found:
        return "S"
    if found <= {"E", "K"}:
        return "E" if "E" in found else "K"
    if found == {"F"}:
        return "F"
    raise Untraceable(f"shapes {sorted(found)} would broadcast across rows")


_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}


class Sym:
    """A traced array or number: its current :class:`Node` and its shape kind. In-place
    operators replace the node (NumPy's in-place update of the same array)."""

    __array_ufunc__ = None  # NumPy numbers defer to Sym's reflected operators

    def __init__(self, node: Node, kind: str, tracer: Tracer):
        self.node, self.kind, self._tracer = node, kind, tracer

    def _new(self, node, kind):
        return Sym(node, kind, self._tracer)

    def _other(self, other) -> Sym:
        if isinstance(other, Sym):
            return other
        return self._tracer.constant(other)

    def _binary(self, op, other, reflected=False):
        other = self._other(other)
        a, b = (other, self) if reflected else (self, other)
        t = _promote(a.node.t, b.node.t)
        if op == "div" and _strong(t) in ("b", "i"):
            t = "d" if not t.startswith("w") else "wf"  # true division
        return self._new(_node(op, (a.node, b.node), t), _kind(a.kind, b.kind))

    def _compare(self, op, other):
        other = self._other(other)
        t = _promote(self.node.t, other.node.t)
        node = _node(op, (self.node, other.node), "b", value=t)
        return self._new(node, _kind(self.kind, other.kind))

    def _assign(self, result: Sym) -> Sym:
        if result.kind != self.kind and self.kind != "S":
            raise Untraceable(f"an in-place update of a {self.kind} array by a {result.kind}")
        t = self.node.t
        self.node = result.node if result.node.t == t else _node("cast", (result.node,), t)
        return self

    __hash__ = None  # type: ignore[assignment]

    def __neg__(self):
        return self._new(_node("neg", (self.node,), self.node.t), self.kind)

    def __bool__(self):
        return self._tracer.guard(self)

    def __getitem__(self, key):
        if key == (Ellipsis, 0) and self.kind in ("K", "F"):
            return self._new(self.node, "F")
        if key == (Ellipsis, None) and self.kind in ("F", "S"):
            return self._new(self.node, "K")
        raise Untraceable(f"indexing with {key!r}")

    def astype(self, dtype) -> Sym:
        t = _OF_DTYPE.get(np.dtype(dtype), (None,))[0]
        if t is None:
            raise Untraceable(f"astype({dtype})")
        return self._new(_node("cast", (self.node,), t), self.kind)

    @property
    def dtype(self):
        return np.dtype(_DTYPE[_strong(self.node.t)])

    @property
    def shape(self):
        return _Shape(self)


def _operators():
    """Sym's arithmetic (also reflected: ``1.0 - x``; and in place: ``m *= b``) and its
    comparisons, each recording its node."""
    for name, op in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div")]:
        setattr(Sym, f"__{name}__", lambda self, o, op=op: self._binary(op, o))
        setattr(Sym, f"__r{name}__", lambda self, o, op=op: self._binary(op, o, True))
        setattr(Sym, f"__i{name}__", lambda self, o, op=op: self._assign(self._binary(op, o)))
    for op in _COMPARE:
        setattr(Sym, f"__{op}__", lambda self, o, op=op: self._compare(op, o))


_operators()


class _Shape:
    """A traced array's shape: only its last axis (the row width d, a runtime number)."""

    def __init__(self, sym: Sym):
        self._sym = sym

    def __getitem__(self, i):
        if i == -1:
            return self._sym._new(Node("width", (), "wi", True), "S")
        raise Untraceable(f"shape[{i}]")


_FLOAT_FN = ("exp", "log", "sqrt", "tanh", "erf", "expm1", "abs")


class Tracer:
    """The ``xp`` of a trace: its functions record nodes. Holds the runtime numbers (params)
    and the guards (a number's truth the formula branched on)."""

    float32, float64, int64, bool_ = np.float32, np.float64, np.int64, np.bool_

    def __init__(self):
        self.params: list[Node] = []
        self.guards: list[tuple[int, bool]] = []
        self.values: list = []

    def __getattr__(self, name):
        raise Untraceable(f"xp.{name}")

    def constant(self, value) -> Sym:
        if isinstance(value, (bool, np.bool_)):
            return Sym(Node("const", (), "b", True, bool(value)), "S", self)
        if isinstance(value, (int, float)) and not isinstance(value, np.generic):
            t = "wi" if isinstance(value, int) else "wf"
            return Sym(Node("const", (), t, True, value), "S", self)
        if isinstance(value, np.generic) and value.dtype in _OF_DTYPE:
            return Sym(Node("const", (), _OF_DTYPE[value.dtype][0], True, value.item()), "S", self)
        raise Untraceable(f"a constant of type {type(value).__name__}")

    def param(self, value) -> Sym:
        if isinstance(value, np.generic):
            t = _OF_DTYPE[value.dtype][0]
        else:
            t = "wi" if isinstance(value, int) else "wf"
        node = Node("param", (), t, True, len(self.params))
        self.params.append(node)
        self.values.append(value)
        return Sym(node, "S", self)

    def guard(self, sym: Sym) -> bool:
        if sym.node.op != "param":
            raise Untraceable("a branch on an array's values")
        truth = bool(self.values[sym.node.value])
        self.guards.append((sym.node.value, truth))
        return truth

    def call(self, op: str, *args, out=None) -> Sym:
        syms = [a if isinstance(a, Sym) else self.constant(a) for a in args]
        t = syms[0].node.t
        if op != "abs":  # exp of an int is a float64
            t = _promote(t, "wf")
            t = "d" if t == "wf" else t
        result = Sym(
            _node(op, tuple(s.node for s in syms), t), _kind(*(s.kind for s in syms)), self
        )
        if out is not None:
            return out._assign(result)
        return result

    def where(self, c, a, b) -> Sym:
        c, a, b = (x if isinstance(x, Sym) else self.constant(x) for x in (c, a, b))
        t = _promote(a.node.t, b.node.t)
        node = _node("where", (c.node, a.node, b.node), t)
        return Sym(node, _kind(c.kind, a.kind, b.kind), self)

    def _reduce(self, op, x, axis, keepdims):
        if axis not in (-1,) or not isinstance(x, Sym) or x.kind != "E":
            raise Untraceable(f"{op} over axis {axis}")
        t = _strong(x.node.t)
        t = "d" if t in ("b", "i") and op != "max" else t
        node = Node(op, (x.node,), t, True)
        return Sym(node, "K" if keepdims else "F", self)

    def sum(self, x, axis=None, keepdims=False):
        return self._reduce("sum", x, axis, keepdims)

    def mean(self, x, axis=None, keepdims=False):
        return self._reduce("mean", x, axis, keepdims)

    def max(self, x, axis=None, keepdims=False):
        return self._reduce("max", x, axis, keepdims)

    def take_along_axis(self, x, index, axis):
        if axis != -1 or x.kind != "E" or index.kind not in ("K", "S"):
            raise Untraceable("take_along_axis other than one index per row of the last axis")
        return Sym(Node("gather", (x.node, index.node), x.node.t, True), "K", self)

    def put_along_axis(self, x, index, values, axis):
        if axis != -1 or x.kind != "E" or index.kind not in ("K", "S"):
            raise Untraceable("put_along_axis other than one index per row of the last axis")
        values = values if isinstance(values, Sym) else self.constant(values)
        at = Node("at", (index.node,), "b", False)  # column j is the row's index
        x._assign(Sym(_node("where", (at, values.node, x.node), x.node.t), "E", self))


def _functions():
    """The namespace's elementwise functions: ``xp.exp(x)``, ``xp.exp(S, out=S)`` ..."""
    for fn in _FLOAT_FN:
        setattr(Tracer, fn, lambda self, x, out=None, fn=fn: self.call(fn, x, out=out))


_functions()


# ----------------------------------------------------------------------- the C source
_PRELUDE = """#include <math.h>
#define W 16
#if defined(TENSORLAB_LIBMVEC)
#define V __attribute__((__simd__("notinbranch")))
V float logf(float); V float tanhf(float); V float erff(float);
V float expm1f(float);
#endif
/* e^x for float, written here: e^x = 2^k e^r with k = rint(x log2 e) and r = x - k ln 2
   (ln 2 in two parts, so r keeps float's precision), e^r by Cephes' degree-6 polynomial for
   |r| <= ln(2)/2, and k added to the exponent bits (k = 128 fits: there r < 0, so e^r < 1
   has exponent -1). At most 1.01 ulp from e^x over every float in [-87, 88.72] (checked
   against the double exp). Below -87 (e^x < 1.7e-38) it gives 0, where NumPy gives that
   small a number or a subnormal; from 128 ln 2 up, inf; NaN stays NaN. Out there k is
   meaningless (even outside int's range) and the choices at the end discard what was
   computed from it. About 20 vector instructions and no call: glibc's vector expf (libmvec)
   took SiLU's forward 211 against 138 us over (768, 512) in a C harness, and it computes
   every lane below -87.3 by a scalar call, 13 times slower (a causal mask's -inf scores are
   half of every row). */
static inline float tl_expf(float x) {
  const float k = __builtin_rintf(x * 1.44269504f);
  float r = __builtin_fmaf(k, -0.693359375f, x);
  r = __builtin_fmaf(k, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r * r, r) + 1.0f;
  unsigned bits;
  __builtin_memcpy(&bits, &p, 4);
  bits += (unsigned)(int)k << 23;
  float e;
  __builtin_memcpy(&e, &bits, 4);
  e = x >= 88.72283935546875f ? INFINITY : e;  /* 128 ln 2 rounded up: e^x > 2^128 */
  e = x < -87.0f ? 0.0f : e;
  return x == x ? e : x;
}
"""


def _literal(value, t: str) -> str:
    t = _strong(t)
    if t in ("b", "i"):
        return f"{int(value)}LL"
    value = float(value)
    if math.isnan(value):
        text = "NAN"
    elif math.isinf(value):
        text = "INFINITY" if value > 0 else "-INFINITY"
    else:
        return f"{value!r}f" if t == "f" else f"{value!r}"
    return f"(({_C[t]}){text})"


class _Writer:
    """C source of one traced signature. ``arrays`` are (name, C type, per_row) of the inputs,
    ``outputs`` (node, kind) and ``stores`` (argument index, node)."""

    EXPF = "tl_expf"  # the float exp the code calls (the prelude's)
    HALF: dict = {}  # the float16/bfloat16 dtypes it reads and writes: (ctype, read, write)

    def __init__(self, arrays, outputs, stores, params, out_ctypes=None):
        self.arrays, self.outputs, self.stores, self.params = arrays, outputs, stores, params
        self.out_ctypes = out_ctypes or [_C[_strong(n.t)] for n, _ in outputs]
        self.lines: list[str] = []
        self.stored: set = set()  # the outputs stored so far (while writing one row's loops)
        roots = [n for n, _ in outputs] + [n for _, n in stores]
        self.nodes = sorted(_reachable(roots), key=lambda n: n.n)

    def name(self, node: Node, col: str) -> str:
        if node.op == "const":
            return _literal(node.value, node.t)
        if node.op == "param":
            return f"p{node.value}"
        if node.op == "width":
            return "d"
        return f"{'r' if node.row else 'e'}{node.n}"

    def use(self, node: Node, t: str, col: str) -> str:
        text = self.name(node, col)
        return text if _strong(node.t) == _strong(t) else f"(({_C[_strong(t)]}){text})"

    def expr(self, node: Node, col: str) -> str:
        op, args, t = node.op, node.args, _strong(node.t)
        if op == "load":
            a, ctype, per_row = self.arrays[node.value]
            return self.read(ctype, f"{a}r[0]" if per_row else f"{a}r[{col}]")
        if op in _BINARY:
            x, y = (self.use(a, t, col) for a in args)
            return f"{x} {_BINARY[op]} {y}"
        if op in _COMPARE:
            x, y = (self.use(a, node.value, col) for a in args)
            return f"{x} {_COMPARE[op]} {y}"
        if op == "neg":
            return f"-{self.name(args[0], col)}"
        if op == "cast":
            return f"({_C[t]}){self.name(args[0], col)}"
        if op == "where":
            c = self.name(args[0], col)
            return f"{c} ? {self.use(args[1], t, col)} : {self.use(args[2], t, col)}"
        if op == "at":
            return f"{col} == {self.name(args[0], col)}"
        if t in ("b", "i"):  # abs of an integer
            return f"llabs({self.name(args[0], col)})"
        fn = ("fabs" if op == "abs" else op) + ("f" if t == "f" else "")
        fn = self.EXPF if fn == "expf" else fn
        return f"{fn}({', '.join(self.use(a, t, col) for a in args)})"

    def elementwise(self, roots: list[Node], col: str, indent: str) -> set:
        """The element nodes that ``roots`` need, at column ``col``, in the order made."""
        nodes = _reachable(roots, rows=False)
        for node in sorted(nodes, key=lambda n: n.n):
            self.lines.append(f"{indent}{_C[_strong(node.t)]} e{node.n} = {self.expr(node, col)};")
        return nodes

    def loop(self, pragma: str, body) -> None:
        """A ``for j`` loop over the row, its ``body(keep)`` written twice. A vector function
        (expf over 16 lanes) leaves the columns after the last whole vector to the compiler's
        scalar loop, one ``expf`` call each: cross-entropy's rows of 65 logits ran the 65th
        through the scalar call, and the kernel took 60 µs where rows of 64 took 35. So the
        first loop runs over the whole vectors (j < dm, dm a multiple of W), and the second
        over the row's last n = min(d, W) columns, d - n ≤ j < d, again as one vector, with
        the columns the first loop did masked off (``keep``: nothing stored, nothing summed).

        dm is written ``d & ~(W - 1)``, not ``d - d % W``: the compiler then knows that the first
        loop runs a whole number of vectors, writes no remainder loop after it, and keeps a
        reduction's 16 partial sums in a register. With ``d - d % W`` it kept them in an array
        on the stack for the remainder loop, reloaded after every row: layer norm's forward
        took 51 µs in C over (768, 128), 27 µs now (a C harness timing the generated code)."""
        out = self.lines
        out += [f"    #pragma {pragma}", "    for (long long j = 0; j < dm; j++) {"]
        stored = set(self.stored)
        body(None)
        self.stored = stored  # (the second loop stores the same outputs)
        out += ["    }", f"    #pragma {pragma}"]
        out.append("    for (long long k = 0; k < n; k++) {")
        out.append("      const long long j = d - n + k;")
        out.append("      const int keep = j >= dm;")
        body("keep")
        out.append("    }")

    def store_outputs(self, computed: set, indent: str, keep=None) -> None:
        """Store the element outputs among the ``computed`` nodes not stored yet (an output a
        reduction's loop computes anyway, such as softmax's e = exp(z - m) under its sum, is
        written there and not computed again). Arguments updated in place are stored in the
        last loop only: every loop before reads their old values."""
        for k, (node, kind) in enumerate(self.outputs):
            if kind == "E" and k not in self.stored and (node in computed or node.row):
                value = self.written(self.out_ctypes[k], self.use(node, node.t, "j"))
                self.lines.append(f"{indent}{_when(keep)}o{k}[r * d + j] = {value};")
                self.stored.add(k)

    def source(self, name: str) -> str:
        """The function: its signature and loop over the rows (:meth:`opening`), each row's
        values in the order made, its element outputs in a last loop over the columns, its
        per-row outputs (:meth:`closing`)."""
        out = self.lines
        head = [f"{ctype}* {a}, long long s{k}" for k, (a, ctype, _) in enumerate(self.arrays)]
        head += [f"{ctype}* o{k}" for k, ctype in enumerate(self.out_ctypes)]
        head += [f"{_C[_strong(n.t)]} p{i}" for i, n in enumerate(self.params)]
        out += self.opening(name, ", ".join(["long long R", "long long d", *head]))
        for k, (a, ctype, _) in enumerate(self.arrays):
            out.append(f"    {ctype}* {a}r = {a} + r * s{k};")
        for node in self.nodes:
            if not node.row or node.op in ("const", "param", "width"):
                continue
            self.row_node(node)
        last = [
            n for k, (n, kind) in enumerate(self.outputs) if kind == "E" and k not in self.stored
        ]
        last += [n for k, n in self.stores if not self.arrays[k][2]]
        if last:

            def outputs(keep):
                self.store_outputs(self.elementwise(last, "j", "      "), "      ", keep)
                for k, node in self.stores:
                    a, ctype, per_row = self.arrays[k]
                    if not per_row:
                        out.append(f"      {_when(keep)}{a}r[j] = ({ctype}){self.name(node, 'j')};")

            self.loop("omp simd", outputs)
        writes = [
            f"o{k}[r] = {self.name(node, '')};"
            for k, (node, kind) in enumerate(self.outputs)
            if kind != "E"
        ]
        writes += [
            f"{a}r[0] = ({ctype}){self.name(node, '')};"
            for (a, ctype, per_row), node in ((self.arrays[k], node) for k, node in self.stores)
            if per_row
        ]
        out += self.closing(writes)
        return self.prelude() + "\n".join(out)

    def outside_row(self, value: str, ctype: str) -> str:
        """What a gather does with an index outside the row: the function returns 1 (run
        raises IndexError)."""
        return "return 1;"

    def read(self, ctype: str, element: str) -> str:
        """An array's element as the formula computes with it (in C, as it is)."""
        return element

    def written(self, ctype: str, value: str) -> str:
        """A computed value as an output of ``ctype`` stores it (in C, as it is)."""
        return value

    def opening(self, name: str, params: str) -> list[str]:
        return [
            f"int {name}({params}) {{",
            "  const long long dm = d & ~(long long)(W - 1);  /* see loop() */",
            "  const long long n = d % W == 0 ? 0 : d < W ? d : W;",
            "  for (long long r = 0; r < R; r++) {",
        ]

    def closing(self, writes: list[str]) -> list[str]:
        return [f"    {w}" for w in writes] + ["  }\n  return 0;\n}\n"]

    def prelude(self) -> str:
        return _PRELUDE

    def row_node(self, node: Node) -> None:
        """One per-row value: a reduction's loop, a gather, or a number made from others.

        A sum is a plain loop marked ``GCC ivdep`` (the outputs it stores do not overlap its
        inputs), which the compiler vectorizes as a sum over 16 lanes in a register
        (``-fassociative-math``). Under ``#pragma omp simd reduction(+:a)`` it kept the 16
        partial sums in an array on the stack, written and read back in pieces each row: layer
        norm's backward took 42 µs over (768, 128) that way and 23 µs as a plain loop (a C
        harness timing the generated code). A maximum keeps the OpenMP clause: the compiler
        would not vectorize ``v > a ? v : a`` as a plain loop (without ``-ffinite-math-only``
        it is no maximum to it)."""
        out, t = self.lines, _C[_strong(node.t)]
        if node.op in ("sum", "mean", "max"):
            (x,) = node.args
            acc = f"a{node.n}"
            if node.op == "max":  # and whether a NaN was seen: NaN wins, as in NumPy
                out.append(f"    {t} {acc} = -INFINITY;")
                out.append(f"    int nan{node.n} = 0;")
                pragma = f"omp simd reduction(max:{acc}) reduction(|:nan{node.n})"
            else:
                out.append(f"    {t} {acc} = 0;")
                pragma = "GCC ivdep"

            def accumulate(keep):
                self.store_outputs(self.elementwise([x], "j", "      "), "      ", keep)
                value = self.use(x, node.t, "j")
                if node.op == "max":  # (a column masked off counts as -∞)
                    value = f"keep ? {value} : -INFINITY" if keep else value
                    out.append(f"      {t} v = {value};")
                    out.append(f"      {acc} = v > {acc} ? v : {acc};")
                    out.append(f"      nan{node.n} |= v != v;")
                else:  # (and as 0)
                    out.append(f"      {acc} += {f'keep ? {value} : 0' if keep else value};")

            self.loop(pragma, accumulate)
            if node.op == "max":
                out.append(f"    const {t} r{node.n} = nan{node.n} ? ({t})NAN : {acc};")
            else:
                scale = f" * ({t})(1.0 / (double)d)" if node.op == "mean" else ""
                out.append(f"    const {t} r{node.n} = {acc}{scale};")
        elif node.op == "gather":
            x, index = node.args
            out.append(f"    {t} r{node.n};")
            out.append("    {")
            out.append(f"      const long long c = (long long){self.name(index, '')};")
            out.append(f"      if (c < 0 || c >= d) {self.outside_row(f'r{node.n}', t)}")
            out.append("      else {")
            self.elementwise([x], "c", "        ")
            out.append(f"        r{node.n} = {self.name(x, 'c')};")
            out.append("      }")
            out.append("    }")
        else:
            out.append(f"    const {t} r{node.n} = {self.expr(node, '')};")


def _when(keep) -> str:
    return f"if ({keep}) " if keep else ""


def _reachable(roots, rows=None) -> set:
    """The nodes ``roots`` depend on (with ``rows=False``: only through element nodes: a row
    node is a value the loop reads, computed before it)."""
    seen, todo = set(), list(roots)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        if rows is False and node.row:
            continue
        seen.add(node)
        todo.extend(node.args)
    return seen


# ----------------------------------------------------------------------- compiling
# Not all of -ffast-math: NaN and ∞ as NumPy has them, and no fused multiply-adds, so that a
# product recomputed in two loops rounds the same in both (layer norm's ĝ - mean(ĝ) is then
# exactly 0 for a row of one). Sums may be regrouped (-fassociative-math: a row's sum split over
# the vector's lanes; layer norm's forward 47 -> 35 µs at the nanoGPT CPU config's shape).
_FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"]
_FLAGS += ["-ffp-contract=off", "-fassociative-math", "-fno-signed-zeros"]
_FLAGS += ["-shared", "-fPIC"]


def _cache_dir() -> Path:
    root = os.environ.get("TENSORLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tensorlab"
    )
    return Path(root) / "kernels"


@functools.cache
def _machine() -> str:
    """What the compiled code depends on besides its source (``-march=native``)."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()} {flags}"


def _build(source: str, extra: list[str]) -> Path:
    """The shared library of ``source`` from the cache, compiled there first if missing
    (written under a temporary name and renamed: processes compiling at once do not clash)."""
    cc = os.environ.get("CC", "cc")
    key = hashlib.sha256("\0".join([source, cc, *_FLAGS, *extra, _machine()]).encode())
    path = _cache_dir() / f"{key.hexdigest()[:32]}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        c_file, so_file = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so"
        c_file.write_text(source)
        cmd = [cc, *_FLAGS, "-o", str(so_file), str(c_file), "-lm", *extra]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"C runner: {' '.join(cmd)} failed:\n{run.stderr[-2000:]}")
        os.replace(so_file, path)
    return path


@functools.cache
def _link() -> tuple[str, ...]:
    """The compile options chosen once per process: glibc's vector math (libmvec) when the
    compiler and library have it, else the scalar ``expf`` ... ; None when no C compiler
    works (then every kernel runs on NumPy)."""
    if shutil.which(os.environ.get("CC", "cc")) is None:  # (a probe cached earlier is no proof)
        return None
    probe = "float probe(float x) { return expf(x) + erff(x) + tanhf(x); }\n"
    for extra in (["-DTENSORLAB_LIBMVEC", "-lmvec"], []):
        try:
            ctypes.CDLL(str(_build(_PRELUDE + probe, extra)))
            return tuple(extra)
        except (OSError, RuntimeError):
            continue
    return None


def available() -> bool:
    """True when kernels on NumPy arrays run compiled (a C compiler works here, and
    ``TENSORLAB_CPU_KERNELS`` is not ``numpy``). Decided once per process."""
    return _choice()


@functools.cache
def _choice() -> bool:
    setting = os.environ.get("TENSORLAB_CPU_KERNELS", "compiled")
    if setting not in ("compiled", "numpy"):
        raise ValueError(f"TENSORLAB_CPU_KERNELS must be 'compiled' or 'numpy', not {setting!r}")
    return setting == "compiled" and sys.platform != "win32" and _link() is not None


# ----------------------------------------------------------------------- calling
class Compiled:
    """One traced, compiled signature of a kernel: call it with the arrays laid out as rows."""

    def __init__(
        self,
        math,
        args: tuple,
        kw: dict,
        layout: tuple,
        name: str,
        each=None,
        writer=None,
        half=(None, 0),
    ):
        name = "k_" + re.sub(r"\W", "_", name)  # the kernel's name as a C identifier
        tracer = Tracer()
        halves = writer.HALF if writer is not None else {}
        self.layout = layout
        syms, self.arrays, number_at = [], [], []
        for i, (a, lay) in enumerate(zip(args, layout)):
            if lay is None:  # a number: a runtime parameter
                syms.append(tracer.param(a))
                number_at.append(("a", i))
                continue
            dtype = np.dtype(lay[0])  # (a half array the writer reads: computed as float)
            t, ctype = ("f", halves[dtype][0]) if dtype in halves else _OF_DTYPE[dtype]
            node = Node("load", (), t, lay[1] != "E", len(self.arrays))
            self.arrays.append((f"a{len(self.arrays)}", ctype, lay[1] != "E"))
            syms.append(Sym(node, lay[1], tracer))
        traced_kw = {}
        for k, v in kw.items():
            if _is_number(v):
                traced_kw[k] = tracer.param(v)
                number_at.append(("k", k))
            else:
                traced_kw[k] = v
        result = math(tracer, *syms, **traced_kw)
        self.tuple = isinstance(result, tuple)
        results = result if self.tuple else (() if result is None else (result,))
        self.returned = result is not None
        self.outputs, self.passthrough = [], []
        array_syms = [s for s, lay in zip(syms, layout) if lay is not None]
        scalar = all(lay is None or lay[1] == "S" for lay in layout)  # 0-d arrays only
        for r in results:
            if not isinstance(r, Sym) or (r.kind == "S" and not scalar):
                raise Untraceable("a result that is not an array")
            same = next((k for k, s in enumerate(array_syms) if s is r and _unchanged(s)), None)
            self.passthrough.append(same)
            if same is None:  # (a 0-d result: the full shape, ())
                self.outputs.append((r.node, "E" if r.kind == "S" else r.kind))
        self.stores = [(k, s.node) for k, s in enumerate(array_syms) if not _unchanged(s)]
        array_layouts = [lay for lay in layout if lay is not None]
        for k, _ in self.stores:
            if array_layouts[k][2]:
                raise Untraceable("an in-place update of a broadcast argument")
            if np.dtype(array_layouts[k][0]) in halves:
                raise Untraceable("an in-place update of a half array")
        self.passes = any(p is not None for p in self.passthrough)
        self.number_at, self.guards = number_at, tracer.guards
        self.kinds = [kind for _, kind in self.outputs]
        self._out_shapes: dict = {}
        self.dtypes = [np.dtype(_DTYPE[_strong(n.t)]) for n, _ in self.outputs]
        rounded, keep = half  # float32 outputs along the rows written in the half dtype, but
        if rounded is not None:  # the last keep (what a forward saves stays float32)
            n = len(self.dtypes) - keep
            self.dtypes = [
                rounded if i < n and kind == "E" and dtype == np.float32 else dtype
                for i, (dtype, kind) in enumerate(zip(self.dtypes, self.kinds))
            ]
        self.param_types = [_strong(n.t) for n in tracer.params]  # ("b", "i", "f" or "d")
        self.is_float = [t not in ("b", "i") for t in self.param_types]
        if writer is not None:  # another form (tensorlab/cuda_rows.py): compiled where it runs
            out_ctypes = [
                halves[dtype][0] if dtype in halves else _C[_strong(node.t)]
                for dtype, (node, _) in zip(self.dtypes, self.outputs)
            ]
            form = writer(self.arrays, self.outputs, self.stores, tracer.params, out_ctypes)
            self.source, self.name, self.form = form.source(name), name, form
            return
        writer = _Writer(self.arrays, self.outputs, self.stores, tracer.params)
        summed = [n for n, kind in self.outputs if kind == "E"]
        if each == "each" and self.returned:
            raise Untraceable("a kernel for .each must return nothing")
        if each == "each_sum" and (len(summed) != 1 or self.stores or not self.returned):
            raise Untraceable("a kernel for .each_sum must return one array and change nothing")
        self.source = writer.source(name)
        if each:
            self.source += _each_source(each, name, self.arrays, tracer.params, summed)
        library = ctypes.CDLL(str(_build(self.source, list(_link()))))
        self.fn = getattr(library, f"{each}_{name}" if each else name)
        self.fn.restype = ctypes.c_double if each == "each_sum" else ctypes.c_int
        number = {True: ctypes.c_double, False: ctypes.c_longlong}
        self.fn.argtypes = (
            [ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p]
            if each
            else [ctypes.c_longlong] * 2
            + [ctypes.c_void_p, ctypes.c_longlong] * len(self.arrays)
            + [ctypes.c_void_p] * len(self.outputs)
        ) + [number[f] for f in self.is_float]

    def out_shapes(self, full: tuple) -> list:
        """(shape, dtype) of each array the C function writes (worked out once per shape)."""
        found = self._out_shapes.get(full)
        if found is None:
            by_kind = {"E": full, "K": (*full[:-1], 1), "F": full[:-1]}
            found = [(by_kind[kind], dtype) for kind, dtype in zip(self.kinds, self.dtypes)]
            self._out_shapes[full] = found
        return found

    def numbers(self, args, kw) -> list:
        return [args[i] if where == "a" else kw[i] for where, i in self.number_at]

    def holds(self, numbers) -> bool:
        return not self.guards or all(bool(numbers[i]) == truth for i, truth in self.guards)


def _each_source(mode: str, name: str, arrays: list, params: list, summed: list) -> str:
    """C of ``each_<name>`` (mode "each"): the kernel on T tensors in one call, tensor t
    being n[t] numbers at the addresses a[t·A], ..., a[t·A + A - 1] (A arrays each), as one
    row of n[t]; or of ``each_sum_<name>``: the sum of its one output over all of them, in
    double, the output written 1024 numbers at a time into a buffer that stays in cache."""
    A = len(arrays)
    head = "".join(f", {_C[_strong(p.t)]} p{i}" for i, p in enumerate(params))
    numbers = "".join(f", p{i}" for i in range(len(params)))
    if mode == "each":
        whole = ", ".join(f"({ctype}*)at[{k}], n[t]" for k, (_, ctype, _) in enumerate(arrays))
        body = [f"    {name}(1, n[t], {whole}{numbers});"]
        returns, total = "int", "0"
    else:
        part = ", ".join(f"({ctype}*)at[{k}] + o, m" for k, (_, ctype, _) in enumerate(arrays))
        body = [
            "    for (long long o = 0; o < n[t]; o += 1024) {",
            "      const long long m = n[t] - o < 1024 ? n[t] - o : 1024;",
            f"      {name}(1, m, {part}, buf{numbers});",
            "      for (long long i = 0; i < m; i++) total += buf[i];",
            "    }",
        ]
        returns, total = "double", "total"
    lines = [f"{returns} {mode}_{name}(long long T, const long long* n, void* const* a{head}) {{"]
    if mode == "each_sum":
        lines += [f"  {_C[_strong(summed[0].t)]} buf[1024];", "  double total = 0.0;"]
    lines += ["  for (long long t = 0; t < T; t++) {", f"    void* const* at = a + t * {A};"]
    lines += body + ["  }", f"  return {total};", "}", ""]
    return "\n".join(lines)


def run_each(kernel, rows: list[tuple], scalars: tuple) -> bool:
    """``kernel(*row, *scalars)`` for every row of C-contiguous arrays of one size and the
    same dtypes (:meth:`tensorlab.fused.fused.each`), in one C call: an optimizer's update of
    every parameter pays the call's Python cost once, not once per parameter (AdamW over the
    nanoGPT CPU config's 100 parameters: 3.8 ms as NumPy operations, session 25). False where
    it cannot be compiled (the caller then runs the rows one by one)."""
    compiled, numbers = _each_compiled(kernel, rows, scalars, "each")
    if compiled is None or any(not r[k].flags.writeable for r in rows for k, _ in compiled.stores):
        return False  # (a read-only array: NumPy's error, not a write into it)
    _each_call(compiled, rows, numbers)
    return True


def run_each_sum(kernel, rows: list[tuple], scalars: tuple):
    """Σ over every row and entry of ``kernel(*row, *scalars)``, a float, summed in float64
    (:meth:`tensorlab.fused.fused.each_sum`: clipping's sum of squares of every gradient), in
    one C call; None where it cannot be compiled."""
    compiled, numbers = _each_compiled(kernel, rows, scalars, "each_sum")
    return None if compiled is None else _each_call(compiled, rows, numbers)


def _each_compiled(kernel, rows: list[tuple], scalars: tuple, mode: str) -> tuple:
    """(the trace of ``kernel`` for these rows' dtypes, written for ``mode``, and its
    numbers), or (None, None)."""
    first = rows[0]
    if kernel.rows or any(a.dtype not in _OF_DTYPE for a in first):
        return None, None
    key = (mode, tuple(a.dtype for a in first), tuple(type(s) for s in scalars))
    variants = kernel._c_each.setdefault(key, [])
    if variants is NOT_COMPILED:
        return None, None
    args = (*first, *scalars)
    compiled = next((c for c in variants if c.holds(c.numbers(args, {}))), None)
    if compiled is None:  # the first trace, or a branch on a number taken the other way
        layout = tuple((a.dtype, "E", False) for a in first) + (None,) * len(scalars)
        try:
            compiled = Compiled(kernel.math, args, {}, layout, kernel.__name__, each=mode)
        except (Untraceable, TypeError, AttributeError):
            if not variants:  # (a branch that cannot be written leaves the others in use)
                kernel._c_each[key] = NOT_COMPILED
            return None, None
        variants.append(compiled)
    return compiled, compiled.numbers(args, {})


def _each_call(compiled, rows: list[tuple], numbers: list):
    """The C function over all ``rows``: their sizes and their arrays' addresses (row by row)
    as int64 arrays, alive until it returns."""
    sizes = np.array([row[0].size for row in rows], np.int64)
    table = np.array([_address(a) for row in rows for a in row], np.int64)
    return compiled.fn(len(rows), sizes.ctypes.data, table.ctypes.data, *numbers)


def _unchanged(s: Sym) -> bool:
    return s.node.op == "load"


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or (
        isinstance(v, np.generic) and v.dtype in _OF_DTYPE and v.dtype != np.bool_
    )


# the types of the numbers most calls pass (a key holds their type; any other value, itself)
_NUMBER_TYPES = frozenset([int, float] + [t.type for t in _OF_DTYPE if t != np.bool_])


def _kw_key(kw: dict) -> tuple:
    """The keyword arguments as a plan's key: each number by its type, anything else (a
    string, a bool, an int subclass) by its value."""
    return tuple([(k, type(v)) if type(v) in _NUMBER_TYPES else (k, v) for k, v in kw.items()])


def _layout(a, rows: bool, full: tuple) -> tuple:
    """(dtype, kind, broadcast) of an array argument against the full shape: kind "E" for
    arrays along the last axis, "K" for (..., 1), "F" for one per row (rows kernels) and "S"
    for a 0-d array; broadcast when it is smaller than its kind's shape (it may not be
    updated in place)."""
    lead = full[:-1]
    if a.ndim == 0:
        return a.dtype, "S", bool(full)
    if rows and a.shape == lead:
        return a.dtype, "F", False
    if full and a.shape[-1] == 1 and full[-1] != 1:
        return a.dtype, "K", a.shape != (*lead, 1)
    return a.dtype, "E", a.shape != full


def _rows_view(a, kind: str, full: tuple, R: int, d: int) -> tuple:
    """``a`` as rows: (the array, its row stride in elements) over R rows of d, the array
    copied where no such view exists (a column-strided or oddly broadcast argument)."""
    if a.flags.c_contiguous:  # the usual layouts, without building a view
        if kind == "E" and a.shape == full:
            return a, d
        if (kind == "E" and a.ndim == 1) or kind == "S":
            return a, 0
        if kind in ("K", "F") and a.size == R:
            return a, 1
    elif kind in ("K", "F") and not any(a.strides):  # one number for every row (a sum's g)
        return a, 0
    xp = np if isinstance(a, np.ndarray) else backend.cupy  # (CuPy's for a GPU's form)
    view = xp.broadcast_to(a[..., None] if kind == "F" else a, full).reshape(R, d)
    if kind == "E" and d > 1 and view.strides[1] != a.itemsize:
        view = xp.ascontiguousarray(view)
    return view, view.strides[0] // a.itemsize


def full_shape(args: tuple, rows: bool) -> tuple:
    """The shape the arrays broadcast to; for a rows kernel, arrays of the largest one's
    leading shape (one number per row, such as class targets) count as (..., 1). A 0-d array
    (a summed loss's g) has no rows: it is never the largest, even beside empty ones."""
    shapes = [a.shape for a in args if _is_array(a)]
    if rows:
        lead = max(shapes, key=lambda s: (s != (), math.prod(s), len(s)))[:-1]
        shapes = [(*s, 1) if s == lead else s for s in shapes]
    return np.broadcast_shapes(*shapes)


def _trace(kernel, args, kw, layout, full, writer=None, half=None) -> Compiled | None:
    """The compiled signature of ``kernel.math``, or None where the formula cannot be written
    (``writer`` and ``half``: see :func:`_plan`). An array of the
    rows' leading shape that also fits the last axis (a (d,) gain beside (d, d) inputs) is
    read as one number per row first, and along the last axis if the formula refuses that
    (NumPy itself broadcasts it along the last axis; a per-row array is made (..., 1) by the
    formula, as cross-entropy's targets are)."""
    both = [
        lay is not None and lay[1] == "F" and a.shape == full[len(full) - a.ndim :]
        for a, lay in zip(args, layout)
    ]
    tries = [layout]
    if any(both):
        tries.append(tuple((lay[0], "E", False) if b else lay for lay, b in zip(layout, both)))
    for lay in tries:
        try:
            rounding = (half, kernel.keep)
            return Compiled(
                kernel.math, args, kw, lay, kernel.__name__, writer=writer, half=rounding
            )
        except (Untraceable, TypeError, AttributeError):  # (x.T, len(x), ...: not recorded)
            continue
    return None


NOT_COMPILED = ()  # what run returns for a signature it cannot compile


def _signature(kernel, args: tuple, kw: dict, key: tuple, writer=None, half=None):
    """(the trace for these arguments, its numbers, the full shape, R, d), or
    :data:`NOT_COMPILED`: the plan of this shape (made once), and among its traces the one
    whose guards the numbers pass (a branch taken the other way gets a trace of its own)."""
    plan = kernel._c_plans.get(key)
    if plan is None:
        plan = kernel._c_plans[key] = _plan(kernel, args, kw, writer, half)
    if plan is NOT_COMPILED:
        return NOT_COMPILED
    variants, full, R, d = plan
    for compiled in variants:
        numbers = compiled.numbers(args, kw)
        if compiled.holds(numbers):
            return compiled, numbers, full, R, d
    layout = variants[0].layout
    compiled = _trace(kernel, args, kw, layout, full, writer, half)
    if compiled is None:
        return NOT_COMPILED
    variants.append(compiled)
    return compiled, compiled.numbers(args, kw), full, R, d


def run(kernel, args: tuple, kw: dict):
    """``kernel.math`` on NumPy arrays, compiled (see the module docstring), or
    :data:`NOT_COMPILED` where this signature cannot be. What depends only on the arguments'
    shapes and dtypes (the full shape, the layouts, the trace) is looked up once per shape."""
    shapes = tuple([(a.shape, a.dtype) if isinstance(a, np.ndarray) else type(a) for a in args])
    found = _signature(kernel, args, kw, (shapes, _kw_key(kw)))
    if found is NOT_COMPILED:
        return NOT_COMPILED
    compiled, numbers, full, R, d = found
    call, views = [R, d], []
    for a, lay in zip(args, compiled.layout):
        if lay is not None:
            view, stride = _rows_view(a, lay[1], full, R, d)
            call += (_address(view), stride)
            views.append((a, view))
    for k, _ in compiled.stores:  # a read-only argument: NumPy's error, not a write into it
        if not views[k][0].flags.writeable:
            return NOT_COMPILED
    outs = [np.empty(shape, dtype) for shape, dtype in compiled.out_shapes(full)]
    call += [_address(out) for out in outs]
    if R and compiled.fn(*call, *numbers):
        raise IndexError(f"{kernel.__name__}: an index along the last axis is outside 0..{d - 1}")
    for k, _ in compiled.stores:  # an argument updated through a copy gets the copy's values
        a, view = views[k]
        if view is not a and not np.shares_memory(a, view):
            a[...] = view.reshape(a.shape)
    return _results(compiled, outs, views)


def _results(compiled: Compiled, outs: list, views: list):
    """What the kernel returns: nothing, one array or a tuple (an argument it returns as it
    is among them, as NumPy's run would)."""
    if not compiled.returned:
        return None
    if compiled.passes:
        made = iter(outs)
        outs = [next(made) if p is None else views[p][0] for p in compiled.passthrough]
    return tuple(outs) if compiled.tuple else outs[0]


def _address(a) -> int:
    """The address of ``a``'s first number. ``ctypes.c_char.from_buffer`` takes a quarter of
    ``a.ctypes.data``'s microsecond, for the writable C-contiguous arrays most are; a read-only
    or empty one (a broadcast view) takes the slower way."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def _plan(kernel, args: tuple, kw: dict, writer=None, half=None):
    """(the traces of this signature, the full shape, R, d), or :data:`NOT_COMPILED`. The
    C function, or the source ``writer`` writes (tensorlab/cuda_rows.py); a writer that reads
    float16/bfloat16 arrays (``writer.HALF``) takes those of a fused op's kernel (``widen``)
    and writes its float32 outputs along the rows in ``half`` (if not None), but the kernel's
    last ``keep``."""
    halves = writer.HALF if writer is not None and kernel.widen else {}
    if any(_is_array(a) and a.dtype not in _OF_DTYPE and a.dtype not in halves for a in args):
        return NOT_COMPILED  # (float16, bfloat16 on the CPU or updated in place, complex, ...)
    full = full_shape(args, kernel.rows)
    layout = tuple(_layout(a, kernel.rows, full) if _is_array(a) else None for a in args)
    key = (writer, layout, _kw_key(kw))
    key += tuple(type(a) for a, lay in zip(args, layout) if lay is None)
    variants = kernel._c_traces.get(key)
    if variants is None:
        compiled = _trace(kernel, args, kw, layout, full, writer, half)
        variants = kernel._c_traces[key] = [compiled] if compiled else NOT_COMPILED
    if variants is NOT_COMPILED:
        return NOT_COMPILED  # this signature runs on NumPy from now on
    d = full[-1] if full else 1
    return variants, full, math.prod(full[:-1]) if full else 1, d


def _is_array(a) -> bool:
    """A NumPy or CuPy array (not a number)."""
    return isinstance(a, np.ndarray) or (
        backend.cupy is not None and isinstance(a, backend.cupy.ndarray)
    )

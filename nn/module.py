"""Module: a container of parameters and submodules, shaped like ``torch.nn.Module``.

Assigning a :class:`Parameter` or a :class:`Module` to an attribute registers it under that
name, so ``named_parameters()`` can walk the tree and ``state_dict()`` can name every tensor
by its path (``blocks.0.attn.W_Q``). Attributes stay ordinary Python attributes: reading
``self.weight`` costs nothing extra in a forward pass.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator

import numpy as np

import tensorlab as tl
from tensorlab import Tensor, function
from tensorlab.autograd import set_grad_enabled
from tensorlab.backend import device_of, to_device, xp_of


class Parameter(Tensor):
    """A Tensor that is a learnable weight of a Module: a leaf that requires grad."""

    __slots__ = ()

    def __init__(self, data, requires_grad: bool = True, name: str | None = None):
        super().__init__(
            data.data if isinstance(data, Tensor) else data, requires_grad=requires_grad, name=name
        )

    def __repr__(self) -> str:
        return "Parameter(" + super().__repr__() + ")"


_hook_ids = itertools.count()  # unique keys for hooks, so a removal never hits another hook


def _fresh_array(value, like: Tensor):
    """A new array holding ``value`` (a NumPy or CuPy array, or Python data) with ``like``'s
    dtype, on ``like``'s device."""
    try:
        xp_of(value)
    except TypeError:
        value = np.asarray(value)  # host: Python data (lists, scalars)
    return to_device(value, like.device).astype(like.dtype, copy=True)


def _is_array_like(value, like: Tensor) -> bool:
    """``value`` is an array of ``like``'s dtype on ``like``'s device."""
    try:
        xp_of(value)
    except TypeError:
        return False
    return value.dtype == like.dtype and device_of(value) == like.device


class _Handle:
    """Returned by ``register_*_hook``; ``remove()`` takes the hook out again, as does the end
    of a ``with`` block (``with point.register_forward_hook(fn): ...``, as in PyTorch)."""

    def __init__(self, hooks: dict, key: int):
        self.hooks, self.key = hooks, key

    def remove(self) -> None:
        self.hooks.pop(self.key, None)

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def zero_grads(params: Iterable[Tensor], set_to_none: bool = True) -> None:
    """Forget the gradients: ``p.grad = None`` (frees memory), or fill them with zeros in place
    (written, not grad · 0, which keeps NaN and ∞: 0·∞ = NaN)."""
    for p in params:
        if set_to_none:
            p.grad = None
        elif p.grad is not None:
            p.grad.data[...] = 0


class Module:
    """Base class of layers and models. Subclasses define ``forward``; call the module."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_forward_hooks", {})
        object.__setattr__(self, "_forward_pre_hooks", {})
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__() (call super().__init__())"
            )
        if name in self._buffers and (value is None or type(value) is Tensor):
            # assigning a new tensor (or None) to a buffer's name keeps it a buffer
            self._buffers[name] = value
            object.__setattr__(self, name, value)
            return
        for registry in (self._parameters, self._modules, self._buffers):
            registry.pop(name, None)
        self._non_persistent.discard(name)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._modules, self._buffers):
            registry.pop(name, None)
        object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """A tensor that belongs to the module but is not learned (e.g. a causal mask).

        Persistent buffers are saved in ``state_dict()``; non-persistent ones are rebuilt.
        """
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__setattr__(self, name, tensor)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        setattr(self, name, param)
        if param is None:
            self._parameters[name] = None

    # ------------------------------------------------------------------ calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        if self._forward_pre_hooks:
            for hook in list(self._forward_pre_hooks.values()):
                new = hook(self, args)
                if new is not None:
                    args = new if isinstance(new, tuple) else (new,)
        out = self.forward(*args, **kwargs)
        if self._forward_hooks:
            for hook in list(self._forward_hooks.values()):
                new = hook(self, args, out)
                if new is not None:
                    out = new
        return out

    def register_forward_hook(self, hook: Callable) -> _Handle:
        """``hook(module, inputs, output)`` runs after forward; a non-None return replaces
        the output."""
        return self._add_hook(self._forward_hooks, hook)

    def register_forward_pre_hook(self, hook: Callable) -> _Handle:
        """``hook(module, inputs)`` runs before forward; a non-None return replaces inputs."""
        return self._add_hook(self._forward_pre_hooks, hook)

    def _add_hook(self, hooks: dict, hook: Callable) -> _Handle:
        key = next(_hook_ids)
        hooks[key] = hook
        return _Handle(hooks, key)

    # ------------------------------------------------------------------ traversal
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            children = [
                (f"{name}.{k}" if name else k, c) for k, c in m._modules.items() if c is not None
            ]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from ((k, m) for k, m in self._modules.items() if m is not None)

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def named_parameters(
        self, prefix: str = "", recurse: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) pairs; a parameter shared by two modules appears once."""
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mname, m in mods:
            for pname, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self, recurse: bool = True) -> list[Parameter]:
        """Every parameter once, in registration order (a list, so it can be walked twice)."""
        return [p for _, p in self.named_parameters(recurse=recurse)]

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        for mname, m in self.named_modules(prefix):
            for bname, b in m._buffers.items():
                if b is not None:
                    yield (f"{mname}.{bname}" if mname else bname), b

    def buffers(self) -> Iterator[Tensor]:
        return (b for _, b in self.named_buffers())

    def num_parameters(self) -> int:
        """Number of learnable scalars (shared parameters counted once)."""
        return sum(p.size for p in self.parameters())

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every submodule (children first) and on self."""
        for m in reversed(list(self.modules())):
            fn(m)
        return self

    # ------------------------------------------------------------------ modes and devices
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        zero_grads(self.parameters(), set_to_none)

    def to(self, device: str) -> Module:
        """Move every parameter and buffer to ``device`` (in place, keeping identities)."""
        for p in self.parameters():
            p.data = to_device(p.data, device)
            if p.grad is not None:
                p.grad = tl.as_tensor(to_device(p.grad.data, device))
        for m in self.modules():
            for b in m._buffers.values():
                if b is not None:
                    b.data = to_device(b.data, device)
        return self

    # ------------------------------------------------------------------ state
    def _state_tensors(self) -> dict[str, Tensor]:
        """Every parameter and persistent buffer by dotted name (a shared one at its first)."""
        own: dict[str, Tensor] = {}
        for mname, m in self.named_modules():
            for k, t in list(m._parameters.items()) + [
                (k, b) for k, b in m._buffers.items() if k not in m._non_persistent
            ]:
                if t is not None:
                    own.setdefault(f"{mname}.{k}" if mname else k, t)
        return own

    def state_dict(self) -> OrderedDict[str, np.ndarray]:
        """Every parameter and persistent buffer, by dotted name, as NumPy arrays (copies)."""
        own = self._state_tensors().items()
        return OrderedDict((k, to_device(t.data, "cpu").copy()) for k, t in own)

    def load_state_dict(
        self, state: dict, strict: bool = True, assign: bool = False
    ) -> tuple[list[str], list[str]]:
        """Copy arrays from ``state`` into this module's parameters and buffers.

        With ``strict=True`` a missing key, an unexpected key or a shape mismatch raises a
        KeyError/ValueError naming the key (and both shapes); nothing is changed then.
        With ``assign=True`` (as in PyTorch) an array already of the parameter's dtype and
        device becomes its data as it is, without a copy: for a loader whose arrays are fresh
        and no one else's (``gpt.hf.from_pretrained``). Returns ``(missing, unexpected)`` keys.
        """
        own = self._state_tensors()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing keys: {', '.join(missing)}")
            if unexpected:
                parts.append(f"unexpected keys: {', '.join(unexpected)}")
            raise KeyError(f"load_state_dict ({type(self).__name__}): " + "; ".join(parts))
        for k, t in own.items():
            if k in state:
                shape = tuple(np.shape(state[k]))
                if shape != t.shape:
                    raise ValueError(
                        f"load_state_dict: {k!r} has shape {shape} in the state "
                        f"but {t.shape} in the model"
                    )
        for k, t in own.items():
            if k in state:
                value = state[k].data if isinstance(state[k], Tensor) else state[k]
                fits = assign and _is_array_like(value, t)
                t.data = value if fits else _fresh_array(value, t)
                t._vc[0] += 1
        return missing, unexpected

    # ------------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            child = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {child}")
        if len(lines) == 1:
            return lines[0] + ")"
        return "\n".join(lines) + "\n)"


class HookPoint(Module):
    """An identity module: a named place (``blocks.0.attn.hook_pattern``) where forward hooks
    can read or replace an activation. ``run_with_cache`` in ``gpt.circuits`` uses them.

    ``closed``: None, or why the model's current path does not pass through this point (the
    scores and pattern of a fused attention); registering a hook then raises with that reason
    instead of leaving a hook that would never run."""

    closed: str | None = None

    def forward(self, x):
        return x

    def _add_hook(self, hooks: dict, hook: Callable) -> _Handle:
        if self.closed:
            raise RuntimeError(f"cannot hook this hook point: {self.closed}")
        return super()._add_hook(hooks, hook)

    @property
    def hooked(self) -> bool:
        """Whether a forward hook (or pre-hook) is registered here."""
        return bool(self._forward_hooks or self._forward_pre_hooks)


def identity(x):
    """x itself: the hook of a composed function called without hook points."""
    return x


def close_hook_points(points: Iterable[HookPoint], reason: str | None, refusal: str) -> None:
    """Close ``points`` with ``reason`` (the path a module now takes skips them), or open them
    (``reason=None``). Closing a point that still carries a hook raises ``refusal``: the hook
    would silently stop running. Modules call this from the setter of the flag that picks
    their path (``fused``, ``use_attn_result``)."""
    points = list(points)
    if reason and any(p.hooked for p in points):
        raise RuntimeError(refusal)
    for p in points:
        p.closed = reason


@contextlib.contextmanager
def switched(model: Module, kind: type, flag: str, value: bool, points: Callable):
    """Inside this block every ``kind`` module in ``model`` has ``flag = value``, the setting
    that opens its hook points ``points(module)``; afterwards each goes back to its own
    setting, except one whose points still carry a hook (it keeps the open path, so that the
    hook keeps running)."""
    layers = [m for m in model.modules() if isinstance(m, kind)]
    before = [getattr(m, flag) for m in layers]
    for m in layers:
        setattr(m, flag, value)
    try:
        yield model
    finally:
        for m, was in zip(layers, before):
            if was != value and not any(p.hooked for p in points(m)):
                setattr(m, flag, was)


class ModuleList(Module):
    """A list of modules, registered as ``0``, ``1``, ... (``blocks.0.attn``)."""

    def __init__(self, modules: Iterable[Module] = ()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m: Module) -> ModuleList:
        setattr(self, str(len(self._modules)), m)
        return self

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())


class Sequential(ModuleList):
    """Modules applied one after another (registered as ``0``, ``1``, ...)."""

    def __init__(self, *modules: Module):
        super().__init__(modules)

    def forward(self, x):
        for m in self:
            x = m(x)
        return x


class ModuleDict(Module):
    """A dict of modules, registered under their keys."""

    def __init__(self, modules: dict[str, Module] | None = None):
        super().__init__()
        for k, m in (modules or {}).items():
            self[k] = m

    def __setitem__(self, key: str, m: Module) -> None:
        setattr(self, key, m)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


@contextlib.contextmanager
def evaluating(model: Module, grad: bool = False):
    """Run ``model`` in eval mode (dropout off) and, unless ``grad``, without recording a
    graph; on exit every submodule gets its own previous mode back (a submodule kept in eval
    mode inside a training model stays so). For evaluation, sampling, decoding and analysis::

        with nn.evaluating(model):
            logits, _ = model(idx)
    """
    modes_before = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with set_grad_enabled(grad):
            yield model
    finally:
        for m, was_training in modes_before:
            object.__setattr__(m, "training", was_training)


@contextlib.contextmanager
def module_scopes(model: Module):
    """Inside this block, every op a submodule's forward records is labelled with that
    module's name (``blocks.0.attn``), so ``tl.draw`` can cluster or collapse modules.

    (Hook points are skipped: they are identities and record no op.)
    """
    stack = function.modes.scope_stack
    depth = len(stack)

    def enter(name):
        def hook(module, inputs):
            stack.append(name)

        return hook

    def leave(module, inputs, output):
        stack.pop()

    handles = []
    for name, m in model.named_modules():
        if name and not isinstance(m, HookPoint):
            handles.append(m.register_forward_pre_hook(enter(name)))
            handles.append(m.register_forward_hook(leave))
    try:
        yield model
    finally:
        for h in handles:
            h.remove()
        del stack[depth:]

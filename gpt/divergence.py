"""The first NaN or Inf of a diverged training step, found by replaying the step.

When the loss or the gradient norm of a step turns non-finite, the trainer (gpt/train.py)
calls :func:`first_nonfinite` with that step's batch, before the optimizer has touched the
parameters. It runs the forward and backward again under ``tl.detect_anomaly()``, which stops
at the first op whose forward value or gradient is NaN or Inf, inside ``nn.module_scopes``,
which labels every op with the module it ran in (as ``tl.draw`` clusters them); a second
replay without anomaly detection finds the first hook point whose activation (in forward
order) or gradient (in the order the backward reaches them) carries it::

    Finding(op="LinearFn", module="blocks.1.mlp", hook="blocks.1.mlp.hook_pre", gradient=False)

A replay that makes no NaN or Inf (None) means the step's own run differed: its dropout masks
were other random draws, or float16's loss scaling overflowed where the replay, unscaled, does
not.
"""

from __future__ import annotations

import contextlib
import dataclasses

import nn
import tensorlab as tl
from nn.module import HookPoint

NOT_FOUND = (
    "a replay of the step under tl.detect_anomaly() made no NaN or Inf (the step's dropout "
    "masks were other random draws, or float16 loss scaling overflowed)"
)


@dataclasses.dataclass
class Finding:
    """What the replay found (its ``str`` is the clause the Diverged error shows)."""

    op: str  # the op's name (its Function class: "LinearFn", "Sqrt")
    module: str  # the module path it ran in ("blocks.1.mlp"); "" for the model's own forward
    hook: str | None  # the first hook point whose value (or gradient) is non-finite
    gradient: bool  # True: the op's backward made a non-finite gradient; False: its forward

    def __str__(self) -> str:
        what = "gradient" if self.gradient else "forward value"
        where = f"in {self.module}" if self.module else "in the model's own forward"
        near = f", first reaching hook point {self.hook}" if self.hook else ""
        return f"the first non-finite {what} came from {self.op} {where}{near}"


def first_nonfinite(model: nn.Module, x, y, dtype: str | None = None) -> Finding | None:
    """Replay one forward and backward of ``model`` on token Tensors ``x`` and targets ``y``
    under ``tl.autocast(dtype)`` and name the first op that made NaN or Inf (None if none
    did). Nothing is stored in the parameters' ``.grad``; the random generator's state is
    put back, so both replays draw the same dropout masks."""
    params = [p for p in model.parameters() if p.requires_grad]
    state = tl.backend.generator_state(x.device)
    try:
        with nn.module_scopes(model), tl.detect_anomaly():
            tl.grad(_loss(model, x, y, dtype), params, allow_unused=True)
        return None
    except tl.AnomalyError as err:
        node, gradient = err.node, err.gradient
    finally:
        tl.backend.set_generator_state(state, x.device)
    bad = []  # hook point names whose value (or gradient) was non-finite, in the order seen

    def check(name, t):
        if not bool(tl.backend.xp_of(t.data).isfinite(t.data).all()):
            bad.append(name)

    def watch(name):  # the activation as the model made it, its gradient after other hooks
        def hook(module, inputs, out):
            if not gradient:
                check(name, inputs[0])
            elif inputs[0].requires_grad:
                inputs[0].register_hook(lambda g: check(name, g))

        return hook

    with contextlib.ExitStack() as undo:
        for name, m in model.named_modules():
            if isinstance(m, HookPoint) and not m.closed:
                undo.callback(m.register_forward_hook(watch(name)).remove)
        loss = _loss(model, x, y, dtype)
        if gradient:
            tl.grad(loss, params, allow_unused=True)
    tl.backend.set_generator_state(state, x.device)
    return Finding(node.name, node.scope or "", bad[0] if bad else None, gradient)


def _loss(model, x, y, dtype):
    with tl.autocast(dtype):
        return model(x, y)[1]

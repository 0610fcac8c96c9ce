"""Mixed precision: dynamic loss scaling for float16 training.

The forward runs its matrix products in float16 or bfloat16 inside ``tl.autocast(dtype)``;
the parameters stay float32 (the master weights) and get float32 gradients. bfloat16 has
float32's exponent range and needs nothing more. float16 does: its smallest normal number is
6.1e-5, and gradients of a deep model's activations go below it and flush to zero. So the loss
is multiplied by a scale S before backward (every gradient then is S times larger, safely
inside float16's range), and the float32 gradients are divided by S before the step::

    scaler = GradScaler()
    with tl.autocast("float16"):
        loss = model(x, y)[1]
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)          # true gradients (clip them here, if you clip)
    scaler.step(optimizer)              # skipped when a gradient is inf or NaN
    scaler.update()                     # S halves after an overflow, doubles after N good steps

S starts large (2¹⁶) and finds its level: an overflow (inf or NaN in a gradient) skips that
step and halves S; ``growth_interval`` steps in a row without one double it.
"""

from __future__ import annotations

import math

from nn.checks import check_bool, check_count, check_real
from nn.optim import Optimizer, scale_kernel, sum_of_squares
from tensorlab import Tensor


class GradScaler:
    """Dynamic loss scaling (see the module docstring). ``enabled=False`` makes every method a
    pass-through (scale 1, steps never skipped), so one training loop serves every dtype."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        check_real("init_scale", init_scale, 0.0, open_lo=True, owner="GradScaler")
        check_real("growth_factor", growth_factor, 1.0, open_lo=True, owner="GradScaler")
        check_real("backoff_factor", backoff_factor, 0.0, 1.0, True, True, owner="GradScaler")
        check_count("GradScaler", growth_interval=growth_interval)
        check_bool("enabled", enabled, owner="GradScaler")
        self.enabled = enabled
        self.scale_value = float(init_scale) if enabled else 1.0
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self.good_steps = 0  # steps in a row without an overflow
        self.skipped = 0  # steps skipped for an overflow, over the whole run
        self._found_inf: bool | None = None  # this step's verdict, once unscale_ has run

    def scale(self, loss: Tensor) -> Tensor:
        """The loss times the scale S: call ``backward()`` on this."""
        return loss * self.scale_value if self.enabled else loss

    def unscale_(self, optimizer: Optimizer) -> bool:
        """Divide every gradient of ``optimizer``'s parameters by S, in place, once per step;
        returns True when one holds inf or NaN (the step will be skipped)."""
        if self._found_inf is not None:
            return self._found_inf
        found = False
        params = [p for g in optimizer.param_groups for p in g["params"]] if self.enabled else []
        grads = [p.grad.data for p in params if p.grad is not None]
        if grads:
            scale_kernel.each((grads,), 1.0 / self.scale_value)  # one launch on a GPU
            # inf or NaN somewhere exactly when Σ g² is not finite: summed in float64, the
            # squares of float32 gradients (≤ 1.2e77 each) cannot overflow
            found = not math.isfinite(float(sum_of_squares(grads)))
        self._found_inf = found
        return found

    def step(self, optimizer: Optimizer) -> bool:
        """``optimizer.step()`` on the unscaled gradients, unless one overflowed; returns
        whether the step was taken."""
        if self.unscale_(optimizer):
            self.skipped += 1
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        """Halve S after an overflow (and start counting again); multiply it by
        ``growth_factor`` after ``growth_interval`` good steps in a row."""
        if self._found_inf is None:
            raise RuntimeError("GradScaler.update: call step(optimizer) (or unscale_) first")
        if self.enabled:
            if self._found_inf:
                self.scale_value *= self.backoff_factor
                self.good_steps = 0
            else:
                self.good_steps += 1
                if self.good_steps == self.growth_interval:
                    self.scale_value *= self.growth_factor
                    self.good_steps = 0
        self._found_inf = None

    def state_dict(self) -> dict:
        """The scale and the count of good steps, for a checkpoint."""
        return {"scale": self.scale_value, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.scale_value = float(state["scale"])
        self.good_steps = int(state["good_steps"])
        self.skipped = int(state.get("skipped", 0))

"""Watching circuits form: a training callback that measures chosen circuit scores every N
steps next to the loss, and a figure of both over training (Olsson et al. 2022 saw the
induction heads appear in a phase change, together with a bump in the loss); used in
examples/induction_heads.py. ``watcher.history`` is a list of records ``{"step", "loss", name:
score, ...}``, one per measured step; what is measured is ``measure(model) -> dict`` (default
:func:`circuit_scores`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpt.circuits.induction import induction_report
from gpt.circuits.qk_ov import composition_scores, ov_circuit
from tensorlab import Tensor


def circuit_scores(model, **report_kw) -> dict:
    """The scores :class:`CircuitWatcher` records by default, per head (n_layer, n_head):
    "induction" and "previous_token" (:func:`~gpt.circuits.induction_report` with
    ``report_kw``), "ov_copying" (each OV circuit's copying score), "k_composition" (each
    head's largest with an earlier head; 0 in layer 0); and "repeat_loss", the loss on the
    repeated tokens' second copy (a number)."""
    rep = induction_report(model, **report_kw)
    L, H = rep["induction"].shape
    copying = np.array(
        [[ov_circuit(model, i, h).copying_score() for h in range(H)] for i in range(L)]
    )
    k = composition_scores(model)["k"].reshape(L, H, -1)
    return {
        "induction": rep["induction"],
        "previous_token": rep["previous_token"],
        "repeat_loss": rep["second_half"],
        "ov_copying": copying,
        "k_composition": k.max(-1) if k.size else np.zeros((L, H)),
    }


LABELS = {
    "loss": "training loss",
    "repeat_loss": "loss on the 2nd copy of repeated tokens",
    "induction": "induction score",
    "previous_token": "previous-token score",
    "ov_copying": "OV copying score",
    "k_composition": "K-composition with an earlier head",
}


def label(name: str) -> str:
    """A recorded key in words: ``LABELS``' entry, or "my_score" -> "my score"."""
    return LABELS.get(name, name.replace("_", " "))


class CircuitWatcher:
    """Call it after each training step, ``watcher(step, model, loss)``: every ``every``
    steps (and at step 1 when ``first``, and whenever ``force``) it records the loss and
    ``measure(model)`` (default :func:`circuit_scores` with ``report_kw``) in ``history`` and
    returns the record (else None)."""

    def __init__(
        self,
        every: int = 100,
        measure: Callable[..., dict] | None = None,
        first: bool = True,
        **report_kw,
    ):
        if every < 1:
            raise ValueError(f"every must be a positive number of steps, got {every}")
        self.every, self.first = every, first
        self.measure = measure or (lambda model: circuit_scores(model, **report_kw))
        self.history: list[dict] = []

    def __call__(self, step: int, model, loss=None, force: bool = False) -> dict | None:
        if step % self.every and not (self.first and step == 1) and not force:
            return None
        record = {"step": step}
        if loss is not None:
            record["loss"] = float(loss.item() if isinstance(loss, Tensor) else loss)
        record.update(self.measure(model))
        self.history.append(record)
        return record

    def series(self, name: str, reduce: Callable = np.max) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one recorded score over training, each record's value reduced
        to a number by ``reduce`` (default: the largest over heads)."""
        pts = [(r["step"], float(reduce(np.asarray(r[name])))) for r in self.history if name in r]
        if not pts:
            raise KeyError(f"no record has {name!r}; recorded: {', '.join(self._names())}")
        steps, values = zip(*pts)
        return np.array(steps), np.array(values)

    def _names(self) -> list[str]:
        return sorted({k for r in self.history for k in r} - {"step"})

    def plot(self, path, losses=("loss", "repeat_loss"), scores=None) -> str:
        """A PNG at ``path``: the ``losses`` above, each score's largest value over heads
        below (``scores``: default every per-head score recorded), on one step axis."""
        from gpt.plots import _pyplot, _save

        plt = _pyplot()
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
        for name in losses:
            if any(name in r for r in self.history):
                top.plot(*self.series(name), label=label(name))
        top.set_ylabel("loss (nats/token)")
        top.legend()
        last = self.history[-1] if self.history else {}
        names = scores or [k for k in self._names() if np.ndim(last.get(k)) == 2]
        for name in names:
            bottom.plot(*self.series(name), label=label(name))
        bottom.set_xlabel("step")
        bottom.set_ylabel("score (largest over heads)")
        bottom.legend()
        top.set_title("circuits forming during training")
        return _save(fig, path)

"""The ``early_stopping`` callback: stop when a reported value stops improving.

After each evaluation (the run's last included) the value ``metric`` (``split.key``:
``val.loss``, ``val.accuracy``, ``val_ema.loss``) is compared with the best so far; after
``patience`` evaluations without an improvement larger than ``min_delta`` the run stops (its
final checkpoint written, its state saying it stopped, so ``--resume`` has nothing left to
train). ``restore_best`` puts the weights of the best evaluation back at the end, saying so in
one line (they are kept in memory and in each checkpoint); the final test figures are then
those weights', logged as such (``restored_step``). A resumed run watching another metric or
mode starts its best anew.

Example:
    >>> from nnx_plugins.training.callbacks._early_stopping import EarlyStopping
    >>> stop = EarlyStopping(metric="val.loss", patience=2)
    >>> [stop.after_eval(None, step, {"val": {"loss": loss}})
    ...  for step, loss in ((10, 1.0), (20, 0.8), (30, 0.9), (40, 0.85))]
    [False, False, False, True]
    >>> stop.state()
    {'metric': 'val.loss', 'mode': 'min', 'best': 0.8, 'best_step': 20, 'last': 0.85, 'wait': 2, 'stopped': True}
"""

from __future__ import annotations

import math
from typing import Any, Literal

import nnx_core

from ..checkpoints._best import improves
from ._base import Callback

__all__ = ["EarlyStopping", "read_value"]


def read_value(results: dict[str, dict[str, float]], metric: str) -> float:
    """The value ``split.key`` of an evaluation's results."""
    split, _, key = metric.partition(".")
    return float(results[split][key])


class EarlyStopping(Callback):
    """Stop after patience evaluations without an improvement of the watched value.

    See the module docstring.

    Args:
        metric: the reported value watched, ``split.key``.
        mode: ``min`` (a loss) or ``max`` (an accuracy): which way is better.
        patience: evaluations without an improvement before stopping.
        min_delta: how much better than the best a value must be to count.
        restore_best: put the best evaluation's weights back at the end.
    """

    def __init__(
        self,
        *,
        metric: str = "val.loss",
        mode: Literal["min", "max"] = "min",
        patience: int = 5,
        min_delta: float = 0.0,
        restore_best: bool = False,
    ):
        if "." not in metric:
            raise ValueError(
                f"metric names a reported value as split.key (e.g. val.loss), got {metric!r}."
            )
        if patience < 1:
            raise ValueError(f"patience must be at least 1, got {patience}.")
        if min_delta < 0:
            raise ValueError(f"min_delta must be >= 0, got {min_delta}.")
        self.metric, self.mode, self.patience = metric, mode, patience
        self.min_delta, self.restore_best = min_delta, restore_best
        self.best: float | None = None
        self.best_step: int | None = None
        self.last: float | None = None
        self.wait = 0
        self.stopped = False
        self.best_model: Any = None

    def watches(self) -> dict[str, str]:
        return {"metric": self.metric}

    def start(self, run: Any) -> None:
        if self.restore_best:
            self.best_model = nnx_core.clone(run.model)

    def after_eval(self, run: Any, step: int, results: dict[str, dict[str, float]]) -> bool:
        value = read_value(results, self.metric)
        self.last = value
        if improves(value, self.best, self.mode, self.min_delta):
            self.best, self.best_step, self.wait = value, step, 0
            if self.best_model is not None:
                nnx_core.update(self.best_model, nnx_core.state(run.model))
        else:
            self.wait += 1
        self.stopped = self.wait >= self.patience
        return self.stopped

    def end(self, run: Any) -> None:
        """With ``restore_best``, put the best evaluation's weights back (saying so) when they
        are not the last step's."""
        if self.best_model is None or self.best_step is None or not run.finished:
            return
        if self.best_step == run.step:
            return
        nnx_core.update(run.model, nnx_core.state(self.best_model))
        run.restored_step = self.best_step
        last = (
            f"; the last evaluation, at step {run.step}, gave {self.last:.6g}"
            if (self.last is not None)
            else ""
        )
        run.print(
            f"early_stopping: restored the weights of step {self.best_step}, the best by "
            f"{self.metric} ({self.best:.6g}, {self.mode}){last}."
        )

    def state(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "mode": self.mode,
            "best": self.best,
            "best_step": self.best_step,
            "last": self.last,
            "wait": self.wait,
            "stopped": self.stopped,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Take back a checkpoint's state; one saved while watching another metric or mode
        (or malformed) is not compared with: the best is chosen anew."""
        if (state.get("metric"), state.get("mode")) != (self.metric, self.mode):
            return
        best, step, wait = state.get("best"), state.get("best_step"), state.get("wait", 0)
        last = state.get("last")
        if not (_number(best) or best is None) or not (_count(step) or step is None):
            return
        self.best = None if best is None else float(best)
        self.best_step = step
        self.last = float(last) if _number(last) else None
        self.wait = wait if _count(wait) else 0
        self.stopped = state.get("stopped") is True

    def nodes(self) -> dict[str, Any]:
        return {"early_stopping_best": self.best_model} if self.best_model is not None else {}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

"""The ``ema`` callback: an exponential moving average of the trained weights.

After each step (one jitted update, no wait for the device) the averaged copy of the model
moves towards the trained one: ``ema = d * ema + (1 - d) * weights`` for the Variables the
optimizer trains, with ``d = min(decay, (1 + n) / (10 + n))`` after ``n`` steps (so early
averages are not dominated by the initial weights); the other state (BatchNorm statistics) is
copied. The average is evaluated beside the raw weights at each evaluation (split
``test_ema``) and saved in each checkpoint (entries ``ema/...``).

Example:
    >>> import nnx_plugins
    >>> from nnx_plugins.training.callbacks._ema import Ema
    >>> Ema(decay=0.99).decay
    0.99
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

import nnx_core

from ._base import Callback

__all__ = ["Ema"]


def _average(ema: Any, model: Any, decay: Any, wrt: Any) -> None:
    averaged, _ = nnx_core.state(ema, wrt, ...)
    weights, rest = nnx_core.state(model, wrt, ...)
    moved = jax.tree.map(
        lambda e, w: (decay * e + (1.0 - decay) * w).astype(e.dtype), averaged, weights
    )
    nnx_core.update(ema, moved, rest)


_UPDATE: dict[Any, Any] = {}


class Ema(Callback):
    """An exponential moving average of the trained weights, evaluated and checkpointed.

    See the module docstring.

    Args:
        decay: the largest weight of the old average in each update, in ``[0, 1)``.
    """

    def __init__(self, *, decay: float = 0.999):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}.")
        self.decay = decay
        self.model: Any = None
        self.wrt: Any = None

    def start(self, run: Any) -> None:
        self.model = nnx_core.clone(run.model)
        self.wrt = run.optimizer.wrt
        if self.wrt not in _UPDATE:  # (one compiled update per filter; it holds no model)
            _UPDATE[self.wrt] = nnx_core.jit(functools.partial(_average, wrt=self.wrt))

    def after_step(self, run: Any, step: int) -> None:
        decay = np.float32(min(self.decay, (1.0 + step) / (10.0 + step)))
        _UPDATE[self.wrt](self.model, run.model, decay)

    def nodes(self) -> dict[str, Any]:
        return {"ema": self.model}

    def evaluated(self) -> dict[str, Any]:
        return {"ema": self.model}

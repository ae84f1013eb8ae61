"""EMA: an exponential moving average of a model's Variables, as flax.nnx's ``nnx.EMA``."""

from __future__ import annotations

from typing import Any, TypeVar

import jax.numpy as jnp

from ._api import merge, split, state
from ._filters import Filter
from ._pytree import Pytree
from ._state import State, format_path
from ._state_functions import from_flat_state, merge_state, to_flat_state
from ._variables import Variable

A = TypeVar("A")


class EMA(Pytree):
    """A shadow copy of a model's Variables, moved towards the model's by :meth:`update`:
    ``ema = decay * ema + (1 - decay) * new``.

    Args:
        params: the model (or any graph, or a State) whose Variables are tracked.
        decay: the weight of the average at each update.
        only: a filter of the Variables to track (all by default).
        graph: accepted for flax.nnx's signature (one traversal serves both modes here).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.zeros(2))
        >>> model = M()
        >>> ema = nnx.EMA(model, decay=0.9)
        >>> smoothed = ema.apply_to(model)  # shares the average's Variables
        >>> model.w.value = jnp.ones(2)
        >>> ema.update(model)
        >>> smoothed.w.value.tolist(), smoothed.w is ema.params["w"]
        ([0.1..., 0.1...], True)

    Raises:
        TypeError: a tracked leaf is not a Variable (a raw array in the graph).
    """

    def __init__(self, params: Any, decay: float, *, only: Filter = ..., graph: bool | None = None):
        self.graph = graph
        self.decay = decay
        self.filter = only
        self.params: State = _copies(state(params, only))

    def update(self, updates: Any) -> None:
        """Move the average towards the Variables of ``updates`` (a graph or State of the same
        structure as the tracked one).

        Raises:
            ValueError: ``updates`` lacks a tracked path.
        """
        new = dict(to_flat_state(state(updates, self.filter)))
        decay = self.decay
        for path, ema in to_flat_state(self.params):
            if path not in new:
                raise ValueError(
                    f"EMA.update: the updates have no Variable at {format_path(path)!r}, which "
                    "the average tracks; pass the model (or State) the EMA was built from."
                )
            value = new[path]
            value = value.get_value() if isinstance(value, Variable) else value
            ema.set_value(decay * ema.get_value() + (1.0 - decay) * value)

    def apply_to(self, model: A) -> A:
        """A new model of ``model``'s structure whose tracked Variables are the average's
        (shared: later updates show in it); the other state is ``model``'s."""
        graphdef, current = split(model)
        return merge(graphdef, merge_state(current, self.params))  # type: ignore[no-any-return]


def _copies(tracked: State) -> State:
    pairs = []
    for path, x in to_flat_state(tracked):
        if not isinstance(x, Variable):
            raise TypeError(
                f"EMA tracks Variables only, got {type(x).__name__} at {format_path(path)!r}. "
                "Wrap the array in a Variable, or leave it out with only=."
            )
        pairs.append((path, x.replace(jnp.copy(x.get_value()))))
    return from_flat_state(pairs)


__all__ = ["EMA"]

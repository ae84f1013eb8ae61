"""The pluggy plugin of acme-layers: registers names computed at import time.

Its entry point is named ``acme``, its namespace: nnx imports this module only when a config
or a lookup needs an ``acme.*`` name that no static entry point provides. It adds the
activation ``acme.Swish`` and the callback ``acme.stop_below``.

Example:
    >>> import jax.numpy as jnp
    >>> from acme_layers.plugin import StopBelow, swish
    >>> swish(jnp.zeros(2))
    Array([0., 0.], dtype=float32)
    >>> StopBelow(value=0.5).after_eval(None, 10, {"val": {"loss": 0.4}})
    True
"""

from typing import Any

import jax

from nnx_plugins import Callback, hookimpl

__all__ = ["swish", "StopBelow", "nnx_register_layers", "nnx_register_run_parts"]


def swish(x: jax.Array) -> jax.Array:
    """``x * sigmoid(x)``: the acme spelling of SiLU."""
    return x * jax.nn.sigmoid(x)


@hookimpl
def nnx_register_layers(registry: Any) -> None:
    """Register ``acme.Swish``."""
    registry.add_layer("acme.Swish", swish)


class StopBelow(Callback):
    """Stop the run once the reported value ``metric`` (``split.key``) falls below ``value``."""

    def __init__(self, *, metric: str = "val.loss", value: float = 0.0):
        self.metric, self.value = metric, value

    def watches(self) -> dict[str, str]:
        return {"metric": self.metric}

    def after_eval(self, run: Any, step: int, results: dict[str, dict[str, float]]) -> bool:
        split, _, key = self.metric.partition(".")
        return results[split][key] < self.value


@hookimpl
def nnx_register_run_parts(registry: Any) -> None:
    """Register ``acme.stop_below``."""
    registry.add_callback("acme.stop_below", StopBelow)

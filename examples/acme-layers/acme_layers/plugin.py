"""The pluggy plugin of acme-layers: registers names computed at import time.

Its entry point is named ``acme``, its namespace: nnx imports this module only when a config
or a lookup needs an ``acme.*`` name that no static entry point provides.

Example:
    >>> import jax.numpy as jnp
    >>> from acme_layers.plugin import swish
    >>> swish(jnp.zeros(2))
    Array([0., 0.], dtype=float32)
"""

from typing import Any

import jax

from nnx_plugins import hookimpl

__all__ = ["swish", "nnx_register_layers"]


def swish(x: jax.Array) -> jax.Array:
    """``x * sigmoid(x)``: the acme spelling of SiLU."""
    return x * jax.nn.sigmoid(x)


@hookimpl
def nnx_register_layers(registry: Any) -> None:
    """Register ``acme.Swish``."""
    registry.add_layer("acme.Swish", swish)

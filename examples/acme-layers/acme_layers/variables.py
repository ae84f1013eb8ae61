"""The ``acme.LoRAParam`` Variable kind: low-rank adapter weights.

A subclass of `nnx_core.Param`, so ``Param`` filters match it too; ``"acme.LoRAParam"`` (or the
class) selects only the adapters.

Example:
    >>> import jax.numpy as jnp
    >>> import nnx_core
    >>> from acme_layers.variables import LoRAParam
    >>> isinstance(LoRAParam(jnp.zeros(2)), nnx_core.Param)
    True
"""

from nnx_core import Param

__all__ = ["LoRAParam"]


class LoRAParam(Param):
    """Low-rank adapter weights (trainable on their own while the base weights stay frozen)."""

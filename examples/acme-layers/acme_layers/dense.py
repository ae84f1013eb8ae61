"""The ``acme.GatedDense`` layer.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_core import Rngs
    >>> from acme_layers.dense import GatedDense
    >>> layer = GatedDense(4, 3, lora_rank=2, rngs=Rngs(0))
    >>> layer(jnp.ones((5, 4))).shape
    (5, 3)
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Rngs
from nnx_layers import Linear, initializers, sigmoid

from .variables import LoRAParam

__all__ = ["GatedDense"]

_LECUN_NORMAL = initializers.lecun_normal()


class GatedDense(Module):
    """``y = value(x) * gate_activation(gate(x))`` with an optional low-rank adapter.

    Args:
        in_features: size of the input's last axis.
        out_features: size of the output's last axis.
        use_bias: add biases in both projections.
        gate_activation: applied to the gate projection (any registered activation).
        kernel_init: initializer of both kernels.
        lora_rank: rank of the `LoRAParam` adapter added to the value path (0: none).
        rngs: random streams for the initializers.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        gate_activation: Callable[..., Any] = sigmoid,
        kernel_init: Callable[..., Any] = _LECUN_NORMAL,
        lora_rank: int = 0,
        rngs: Rngs,
    ):
        if lora_rank < 0:
            raise ValueError(f"GatedDense lora_rank must be >= 0, got {lora_rank}.")
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = use_bias
        self.gate_activation = gate_activation
        self.kernel_init = kernel_init
        self.lora_rank = lora_rank
        options = dict(use_bias=use_bias, kernel_init=kernel_init, rngs=rngs)
        self.value = Linear(in_features, out_features, **options)
        self.gate = Linear(in_features, out_features, **options)
        if lora_rank:
            a = jax.random.normal(rngs.params(), (in_features, lora_rank)) / lora_rank
            self.lora_a = LoRAParam(a)
            self.lora_b = LoRAParam(jnp.zeros((lora_rank, out_features)))

    def __call__(self, x: jax.Array) -> jax.Array:
        value = self.value(x)
        if self.lora_rank:
            value = value + x @ self.lora_a.value @ self.lora_b.value
        return value * self.gate_activation(self.gate(x))

"""`Dropout`: randomly zero entries in training mode, identity in eval mode."""

import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Rngs, RngStream

from ._constraints import Rate

__all__ = ["Dropout"]


def _check_rate(rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, Real) or not 0.0 <= float(rate) <= 1.0:
        raise ValueError(
            f"Dropout rate must be a number in [0, 1] (the probability of dropping an entry), "
            f"got {rate!r}. Pass e.g. Dropout(0.1)."
        )
    return float(rate)


class Dropout(Module):
    """Zero each entry with probability ``rate`` and scale the rest by ``1 / (1 - rate)``.

    The layer is the identity when ``deterministic`` is True (``model.eval()``) or ``rate``
    is 0, and returns exact zeros when ``rate`` is 1. Random keys come from the ``rngs``
    passed to the call, else from the layer's own stream.

    As in flax.nnx, the layer keeps its own `RngStream` ``rngs``, forked at construction from
    the ``rng_collection`` stream of the given `Rngs` (or from the given stream; an `Rngs`
    without that stream gives its ``default`` one). So two Dropouts built from one `Rngs`
    draw independent masks, a Dropout built under ``vmap`` with ``split_rngs`` holds one key
    per layer (and can be applied with ``scan``), and ``reseed(model, dropout=seed)``
    reproduces its first mask.

    Args:
        rate: probability of dropping an entry, in ``[0, 1]``.
        broadcast_dims: axes along which one mask value is shared (e.g. ``(1,)`` drops
            whole time steps' features together for ``(batch, time, features)``).
        deterministic: if True, the layer is the identity; ``None`` means it must be
            given to the call.
        rng_collection: name of the Rngs stream to draw keys from.
        rngs: an `Rngs` or `RngStream` the layer forks its own stream from (for training
            mode); ``None`` keeps none (the call must then get ``rngs``).

    Raises:
        ValueError: for a rate outside ``[0, 1]``; at call time, in training mode, when no
            rngs were given to the constructor or to the call, or when ``deterministic`` is
            ``None`` in both.
        TypeError: ``rngs`` (at construction or call) of another type.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Dropout
        >>> drop = Dropout(0.5, rngs=Rngs(dropout=0))
        >>> y = drop(jnp.ones((4, 8)))
        >>> sorted(set(y.ravel().tolist()))
        [0.0, 2.0]
        >>> Dropout(0.5, deterministic=True)(jnp.ones(3))
        Array([1., 1., 1.], dtype=float32)
        >>> Dropout(1.0, rngs=Rngs(0))(jnp.ones(3))
        Array([0., 0., 0.], dtype=float32)
    """

    def __init__(
        self,
        rate: Rate,
        *,
        broadcast_dims: Sequence[int] = (),
        deterministic: bool | None = False,
        rng_collection: str = "dropout",
        rngs: Rngs | RngStream | None = None,
    ):
        self.rate = _check_rate(rate)
        self.broadcast_dims = tuple(broadcast_dims)
        self.deterministic = deterministic
        self.rng_collection = rng_collection
        self.rngs: RngStream | None = None
        if isinstance(rngs, Rngs):
            self.rngs = rngs[rng_collection].fork()
        elif isinstance(rngs, RngStream):
            self.rngs = rngs.fork()
        elif rngs is not None:
            raise TypeError(
                f"Dropout rngs must be an Rngs, an RngStream or None, got "
                f"{type(rngs).__name__}. Pass e.g. rngs=Rngs(dropout=0)."
            )

    def __call__(
        self,
        inputs: jax.Array,
        *,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | jax.Array | None = None,
    ) -> jax.Array:
        """Apply dropout; ``deterministic``/``rngs`` override the layer's for this call.

        ``rngs`` may be an `Rngs` (its ``rng_collection`` stream), a stream, or a PRNG key.
        """
        if deterministic is None:
            deterministic = self.deterministic
        if deterministic is None:
            raise ValueError(
                "Dropout has deterministic=None and none was passed to the call. Pass "
                "deterministic=True/False to the call, or call model.train() / model.eval()."
            )
        inputs = jnp.asarray(inputs)
        if deterministic or self.rate == 0.0:
            return inputs
        if self.rate == 1.0:
            return jnp.zeros_like(inputs)
        key = self._key(rngs)
        keep = 1.0 - self.rate
        mask_shape = list(inputs.shape)
        for axis in self.broadcast_dims:
            mask_shape[axis] = 1
        # Drawn flat and reshaped: the same values as drawing with the shape (JAX numbers
        # the entries row-major), but much faster to compile for high-rank shapes.
        mask = jax.random.bernoulli(key, p=keep, shape=(math.prod(mask_shape),))
        mask = jnp.broadcast_to(mask.reshape(mask_shape), inputs.shape)
        spec = jax.typeof(inputs).sharding.spec
        if any(entry is not None for entry in spec):  # laid out over Explicit mesh axes
            mask = jax.sharding.reshard(mask, spec)
        return jax.lax.select(mask, inputs / keep, jnp.zeros_like(inputs))

    def _key(self, rngs: Any) -> jax.Array:
        rngs = self.rngs if rngs is None else rngs
        if rngs is None:
            raise ValueError(
                "`deterministic` is False, but no `rngs` argument was provided to Dropout "
                "(training mode, and the layer keeps no stream). Build it with Dropout(rate, "
                "rngs=Rngs(dropout=0)), pass rngs= to the call, or call model.eval() for "
                "inference."
            )
        if isinstance(rngs, Rngs):
            return rngs[self.rng_collection]()
        if isinstance(rngs, RngStream):
            return rngs()
        if isinstance(rngs, jax.Array):
            return rngs
        raise TypeError(
            f"Dropout call rngs must be an Rngs, an RngStream or a PRNG key, got "
            f"{type(rngs).__name__}. Pass e.g. rngs=Rngs(dropout=0)."
        )

    def set_view(self, deterministic: bool | None = None) -> None:
        """Set ``deterministic`` (for ``nnx.view``; None leaves it).

        Example:
            >>> from nnx_layers import Dropout
            >>> drop = Dropout(0.5)
            >>> drop.set_view(deterministic=True)
            >>> drop.deterministic
            True
        """
        if deterministic is not None:
            self.deterministic = deterministic

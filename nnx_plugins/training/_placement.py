"""Placing values on devices from every process: each process transfers only the blocks of its
own devices (`jax.device_put` cannot reach other processes' devices). Used by the mesh of a run
and by checkpoints.

Example:
    >>> import jax, numpy as np
    >>> from nnx_plugins.training._placement import is_key, place
    >>> is_key(jax.random.key(0)), is_key(np.zeros(2))
    (True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["is_key", "global_array", "place"]


def is_key(value: Any) -> bool:
    """Whether ``value`` is an array (or an abstract one) of typed PRNG keys."""
    return isinstance(value, (jax.Array, jax.ShapeDtypeStruct)) and jnp.issubdtype(
        value.dtype, jax.dtypes.prng_key
    )


def global_array(shape: Sequence[int], sharding: Any, read: Callable[[Any], Any]) -> Any:
    """One array over ``sharding`` whose block at ``index`` (a tuple of slices) is ``read(index)``.

    With several processes each one calls it and reads only the blocks of its own devices.

    Example:
        >>> import jax, numpy as np
        >>> from jax.sharding import NamedSharding, PartitionSpec
        >>> from nnx_plugins.training._mesh import make_mesh
        >>> from nnx_plugins.training._placement import global_array
        >>> host = np.arange(6.0).reshape(2, 3)
        >>> array = global_array(host.shape, NamedSharding(make_mesh({"data": 1}), PartitionSpec()),
        ...                      lambda index: host[index])
        >>> array.shape, float(array.sum())
        ((2, 3), 15.0)
    """
    return jax.make_array_from_callback(tuple(shape), sharding, read)


def place(value: Any, sharding: Any) -> Any:
    """``value`` (a host or one-device array, the same in every process) placed over ``sharding``.

    Typed PRNG keys are placed as their key data and wrapped again.
    """
    if is_key(value):
        data = np.asarray(jax.random.key_data(value))
        placed = global_array(data.shape, sharding, lambda index: data[index])
        return jax.random.wrap_key_data(placed, impl=jax.random.key_impl(value))
    host = np.asarray(value)
    return global_array(host.shape, sharding, lambda index: host[index])

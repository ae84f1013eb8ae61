"""The key of a run's seed: ``train.seed`` and ``nnx generate --seed`` take 0 .. 2**63-1, where a
bare ``jax.random.key`` keeps only the low 32 bits (seeds 2**32 apart would draw alike)."""

from __future__ import annotations

import jax

__all__ = ["MAX_SEED", "seed_key"]

#: the largest seed: the range of ``train.seed`` (JAX's key takes 32 bits at a time)
MAX_SEED = 2**63 - 1


def seed_key(seed: int) -> jax.Array:
    """The key of ``seed`` (0 .. `MAX_SEED`): ``jax.random.key(seed)`` for seeds below 2**32,
    the high 32 bits folded in above (a bare key would keep only the low 32 bits, so seeds
    2**32 apart would draw the same tokens).

    Example:
        >>> import jax
        >>> from nnx_plugins.training._seed import seed_key
        >>> bool((jax.random.key_data(seed_key(5)) == jax.random.key_data(jax.random.key(5))).all())
        True
        >>> bool((jax.random.key_data(seed_key(2**32)) == jax.random.key_data(seed_key(0))).all())
        False
    """
    key = jax.random.key(seed & 0xFFFFFFFF)
    return jax.random.fold_in(key, seed >> 32) if seed >> 32 else key

"""Rngs: named streams of PRNG keys whose counters are state."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ._module import Module
from ._variables import Variable


class RngKey(Variable, kind="RngKey"):
    """The base key of an Rng stream."""


class RngCount(Variable, kind="RngCount"):
    """How many keys an Rng stream has handed out (advances through transforms)."""


def _as_key(seed: Any, name: str) -> Any:
    if isinstance(seed, (int, jnp.integer)) and not isinstance(seed, bool):
        return jax.random.key(int(seed))
    if isinstance(seed, jax.Array):
        if jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
            return seed
        if seed.dtype == jnp.uint32 and seed.shape[-1:] == (2,):
            return jax.random.wrap_key_data(seed)
        if seed.shape == () and jnp.issubdtype(seed.dtype, jnp.integer):
            return jax.random.key(seed)
    shown = f"{type(seed).__name__}"
    if hasattr(seed, "dtype") and hasattr(seed, "shape"):
        shown += f" {seed.dtype}{list(seed.shape)}"
    raise TypeError(
        f"Rng stream {name!r} needs an int seed or a PRNG key, got {shown}. "
        f"Use e.g. Rngs({name}=0)."
    )


class RngStream(Module):
    """One named stream: each call returns a new key ``fold_in(key, count)`` and counts up.

    Example:
        >>> import jax
        >>> from nnx_core import RngStream
        >>> s = RngStream(0, tag="params")
        >>> bool((jax.random.key_data(s()) != jax.random.key_data(s())).any()), int(s.count.value)
        (True, 2)
    """

    def __init__(self, seed: Any, *, tag: str):
        self.key = RngKey(_as_key(seed, tag), tag=tag)
        self.count = RngCount(jnp.zeros((), jnp.uint32), tag=tag)
        self.tag = tag

    def __call__(self) -> jax.Array:
        key = jax.random.fold_in(self.key.value, self.count.value)
        self.count.value = self.count.value + 1
        return key

    def split(self, num: int | tuple[int, ...]) -> jax.Array:
        """``num`` independent keys from one draw of the stream."""
        return jax.random.split(self(), num)


class Rngs(Module):
    """Named Rng streams: ``Rngs(0)``, ``Rngs(params=0, dropout=1)``.

    ``rngs.params()`` / ``rngs["params"]()`` return a fresh key; a stream that does not exist
    falls back to the ``default`` stream (the positional seed). The counters are Variables
    (kind ``RngCount``), so they advance correctly through ``jit`` and are split per example in
    ``vmap``.

    Example:
        >>> import nnx_core as nnx
        >>> rngs = nnx.Rngs(0, dropout=1)
        >>> rngs.params().shape, rngs["dropout"]().shape, "dropout" in rngs
        ((), (), True)
        >>> int(rngs.default.count.value)
        1

    Raises:
        TypeError: no seed, the default seed given twice, or a seed that is not an int or key.
        AttributeError: a stream is missing and there is no ``default`` stream.
    """

    def __init__(self, default: Any = None, /, **streams: Any):
        if default is not None:
            if "default" in streams:
                raise TypeError(
                    "Rngs got the default seed twice (positionally and as default=); pass one."
                )
            streams = {"default": default, **streams}
        if not streams:
            raise TypeError("Rngs needs at least one seed, e.g. Rngs(0) or Rngs(params=0).")
        for name, seed in streams.items():
            setattr(self, name, RngStream(seed, tag=name))

    def __getattr__(self, name: str) -> RngStream:
        d = self.__dict__
        if name.startswith("__"):
            raise AttributeError(name)
        default = d.get("default")
        if isinstance(default, RngStream):
            return default
        streams = sorted(k for k, v in d.items() if isinstance(v, RngStream))
        raise AttributeError(
            f"Rngs has no stream {name!r} and no default stream (streams: {streams}). "
            f"Create it with Rngs({name}=seed, ...) or give a default seed: Rngs(0, ...)."
        )

    def __getitem__(self, name: str) -> RngStream:
        stream = vars(self).get(name)
        return stream if isinstance(stream, RngStream) else self.__getattr__(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(vars(self).get(name), RngStream)  # type: ignore[arg-type,call-overload]

    def __call__(self) -> jax.Array:
        return self.default()

    def streams(self) -> dict[str, RngStream]:
        """The streams by name."""
        return {k: v for k, v in vars(self).items() if isinstance(v, RngStream)}

"""`PositionEmbed`: a learned embedding per position, added to a sequence; decodes from a cache."""

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Cache, Module, Rngs

from . import initializers
from ._axis_names import EMBED, named_param
from ._checks import (
    Dtype,
    as_input,
    check_param_dtype,
    check_positive_int,
    check_sequence_shape,
    metadata,
    promote_dtype,
)
from ._constraints import Size
from .initializers import Initializer

__all__ = ["PositionEmbed"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_INIT = initializers.normal(0.02)
_NAME = "PositionEmbed"


class PositionEmbed(Module):
    """Add a learned vector per position to a sequence: ``inputs + embedding[:length]``.

    The ``embedding`` Param has one row per position, ``(max_length, features)``; a sequence
    ``(batch..., length, features)`` gets row ``t`` added at position ``t``. It is the position
    half of a GPT's input (the token half is `Embed`) and can sit in a `Sequential` right after
    the `Embed`, so a config can describe it.

    For autoregressive decoding, ``init_cache(shape)`` starts a sequence (a `Cache` Variable
    ``cache_index`` at 0) and each ``decode=True`` call continues it: its ``length`` positions
    are numbered from ``cache_index`` on, which then advances by ``length``. So the calls of a
    decoding loop, together, add exactly what one call on the whole sequence adds. flax.nnx has
    no such layer; this one follows `Embed` and `MultiHeadAttention`'s conventions.

    Args:
        max_length: the number of positions, i.e. the longest sequence the layer takes.
        features: width of the input and of each position's vector.
        dtype: computation dtype; ``None`` promotes the input and ``embedding`` together.
        param_dtype: dtype of ``embedding``.
        embedding_init: initializer of ``embedding``; ``normal(0.02)`` by default (GPT-2's).
        decode: whether calls continue the sequence in the cache (see above); a call's
            ``decode`` overrides it.
        rngs: random streams; ``rngs.params()`` initializes ``embedding``.
        embedding_metadata: metadata for the ``embedding`` Param.

    Raises:
        ValueError: ``max_length`` or ``features`` not a positive integer, a ``param_dtype``
            that is not floating (the table is trained); call-time errors are listed on
            ``__call__``.
        TypeError: ``decode`` that is not a bool.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import PositionEmbed
        >>> layer = PositionEmbed(16, 4, rngs=Rngs(0))
        >>> layer.embedding.value.shape
        (16, 4)
        >>> x = jnp.zeros((2, 5, 4))
        >>> y = layer(x)
        >>> y.shape, bool(jnp.array_equal(y[1], layer.embedding.value[:5]))
        ((2, 5, 4), True)
        >>> layer.init_cache(x.shape)
        >>> steps = [layer(x[:, t : t + 1], decode=True) for t in range(5)]
        >>> bool(jnp.array_equal(jnp.concatenate(steps, axis=1), y)), int(layer.cache_index.value)
        (True, 5)
    """

    def __init__(
        self,
        max_length: Size,
        features: Size,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        embedding_init: Initializer = _DEFAULT_INIT,
        decode: bool = False,
        rngs: Rngs,
        embedding_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.max_length = check_positive_int(_NAME, "max_length", max_length)
        self.features = check_positive_int(_NAME, "features", features)
        if not isinstance(decode, bool):
            raise TypeError(
                f"{_NAME} decode must be True or False, got {decode!r}. Pass decode=False "
                f"to train, decode=True to continue a sequence from the cache."
            )
        self.dtype = dtype
        self.param_dtype = check_param_dtype(_NAME, "param_dtype", param_dtype)
        self.embedding_init = embedding_init
        self.decode = decode
        self.embedding_metadata = metadata(embedding_metadata)
        value = embedding_init(rngs.params(), (self.max_length, self.features), param_dtype)
        self.embedding = named_param(value, self.embedding_metadata, (None, EMBED))
        self.cache_index: Cache | None = None

    def __call__(self, inputs: jax.Array, *, decode: bool | None = None) -> jax.Array:
        """Add the position vectors to ``inputs`` ``(batch..., length, features)``.

        Args:
            inputs: the sequence, floating point.
            decode: overrides the layer's ``decode`` for this call.

        Returns:
            ``inputs`` plus the vectors of its positions, same shape.

        Raises:
            TypeError: an integer input (token ids go through `Embed` first).
            ValueError: an input that is not ``(batch..., length, features)``; a sequence
                longer than ``max_length``; decoding without ``init_cache`` or past
                ``max_length`` (under ``jit`` such a step returns NaN instead).
        """
        x = as_input(_NAME, inputs)
        if not jnp.issubdtype(x.dtype, jnp.inexact):
            raise TypeError(
                f"{_NAME} expects a floating-point input, got dtype {x.dtype} with shape "
                f"{x.shape}. Token ids go through Embed first: Embed(vocab, features) then "
                f"{_NAME}."
            )
        if x.ndim < 2 or x.shape[-1] != self.features:
            raise ValueError(
                f"{_NAME} expects inputs of shape (batch..., length, {self.features}) "
                f"(features), got shape {x.shape}. Reshape the input or build the layer with "
                f"features={x.shape[-1] if x.ndim else '...'}."
            )
        length = x.shape[-2]
        decode = self.decode if decode is None else decode
        if decode:
            table = self._decode_rows(length)
        elif length > self.max_length:
            raise ValueError(
                f"{_NAME} holds {self.max_length} positions (max_length) but got a sequence "
                f"of length {length} (shape {x.shape}). Feed at most {self.max_length} "
                f"positions, or build the layer with max_length={length}."
            )
        else:
            table = self.embedding.value[:length]
        x, table = promote_dtype((x, table), dtype=self.dtype)
        return x + table

    def _decode_rows(self, length: int) -> jax.Array:
        """The rows of the next ``length`` positions; advances ``cache_index``."""
        if self.cache_index is None:
            raise ValueError(
                f"{_NAME} is decoding (decode=True) but its cache is not initialized. Call "
                f"layer.init_cache((batch, max_length, features)) before the first step."
            )
        index = self.cache_index.value
        rows = jax.lax.dynamic_slice(self.embedding.value, (index, 0), (length, self.features))
        end = index + length
        if isinstance(end, jax.core.Tracer):  # a host check per step would cost a round trip
            rows = jnp.where(end > self.max_length, jnp.nan, rows)
        elif int(end) > self.max_length:
            raise ValueError(
                f"{_NAME} decode step at position {int(index)} with {length} position(s) runs "
                f"past max_length ({self.max_length}). Start a new sequence with init_cache, "
                f"or build the layer with a larger max_length."
            )
        self.cache_index.value = end
        return rows

    def init_cache(self, input_shape: Sequence[int], dtype: Dtype = jnp.float32) -> None:
        """Start a sequence for decoding: ``cache_index`` becomes a zero `Cache`.

        Takes the arguments of `MultiHeadAttention.init_cache`, so one loop can start every
        decoding layer of a model.

        Args:
            input_shape: the shape of a whole sequence, ``(batch..., length, features)``;
                ``length`` may not exceed ``max_length``.
            dtype: unused (the index is int32); accepted as `MultiHeadAttention` takes it.

        Raises:
            ValueError: a shape that is not ``(batch..., length, features)`` with positive
                sizes, or a ``length`` past ``max_length``.

        Example:
            >>> import jax.numpy as jnp
            >>> from nnx_core import Rngs
            >>> from nnx_layers import PositionEmbed
            >>> layer = PositionEmbed(8, 2, decode=True, rngs=Rngs(0))
            >>> layer.init_cache((1, 8, 2))
            >>> y = layer(jnp.zeros((1, 3, 2)))  # three positions at once, then one
            >>> y = layer(jnp.zeros((1, 1, 2)))
            >>> int(layer.cache_index.value)
            4
        """
        del dtype
        example = f"(1, {self.max_length}, {self.features})"
        shape = check_sequence_shape(_NAME, input_shape, example)
        if shape[-2] > self.max_length:
            raise ValueError(
                f"{_NAME}.init_cache: a sequence of {shape[-2]} positions is longer than "
                f"max_length ({self.max_length}). Decode at most {self.max_length} positions, "
                f"or build the layer with max_length={shape[-2]}."
            )
        self.cache_index = Cache(jnp.array(0, dtype=jnp.int32))

"""Rotary position embeddings: `RoPE` and `dot_product_attention_with_rope`.

A vector at position ``p`` is rotated pair by pair: feature ``j`` and feature ``j + d/2`` (the
two halves of the last axis, as GPT-NeoX, Llama, Mistral and Qwen do) turn by the angle
``p * inv_freq[j]`` with ``inv_freq[j] = theta ** (-2j / d)``. Queries and keys rotated this
way make attention depend on the distance between positions only. ``scaling="llama3"``
rescales the frequencies as Llama 3.1 does (low frequencies divided by ``factor``, high ones
kept, the band between interpolated), from the fields of a transformers ``rope_scaling`` /
``rope_parameters`` entry.
"""

import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from nnx_core import Module

from ._checks import check_positive_int
from ._constraints import MAX_SIZE, Positive, Size
from ._dot_product_attention import dot_product_attention

__all__ = ["RoPE", "dot_product_attention_with_rope", "rope_frequencies"]

_NAME = "RoPE"
Scaling = Literal["default", "llama3"]

_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: the ``theta`` a RoPE takes: the frequencies run from 1 down to ``1 / theta`` and their
#: wavelengths up to ``2π·theta``, so past the upper end a wavelength is infinite in float32 (a
#: frequency 0), and below the lower end ``position · (1 / theta)`` overflows float32 for an
#: int32 position (its cosine is NaN)
THETA_RANGE = (MAX_SIZE / _FLOAT32_MAX, _FLOAT32_MAX / (2 * math.pi))


def _check_number(name: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{_NAME} {name} must be a finite number, got {value!r}.")
    if positive and value <= 0:
        raise ValueError(f"{_NAME} {name} must be > 0, got {value!r}.")
    return float(value)


def rope_frequencies(
    embedding_size: int,
    *,
    theta: float = 10000.0,
    scaling: Scaling = "default",
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position_embeddings: int = 8192,
) -> np.ndarray:
    """The ``embedding_size // 2`` rotation frequencies, float32, computed as transformers does.

    Args:
        embedding_size: the rotated width (a head's dimension); even.
        theta: the base wavelength.
        scaling: ``"default"`` or ``"llama3"`` (the remaining arguments apply to it).
        factor: the low frequencies are divided by it.
        low_freq_factor: wavelengths above ``original / low_freq_factor`` are scaled.
        high_freq_factor: wavelengths below ``original / high_freq_factor`` are kept.
        original_max_position_embeddings: the context length of pretraining.

    Example:
        >>> from nnx_layers import rope_frequencies
        >>> rope_frequencies(4, theta=100.0).tolist()
        [1.0, 0.10000000149011612]

    Raises:
        ValueError: settings whose frequencies are not finite and positive in float32, e.g.
            ``theta=1e308`` (every frequency but the first is 0).
    """
    settings = {"theta": theta, "scaling": scaling}
    if scaling != "default":
        settings.update(
            factor=factor,
            low_freq_factor=low_freq_factor,
            high_freq_factor=high_freq_factor,
            original_max_position_embeddings=original_max_position_embeddings,
        )
    # (llama3 computes every lane three ways and keeps one: a lane it drops may overflow)
    with np.errstate(all="ignore"):
        inv_freq = _frequencies(embedding_size, **settings)  # type: ignore[arg-type]
    if not (np.isfinite(inv_freq) & (inv_freq > 0)).all():
        given = ", ".join(f"{k}={v!r}" for k, v in settings.items())
        raise ValueError(
            f"{_NAME} frequencies of {given} leave float32 (they come out as "
            f"{sorted({str(f) for f in inv_freq if not np.isfinite(f) or f <= 0})}, where "
            f"each must be finite and > 0). Use settings of the usual magnitudes: theta 1e4 "
            f"to 1e7, factors about 1 to 64."
        )
    return inv_freq


def _frequencies(
    embedding_size: int,
    *,
    theta: float,
    scaling: Scaling,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position_embeddings: int = 8192,
) -> np.ndarray:
    half = np.arange(0, embedding_size, 2, dtype=np.int64).astype(np.float32) / embedding_size
    inv_freq = (1.0 / (np.float32(theta) ** half)).astype(np.float32)
    if scaling == "default":
        return inv_freq
    low_wavelen = original_max_position_embeddings / low_freq_factor
    high_wavelen = original_max_position_embeddings / high_freq_factor
    wavelen = (2 * math.pi / inv_freq).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(factor), inv_freq)
    smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _rotate_half(x: jax.Array) -> jax.Array:
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


class RoPE(Module):
    """Rotary position embeddings: rotate the last axis of queries and keys by position.

    flax.nnx's ``RoPE`` (flax 0.12.10) under the same name and arguments, plus the Llama 3
    frequency scaling. The rotation tables are computed in the call from the static settings
    (flax stores them as Variables when ``embedding_size`` and ``max_seq_len`` are given): a
    RoPE has no state, so nothing of it is saved, checkpointed or sharded.

    Args:
        theta: the base wavelength (transformers' ``rope_theta``), between ``6.3e-30`` and
            ``5.4e37`` (where the frequencies, their wavelengths and the angles of int32
            positions are finite in float32).
        embedding_size: the rotated width; when given, a call on another width is refused.
        max_seq_len: the number of positions; when given, a longer sequence is refused, in
            every call that rotates (``__call__``, ``rotate``, `SelfAttention`,
            `dot_product_attention_with_rope`), while tracing: it costs nothing at run time.
        scaling: ``"default"`` (plain RoPE) or ``"llama3"`` (transformers' ``rope_type``).
        factor: Llama 3 scaling: the low frequencies are divided by it.
        low_freq_factor: Llama 3 scaling, as transformers names it.
        high_freq_factor: Llama 3 scaling, as transformers names it.
        original_max_position_embeddings: Llama 3 scaling: the pretraining context length.

    Raises:
        ValueError: a ``theta`` outside ``[6.3e-30, 5.4e37]``, a non-positive size or factor,
            ``high_freq_factor`` not above ``low_freq_factor``, an unknown ``scaling``; at call
            time an odd width, a width other than ``embedding_size``, a sequence longer than
            ``max_seq_len``, positions that do not fit the input, factors whose frequencies
            overflow float32.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import RoPE
        >>> rope = RoPE(theta=10000.0)
        >>> x = jnp.ones((2, 5, 8))  # (batch, length, features)
        >>> y = rope(x)
        >>> y.shape, bool(jnp.allclose(y[:, 0], x[:, 0]))  # position 0 is not rotated
        ((2, 5, 8), True)
        >>> bool(jnp.allclose(jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(x, axis=-1)))
        True
    """

    def __init__(
        self,
        theta: Positive = 10000.0,
        embedding_size: Size | None = None,
        max_seq_len: Size | None = None,
        *,
        scaling: Scaling = "default",
        factor: Positive = 8.0,
        low_freq_factor: Positive = 1.0,
        high_freq_factor: Positive = 4.0,
        original_max_position_embeddings: Size = 8192,
    ):
        self.theta = _check_number("theta", theta)
        low, high = THETA_RANGE
        if not low <= self.theta <= high:
            raise ValueError(
                f"{_NAME} theta must be between {low:.2g} and {high:.2g} (the frequencies run "
                f"from 1 down to 1/theta and their wavelengths up to 2*pi*theta, which must stay "
                f"finite in float32, as must the angle of every int32 position), got {theta!r}. "
                f"Usual values are 1e4 to 1e7 (transformers' rope_theta)."
            )
        self.embedding_size = (
            None
            if embedding_size is None
            else _even(check_positive_int(_NAME, "embedding_size", embedding_size))
        )
        self.max_seq_len = (
            None if max_seq_len is None else check_positive_int(_NAME, "max_seq_len", max_seq_len)
        )
        if scaling not in ("default", "llama3"):
            raise ValueError(
                f"{_NAME} scaling must be 'default' or 'llama3', got {scaling!r}. Other "
                f"frequency scalings (linear, dynamic, yarn, longrope) are not implemented."
            )
        self.scaling = scaling
        self.factor = _check_number("factor", factor)
        self.low_freq_factor = _check_number("low_freq_factor", low_freq_factor)
        self.high_freq_factor = _check_number("high_freq_factor", high_freq_factor)
        if scaling == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                f"{_NAME} high_freq_factor ({high_freq_factor}) must be above low_freq_factor "
                f"({low_freq_factor}) for the llama3 scaling."
            )
        self.original_max_position_embeddings = check_positive_int(
            _NAME, "original_max_position_embeddings", original_max_position_embeddings
        )

    def frequencies(self, embedding_size: int) -> np.ndarray:
        """The ``embedding_size // 2`` frequencies of this RoPE (see `rope_frequencies`)."""
        return rope_frequencies(
            embedding_size,
            theta=self.theta,
            scaling=self.scaling,
            factor=self.factor,
            low_freq_factor=self.low_freq_factor,
            high_freq_factor=self.high_freq_factor,
            original_max_position_embeddings=self.original_max_position_embeddings,
        )

    def __call__(self, x: jax.Array, input_positions: jax.Array | None = None) -> jax.Array:
        """Rotate ``x`` of shape ``(..., seq_length, embedding_size)``.

        Args:
            x: the vectors to rotate.
            input_positions: their positions, ``(..., seq_length)`` broadcastable to
                ``x.shape[:-1]``; ``arange(seq_length)`` when None.

        Returns:
            ``x`` rotated, same shape and dtype.
        """
        x = jnp.asarray(x)
        if x.ndim < 2:
            raise ValueError(
                f"{_NAME} expects x of shape (..., seq_length, embedding_size), got shape "
                f"{x.shape}."
            )
        positions = self._positions(x.shape[-2], input_positions)
        try:
            positions = jnp.broadcast_to(positions, x.shape[:-1])
        except ValueError:
            raise ValueError(
                f"{_NAME} input_positions of shape {positions.shape} do not fit x of shape "
                f"{x.shape}: they must broadcast to x.shape[:-1] = {x.shape[:-1]}."
            ) from None
        return self.rotate(x, positions, heads=False)

    def rotate(self, x: jax.Array, positions: jax.Array, *, heads: bool = True) -> jax.Array:
        """Rotate ``x`` at ``positions``; with ``heads``, ``x`` is ``(..., seq, heads, dim)``
        and ``positions`` ``(..., seq)`` (every head of a position turns alike), else
        ``positions`` has ``x.shape[:-1]``. Angles in float32, the result in ``x``'s dtype.

        Raises:
            ValueError: an ``x`` without a sequence axis, a ``seq`` longer than
                ``max_seq_len``, an odd width or one other than ``embedding_size``.

        Example:
            >>> import jax.numpy as jnp
            >>> from nnx_layers import RoPE
            >>> q = jnp.ones((1, 3, 2, 4))  # (batch, length, heads, head_dim)
            >>> RoPE().rotate(q, jnp.array([[0, 1, 2]])).shape
            (1, 3, 2, 4)
        """
        axis = -3 if heads else -2
        if x.ndim < -axis:
            layout = "(..., seq_length, heads, head_dim)" if heads else "(..., seq_length, width)"
            raise ValueError(
                f"{_NAME}.rotate with heads={heads} expects x of shape {layout}, got shape "
                f"{x.shape}."
            )
        self._check_length(x.shape[axis])
        width = x.shape[-1]
        self._check_width(width)
        inv_freq = jnp.asarray(self.frequencies(width))
        angles = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq
        angles = jnp.concatenate([angles, angles], axis=-1)
        cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
        if heads:
            cos, sin = cos[..., None, :], sin[..., None, :]
        return x * cos + _rotate_half(x) * sin

    def _check_length(self, length: int) -> None:
        """Refuse a sequence longer than ``max_seq_len`` (a static shape: checked while
        tracing, so it costs nothing at run time)."""
        if self.max_seq_len is not None and length > self.max_seq_len:
            raise ValueError(
                f"{_NAME} holds {self.max_seq_len} positions (max_seq_len) but got a sequence "
                f"of length {length}. Build it with max_seq_len={length} or without one."
            )

    def _positions(self, length: int, given: Any) -> jax.Array:
        if given is None:
            return jnp.arange(length, dtype=jnp.int32)
        positions = jnp.asarray(given)
        if positions.ndim == 0 or positions.shape[-1] != length:
            raise ValueError(
                f"{_NAME} input_positions must have the same seq_length as x ({length}), got "
                f"shape {positions.shape}."
            )
        return positions

    def _check_width(self, width: int) -> None:
        if width % 2:
            raise ValueError(
                f"{_NAME} rotates pairs of features, so the last axis must be even, got {width}."
            )
        if self.embedding_size is not None and width != self.embedding_size:
            raise ValueError(
                f"{_NAME} was built for embedding_size={self.embedding_size}, got vectors of "
                f"width {width}."
            )


def _even(value: int) -> int:
    if value % 2:
        raise ValueError(f"{_NAME} embedding_size must be even, got {value}.")
    return value


def dot_product_attention_with_rope(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    *,
    rope: RoPE,
    input_positions: jax.Array | None = None,
    **kwargs: Any,
) -> jax.Array:
    """`dot_product_attention` with ``rope`` applied to the queries and keys first.

    flax.nnx's function of the same name and signature: usable as a `MultiHeadAttention`'s
    ``attention_fn`` through ``functools.partial(dot_product_attention_with_rope, rope=rope)``.

    Args:
        query: ``(batch..., q_length, heads, head_dim)``.
        key: ``(batch..., kv_length, kv_heads, head_dim)``.
        value: ``(batch..., kv_length, kv_heads, v_dim)``.
        rope: the `RoPE` to apply.
        input_positions: ``(batch..., length)`` positions of the queries and keys (same
            length); ``arange`` of each one's own length when None.
        **kwargs: passed on to `dot_product_attention` (``mask``, ``is_causal``, ...).

    Returns:
        ``(batch..., q_length, heads, v_dim)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import RoPE, dot_product_attention_with_rope
        >>> q = k = v = jnp.ones((2, 5, 4, 8))
        >>> dot_product_attention_with_rope(q, k, v, rope=RoPE(), is_causal=True).shape
        (2, 5, 4, 8)
    """
    q_pos = rope._positions(query.shape[-3], input_positions)
    k_pos = rope._positions(key.shape[-3], input_positions)
    query = rope.rotate(query, jnp.broadcast_to(q_pos, query.shape[:-2]))
    key = rope.rotate(key, jnp.broadcast_to(k_pos, key.shape[:-2]))
    return dot_product_attention(query, key, value, **kwargs)

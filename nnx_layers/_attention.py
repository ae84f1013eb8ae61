"""`MultiHeadAttention`: projections to heads, dot-product attention, a decoding cache."""

from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Cache, Module, Rngs, RngStream

from . import initializers
from ._axis_names import EMBED, HEAD_DIM, HEADS, KV_HEADS, with_default_names
from ._checks import (
    Dtype,
    PromoteDtypeFn,
    as_input,
    check_positive_int,
    check_sequence_shape,
    metadata,
    promote_dtype,
)
from ._constraints import Rate, Size
from ._dot_product_attention import dot_product_attention
from ._linear_general import LinearGeneral
from ._normalization import LayerNorm
from .initializers import Initializer

__all__ = ["MultiHeadAttention"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_KERNEL_INIT = initializers.lecun_normal()
_NAME = "MultiHeadAttention"


def _optional_size(name: str, value: Any, default: int) -> int:
    return default if value is None else check_positive_int(_NAME, name, value)


def _check_rate(rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, Real) or not 0.0 <= float(rate) <= 1.0:
        raise ValueError(
            f"{_NAME} dropout_rate must be a number in [0, 1], got {rate!r}. Pass e.g. "
            f"dropout_rate=0.1."
        )
    return float(rate)


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{_NAME} {name} must be True or False, got {value!r}. Pass e.g. {name}=True."
        )
    return value


def _check_features(arg: str, x: jax.Array, expected: int, setting: str) -> None:
    if x.ndim < 2 or x.shape[-1] != expected:
        raise ValueError(
            f"{_NAME} expects {arg} of shape (batch..., length, {expected}) ({setting}), got "
            f"shape {x.shape}. Reshape the input or build the layer with {setting}="
            f"{x.shape[-1] if x.ndim else '...'}."
        )


def _past_the_end(index: jax.Array, max_length: int) -> jax.Array | None:
    """Raise if a decoding step would write past the cache's end; under a trace, return the flag.

    A compiled step cannot raise without a host round trip per step (measured at several
    times the cost of the step itself), so under ``jit`` the caller poisons the step's output
    with NaN instead of silently overwriting the last cached position.
    """
    if isinstance(index, jax.core.Tracer):
        return index >= max_length
    if int(index) >= max_length:
        raise ValueError(
            f"{_NAME} decode step {int(index)} is past the end of the cache (length "
            f"{max_length}, set by init_cache). Call init_cache with a longer input shape, or "
            f"start a new sequence with init_cache."
        )
    return None


class MultiHeadAttention(Module):
    """Multi-head attention (self- or cross-), with masks, dropout and a decoding cache.

    The inputs are projected by `LinearGeneral` layers ``query``, ``key``, ``value`` to
    ``num_heads`` (``num_kv_heads`` for keys/values) heads of ``qkv_features // num_heads``
    features, combined by ``attention_fn`` (`dot_product_attention`) and projected back by
    ``out``. With ``normalize_qk`` the query and key heads pass through `LayerNorm`s
    ``query_ln`` and ``key_ln`` first. ``num_kv_heads < num_heads`` is grouped-query attention.

    For autoregressive decoding, call ``init_cache(shape)`` with the full input shape
    ``(batch..., max_length, features)``, then call the layer with ``decode=True`` on one
    position ``(batch..., 1, features)`` at a time: keys and values are stored in the
    `Cache` Variables ``cached_key``/``cached_value`` at ``cache_index``, and each position
    attends to the positions decoded so far.

    Args:
        num_heads: number of query heads.
        in_features: width of the query input.
        qkv_features: total width of the query/key/value heads (``in_features`` if None);
            must be divisible by ``num_heads``.
        out_features: width of the output (``in_features`` if None).
        num_kv_heads: number of key/value heads (``num_heads`` if None); must divide
            ``num_heads``.
        in_kv_features: width of the key/value inputs (``in_features`` if None).
        dtype: computation dtype; ``None`` promotes inputs and parameters together.
        param_dtype: dtype of the parameters.
        broadcast_dropout: share one attention dropout mask across batch and heads.
        dropout_rate: probability of dropping an attention weight.
        deterministic: if True, no dropout; ``None`` means the call must say (only checked
            when ``dropout_rate > 0``). ``model.eval()`` / ``model.train()`` set it.
        precision: ``jax.lax.Precision`` of the projections and the attention.
        kernel_init: initializer of the query/key/value (and output) kernels.
        out_kernel_init: initializer of the output kernel; ``None`` means ``kernel_init``.
            The default is ``lecun_normal()`` (flax.nnx's default is ``None``, which a config
            cannot spell): set both when you change ``kernel_init``.
        bias_init: initializer of the biases.
        out_bias_init: initializer of the output bias; ``None`` means ``bias_init``. The
            default is ``zeros``.
        use_bias: whether the projections have biases.
        attention_fn: the attention function, called as `dot_product_attention` is (a
            Python-only hook: a config can only name a registered function).
        decode: whether calls decode one position with the cache; ``None`` means the call
            must say.
        normalize_qk: normalize query and key heads with `LayerNorm` (no bias).
        is_causal: mask keys after each query position in every call that does not say
            otherwise (a decoder's self-attention, e.g. a GPT block built from a config);
            decoding is causal either way. Not in flax.nnx, where only the call takes it.
        qkv_promote_dtype: ``promote_dtype`` of the ``query``/``key``/``value`` projections.
        out_promote_dtype: ``promote_dtype`` of the ``out`` projection.
        ln_promote_dtype: ``promote_dtype`` of ``query_ln``/``key_ln``.
        qkv_dot_general: ``dot_general`` of the query/key/value projections (`LinearGeneral`).
        out_dot_general: ``dot_general`` of the ``out`` projection.
        qkv_dot_general_cls: ``dot_general_cls`` of the query/key/value projections.
        out_dot_general_cls: ``dot_general_cls`` of the ``out`` projection.
        rngs: random streams: ``params`` for the weights; with ``dropout_rate > 0`` and
            ``keep_rngs`` a ``dropout`` stream forked from it is kept for the calls.
        keep_rngs: keep a dropout stream on the layer (else the call must get ``rngs``).
        kernel_metadata: metadata of the query/key/value kernels (and the output's).
        out_kernel_metadata: metadata of the output kernel (``kernel_metadata`` if empty).
        bias_metadata: metadata of the query/key/value biases (and the output's).
        out_bias_metadata: metadata of the output bias (``bias_metadata`` if empty).
        query_ln_scale_metadata: metadata of ``query_ln.scale``.
        key_ln_scale_metadata: metadata of ``key_ln.scale``.

    Raises:
        ValueError: sizes that are not positive integers, ``qkv_features`` not divisible by
            ``num_heads``, ``num_heads`` not divisible by ``num_kv_heads``, a dropout rate
            outside ``[0, 1]``; call-time errors are listed on ``__call__``.
        TypeError: ``is_causal`` that is not a bool.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import MultiHeadAttention, make_causal_mask
        >>> layer = MultiHeadAttention(2, 8, qkv_features=16, decode=False, rngs=Rngs(0))
        >>> layer.query.kernel.value.shape, layer.out.kernel.value.shape
        ((8, 2, 8), (2, 8, 8))
        >>> x = jnp.ones((4, 5, 8))
        >>> layer(x).shape  # self-attention
        (4, 5, 8)
        >>> layer(x, jnp.ones((4, 7, 8))).shape  # cross-attention to 7 positions
        (4, 5, 8)
        >>> causal = layer(x, mask=make_causal_mask(jnp.ones((4, 5))))
        >>> causal.shape
        (4, 5, 8)
        >>> layer.is_causal = True  # as MultiHeadAttention(..., is_causal=True) builds it
        >>> bool(jnp.allclose(layer(x), causal, atol=1e-6))
        True
    """

    def __init__(
        self,
        num_heads: Size,
        in_features: Size,
        qkv_features: Size | None = None,
        out_features: Size | None = None,
        num_kv_heads: Size | None = None,
        *,
        in_kv_features: Size | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        broadcast_dropout: bool = True,
        dropout_rate: Rate = 0.0,
        deterministic: bool | None = None,
        precision: Any = None,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        out_kernel_init: Initializer | None = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        out_bias_init: Initializer | None = initializers.zeros,
        use_bias: bool = True,
        attention_fn: Callable[..., jax.Array] = dot_product_attention,
        decode: bool | None = None,
        normalize_qk: bool = False,
        is_causal: bool = False,
        qkv_promote_dtype: PromoteDtypeFn = promote_dtype,
        out_promote_dtype: PromoteDtypeFn = promote_dtype,
        ln_promote_dtype: PromoteDtypeFn = promote_dtype,
        qkv_dot_general: Callable[..., jax.Array] | None = jax.lax.dot_general,
        out_dot_general: Callable[..., jax.Array] | None = jax.lax.dot_general,
        qkv_dot_general_cls: Callable[[], Callable[..., jax.Array]] | None = None,
        out_dot_general_cls: Callable[[], Callable[..., jax.Array]] | None = None,
        rngs: Rngs,
        keep_rngs: bool = True,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        out_kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
        out_bias_metadata: Mapping[str, Any] = _EMPTY,
        query_ln_scale_metadata: Mapping[str, Any] = _EMPTY,
        key_ln_scale_metadata: Mapping[str, Any] = _EMPTY,
    ):
        heads = check_positive_int(_NAME, "num_heads", num_heads)
        width = check_positive_int(_NAME, "in_features", in_features)
        qkv = _optional_size("qkv_features", qkv_features, width)
        kv_heads = _optional_size("num_kv_heads", num_kv_heads, heads)
        kv_width = _optional_size("in_kv_features", in_kv_features, width)
        out_width = _optional_size("out_features", out_features, width)
        if qkv % heads:
            raise ValueError(
                f"{_NAME} qkv_features ({qkv}) must be divisible by num_heads ({heads}): each "
                f"head gets qkv_features // num_heads features. Pass e.g. qkv_features="
                f"{heads * max(1, round(qkv / heads))}."
            )
        if heads % kv_heads:
            raise ValueError(
                f"{_NAME} num_heads ({heads}) must be divisible by num_kv_heads ({kv_heads}): "
                f"each key/value head serves num_heads // num_kv_heads query heads."
            )
        self.num_heads = heads
        self.in_features = width
        self.qkv_features = qkv_features if qkv_features is None else qkv
        self.out_features = out_features if out_features is None else out_width
        self.num_kv_heads = num_kv_heads if num_kv_heads is None else kv_heads
        self.in_kv_features = in_kv_features if in_kv_features is None else kv_width
        self.head_dim = qkv // heads
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.broadcast_dropout = broadcast_dropout
        self.dropout_rate = _check_rate(dropout_rate)
        self.deterministic = deterministic
        self.precision = precision
        self.kernel_init = kernel_init
        self.out_kernel_init = kernel_init if out_kernel_init is None else out_kernel_init
        self.bias_init = bias_init
        self.out_bias_init = bias_init if out_bias_init is None else out_bias_init
        self.use_bias = use_bias
        self.attention_fn = attention_fn
        self.decode = decode
        self.normalize_qk = normalize_qk
        self.is_causal = _check_bool("is_causal", is_causal)
        self.qkv_promote_dtype = qkv_promote_dtype
        self.out_promote_dtype = out_promote_dtype
        self.ln_promote_dtype = ln_promote_dtype
        self.qkv_dot_general = qkv_dot_general
        self.out_dot_general = out_dot_general
        self.qkv_dot_general_cls = qkv_dot_general_cls
        self.out_dot_general_cls = out_dot_general_cls
        self.keep_rngs = keep_rngs
        self.kernel_metadata = metadata(kernel_metadata)
        self.out_kernel_metadata = metadata(out_kernel_metadata)
        self.bias_metadata = metadata(bias_metadata)
        self.out_bias_metadata = metadata(out_bias_metadata)
        self.query_ln_scale_metadata = metadata(query_ln_scale_metadata)
        self.key_ln_scale_metadata = metadata(key_ln_scale_metadata)
        self._build(rngs, width, kv_width, kv_heads, out_width)
        self.rngs: RngStream | None = None
        if keep_rngs and self.dropout_rate > 0:
            self.rngs = RngStream(rngs["dropout"](), tag="dropout")
        self.cached_key: Cache | None = None
        self.cached_value: Cache | None = None
        self.cache_index: Cache | None = None

    def _build(self, rngs: Rngs, width: int, kv_width: int, kv_heads: int, out: int) -> None:
        """Create the projections (and the q/k norms) in flax.nnx's key order."""
        common = dict(
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            precision=self.precision,
            use_bias=self.use_bias,
            rngs=rngs,
        )
        project = dict(
            common,
            kernel_init=self.kernel_init,
            bias_init=self.bias_init,
            promote_dtype=self.qkv_promote_dtype,
            dot_general=self.qkv_dot_general,
            dot_general_cls=self.qkv_dot_general_cls,
        )
        self.query = LinearGeneral(
            width, (self.num_heads, self.head_dim), **project, **self._names(HEADS)
        )
        self.key = LinearGeneral(kv_width, (kv_heads, self.head_dim), **project, **self._names())
        self.value = LinearGeneral(kv_width, (kv_heads, self.head_dim), **project, **self._names())
        self.query_ln: LayerNorm | None = None
        self.key_ln: LayerNorm | None = None
        if self.normalize_qk:
            norm = dict(
                use_bias=False,
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                promote_dtype=self.ln_promote_dtype,
            )
            query_scale = with_default_names(self.query_ln_scale_metadata, (HEAD_DIM,))
            key_scale = with_default_names(self.key_ln_scale_metadata, (HEAD_DIM,))
            self.query_ln = LayerNorm(self.head_dim, **norm, scale_metadata=query_scale, rngs=rngs)
            self.key_ln = LayerNorm(self.head_dim, **norm, scale_metadata=key_scale, rngs=rngs)
        self.out = LinearGeneral(
            (self.num_heads, self.head_dim),
            out,
            axis=(-2, -1),
            **dict(
                common,
                kernel_init=self.out_kernel_init,
                bias_init=self.out_bias_init,
                promote_dtype=self.out_promote_dtype,
                dot_general=self.out_dot_general,
                dot_general_cls=self.out_dot_general_cls,
                kernel_metadata=with_default_names(
                    self.out_kernel_metadata or self.kernel_metadata, (HEADS, HEAD_DIM, EMBED)
                ),
                bias_metadata=with_default_names(
                    self.out_bias_metadata or self.bias_metadata, (EMBED,)
                ),
            ),
        )

    def _names(self, heads: str = KV_HEADS) -> dict[str, Any]:
        """The metadata of a query (``heads``) or key/value projection, names by default."""
        return {
            "kernel_metadata": with_default_names(self.kernel_metadata, (EMBED, heads, HEAD_DIM)),
            "bias_metadata": with_default_names(self.bias_metadata, (heads, HEAD_DIM)),
        }

    def __call__(
        self,
        inputs_q: jax.Array,
        inputs_k: jax.Array | None = None,
        inputs_v: jax.Array | None = None,
        *,
        mask: jax.Array | None = None,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | jax.Array | None = None,
        sow_weights: bool = False,
        decode: bool | None = None,
        is_causal: bool | None = None,
        out_sharding: Any = None,
        qkv_sharding: Any = None,
    ) -> jax.Array:
        """Attend from ``inputs_q`` to ``inputs_k`` (default: ``inputs_q``) / ``inputs_v``.

        Args:
            inputs_q: queries, ``(batch..., q_length, in_features)``.
            inputs_k: keys, ``(batch..., kv_length, in_kv_features)``; ``inputs_q`` if None.
            inputs_v: values, like ``inputs_k``; ``inputs_k`` if None.
            mask: True/1 where a query may attend to a key; broadcastable to
                ``(batch..., num_heads, q_length, kv_length)`` (``kv_length`` is the cache
                length when decoding).
            deterministic: overrides the layer's ``deterministic`` for this call.
            rngs: dropout randomness for this call: an `Rngs` (its ``dropout`` stream), a
                stream, or a PRNG key; else the layer's kept stream.
            sow_weights: record the attention weights as the Intermediate
                ``attention_weights``.
            decode: overrides the layer's ``decode`` for this call.
            is_causal: also mask keys after each query position (implied when decoding);
                ``None`` means the layer's ``is_causal``.
            out_sharding: how the output is laid out over the mesh (see `Linear`).
            qkv_sharding: how the projected queries, keys and values
                ``(batch..., length, heads, head_dim)`` are laid out over the mesh.

        Returns:
            ``(batch..., q_length, out_features)``.

        Raises:
            ValueError: ``inputs_v`` without ``inputs_k``; inputs whose last axis is not
                ``in_features``/``in_kv_features``; a mask that does not broadcast;
                ``decode`` or (with dropout) ``deterministic`` that is None in both the layer
                and the call; decoding without ``init_cache``, with more than one position
                or another batch shape than the cache's, or past the cache's end (under
                ``jit`` such a step returns NaN instead, and so does every later one until
                ``init_cache``); dropout in training mode without any rngs.
        """
        inputs_k, inputs_v = self._inputs(inputs_q, inputs_k, inputs_v)
        decode = self._flag("decode", decode, self.decode)
        query = self.query(inputs_q, out_sharding=qkv_sharding)
        key = self.key(inputs_k, out_sharding=qkv_sharding)
        value = self.value(inputs_v, out_sharding=qkv_sharding)
        if self.query_ln is not None and self.key_ln is not None:
            query, key = self.query_ln(query), self.key_ln(key)
        is_causal = self.is_causal if is_causal is None else is_causal
        if decode:
            key, value, mask = self._decode_step(key, value, mask)
            is_causal = False  # the cache mask is causal already
        target = (*query.shape[:-3], self.num_heads, query.shape[-3], key.shape[-3])
        self._check_mask(mask, target)
        dropout_rng = self._dropout_rng(deterministic, rngs)
        x = self.attention_fn(
            query,
            key,
            value,
            mask=mask,
            dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate,
            broadcast_dropout=self.broadcast_dropout,
            deterministic=dropout_rng is None,
            dtype=self.dtype,
            precision=self.precision,
            module=self if sow_weights else None,
            is_causal=is_causal,
        )
        return self.out(x, out_sharding=out_sharding)

    def _inputs(self, q: Any, k: Any, v: Any) -> tuple[jax.Array, jax.Array]:
        if k is None and v is not None:
            raise ValueError(
                f"{_NAME} got inputs_v but no inputs_k. Pass inputs_k too, or only inputs_k "
                f"to use it as the values as well."
            )
        q = as_input(_NAME, q)
        k = q if k is None else as_input(_NAME, k)
        v = k if v is None else as_input(_NAME, v)
        _check_features("inputs_q", q, self.in_features, "in_features")
        kv_width = self.in_features if self.in_kv_features is None else self.in_kv_features
        _check_features("inputs_k", k, kv_width, "in_kv_features")
        _check_features("inputs_v", v, kv_width, "in_kv_features")
        return k, v

    @staticmethod
    def _flag(name: str, call: bool | None, layer: bool | None) -> bool:
        value = layer if call is None else call
        if value is None:
            raise ValueError(
                f"{_NAME} has {name}=None and none was passed to the call. Build it with "
                f"{name}=True/False or pass {name}= to the call."
            )
        return bool(value)

    def _check_mask(self, mask: Any, target: tuple[int, ...]) -> None:
        if mask is None:
            return
        shape = jnp.shape(mask)
        if len(shape) > len(target) or not all(
            s in (1, t) for s, t in zip(reversed(shape), reversed(target))
        ):
            raise ValueError(
                f"{_NAME} mask of shape {shape} does not broadcast to (batch..., num_heads, "
                f"q_length, kv_length) = {target}. Build it with make_attention_mask / "
                f"make_causal_mask, or give it size-1 axes, e.g. shape "
                f"{(1,) * (len(target) - 2) + target[-2:]}."
            )

    def _dropout_rng(self, deterministic: bool | None, rngs: Any) -> jax.Array | None:
        """The dropout key of this call, or None when no dropout applies."""
        if self.dropout_rate == 0.0:
            return None
        if self._flag("deterministic", deterministic, self.deterministic):
            return None
        rngs = self.rngs if rngs is None else rngs
        if rngs is None:
            raise ValueError(
                f"{_NAME} applies dropout (dropout_rate={self.dropout_rate}, training mode) "
                f"but has no rngs: it was built with keep_rngs=False. Pass rngs= to the call, "
                f"or call model.eval() for inference."
            )
        if isinstance(rngs, Rngs):
            return rngs["dropout"]()
        if isinstance(rngs, jax.Array):
            return rngs
        return rngs()

    def _decode_step(self, key: jax.Array, value: jax.Array, mask: Any) -> tuple[Any, Any, Any]:
        """Write this position's key/value into the cache; return the cache and its mask."""
        if self.cached_key is None or self.cached_value is None or self.cache_index is None:
            raise ValueError(
                f"{_NAME} is decoding (decode=True) but its cache is not initialized. Call "
                f"layer.init_cache((batch, max_length, features)) before the first step."
            )
        cache = self.cached_key.value
        *batch, max_length, _, _ = cache.shape
        expected = (*batch, 1, *cache.shape[-2:])
        if key.shape != expected:
            raise ValueError(
                f"{_NAME} decodes one position at a time with the cache's batch shape: expected "
                f"inputs of shape {(*batch, 1, '...')} (keys {expected}), got keys "
                f"{key.shape}. Feed x[..., t:t+1, :] per step, or init_cache for this batch."
            )
        index = self.cache_index.value
        past = _past_the_end(index, max_length)
        value = value.astype(cache.dtype)
        if past is not None:  # traced: a step past the end yields NaN, not stale values
            # (its value lands where dynamic_update_slice clamps it, the last position, which
            # every later step attends to; poisoning the step, not the cache, keeps the cache
            # update in place: a whole-cache select per step doubled a decoding step's time)
            value = jnp.where(past, jnp.full_like(value, jnp.nan), value)
        # every start index in the index's dtype (Python ints are int64 under jax x64)
        start = tuple(jnp.asarray(i, index.dtype) for i in (0,) * len(batch) + (index, 0, 0))
        key = jax.lax.dynamic_update_slice(cache, key.astype(cache.dtype), start)
        value = jax.lax.dynamic_update_slice(self.cached_value.value, value, start)
        self.cached_key.value = key
        self.cached_value.value = value
        self.cache_index.value = index + 1
        seen = jnp.broadcast_to(jnp.arange(max_length) <= index, (*batch, 1, 1, max_length))
        if mask is None:
            return key, value, seen
        self._check_mask(mask, (*batch, self.num_heads, 1, max_length))
        return key, value, jnp.logical_and(jnp.asarray(mask, bool), seen)

    def init_cache(self, input_shape: Sequence[int], dtype: Dtype = jnp.float32) -> None:
        """Create empty ``cached_key``/``cached_value`` caches and a zero ``cache_index``.

        Args:
            input_shape: the shape of a whole sequence, ``(batch..., max_length, features)``.
            dtype: dtype of the cached keys and values.

        Raises:
            ValueError: ``input_shape`` is not ``(batch..., max_length, features)`` with
                positive sizes.

        Example:
            >>> import jax.numpy as jnp
            >>> from nnx_core import Rngs
            >>> from nnx_layers import MultiHeadAttention
            >>> layer = MultiHeadAttention(2, 6, decode=True, rngs=Rngs(0))
            >>> layer.init_cache((3, 10, 6))
            >>> layer.cached_key.value.shape, int(layer.cache_index.value)
            ((3, 10, 2, 3), 0)
            >>> layer(jnp.ones((3, 1, 6))).shape
            (3, 1, 6)
            >>> int(layer.cache_index.value)
            1
        """
        example = f"x.shape for x of shape (batch, max_length, {self.in_features})"
        shape = check_sequence_shape(_NAME, input_shape, example)
        kv_heads = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        cache_shape = (*shape[:-1], kv_heads, self.head_dim)
        self.cached_key = Cache(jnp.zeros(cache_shape, dtype))
        self.cached_value = Cache(jnp.zeros(cache_shape, dtype))
        self.cache_index = Cache(jnp.array(0, dtype=jnp.int32))

    def set_view(
        self,
        deterministic: bool | None = None,
        decode: bool | None = None,
        batch_size: int | Sequence[int] | None = None,
        max_length: int | None = None,
    ) -> None:
        """Set ``deterministic``/``decode`` (for ``nnx.view``; None leaves them).

        Switching to ``decode=True`` without a cache creates one (see `init_cache`) for
        ``batch_size`` sequences (an int or a batch shape) of ``max_length`` positions, in the
        layer's ``dtype`` (float32 if None).

        Raises:
            TypeError: ``decode=True`` without a cache and without ``batch_size`` or
                ``max_length``.

        Example:
            >>> from nnx_core import Rngs
            >>> from nnx_layers import MultiHeadAttention
            >>> layer = MultiHeadAttention(2, 6, rngs=Rngs(0))
            >>> layer.set_view(deterministic=True, decode=True, batch_size=3, max_length=10)
            >>> layer.decode, layer.cached_key.value.shape
            (True, (3, 10, 2, 3))
        """
        if deterministic is not None:
            self.deterministic = deterministic
        if decode is None:
            return
        self.decode = decode
        if decode and self.cached_key is None:
            if batch_size is None or max_length is None:
                raise TypeError(
                    f"{_NAME}.set_view(decode=True) creates the decoding cache, so it needs "
                    f"'batch_size' and 'max_length', got batch_size={batch_size!r}, max_length="
                    f"{max_length!r}. Pass both, or call init_cache first."
                )
            batch = (batch_size,) if isinstance(batch_size, int) else tuple(batch_size)
            dtype = jnp.float32 if self.dtype is None else self.dtype
            self.init_cache((*batch, max_length, self.in_features), dtype=dtype)

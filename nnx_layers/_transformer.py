"""The blocks every transformer family shares: `SelfAttention`, `MLP`, `GatedMLP`, `TransformerBlock`.

Every projection is a plain `Linear` (kernel ``(in, out)``: a transformers ``nn.Linear`` weight
transposed), so a checkpoint converter is a table of transposes. Every parameter carries the
logical axis names of docs/design/pretrained.md in its ``sharding_names`` (``embed``, ``heads``,
``kv_heads``, ``mlp``). With ``lora_rank > 0`` every projection is a `LoRALinear`: its
``kernel`` stays where a `Linear`'s is and a `LoRAParam` adapter ``lora.lora_a @ lora.lora_b``
(scaled by ``lora_alpha / lora_rank``) is added; ``lora_b`` starts at zero, so a fresh adapter
changes nothing.
"""

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

from nnx_core import Cache, Module, Rngs

from . import initializers
from ._axis_names import names_given
from ._checks import (
    Dtype,
    as_input,
    check_param_dtype,
    check_positive_int,
    check_sequence_shape,
)
from ._constraints import Count, NonNegative, Positive, Size
from ._dot_product_attention import dot_product_attention
from ._linear import Linear
from ._lora import LoRALinear, check_rank
from ._normalization import RMSNorm
from ._rope import RoPE
from .activations import gelu, silu
from .initializers import Initializer

__all__ = ["SelfAttention", "MLP", "GatedMLP", "TransformerBlock"]

_DEFAULT_KERNEL_INIT = initializers.lecun_normal()


# -- projections -------------------------------------------------------------------------------
def _names(*axes: str | None) -> dict[str, Any]:
    return {"sharding_names": tuple(axes)}


def _lora_rank(layer: str, value: Any, kernel: tuple[int, int]) -> int:
    """``value`` checked: 0, or a rank the layer's smallest projection ``kernel`` (in, out)
    can use (`check_rank`)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{layer} lora_rank must be a whole number >= 0 (0: no adapters), got {value!r}."
        )
    return check_rank(layer, value, *kernel) if value else 0


#: the largest adapter scale ``lora_alpha / lora_rank``: the adapters' gradients grow with the
#: scale, and an optimizer squares them (Adam's second moment, a gradient norm), so a scale past
#: the square root of float32's largest value overflows them on the first step
_MAX_LORA_SCALE = math.sqrt(float(jnp.finfo(jnp.float32).max))


def _lora_scale(layer: str, rank: int, alpha: Any) -> float:
    """The adapters' scale ``lora_alpha / lora_rank`` (1 without ``lora_alpha``), checked:
    ``lora_alpha`` finite and positive, set only with a rank, the scale at most
    `_MAX_LORA_SCALE`."""
    if alpha is None:
        return 1.0
    if rank == 0:
        raise ValueError(
            f"{layer} lora_alpha={alpha!r} has no effect without lora_rank (lora_rank=0: no "
            f"adapters to scale). Set lora_rank (e.g. lora_rank=8) to add adapters, or remove "
            f"lora_alpha."
        )
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float))
        or not math.isfinite(alpha)
        or alpha <= 0
    ):
        raise ValueError(
            f"{layer} lora_alpha must be a finite number > 0 or None, got {alpha!r}. Usual "
            f"values are lora_alpha = lora_rank to 2 * lora_rank (here {rank} to {2 * rank})."
        )
    scale = float(alpha) / rank
    if scale > _MAX_LORA_SCALE:
        raise ValueError(
            f"{layer} lora_alpha={alpha!r} with lora_rank={rank} scales the adapters by "
            f"lora_alpha / lora_rank = {scale:.3g}, past {_MAX_LORA_SCALE:.2g} (the square root "
            f"of float32's largest value): the adapters' gradients grow with the scale, and the "
            f"optimizer squares them (Adam's second moment, gradient clipping's norm), which "
            f"overflows to inf on the first step. Usual values are lora_alpha = lora_rank to "
            f"2 * lora_rank (here {rank} to {2 * rank})."
        )
    return scale


class _Projections:
    """Makes a layer's projections: a `Linear`, or a `LoRALinear` when the rank is set."""

    def __init__(self, layer: Module, rngs: Rngs):
        self.layer, self.rngs = layer, rngs

    def make(self, width: int, out: int, axes: tuple[str, str], bias: bool) -> Linear:
        layer = self.layer
        common = dict(
            use_bias=bias,
            dtype=layer.dtype,
            param_dtype=layer.param_dtype,
            kernel_init=layer.kernel_init,
            bias_init=layer.bias_init,
            rngs=self.rngs,
            kernel_metadata=_names(*axes),
            bias_metadata=_names(axes[1]),
        )
        if not layer.lora_rank:
            return Linear(width, out, **common)
        return LoRALinear(
            width,
            out,
            lora_rank=layer.lora_rank,
            lora_param_dtype=layer.param_dtype,
            a_metadata=_names(axes[0], None),
            b_metadata=_names(None, axes[1]),
            **common,
        )


def _project(linear: Linear, x: jax.Array, scale: float) -> jax.Array:
    """``linear(x)``, its adapter (if any) scaled by ``scale``."""
    if isinstance(linear, LoRALinear):
        return Linear.__call__(linear, x) + scale * linear.lora(x)
    return linear(x)


def name_axes(module: Any, names: dict[str, tuple[Any, ...]]) -> None:
    """Give ``module``'s Variables named in ``names`` those logical axis names (over the
    layer's own defaults, e.g. a head `Linear`'s ``(embed, mlp)``), unless the config's
    ``*_metadata`` names them (it wins)."""
    if module is None:
        return
    for attribute, axes in names.items():
        variable = getattr(module, attribute, None)
        given = getattr(module, f"{attribute}_metadata", None) or {}
        if variable is None or names_given(given) or variable.has_metadata("out_sharding"):
            continue
        if len(axes) == variable.ndim:
            variable.set_metadata(sharding_names=axes)


def norm_axes(norm: Any) -> None:
    name_axes(norm, {"scale": ("embed",), "bias": ("embed",)})


def _check_bool(layer: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{layer} {name} must be True or False, got {value!r}.")
    return value


# -- attention ---------------------------------------------------------------------------------
class SelfAttention(Module):
    """Self-attention with grouped key/value heads, RoPE, q/k norms and a KV cache.

    The input ``(batch, length, in_features)`` is projected by `Linear` layers ``query``
    (``num_heads * head_dim`` features), ``key`` and ``value`` (``num_kv_heads * head_dim``
    each); with ``qk_norm="rms"`` each query and key head passes an `RMSNorm` (``query_norm``,
    ``key_norm``, as Qwen3), then ``rope`` rotates them by position; the heads attend
    (``num_heads // num_kv_heads`` query heads share a key/value head) and ``out`` projects
    back to ``in_features``.

    A call takes ``mask`` (``(batch, length)``, True for a real token, False for padding:
    transformers' ``attention_mask``) and ``positions`` (``(batch, length)`` integers, the
    RoPE positions; ``arange(length)`` by default). A padded key is never attended to.

    Decoding: after ``init_cache((batch, max_length, in_features))``, a call with
    ``decode=True`` (or the layer's ``decode``) takes the next ``length >= 1`` positions of
    every row (a whole prompt, then one token at a time): their keys, values and ``mask`` are
    written into the cache at ``cache_index``, and each query attends to the cached slots that
    hold real tokens at or before its own slot. ``positions`` default to the slots' indices.

    Args:
        in_features: the width of the input and of the output.
        num_heads: query heads.
        num_kv_heads: key/value heads (``num_heads`` if None); must divide ``num_heads``.
        head_dim: features per head (``in_features // num_heads`` if None).
        qkv_bias: whether ``query``, ``key`` and ``value`` have biases.
        out_bias: whether ``out`` has a bias.
        qk_norm: ``"rms"``: an `RMSNorm` over each query and key head; None: none.
        qk_norm_epsilon: the epsilon of those norms.
        rope: the `RoPE` applied to queries and keys; None: no rotary embedding.
        is_causal: each position attends only to positions at or before it.
        sliding_window: with ``is_causal``, each position attends only to the
            ``sliding_window`` positions ending at it (Mistral's); None: all of them.
        decode: whether calls continue the cached sequence; a call's ``decode`` overrides it.
        dtype: computation dtype; None promotes the input and the parameters together.
        param_dtype: dtype of the parameters.
        kernel_init: initializer of the projections' kernels.
        bias_init: initializer of their biases.
        lora_rank: with a rank ``> 0``, every projection gets a `LoRAParam` adapter; at most
            ``min(in_features, num_kv_heads * head_dim)``, the rank of the smallest kernel.
        lora_alpha: the adapters are scaled by ``lora_alpha / lora_rank`` (1 if None); set
            only with ``lora_rank``; a scale past ``1.8e19`` (the square root of float32's
            largest value, where an optimizer's squared gradients overflow) is refused.
        rngs: random streams; ``rngs.params()`` initializes the weights.

    Raises:
        ValueError: sizes that are not positive, ``num_heads`` not a multiple of
            ``num_kv_heads``, ``sliding_window`` without ``is_causal``, a bad ``qk_norm`` or
            LoRA setting (a ``lora_alpha / lora_rank`` scale past ``1.8e19`` overflows the
            optimizer), a ``param_dtype`` that is not floating (the weights are trained);
            call-time errors are listed on ``__call__``.
        TypeError: ``is_causal`` or ``decode`` that is not a bool; ``rope`` that is not a RoPE.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import RoPE, SelfAttention
        >>> layer = SelfAttention(16, 4, num_kv_heads=2, rope=RoPE(), is_causal=True, rngs=Rngs(0))
        >>> layer.query.kernel.shape, layer.key.kernel.shape, layer.query.kernel.sharding_names
        ((16, 16), (16, 8), ('embed', 'heads'))
        >>> x = jnp.ones((2, 5, 16))
        >>> full = layer(x)
        >>> layer.init_cache((2, 5, 16))
        >>> prefix = layer(x[:, :3], decode=True)    # a chunk of three positions, then one by one
        >>> steps = [layer(x[:, t : t + 1], decode=True) for t in (3, 4)]
        >>> bool(jnp.allclose(jnp.concatenate([prefix, *steps], 1), full, atol=1e-5))
        True
    """

    def __init__(
        self,
        in_features: Size,
        num_heads: Size,
        *,
        num_kv_heads: Size | None = None,
        head_dim: Size | None = None,
        qkv_bias: bool = False,
        out_bias: bool = False,
        qk_norm: Literal["rms"] | None = None,
        qk_norm_epsilon: NonNegative = 1e-6,
        rope: RoPE | None = None,
        is_causal: bool = False,
        sliding_window: Size | None = None,
        decode: bool = False,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        lora_rank: Count = 0,
        lora_alpha: Positive | None = None,
        rngs: Rngs,
    ):
        name = "SelfAttention"
        self.in_features = check_positive_int(name, "in_features", in_features)
        self.num_heads = check_positive_int(name, "num_heads", num_heads)
        kv = self.num_heads if num_kv_heads is None else num_kv_heads
        kv = check_positive_int(name, "num_kv_heads", kv)
        if self.num_heads % kv:
            raise ValueError(
                f"{name} num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({kv}): "
                f"each key/value head serves num_heads // num_kv_heads query heads."
            )
        if head_dim is None and self.in_features % self.num_heads:
            raise ValueError(
                f"{name} in_features ({self.in_features}) is not a multiple of num_heads "
                f"({self.num_heads}); give head_dim explicitly."
            )
        width = self.in_features // self.num_heads if head_dim is None else head_dim
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        self.head_size = check_positive_int(name, "head_dim", width)
        self.kv_heads = kv
        self.qkv_bias = _check_bool(name, "qkv_bias", qkv_bias)
        self.out_bias = _check_bool(name, "out_bias", out_bias)
        if qk_norm not in (None, "rms"):
            raise ValueError(f"{name} qk_norm must be 'rms' or None, got {qk_norm!r}.")
        self.qk_norm, self.qk_norm_epsilon = qk_norm, qk_norm_epsilon
        if rope is not None and not isinstance(rope, RoPE):
            raise TypeError(f"{name} rope must be a RoPE or None, got {type(rope).__name__}.")
        self.rope = rope
        self.is_causal = _check_bool(name, "is_causal", is_causal)
        if sliding_window is not None:
            check_positive_int(name, "sliding_window", sliding_window)
            if not is_causal:
                raise ValueError(
                    f"{name} sliding_window={sliding_window} needs is_causal=True: the window "
                    f"is the positions before each query."
                )
        self.sliding_window = sliding_window
        self.decode = _check_bool(name, "decode", decode)
        self.dtype = dtype
        self.param_dtype = check_param_dtype(name, "param_dtype", param_dtype)
        self.kernel_init, self.bias_init = kernel_init, bias_init
        self.lora_rank = _lora_rank(name, lora_rank, (self.in_features, kv * self.head_size))
        self.lora_alpha = lora_alpha
        self._scale = _lora_scale(name, self.lora_rank, lora_alpha)
        self._build(rngs)
        self.cached_key: Cache | None = None
        self.cached_value: Cache | None = None
        self.cached_mask: Cache | None = None
        self.cache_index: Cache | None = None

    def _build(self, rngs: Rngs) -> None:
        make = _Projections(self, rngs).make
        heads, kv = self.num_heads * self.head_size, self.kv_heads * self.head_size
        self.query = make(self.in_features, heads, ("embed", "heads"), self.qkv_bias)
        self.key = make(self.in_features, kv, ("embed", "kv_heads"), self.qkv_bias)
        self.value = make(self.in_features, kv, ("embed", "kv_heads"), self.qkv_bias)
        self.out = make(heads, self.in_features, ("heads", "embed"), self.out_bias)
        self.query_norm: RMSNorm | None = None
        self.key_norm: RMSNorm | None = None
        if self.qk_norm == "rms":
            norm = dict(
                epsilon=self.qk_norm_epsilon,
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                scale_metadata=_names(None),
                rngs=rngs,
            )
            self.query_norm = RMSNorm(self.head_size, **norm)
            self.key_norm = RMSNorm(self.head_size, **norm)

    def __call__(
        self,
        x: jax.Array,
        *,
        positions: jax.Array | None = None,
        mask: jax.Array | None = None,
        decode: bool | None = None,
    ) -> jax.Array:
        """Attend over ``x`` ``(batch, length, in_features)``.

        Args:
            x: the sequence (or, decoding, its next chunk).
            positions: ``(batch, length)`` integer positions for ``rope``.
            mask: ``(batch, length)``: True for real tokens, False for padding.
            decode: overrides the layer's ``decode`` for this call.

        Returns:
            ``(batch, length, in_features)``.

        Raises:
            ValueError: an input that is not ``(batch, length, in_features)``; a mask or
                positions not ``(batch, length)``; a ``length`` past the ``rope``'s
                ``max_seq_len`` (checked while tracing); decoding without ``init_cache``, with
                another batch size, or past the cache's end (under ``jit`` such a step
                returns NaN instead).
        """
        x = as_input("SelfAttention", x)
        if x.ndim != 3 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"SelfAttention expects inputs of shape (batch, length, {self.in_features}) "
                f"(in_features), got shape {x.shape}."
            )
        batch, length = x.shape[:2]
        mask = _row_array("mask", mask, (batch, length))
        positions = _row_array("positions", positions, (batch, length))
        q = self._heads(self.query, x, self.num_heads, self.query_norm)
        k = self._heads(self.key, x, self.kv_heads, self.key_norm)
        v = self._heads(self.value, x, self.kv_heads, None)
        decode = self.decode if decode is None else decode
        if decode:
            out = self._decode_step(q, k, v, positions, mask)
        else:
            if self.rope is not None:
                where = jnp.arange(length)[None] if positions is None else positions
                q, k = self.rope.rotate(q, where), self.rope.rotate(k, where)
            keep, causal = self._mask(mask, length)
            out = dot_product_attention(q, k, v, mask=keep, is_causal=causal, dtype=self.dtype)
        return _project(self.out, out.reshape(batch, length, -1), self._scale)

    def _heads(self, linear: Linear, x: jax.Array, heads: int, norm: Any) -> jax.Array:
        y = _project(linear, x, self._scale)
        y = y.reshape(*y.shape[:-1], heads, self.head_size)
        return y if norm is None else norm(y)

    def _mask(self, mask: Any, length: int) -> tuple[Any, bool]:
        """The attention mask ``(batch, 1, q, k)`` and whether to add the causal one."""
        if mask is None and self.sliding_window is None:
            return None, self.is_causal
        keep = jnp.ones((1, 1, 1, length), bool) if mask is None else mask[:, None, None, :]
        if self.is_causal:
            slots = jnp.arange(length)
            keep = keep & _window(slots, slots, self.sliding_window)[None, None]
        return keep, False

    def _decode_step(self, q: Any, k: Any, v: Any, positions: Any, mask: Any) -> jax.Array:
        """Write the chunk into the cache and attend to the real tokens cached so far."""
        if (
            self.cache_index is None
            or self.cached_key is None
            or self.cached_value is None
            or self.cached_mask is None
        ):
            raise ValueError(
                "SelfAttention is decoding (decode=True) but its cache is not initialized. "
                "Call layer.init_cache((batch, max_length, in_features)) first."
            )
        batch, length = q.shape[:2]
        cached = self.cached_key.value
        if cached.shape[0] != batch:
            raise ValueError(
                f"SelfAttention decodes {cached.shape[0]} rows (set by init_cache) but got a "
                f"chunk of {batch} rows (shape {q.shape[:2]}). Call init_cache for this batch."
            )
        total = cached.shape[1]
        index = self.cache_index.value
        past = _past_the_end(index, length, total)
        slots = index + jnp.arange(length)
        if self.rope is not None:
            where = jnp.broadcast_to(slots, (batch, length)) if positions is None else positions
            q, k = self.rope.rotate(q, where), self.rope.rotate(k, where)
        real = jnp.ones((batch, length), bool) if mask is None else mask
        zero = jnp.zeros((), index.dtype)
        start = (zero, index, zero, zero)
        keys = jax.lax.dynamic_update_slice(cached, k.astype(cached.dtype), start)
        values = jax.lax.dynamic_update_slice(
            self.cached_value.value, v.astype(cached.dtype), start
        )
        valid = jax.lax.dynamic_update_slice(self.cached_mask.value, real, (zero, index))
        self.cached_key.value, self.cached_value.value = keys, values
        self.cached_mask.value = valid
        self.cache_index.value = index + length
        keep = valid[:, None, None, :] & _window(slots, jnp.arange(total), self.sliding_window)
        out = dot_product_attention(q, keys.astype(q.dtype), values.astype(q.dtype), mask=keep)
        if past is not None:  # traced: a step past the end yields NaN, not overwritten slots
            out = jnp.where(past, jnp.full_like(out, jnp.nan), out)
        return out

    def init_cache(self, input_shape: Sequence[int], dtype: Dtype = jnp.float32) -> None:
        """Create an empty cache for ``input_shape`` = ``(batch, max_length, in_features)``.

        ``cached_key``/``cached_value`` ``(batch, max_length, kv_heads, head_dim)``,
        ``cached_mask`` ``(batch, max_length)`` (which slots hold real tokens) and
        ``cache_index`` (the next slot), all `Cache` Variables.

        Raises:
            ValueError: ``input_shape`` is not ``(batch, max_length, features)``, or its
                ``max_length`` is past the ``rope``'s ``max_seq_len``.

        Example:
            >>> from nnx_core import Rngs
            >>> from nnx_layers import SelfAttention
            >>> layer = SelfAttention(8, 2, num_kv_heads=1, rngs=Rngs(0))
            >>> layer.init_cache((3, 10, 8))
            >>> layer.cached_key.shape, layer.cached_mask.shape, int(layer.cache_index.value)
            ((3, 10, 1, 4), (3, 10), 0)
        """
        example = f"(batch, max_length, {self.in_features})"
        shape = check_sequence_shape("SelfAttention", input_shape, example)
        if len(shape) != 3:
            raise ValueError(
                f"SelfAttention.init_cache needs (batch, max_length, features), got {shape}."
            )
        batch, total = shape[:2]
        limit = None if self.rope is None else self.rope.max_seq_len
        if limit is not None and total > limit:
            raise ValueError(
                f"SelfAttention.init_cache: a cache of {total} positions is longer than its "
                f"rope's max_seq_len ({limit}). Call init_cache with max_length <= {limit}, or "
                f"build the RoPE with max_seq_len={total} or without one."
            )
        cache_shape = (batch, total, self.kv_heads, self.head_size)
        self.cached_key = Cache(jnp.zeros(cache_shape, dtype))
        self.cached_value = Cache(jnp.zeros(cache_shape, dtype))
        self.cached_mask = Cache(jnp.zeros((batch, total), bool))
        self.cache_index = Cache(jnp.array(0, jnp.int32))


def _window(queries: jax.Array, keys: jax.Array, window: int | None) -> jax.Array:
    """``(q, k)``: key slot ``k`` at or before query slot ``q`` (within ``window``)."""
    distance = queries[:, None] - keys[None, :]
    keep = distance >= 0
    return keep if window is None else keep & (distance < window)


def _row_array(name: str, value: Any, shape: tuple[int, int]) -> Any:
    if value is None:
        return None
    value = jnp.asarray(value)
    if value.shape != shape:
        raise ValueError(
            f"SelfAttention {name} must have the shape (batch, length) = {shape} of the input, "
            f"got {value.shape}."
        )
    return value.astype(bool) if name == "mask" else value


def _past_the_end(index: jax.Array, length: int, total: int) -> jax.Array | None:
    if isinstance(index, jax.core.Tracer):
        return index + length > total
    if int(index) + length > total:
        raise ValueError(
            f"SelfAttention: a chunk of {length} position(s) at slot {int(index)} runs past the "
            f"end of the cache ({total} slots, set by init_cache). Call init_cache with a "
            f"longer max_length."
        )
    return None


# -- MLPs --------------------------------------------------------------------------------------
class MLP(Module):
    """``down(activation(up(x)))``: the feed-forward block of GPT-2, BERT and ViT.

    Args:
        features: the width of the input and output.
        hidden: the inner width.
        activation: a function, in a config a registered activation's name
            (``{type: gelu, approximate: false}`` is BERT's exact gelu, ``gelu`` GPT-2's).
        use_bias: whether ``up`` and ``down`` have biases.
        dtype: computation dtype; None promotes the input and the parameters together.
        param_dtype: dtype of the parameters.
        kernel_init: initializer of the kernels.
        bias_init: initializer of the biases.
        lora_rank: with a rank ``> 0``, ``up`` and ``down`` get `LoRAParam` adapters; at most
            ``min(features, hidden)``.
        lora_alpha: the adapters are scaled by ``lora_alpha / lora_rank`` (1 if None); set
            only with ``lora_rank``; a scale past ``1.8e19`` (the square root of float32's
            largest value, where an optimizer's squared gradients overflow) is refused.
        rngs: random streams.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import MLP
        >>> mlp = MLP(8, 32, rngs=Rngs(0))
        >>> mlp.up.kernel.shape, mlp.down.kernel.sharding_names, mlp(jnp.ones((2, 8))).shape
        ((8, 32), ('mlp', 'embed'), (2, 8))
    """

    def __init__(
        self,
        features: Size,
        hidden: Size,
        *,
        activation: Callable[[jax.Array], jax.Array] = gelu,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        lora_rank: Count = 0,
        lora_alpha: Positive | None = None,
        rngs: Rngs,
    ):
        _setup_mlp(self, "MLP", features, hidden, activation, use_bias, dtype, param_dtype)
        self.kernel_init, self.bias_init = kernel_init, bias_init
        kernel = (self.features, self.hidden)
        self.lora_rank, self.lora_alpha = _lora_rank("MLP", lora_rank, kernel), lora_alpha
        self._scale = _lora_scale("MLP", self.lora_rank, lora_alpha)
        make = _Projections(self, rngs).make
        self.up = make(self.features, self.hidden, ("embed", "mlp"), use_bias)
        self.down = make(self.hidden, self.features, ("mlp", "embed"), use_bias)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Apply the block to ``x`` ``(..., features)``."""
        return _project(self.down, self.activation(_project(self.up, x, self._scale)), self._scale)


class GatedMLP(Module):
    """``down(activation(gate(x)) * up(x))``: the gated (SwiGLU) block of Llama, Mistral, Qwen.

    Args:
        features: the width of the input and output.
        hidden: the inner width.
        activation: the gate's function (``silu`` for SwiGLU).
        use_bias: whether ``gate``, ``up`` and ``down`` have biases.
        dtype: computation dtype; None promotes the input and the parameters together.
        param_dtype: dtype of the parameters.
        kernel_init: initializer of the kernels.
        bias_init: initializer of the biases.
        lora_rank: with a rank ``> 0``, ``gate``, ``up`` and ``down`` get adapters; at most
            ``min(features, hidden)``.
        lora_alpha: the adapters are scaled by ``lora_alpha / lora_rank`` (1 if None); set
            only with ``lora_rank``; a scale past ``1.8e19`` (the square root of float32's
            largest value, where an optimizer's squared gradients overflow) is refused.
        rngs: random streams.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import GatedMLP
        >>> mlp = GatedMLP(8, 24, lora_rank=2, rngs=Rngs(0))
        >>> mlp.gate.kernel.shape, mlp.gate.lora.lora_a.shape, mlp(jnp.ones((2, 8))).shape
        ((8, 24), (8, 2), (2, 8))
    """

    def __init__(
        self,
        features: Size,
        hidden: Size,
        *,
        activation: Callable[[jax.Array], jax.Array] = silu,
        use_bias: bool = False,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        lora_rank: Count = 0,
        lora_alpha: Positive | None = None,
        rngs: Rngs,
    ):
        _setup_mlp(self, "GatedMLP", features, hidden, activation, use_bias, dtype, param_dtype)
        self.kernel_init, self.bias_init = kernel_init, bias_init
        kernel = (self.features, self.hidden)
        self.lora_rank, self.lora_alpha = _lora_rank("GatedMLP", lora_rank, kernel), lora_alpha
        self._scale = _lora_scale("GatedMLP", self.lora_rank, lora_alpha)
        make = _Projections(self, rngs).make
        self.gate = make(self.features, self.hidden, ("embed", "mlp"), use_bias)
        self.up = make(self.features, self.hidden, ("embed", "mlp"), use_bias)
        self.down = make(self.hidden, self.features, ("mlp", "embed"), use_bias)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Apply the block to ``x`` ``(..., features)``."""
        gate = self.activation(_project(self.gate, x, self._scale))
        return _project(self.down, gate * _project(self.up, x, self._scale), self._scale)


def _setup_mlp(
    layer: Any, name: str, features: Any, hidden: Any, activation: Any, bias: Any, *dtypes: Any
) -> None:
    layer.features = check_positive_int(name, "features", features)
    layer.hidden = check_positive_int(name, "hidden", hidden)
    if not callable(activation):
        raise TypeError(f"{name} activation must be a function, got {activation!r}.")
    layer.activation = activation
    layer.use_bias = _check_bool(name, "use_bias", bias)
    dtype, param_dtype = dtypes
    layer.dtype, layer.param_dtype = dtype, check_param_dtype(name, "param_dtype", param_dtype)


# -- the block ---------------------------------------------------------------------------------
class TransformerBlock(Module):
    """A residual attention sub-block then a residual MLP sub-block, pre- or post-norm.

    Pre-norm (GPT-2, Llama, Mistral, Qwen, ViT)::

        x = x + attention(attention_norm(x)); x = x + mlp(mlp_norm(x))

    Post-norm (BERT)::

        x = attention_norm(x + attention(x)); x = mlp_norm(x + mlp(x))

    Every sub-layer is a layer of its own (in a config a nested ``{type: ...}``), so a block
    lives in a `Repeat` like any layer; ``positions`` and ``mask`` reach the attention.

    Args:
        attention: the sequence mixer, e.g. a `SelfAttention`.
        mlp: the position-wise block, e.g. an `MLP` or a `GatedMLP`.
        attention_norm: the norm of the attention sub-block (`LayerNorm`, `RMSNorm`).
        mlp_norm: the norm of the MLP sub-block.
        post_norm: normalize after each residual sum instead of before the sub-layer.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import MLP, LayerNorm, SelfAttention, TransformerBlock
        >>> rngs = Rngs(0)
        >>> block = TransformerBlock(
        ...     SelfAttention(8, 2, is_causal=True, rngs=rngs), MLP(8, 32, rngs=rngs),
        ...     LayerNorm(8, rngs=rngs), LayerNorm(8, rngs=rngs))
        >>> block(jnp.ones((2, 5, 8)), mask=jnp.ones((2, 5), bool)).shape
        (2, 5, 8)
    """

    def __init__(
        self,
        attention: Module,
        mlp: Module,
        attention_norm: Module,
        mlp_norm: Module,
        *,
        post_norm: bool = False,
    ):
        for name, layer in (
            ("attention", attention),
            ("mlp", mlp),
            ("attention_norm", attention_norm),
            ("mlp_norm", mlp_norm),
        ):
            if not callable(layer):
                raise TypeError(f"TransformerBlock {name} must be a layer, got {layer!r}.")
        self.attention, self.mlp = attention, mlp
        self.attention_norm, self.mlp_norm = attention_norm, mlp_norm
        norm_axes(attention_norm)
        norm_axes(mlp_norm)
        self.post_norm = _check_bool("TransformerBlock", "post_norm", post_norm)

    def __call__(
        self, x: jax.Array, *, positions: jax.Array | None = None, mask: jax.Array | None = None
    ) -> jax.Array:
        """Apply the block to ``x`` ``(batch, length, features)``; ``positions`` and ``mask``
        (``(batch, length)``) go to the attention."""
        extra = {k: v for k, v in (("positions", positions), ("mask", mask)) if v is not None}
        if self.post_norm:
            x = self.attention_norm(x + self.attention(x, **extra))
            return self.mlp_norm(x + self.mlp(x))
        x = x + self.attention(self.attention_norm(x), **extra)
        return x + self.mlp(self.mlp_norm(x))

"""Dense layers: `Linear` and `Embed`."""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Param, Rngs

from . import initializers
from ._axis_names import EMBED, VOCAB, dense_names, named_param
from ._checks import (
    Dtype,
    PromoteDtypeFn,
    as_input,
    check_last_axis,
    check_positive_int,
    element_type,
    metadata,
    promote_dtype,
)
from ._constraints import Size
from ._sharding import out_sharding_op, place
from .initializers import Initializer

__all__ = ["Linear", "Embed"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_KERNEL_INIT = initializers.lecun_normal()
_DEFAULT_EMBEDDING_INIT = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


class Linear(Module):
    """Dense layer ``y = x @ kernel + bias`` over the last axis.

    Args:
        in_features: width of the input's last axis.
        out_features: width of the output's last axis.
        use_bias: whether to add a bias.
        dtype: computation dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``kernel`` and ``bias``.
        precision: ``jax.lax.Precision`` for the matmul.
        kernel_init: initializer of ``kernel``, shape ``(in_features, out_features)``.
        bias_init: initializer of ``bias``, shape ``(out_features,)``.
        dot_general: the contraction, called as ``jax.lax.dot_general`` is (e.g. a quantized
            one); it gets ``preferred_element_type``/``out_sharding`` only when they are set.
        promote_dtype: brings ``(inputs, kernel, bias)`` to one dtype, called with
            ``dtype=dtype`` (see `promote_dtype`: integer inputs become float32).
        preferred_element_type: accumulation/result dtype passed to ``lax.dot_general``.
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata (e.g. ``sharding_names``) for the ``kernel`` Param.
        bias_metadata: metadata for the ``bias`` Param.

    Raises:
        TypeError: for a non-numeric input.
        ValueError: for an input whose last axis is not ``in_features`` wide.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear
        >>> layer = Linear(3, 4, rngs=Rngs(0))
        >>> layer.kernel.value.shape, layer.bias.value.shape
        ((3, 4), (4,))
        >>> layer(jnp.ones((2, 3))).shape
        (2, 4)
    """

    def __init__(
        self,
        in_features: Size,
        out_features: Size,
        *,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        dot_general: Callable[..., jax.Array] = jax.lax.dot_general,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.in_features = check_positive_int("Linear", "in_features", in_features)
        self.out_features = check_positive_int("Linear", "out_features", out_features)
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.dot_general = dot_general
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type
        self.kernel_metadata = metadata(kernel_metadata)
        self.bias_metadata = metadata(bias_metadata)
        kernel_value = kernel_init(rngs.params(), (in_features, out_features), param_dtype)
        names = dense_names(self.in_features, self.out_features)
        self.kernel = named_param(kernel_value, self.kernel_metadata, names)
        self.bias: Param | None = None
        if use_bias:
            bias_value = bias_init(rngs.params(), (out_features,), param_dtype)
            self.bias = named_param(bias_value, self.bias_metadata, names[1:])

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        """Apply the layer to ``inputs`` of shape ``(..., in_features)``.

        ``out_sharding`` (a ``PartitionSpec`` over the mesh set with ``jax.set_mesh``, or a
        ``NamedSharding``) lays the output out over the mesh's devices.
        """
        inputs = as_input("Linear", inputs)
        # (the kernel, not in_features: under shard_map a row-parallel kernel is a local shard)
        check_last_axis("Linear", inputs, self.kernel.shape[0], "in_features")
        bias = None if self.bias is None else self.bias.value
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel.value, bias), dtype=self.dtype
        )
        dot_general = out_sharding_op("Linear", self.dot_general, out_sharding)
        y = dot_general(
            inputs,
            kernel,
            (((inputs.ndim - 1,), (0,)), ((), ())),
            precision=self.precision,
            **element_type(self.preferred_element_type),
        )
        if bias is not None:
            y = y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
        return y


def _take_rows(embedding: jax.Array, ids: jax.Array) -> jax.Array:
    return jnp.take(embedding, ids, axis=0)


class Embed(Module):
    """Lookup table mapping integer ids in ``[0, num_embeddings)`` to ``features``-vectors.

    Args:
        num_embeddings: number of rows of the table.
        features: width of each embedding vector.
        dtype: dtype of the looked-up vectors and of ``attend``; ``None`` uses the
            embedding's dtype (``param_dtype``).
        param_dtype: dtype of ``embedding``.
        embedding_init: initializer of ``embedding``, shape ``(num_embeddings, features)``.
        promote_dtype: brings the arrays to the computation dtype, called with
            ``dtype=`` (and ``inexact=False`` for the lookup); see `promote_dtype`.
        rngs: random streams; ``rngs.params()`` initializes the table.
        embedding_metadata: metadata for the ``embedding`` Param.

    Raises:
        TypeError: for a non-integer input to ``__call__``.
        ValueError: for an ``attend`` query whose last axis is not ``features`` wide.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Embed
        >>> embed = Embed(10, 4, rngs=Rngs(0))
        >>> embed(jnp.array([[1, 2, 3]])).shape
        (1, 3, 4)
        >>> embed.attend(jnp.ones((2, 4))).shape
        (2, 10)
    """

    def __init__(
        self,
        num_embeddings: Size,
        features: Size,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        embedding_init: Initializer = _DEFAULT_EMBEDDING_INIT,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        embedding_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.num_embeddings = check_positive_int("Embed", "num_embeddings", num_embeddings)
        self.features = check_positive_int("Embed", "features", features)
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.embedding_init = embedding_init
        self.promote_dtype = promote_dtype
        self.embedding_metadata = metadata(embedding_metadata)
        value = embedding_init(rngs.params(), (num_embeddings, features), param_dtype)
        self.embedding = named_param(value, self.embedding_metadata, (VOCAB, EMBED))

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        """Look up the rows ``inputs`` (any integer array) -> shape ``inputs.shape + (features,)``.

        ``out_sharding`` lays the looked-up vectors out over the mesh (see `Linear`).
        """
        inputs = jnp.asarray(inputs)
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise TypeError(
                f"Embed expects integer ids, got dtype {inputs.dtype} with shape "
                f"{inputs.shape}. Cast the ids with x.astype(jnp.int32); to project float "
                f"vectors use Embed.attend or Linear."
            )
        if self.num_embeddings == 1:
            (embedding,) = self.promote_dtype(
                (self.embedding.value,), dtype=self._dtype(), inexact=False
            )
            return place(
                "Embed", jnp.broadcast_to(embedding, inputs.shape + (self.features,)), out_sharding
            )
        # The looked-up rows are cast, not the table: the same values, and the gradient's
        # scatter-add into the table runs in param_dtype (in bfloat16 it is lossy, and 9x slower
        # a step on an H200: see docs/performance.md).
        take = out_sharding_op("Embed", _take_rows, out_sharding, native=False)
        (rows,) = self.promote_dtype(
            (take(self.embedding.value, inputs),), dtype=self._dtype(), inexact=False
        )
        return rows

    def attend(self, query: jax.Array, out_sharding: Any = None) -> jax.Array:
        """Score ``query`` (``(..., features)``) against every embedding: ``query @ embedding.T``.

        ``out_sharding`` lays the scores out over the mesh (see `Linear`); integer queries are
        promoted as by `Linear`.

        Example:
            >>> import jax.numpy as jnp
            >>> from nnx_core import Rngs
            >>> from nnx_layers import Embed
            >>> Embed(5, 3, rngs=Rngs(0)).attend(jnp.ones((7, 3))).shape
            (7, 5)
        """
        query = as_input("Embed.attend", query)
        check_last_axis("Embed.attend", query, self.features, "features")
        query, embedding = self.promote_dtype((query, self.embedding.value), dtype=self._dtype())
        return out_sharding_op("Embed.attend", jnp.dot, out_sharding)(query, embedding.T)

    def _dtype(self) -> Dtype:
        """The computation dtype: ``dtype``, or the embedding's own dtype when it is None."""
        return self.embedding.value.dtype if self.dtype is None else self.dtype

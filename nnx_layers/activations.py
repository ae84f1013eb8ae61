"""Activation functions: plain module-level functions, usable by name.

Each function is a hashable singleton, so it can sit in a `Sequential` (or any Module attribute)
as static structure. ``get(name)`` returns the function registered under ``name`` and
``name_of(fn)`` gives the name back, so a config file can write ``{type: relu}``.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_layers import activations
    >>> activations.get("relu")(jnp.array([-1.0, 2.0]))
    Array([0., 2.], dtype=float32)
    >>> activations.name_of(activations.swish)
    'swish'
"""

import difflib
from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any, Literal

import jax
import jax.numpy as jnp

from ._constraints import Positive

__all__ = [
    "relu",
    "relu6",
    "gelu",
    "silu",
    "swish",
    "tanh",
    "sigmoid",
    "hard_sigmoid",
    "hard_tanh",
    "log_sigmoid",
    "softmax",
    "log_softmax",
    "elu",
    "celu",
    "selu",
    "leaky_relu",
    "softplus",
    "soft_sign",
    "glu",
    "identity",
    "hard_silu",
    "hard_swish",
    "logsumexp",
    "one_hot",
    "standardize",
    "normalize",
    "get",
    "name_of",
    "names",
]


def relu(x: jax.Array) -> jax.Array:
    """Rectified linear unit ``max(x, 0)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import relu
        >>> relu(jnp.array([-1.0, 0.0, 2.0]))
        Array([0., 0., 2.], dtype=float32)
    """
    return jax.nn.relu(x)


def relu6(x: jax.Array) -> jax.Array:
    """ReLU clipped at 6: ``min(max(x, 0), 6)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import relu6
        >>> relu6(jnp.array([-1.0, 3.0, 8.0]))
        Array([0., 3., 6.], dtype=float32)
    """
    return jax.nn.relu6(x)


def gelu(x: jax.Array, approximate: bool = True) -> jax.Array:
    """Gaussian error linear unit (tanh approximation by default, as flax and jax).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import gelu
        >>> gelu(jnp.array([0.0]))
        Array([0.], dtype=float32)
    """
    return jax.nn.gelu(x, approximate=approximate)


def silu(x: jax.Array) -> jax.Array:
    """Sigmoid linear unit ``x * sigmoid(x)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import silu
        >>> silu(jnp.array([0.0]))
        Array([0.], dtype=float32)
    """
    return jax.nn.silu(x)


def swish(x: jax.Array) -> jax.Array:
    """Swish, the same function as `silu`: ``x * sigmoid(x)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import swish
        >>> swish(jnp.array([0.0]))
        Array([0.], dtype=float32)
    """
    return jax.nn.silu(x)


def tanh(x: jax.Array) -> jax.Array:
    """Hyperbolic tangent.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import tanh
        >>> tanh(jnp.array([0.0]))
        Array([0.], dtype=float32)
    """
    return jnp.tanh(x)


def sigmoid(x: jax.Array) -> jax.Array:
    """Logistic sigmoid ``1 / (1 + exp(-x))``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import sigmoid
        >>> sigmoid(jnp.array([0.0]))
        Array([0.5], dtype=float32)
    """
    return jax.nn.sigmoid(x)


def hard_sigmoid(x: jax.Array) -> jax.Array:
    """Piecewise-linear sigmoid ``relu6(x + 3) / 6``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import hard_sigmoid
        >>> hard_sigmoid(jnp.array([-4.0, 0.0, 4.0]))
        Array([0. , 0.5, 1. ], dtype=float32)
    """
    return jax.nn.hard_sigmoid(x)


def hard_tanh(x: jax.Array) -> jax.Array:
    """``x`` clipped to ``[-1, 1]``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import hard_tanh
        >>> hard_tanh(jnp.array([-2.0, 0.5, 2.0]))
        Array([-1. ,  0.5,  1. ], dtype=float32)
    """
    return jax.nn.hard_tanh(x)


def log_sigmoid(x: jax.Array) -> jax.Array:
    """``log(sigmoid(x))``, computed stably.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import log_sigmoid
        >>> log_sigmoid(jnp.array([0.0]))
        Array([-0.6931472], dtype=float32)
    """
    return jax.nn.log_sigmoid(x)


def softmax(x: jax.Array, axis: int = -1) -> jax.Array:
    """Softmax over ``axis``: ``exp(x) / sum(exp(x))``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import softmax
        >>> softmax(jnp.array([0.0, 0.0]))
        Array([0.5, 0.5], dtype=float32)
    """
    return jax.nn.softmax(x, axis=axis)


def log_softmax(x: jax.Array, axis: int = -1) -> jax.Array:
    """Log of the softmax over ``axis``, computed stably.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import log_softmax
        >>> log_softmax(jnp.array([0.0, 0.0]))
        Array([-0.6931472, -0.6931472], dtype=float32)
    """
    return jax.nn.log_softmax(x, axis=axis)


def elu(x: jax.Array, alpha: float = 1.0) -> jax.Array:
    """Exponential linear unit: ``x`` if ``x > 0`` else ``alpha * (exp(x) - 1)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import elu
        >>> elu(jnp.array([2.0, 0.0]))
        Array([2., 0.], dtype=float32)
    """
    return jax.nn.elu(x, alpha=alpha)


def celu(x: jax.Array, alpha: Positive = 1.0) -> jax.Array:
    """Continuously differentiable ELU (``alpha > 0``).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import celu
        >>> celu(jnp.array([2.0, 0.0]))
        Array([2., 0.], dtype=float32)
    """
    return jax.nn.celu(x, alpha=alpha)


def selu(x: jax.Array) -> jax.Array:
    """Scaled exponential linear unit.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import selu
        >>> selu(jnp.array([0.0]))
        Array([0.], dtype=float32)
    """
    return jax.nn.selu(x)


def leaky_relu(x: jax.Array, negative_slope: float = 0.01) -> jax.Array:
    """``x`` if ``x >= 0`` else ``negative_slope * x``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import leaky_relu
        >>> leaky_relu(jnp.array([-100.0, 2.0]))
        Array([-1.,  2.], dtype=float32)
    """
    return jax.nn.leaky_relu(x, negative_slope=negative_slope)


def softplus(x: jax.Array) -> jax.Array:
    """``log(1 + exp(x))``, computed stably.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import softplus
        >>> softplus(jnp.array([0.0]))
        Array([0.6931472], dtype=float32)
    """
    return jax.nn.softplus(x)


def soft_sign(x: jax.Array) -> jax.Array:
    """``x / (|x| + 1)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import soft_sign
        >>> soft_sign(jnp.array([1.0]))
        Array([0.5], dtype=float32)
    """
    return jax.nn.soft_sign(x)


def glu(x: jax.Array, axis: int = -1) -> jax.Array:
    """Gated linear unit: split ``x`` in two halves ``a, b`` on ``axis``; ``a * sigmoid(b)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import glu
        >>> glu(jnp.ones((2, 6))).shape
        (2, 3)
    """
    return jax.nn.glu(x, axis=axis)


def identity(x: jax.Array) -> jax.Array:
    """Return ``x`` unchanged.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers.activations import identity
        >>> identity(jnp.array([1.0]))
        Array([1.], dtype=float32)
    """
    return x


def hard_silu(x: jax.Array) -> jax.Array:
    """Piecewise-linear SiLU ``x * hard_sigmoid(x) = x * relu6(x + 3) / 6``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import hard_silu
        >>> hard_silu(jnp.array([-4.0, 0.0, 3.0]))
        Array([-0.,  0.,  3.], dtype=float32)
    """
    return jax.nn.hard_silu(x)


def hard_swish(x: jax.Array) -> jax.Array:
    """Hard swish, the same function as `hard_silu`: ``x * relu6(x + 3) / 6``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import hard_swish
        >>> hard_swish(jnp.array([-4.0, 0.0, 3.0]))
        Array([-0.,  0.,  3.], dtype=float32)
    """
    return jax.nn.hard_silu(x)


def logsumexp(
    a: jax.Array,
    axis: int | Sequence[int] | None = None,
    b: jax.Array | None = None,
    keepdims: bool = False,
    *,
    return_sign: bool = False,
    where: jax.Array | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """``log(sum(b * exp(a)))`` over ``axis`` (all axes when ``None``), computed stably.

    Args:
        a: the input.
        axis: the axes to reduce; ``None`` reduces all of them.
        b: optional weights, broadcastable to ``a``.
        keepdims: keep the reduced axes with size 1.
        return_sign: also return the sign of ``sum(b * exp(a))`` (for negative ``b``); the
            first result is then ``log(abs(...))``.
        where: optional boolean mask of the entries to include.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import logsumexp
        >>> logsumexp(jnp.zeros((2, 4)), axis=-1)  # log(4)
        Array([1.3862944, 1.3862944], dtype=float32)
        >>> logsumexp(jnp.zeros((2, 4))).shape
        ()
    """
    axis = tuple(axis) if isinstance(axis, Sequence) else axis
    return jax.nn.logsumexp(
        a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign, where=where
    )


def one_hot(
    x: jax.Array, num_classes: int, *, dtype: Any | None = None, axis: int = -1
) -> jax.Array:
    """Encode integer ids ``x`` as one-hot vectors of length ``num_classes`` along ``axis``.

    Ids outside ``[0, num_classes)`` become all-zero vectors.

    Args:
        x: an integer array of class ids.
        num_classes: the length of each one-hot vector.
        dtype: the result's dtype; ``None`` gives the default float dtype (float32).
        axis: where the new axis goes in the result.

    Raises:
        TypeError: ``x`` is not an integer array.
        ValueError: ``num_classes`` is not a positive integer.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import one_hot
        >>> one_hot(jnp.array([0, 2, 5]), 3)
        Array([[1., 0., 0.],
               [0., 0., 1.],
               [0., 0., 0.]], dtype=float32)
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(
            f"one_hot expects integer class ids, got dtype {x.dtype} with shape {x.shape}. "
            f"Cast the ids first, e.g. x.astype(jnp.int32)."
        )
    if isinstance(num_classes, bool) or not isinstance(num_classes, Integral) or num_classes < 1:
        raise ValueError(
            f"one_hot num_classes must be a positive integer, got {num_classes!r}. "
            f"Pass e.g. one_hot(x, num_classes=10)."
        )
    return jax.nn.one_hot(x, int(num_classes), dtype=dtype, axis=axis)


def standardize(
    x: jax.Array,
    axis: int | Sequence[int] | None = -1,
    mean: jax.Array | None = None,
    variance: jax.Array | None = None,
    epsilon: float = 1e-5,
    *,
    where: jax.Array | None = None,
    algorithm: Literal["fast", "stable"] = "fast",
) -> jax.Array:
    """Shift and scale ``x`` to zero mean and unit variance over ``axis``.

    ``(x - mean) / sqrt(variance + epsilon)``, with the statistics of ``x`` over ``axis``
    unless ``mean`` / ``variance`` are given.

    Args:
        x: the input.
        axis: the axes the statistics are taken over; ``None`` means all axes.
        mean: use this mean instead of ``x``'s.
        variance: use this variance instead of ``x``'s.
        epsilon: added to the variance.
        where: optional boolean mask of the entries that count in the statistics.
        algorithm: ``"fast"`` computes the variance as ``mean(x**2) - mean(x)**2`` (clipped
            at 0), ``"stable"`` as ``mean((x - mean(x))**2)``.

    Raises:
        ValueError: for an unknown ``algorithm``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import standardize
        >>> standardize(jnp.array([1.0, 3.0]), epsilon=0.0)
        Array([-1.,  1.], dtype=float32)
    """
    if algorithm not in ("fast", "stable"):
        raise ValueError(
            f"standardize algorithm must be 'fast' or 'stable', got {algorithm!r}. "
            f"Pass algorithm='stable' for the two-pass variance."
        )
    axis = tuple(axis) if isinstance(axis, Sequence) else axis
    return jax.nn.standardize(
        x, axis, mean=mean, variance=variance, epsilon=epsilon, where=where, algorithm=algorithm
    )


def normalize(
    x: jax.Array,
    axis: int | Sequence[int] | None = -1,
    mean: jax.Array | None = None,
    variance: jax.Array | None = None,
    epsilon: float = 1e-5,
    *,
    where: jax.Array | None = None,
    algorithm: Literal["fast", "stable"] = "fast",
) -> jax.Array:
    """The same function as `standardize` under flax.linen's older name.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import normalize
        >>> normalize(jnp.array([[1.0, 3.0], [0.0, 10.0]]), epsilon=0.0)
        Array([[-1.,  1.],
               [-1.,  1.]], dtype=float32)
    """
    return standardize(x, axis, mean, variance, epsilon, where=where, algorithm=algorithm)


_TABLE: dict[str, Callable[..., Any]] = {
    name: globals()[name] for name in __all__ if name not in ("get", "name_of", "names")
}


def names() -> tuple[str, ...]:
    """Return every activation name, sorted.

    Example:
        >>> from nnx_layers import activations
        >>> "relu" in activations.names()
        True
    """
    return tuple(sorted(_TABLE))


def get(name: str) -> Callable[..., Any]:
    """Return the activation function registered as ``name``.

    Raises:
        ValueError: if ``name`` is not an activation; the message suggests close names.

    Example:
        >>> from nnx_layers import activations
        >>> activations.get("gelu") is activations.gelu
        True
    """
    if name not in _TABLE:
        close = difflib.get_close_matches(str(name), _TABLE, n=3)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"Unknown activation {name!r}.{hint} Known activations: {', '.join(names())}."
        )
    return _TABLE[name]


def name_of(fn: Callable[..., Any]) -> str:
    """Return the registered name of activation ``fn``.

    Raises:
        ValueError: if ``fn`` is not one of this module's activations.

    Example:
        >>> from nnx_layers import activations
        >>> activations.name_of(activations.relu)
        'relu'
    """
    for name, candidate in _TABLE.items():
        if candidate is fn:
            return name
    raise ValueError(
        f"{fn!r} is not a registered activation. Use one of nnx_layers.activations "
        f"({', '.join(names())}), or wrap custom code in a Module."
    )

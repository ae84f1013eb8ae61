"""Parameter initializers as small, hashable value objects.

Every initializer is a frozen dataclass with ``__call__(key, shape, dtype=jnp.float32)``. Two
initializers built with the same arguments compare equal and hash equal, so models that use
them have equal static structure. Each one has a ``name`` (its entry in the name table) and a
``config()`` dict, so ``get(init.name, **init.config()) == init`` always holds.

The algorithms are the standard ones used across the JAX ecosystem, and produce the same
values as ``jax.nn.initializers`` for the same key, shape and dtype.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from nnx_layers import initializers
    >>> init = initializers.get("normal", stddev=0.02)
    >>> init
    Normal(stddev=0.02)
    >>> init.name, init.config()
    ('normal', {'stddev': 0.02})
    >>> init(jax.random.key(0), (2, 3)).shape
    (2, 3)
    >>> initializers.lecun_normal() == initializers.variance_scaling(1.0, "fan_in", "truncated_normal")
    True
"""

import dataclasses
import difflib
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "Initializer",
    "Zeros",
    "Ones",
    "Constant",
    "Normal",
    "Uniform",
    "TruncatedNormal",
    "VarianceScaling",
    "Orthogonal",
    "zeros",
    "ones",
    "zeros_init",
    "ones_init",
    "constant",
    "normal",
    "uniform",
    "truncated_normal",
    "variance_scaling",
    "lecun_normal",
    "lecun_uniform",
    "he_normal",
    "he_uniform",
    "kaiming_normal",
    "kaiming_uniform",
    "xavier_normal",
    "xavier_uniform",
    "glorot_normal",
    "glorot_uniform",
    "orthogonal",
    "get",
    "names",
]


@runtime_checkable
class Initializer(Protocol):
    """The type of an initializer: anything called as ``init(key, shape, dtype)`` -> array.

    Use it to annotate ``*_init`` arguments. Every initializer in this module satisfies it, and
    so does any plain function with that call signature (e.g. ``jax.nn.initializers.ones``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_layers import Initializer, initializers
        >>> def halves(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
        ...     return jnp.full(shape, 0.5, dtype)
        >>> isinstance(halves, Initializer), isinstance(initializers.zeros, Initializer)
        (True, True)
        >>> halves(jax.random.key(0), (2,))
        Array([0.5, 0.5], dtype=float32)
    """

    def __call__(self, key: jax.Array, shape: Any, dtype: Any = ..., /) -> jax.Array:
        """Return an array of ``shape`` and ``dtype`` drawn with ``key``."""
        ...


_MODES = ("fan_in", "fan_out", "fan_avg", "fan_geo_avg")
_DISTRIBUTIONS = ("truncated_normal", "normal", "uniform")
# Standard deviation of a standard normal truncated to [-2, 2].
_TRUNCATED_STDDEV = 0.87962566103423978


def _canonical_dtype(dtype: Any) -> Any:
    return jax.dtypes.canonicalize_dtype(dtype)


def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)


def _flat(
    sample: Callable[[tuple[int, ...], Any], jax.Array], shape: tuple[int, ...], out_sharding: Any
) -> jax.Array:
    """Draw ``sample((size,), None)`` and reshape: the same values as ``sample(shape, None)``.

    JAX's counter-based generators number the entries in row-major order, so drawing flat
    gives identical values, while compiling far faster on CPU for high-rank shapes. With an
    ``out_sharding`` (explicit sharding, as jax's and flax.nnx's initializers take it) the
    draw is made in its shape, sharded so.
    """
    if out_sharding is not None:
        return sample(shape, out_sharding)
    return sample((math.prod(shape),), None).reshape(shape)


class _Base:
    """Shared behaviour: the call (shape and dtype normalised, then ``_init``), ``name`` from
    the name table and ``config()``."""

    name: ClassVar[str] = ""

    def __call__(
        self,
        key: jax.Array,
        shape: Sequence[int],
        dtype: Any = jnp.float32,
        *,
        out_sharding: Any = None,
    ) -> jax.Array:
        """Draw an array of ``shape`` and ``dtype`` from ``key`` (``out_sharding``: sharded so)."""
        return self._init(key, _shape(shape), _canonical_dtype(dtype), out_sharding)

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """Return the constructor arguments, so ``get(self.name, **self.config())`` rebuilds it."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Zeros(_Base):
    """Initialize with zeros.

    Example:
        >>> import jax
        >>> from nnx_layers.initializers import zeros
        >>> zeros(jax.random.key(0), (2,))
        Array([0., 0.], dtype=float32)
    """

    name: ClassVar[str] = "zeros"

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        return jnp.zeros(shape, dtype, out_sharding=out_sharding)


@dataclasses.dataclass(frozen=True)
class Ones(_Base):
    """Initialize with ones.

    Example:
        >>> import jax
        >>> from nnx_layers.initializers import ones
        >>> ones(jax.random.key(0), (2,))
        Array([1., 1.], dtype=float32)
    """

    name: ClassVar[str] = "ones"

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        return jnp.ones(shape, dtype, out_sharding=out_sharding)


@dataclasses.dataclass(frozen=True)
class Constant(_Base):
    """Initialize every entry with ``value``.

    Example:
        >>> import jax
        >>> from nnx_layers.initializers import constant
        >>> constant(0.5)(jax.random.key(0), (3,))
        Array([0.5, 0.5, 0.5], dtype=float32)
    """

    name: ClassVar[str] = "constant"
    value: float = 0.0

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        return jnp.full(shape, self.value, dtype, out_sharding=out_sharding)


@dataclasses.dataclass(frozen=True)
class Normal(_Base):
    """Sample from a normal distribution with mean 0 and standard deviation ``stddev``.

    Example:
        >>> import jax
        >>> from nnx_layers.initializers import normal
        >>> normal(stddev=0.02)(jax.random.key(0), (2, 3)).shape
        (2, 3)
    """

    name: ClassVar[str] = "normal"
    stddev: float = 1e-2

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        values = _flat(
            lambda s, sh: jax.random.normal(key, s, dtype, out_sharding=sh),
            shape,
            out_sharding,
        )
        return values * jnp.asarray(self.stddev, dtype)


@dataclasses.dataclass(frozen=True)
class Uniform(_Base):
    """Sample uniformly from ``[0, scale)``.

    Example:
        >>> import jax
        >>> from nnx_layers.initializers import uniform
        >>> x = uniform(scale=2.0)(jax.random.key(0), (6,))
        >>> bool((x >= 0).all() and (x < 2).all())
        True
    """

    name: ClassVar[str] = "uniform"
    scale: float = 1e-2

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        values = _flat(
            lambda s, sh: jax.random.uniform(key, s, dtype, out_sharding=sh),
            shape,
            out_sharding,
        )
        return values * jnp.asarray(self.scale, dtype)


@dataclasses.dataclass(frozen=True)
class TruncatedNormal(_Base):
    """Sample ``stddev * z`` with ``z`` a standard normal truncated to ``[lower, upper]``.

    Example:
        >>> import jax
        >>> from nnx_layers.initializers import truncated_normal
        >>> x = truncated_normal(stddev=1.0)(jax.random.key(0), (6,))
        >>> bool((abs(x) <= 2.0).all())
        True
    """

    name: ClassVar[str] = "truncated_normal"
    stddev: float = 1e-2
    lower: float = -2.0
    upper: float = 2.0

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        z = _flat(
            lambda s, sh: jax.random.truncated_normal(
                key, self.lower, self.upper, s, dtype, out_sharding=sh
            ),
            shape,
            out_sharding,
        )
        return z * jnp.asarray(self.stddev, dtype)


def _axes(value: int | Sequence[int]) -> int | tuple[int, ...]:
    return int(value) if isinstance(value, (int, np.integer)) else tuple(int(a) for a in value)


def _positive_axes(axes: int | tuple[int, ...], ndim: int) -> tuple[int, ...]:
    axes = (axes,) if isinstance(axes, int) else axes
    return tuple(a % ndim for a in axes)


def _fans(shape: tuple[int, ...], init: "VarianceScaling") -> tuple[float, float]:
    """Return ``(fan_in, fan_out)``; every axis not named is part of the receptive field."""
    ndim = len(shape)
    if ndim < 2:
        raise ValueError(
            f"{init!r} needs a shape with at least 2 dimensions to compute fan-in/fan-out, "
            f"got shape {shape}. Use a different initializer (e.g. normal) for 1-D parameters."
        )
    in_axes = _positive_axes(init.in_axis, ndim)
    out_axes = _positive_axes(init.out_axis, ndim)
    batch_axes = _positive_axes(init.batch_axis, ndim)
    in_size = math.prod(shape[a] for a in in_axes)
    out_size = math.prod(shape[a] for a in out_axes)
    batch_size = math.prod(shape[a] for a in batch_axes)
    receptive = math.prod(shape) / in_size / out_size / batch_size
    return in_size * receptive, out_size * receptive


@dataclasses.dataclass(frozen=True)
class VarianceScaling(_Base):
    """Sample with variance ``scale / n``, where ``n`` is chosen by ``mode`` from the fans.

    ``mode`` is one of ``fan_in``, ``fan_out``, ``fan_avg``, ``fan_geo_avg``; ``distribution``
    is one of ``truncated_normal``, ``normal``, ``uniform``. ``in_axis``/``out_axis`` name the
    input/output feature axes, ``batch_axis`` axes that are excluded from the fans.

    Example:
        >>> import jax
        >>> from nnx_layers.initializers import VarianceScaling
        >>> init = VarianceScaling(2.0, "fan_in", "normal")
        >>> init(jax.random.key(0), (1, 1, 2, 3)).shape
        (1, 1, 2, 3)
    """

    name: ClassVar[str] = "variance_scaling"
    scale: float = 1.0
    mode: str = "fan_in"
    distribution: str = "truncated_normal"
    in_axis: int | tuple[int, ...] = -2
    out_axis: int | tuple[int, ...] = -1
    batch_axis: int | tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(
                f"VarianceScaling mode must be one of {_MODES}, got {self.mode!r}. "
                f"Pass e.g. mode='fan_in'."
            )
        if self.distribution not in _DISTRIBUTIONS:
            raise ValueError(
                f"VarianceScaling distribution must be one of {_DISTRIBUTIONS}, got "
                f"{self.distribution!r}. Pass e.g. distribution='truncated_normal'."
            )
        for field in ("in_axis", "out_axis", "batch_axis"):
            object.__setattr__(self, field, _axes(getattr(self, field)))

    def _variance(self, shape: tuple[int, ...]) -> float:
        fan_in, fan_out = _fans(shape, self)
        denominator = {
            "fan_in": fan_in,
            "fan_out": fan_out,
            "fan_avg": (fan_in + fan_out) / 2,
            "fan_geo_avg": math.sqrt(fan_in * fan_out),
        }[self.mode]
        return self.scale / denominator

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        variance = jnp.array(self._variance(shape), dtype=dtype)
        if self.distribution == "truncated_normal":
            stddev = jnp.sqrt(variance) / jnp.array(_TRUNCATED_STDDEV, dtype)
            z = _flat(
                lambda s, sh: jax.random.truncated_normal(key, -2, 2, s, dtype, out_sharding=sh),
                shape,
                out_sharding,
            )
            return z * stddev
        if self.distribution == "normal":
            z = _flat(
                lambda s, sh: jax.random.normal(key, s, dtype, out_sharding=sh), shape, out_sharding
            )
            return z * jnp.sqrt(variance)
        z = _flat(
            lambda s, sh: jax.random.uniform(key, s, dtype, -1, out_sharding=sh),
            shape,
            out_sharding,
        )
        return z * jnp.sqrt(3 * variance)


@dataclasses.dataclass(frozen=True)
class Orthogonal(_Base):
    """Sample a (semi-)orthogonal matrix over ``column_axis`` and the flattened other axes.

    Half-precision dtypes are sampled in float32 and cast (as flax.nnx's LSTMCell does for its
    recurrent kernel), which also works where QR has no half-precision kernel (CPU).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_layers.initializers import orthogonal
        >>> w = orthogonal()(jax.random.key(0), (4, 4))
        >>> bool(jnp.allclose(w @ w.T, jnp.eye(4), atol=1e-5))
        True
    """

    name: ClassVar[str] = "orthogonal"
    scale: float = 1.0
    column_axis: int = -1

    def _init(
        self, key: jax.Array, shape: tuple[int, ...], dtype: Any, out_sharding: Any
    ) -> jax.Array:
        if len(shape) < 2:
            raise ValueError(
                f"orthogonal initializer needs a shape with at least 2 dimensions, got {shape}. "
                f"Use a different initializer for 1-D parameters."
            )
        n_cols = shape[self.column_axis]
        n_rows = math.prod(shape) // n_cols
        wide = n_rows < n_cols
        # Half precision: sample and factorize in float32, then cast (CPU has no bf16 QR).
        compute = jnp.promote_types(dtype, jnp.float32)
        matrix = jax.random.normal(key, (n_cols, n_rows) if wide else (n_rows, n_cols), compute)
        q, r = jnp.linalg.qr(matrix)
        q = q * jnp.sign(jnp.diagonal(r))[None, :]
        if wide:
            q = q.T
        other = tuple(np.delete(np.array(shape), self.column_axis))
        q = jnp.reshape(q, other + (n_cols,))
        q = jnp.moveaxis(q, -1, self.column_axis)
        out = (jnp.asarray(self.scale, compute) * q).astype(dtype)
        return out if out_sharding is None else jax.sharding.reshard(out, out_sharding)


#: Initialize with zeros (an initializer, not a factory): ``bias_init=zeros``.
zeros = Zeros()
#: Initialize with ones (an initializer, not a factory): ``scale_init=ones``.
ones = Ones()


def zeros_init() -> Zeros:
    """Return the zeros initializer.

    Example:
        >>> from nnx_layers.initializers import zeros_init, zeros
        >>> zeros_init() == zeros
        True
    """
    return Zeros()


def ones_init() -> Ones:
    """Return the ones initializer.

    Example:
        >>> from nnx_layers.initializers import ones_init, ones
        >>> ones_init() == ones
        True
    """
    return Ones()


def constant(value: float) -> Constant:
    """Return an initializer filling every entry with ``value``.

    Example:
        >>> from nnx_layers.initializers import constant
        >>> constant(0.1)
        Constant(value=0.1)
    """
    return Constant(value)


def normal(stddev: float = 1e-2) -> Normal:
    """Return a normal initializer with standard deviation ``stddev``.

    Example:
        >>> from nnx_layers.initializers import normal
        >>> normal(0.02)
        Normal(stddev=0.02)
    """
    return Normal(stddev)


def uniform(scale: float = 1e-2) -> Uniform:
    """Return an initializer sampling uniformly from ``[0, scale)``.

    Example:
        >>> from nnx_layers.initializers import uniform
        >>> uniform(0.5)
        Uniform(scale=0.5)
    """
    return Uniform(scale)


def truncated_normal(
    stddev: float = 1e-2, lower: float = -2.0, upper: float = 2.0
) -> TruncatedNormal:
    """Return a truncated-normal initializer (truncation in units of ``stddev``).

    Example:
        >>> from nnx_layers.initializers import truncated_normal
        >>> truncated_normal(0.02)
        TruncatedNormal(stddev=0.02, lower=-2.0, upper=2.0)
    """
    return TruncatedNormal(stddev, lower, upper)


def variance_scaling(
    scale: float,
    mode: str,
    distribution: str,
    *,
    in_axis: int | Sequence[int] = -2,
    out_axis: int | Sequence[int] = -1,
    batch_axis: int | Sequence[int] = (),
) -> VarianceScaling:
    """Return a variance-scaling initializer (see `VarianceScaling`).

    Example:
        >>> from nnx_layers.initializers import variance_scaling
        >>> variance_scaling(2.0, "fan_in", "uniform").distribution
        'uniform'
    """
    return VarianceScaling(scale, mode, distribution, in_axis, out_axis, batch_axis)  # type: ignore[arg-type]


def _preset(
    scale: float, mode: str, distribution: str, doc_name: str
) -> Callable[..., VarianceScaling]:
    def factory(
        in_axis: int | Sequence[int] = -2,
        out_axis: int | Sequence[int] = -1,
        batch_axis: int | Sequence[int] = (),
    ) -> VarianceScaling:
        return VarianceScaling(scale, mode, distribution, in_axis, out_axis, batch_axis)  # type: ignore[arg-type]

    factory.__name__ = factory.__qualname__ = doc_name
    factory.__doc__ = f"""Return ``VarianceScaling({scale}, {mode!r}, {distribution!r})``.

    Example:
        >>> from nnx_layers.initializers import {doc_name}
        >>> {doc_name}().config()["mode"]
        '{mode}'
    """
    return factory


lecun_normal = _preset(1.0, "fan_in", "truncated_normal", "lecun_normal")
lecun_uniform = _preset(1.0, "fan_in", "uniform", "lecun_uniform")
he_normal = _preset(2.0, "fan_in", "truncated_normal", "he_normal")
he_uniform = _preset(2.0, "fan_in", "uniform", "he_uniform")
kaiming_normal = _preset(2.0, "fan_in", "truncated_normal", "kaiming_normal")
kaiming_uniform = _preset(2.0, "fan_in", "uniform", "kaiming_uniform")
glorot_normal = _preset(1.0, "fan_avg", "truncated_normal", "glorot_normal")
glorot_uniform = _preset(1.0, "fan_avg", "uniform", "glorot_uniform")
xavier_normal = _preset(1.0, "fan_avg", "truncated_normal", "xavier_normal")
xavier_uniform = _preset(1.0, "fan_avg", "uniform", "xavier_uniform")


def orthogonal(scale: float = 1.0, column_axis: int = -1) -> Orthogonal:
    """Return an orthogonal initializer.

    Example:
        >>> from nnx_layers.initializers import orthogonal
        >>> orthogonal(scale=2.0)
        Orthogonal(scale=2.0, column_axis=-1)
    """
    return Orthogonal(scale, column_axis)


_TABLE: dict[str, Callable[..., Any]] = {
    "zeros": Zeros,
    "ones": Ones,
    "constant": Constant,
    "normal": Normal,
    "uniform": Uniform,
    "truncated_normal": TruncatedNormal,
    "variance_scaling": VarianceScaling,
    "orthogonal": Orthogonal,
    "lecun_normal": lecun_normal,
    "lecun_uniform": lecun_uniform,
    "he_normal": he_normal,
    "he_uniform": he_uniform,
    "kaiming_normal": kaiming_normal,
    "kaiming_uniform": kaiming_uniform,
    "glorot_normal": glorot_normal,
    "glorot_uniform": glorot_uniform,
    "xavier_normal": xavier_normal,
    "xavier_uniform": xavier_uniform,
}


def names() -> tuple[str, ...]:
    """Return every name ``get`` accepts, sorted.

    Example:
        >>> from nnx_layers import initializers
        >>> "lecun_normal" in initializers.names()
        True
    """
    return tuple(sorted(_TABLE))


def get(name: str, **kwargs: Any) -> Any:
    """Build the initializer registered as ``name`` with keyword arguments ``kwargs``.

    Args:
        name: a name from `names()`, e.g. ``"normal"`` or ``"he_uniform"``.
        **kwargs: the initializer's arguments, e.g. ``stddev=0.02``.

    Returns:
        The initializer value object.

    Raises:
        ValueError: if ``name`` is unknown or ``kwargs`` do not fit it.

    Example:
        >>> from nnx_layers import initializers
        >>> initializers.get("truncated_normal", stddev=0.02)
        TruncatedNormal(stddev=0.02, lower=-2.0, upper=2.0)
        >>> init = initializers.he_uniform()
        >>> initializers.get(init.name, **init.config()) == init
        True
    """
    if name not in _TABLE:
        close = difflib.get_close_matches(str(name), _TABLE, n=3)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"Unknown initializer {name!r}.{hint} Known initializers: {', '.join(names())}."
        )
    try:
        return _TABLE[name](**kwargs)
    except TypeError as error:
        raise ValueError(
            f"Initializer {name!r} does not accept arguments {sorted(kwargs)}: {error}. "
            f"Check the argument names against initializers.{name}."
        ) from None

"""Wrappers that reparametrize a layer's weights: `WeightNorm` and `SpectralNorm`.

Each call computes normalized weights from the wrapped layer's own Params and runs a copy of
the layer that uses them (sharing every other Variable). The Params themselves are never
overwritten: they stay the free parameters the optimizer updates, and the normalization is
applied again on every call, with gradients flowing through it.
"""

from collections.abc import Sequence
from numbers import Integral
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import (
    BatchStat,
    Module,
    Param,
    PathContains,
    Rngs,
    State,
    format_path,
    merge,
    split,
    state,
    to_predicate,
)

from . import initializers
from ._axis_names import named_param
from ._checks import Dtype, PromoteDtypeFn, canonical_axes, frozen, promote_dtype
from ._constraints import Count, NonNegative
from ._norm_stats import check_epsilon
from .initializers import Initializer

__all__ = ["WeightNorm", "SpectralNorm"]

_KERNELS = PathContains("kernel")


def _params(layer: Module) -> list[tuple[tuple[Any, ...], Param]]:
    """The Params of ``layer`` with their paths, in sorted depth-first order."""
    return list(state(layer, Param).flat_state())


def _call_with(layer: Module, values: dict[Any, jax.Array], *args: Any, **kw: Any) -> Any:
    """Call a copy of ``layer`` whose Params at the paths in ``values`` hold those values.

    The copy shares every other Variable with ``layer`` (so their updates reach it), while the
    layer's own Params are never written: the wrapper is a pure function of them.
    """
    graphdef, variables = split(layer)
    flat = [(path, values.get(path, leaf)) for path, leaf in variables.flat_state()]
    return merge(graphdef, State.from_flat_state(flat))(*args, **kw)


def _l2_normalize(x: jax.Array, axes: tuple[int, ...] | None, epsilon: float) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=axes, keepdims=True) + epsilon)


Path = tuple[Any, ...]


def _missing(wrapper: str, stats: str, path: tuple[Any, ...]) -> ValueError:
    return ValueError(
        f"{wrapper} has no {stats} for layer_instance.{format_path(path)}: the wrapped layer "
        f"gained or reshaped parameters after {wrapper} was built. Build {wrapper} around the "
        f"finished layer."
    )


class WeightNorm(Module):
    """Weight normalization: ``w = scale * v / ||v||`` for the selected Params ``v`` of a layer.

    For every Param of ``layer_instance`` matched by ``variable_filter`` (by default those whose
    path contains ``kernel``), the norm is taken over every axis but ``feature_axes``, so by
    default each output column of a kernel has norm ``scale``. The learned ``scales`` (Params,
    one per feature) live in ``self.scales``, keyed by the Param's path (a tuple, as in
    flax.nnx: ``scales[("kernel",)]``).

    Args:
        layer_instance: the layer to wrap (any Module with Params).
        feature_axes: axes of each weight that keep their own norm and scale; ``None``
            normalizes each weight as a whole (one scalar scale).
        use_scale: whether to multiply by the learned ``scales`` (else the norm is 1).
        scale_init: initializer of the scales.
        epsilon: added to the squared norm before the square root.
        dtype: dtype of the normalized weights; ``None`` promotes the weight and its scale.
        param_dtype: dtype of the scales.
        variable_filter: which Params to normalize (a filter on ``(path, variable)``).
        promote_dtype: brings the normalized weight and its operands to one dtype, called
            with ``dtype=dtype`` (see `promote_dtype`).
        rngs: random streams; ``rngs.params()`` initializes the scales.

    Raises:
        ValueError: at call time, if a selected Param has no scale (the layer changed after
            wrapping) or ``feature_axes`` is out of range for it.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear, WeightNorm
        >>> layer = WeightNorm(Linear(2, 3, rngs=Rngs(0)), rngs=Rngs(0))
        >>> layer.scales[("kernel",)].value
        Array([1., 1., 1.], dtype=float32)
        >>> layer.layer_instance.kernel.value = jnp.array([[3.0, 0.0, 1.0], [4.0, 2.0, 0.0]])
        >>> layer(jnp.array([[1.0, 0.0]]))  # each kernel column scaled to norm 1
        Array([[0.6, 0. , 1. ]], dtype=float32)
        >>> layer.layer_instance.kernel.value[0]  # the Param itself is unchanged
        Array([3., 0., 1.], dtype=float32)
    """

    def __init__(
        self,
        layer_instance: Module,
        *,
        feature_axes: int | Sequence[int] | None = -1,
        use_scale: bool = True,
        scale_init: Initializer = initializers.ones,
        epsilon: NonNegative = 1e-12,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        variable_filter: Any = _KERNELS,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
    ):
        self.layer_instance = layer_instance
        self.feature_axes = frozen(feature_axes)
        self.use_scale = use_scale
        self.scale_init = scale_init
        self.epsilon = check_epsilon("WeightNorm", epsilon)
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.variable_filter = variable_filter
        self.promote_dtype = promote_dtype
        self.scales: dict[Path, Param] | None = None
        if use_scale:
            self.scales = {
                path: named_param(
                    scale_init(rngs.params(), self._scale_shape(path, param), param_dtype),
                    {},
                    self._scale_names(path, param),
                )
                for path, param in self._selected()
            }

    def _selected(self) -> list[tuple[tuple[Any, ...], Param]]:
        matches = to_predicate(self.variable_filter)
        return [
            (path, param) for path, param in _params(self.layer_instance) if matches(path, param)
        ]

    def _feature_axes(self, path: tuple[Any, ...], ndim: int) -> tuple[int, ...]:
        if self.feature_axes is None:
            return ()
        return canonical_axes(f"WeightNorm (for {format_path(path)})", self.feature_axes, ndim)

    def _scale_shape(self, path: tuple[Any, ...], param: Param) -> tuple[int, ...]:
        shape = param.value.shape
        return tuple(shape[a] for a in self._feature_axes(path, len(shape)))

    def _scale_names(self, path: tuple[Any, ...], param: Param) -> tuple[Any, ...]:
        """The scale's axis names: those of the weight's feature axes."""
        names = param.get_metadata("sharding_names", None)
        axes = self._feature_axes(path, param.value.ndim)
        if names is None or len(names) != param.value.ndim:
            return (None,) * len(axes)
        return tuple(names[a] for a in axes)

    def _normalized(self, path: tuple[Any, ...], param: Param) -> jax.Array:
        value = param.value
        feature_axes = self._feature_axes(path, value.ndim)
        reduction = tuple(a for a in range(value.ndim) if a not in feature_axes)
        normalized = _l2_normalize(value, reduction, self.epsilon)
        operands = [value]
        if self.scales is not None:
            scale = self.scales.get(path)
            if scale is None:
                raise _missing("WeightNorm", "scale", path)
            shape = [value.shape[a] if a in feature_axes else 1 for a in range(value.ndim)]
            normalized = normalized * scale.value.reshape(shape)
            operands.append(scale.value)
        return self.promote_dtype((normalized, *operands), dtype=self.dtype)[0]

    def __call__(self, x: jax.Array, *args: Any, **kwargs: Any) -> Any:
        """Call ``layer_instance(x, *args, **kwargs)`` with its selected weights normalized."""
        values = {path: self._normalized(path, param) for path, param in self._selected()}
        return _call_with(self.layer_instance, values, x, *args, **kwargs)


class SpectralNorm(Module):
    """Spectral normalization: divide each weight matrix by its largest singular value.

    Every Param of ``layer_instance`` with two or more dimensions is divided by ``sigma``, its
    largest singular value, estimated by ``n_steps`` of power iteration from the stored vector
    ``u``. ``u`` and ``sigma`` are BatchStats in ``self.batch_stats``, keyed as in flax.nnx by
    the Param's path and the name (``batch_stats[("kernel", "u")]``); in training mode
    (``update_stats=True``, set by ``model.train()``) each call stores the new estimates, in
    evaluation mode (``model.eval()``) they are only read. Weights with more than two
    dimensions are flattened to ``(-1, last axis)``; 0-D and 1-D Params are left alone.

    Args:
        layer_instance: the layer to wrap (any Module with Params).
        n_steps: power-iteration steps per call (0 turns the normalization off).
        epsilon: added to squared norms before the square root in the power iteration.
        dtype: dtype of the normalized weights; ``None`` promotes the weight and the stats.
        param_dtype: dtype of ``u`` and ``sigma``.
        error_on_non_matrix: raise for Params with more than two dimensions instead of
            flattening them.
        update_stats: store the new ``u``/``sigma`` on each call (training mode).
        rngs: random streams; ``rngs.params()`` initializes each ``u``.

    Raises:
        ValueError: for a Param with more than two dimensions when ``error_on_non_matrix`` is
            set (at construction), or one without stored statistics (at call time).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear, SpectralNorm
        >>> layer = SpectralNorm(Linear(2, 2, use_bias=False, rngs=Rngs(0)), n_steps=10, rngs=Rngs(0))
        >>> layer.layer_instance.kernel.value = jnp.array([[4.0, 0.0], [0.0, 2.0]])
        >>> layer(jnp.array([[1.0, 1.0]])).round(3)
        Array([[1. , 0.5]], dtype=float32)
        >>> layer.batch_stats[("kernel", "sigma")].value.round(3)
        Array(4., dtype=float32)
        >>> _ = layer.eval()
        >>> layer.update_stats
        False
    """

    def __init__(
        self,
        layer_instance: Module,
        *,
        n_steps: Count = 1,
        epsilon: NonNegative = 1e-12,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        error_on_non_matrix: bool = False,
        update_stats: bool = True,
        rngs: Rngs,
    ):
        self.layer_instance = layer_instance
        self.n_steps = _check_steps(n_steps)
        self.epsilon = check_epsilon("SpectralNorm", epsilon)
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.error_on_non_matrix = error_on_non_matrix
        # model.train()/eval() switch use_running_average; update_stats is its negation.
        self.use_running_average = not update_stats
        self.batch_stats: dict[Path, BatchStat] = {}
        for path, param in self._selected():
            columns = param.value.shape[-1]
            key = rngs.params()
            u = initializers.normal()(key, (1, columns), param_dtype)
            sigma = initializers.ones(key, (), param_dtype)
            self.batch_stats[(*path, "u")] = BatchStat(u)
            self.batch_stats[(*path, "sigma")] = BatchStat(sigma)

    @property
    def update_stats(self) -> bool:
        """Whether calls store new ``u``/``sigma`` (``not use_running_average``)."""
        return not self.use_running_average

    @update_stats.setter
    def update_stats(self, value: bool) -> None:
        self.use_running_average = not value

    def _selected(self) -> list[tuple[tuple[Any, ...], Param]]:
        if self.n_steps < 1:
            return []
        selected = []
        for path, param in _params(self.layer_instance):
            ndim = jnp.ndim(param.value)
            if ndim > 2 and self.error_on_non_matrix:
                raise ValueError(
                    f"SpectralNorm got the {ndim}-D Param layer_instance.{format_path(path)} "
                    f"(shape {jnp.shape(param.value)}) with error_on_non_matrix=True. Pass "
                    f"error_on_non_matrix=False to normalize it as a (-1, last axis) matrix."
                )
            if ndim >= 2:
                selected.append((path, param))
        return selected

    def _normalized(self, path: tuple[Any, ...], param: Param, update_stats: bool) -> jax.Array:
        u_stat = self.batch_stats.get((*path, "u"))
        sigma_stat = self.batch_stats.get((*path, "sigma"))
        if u_stat is None or sigma_stat is None or u_stat.shape[-1] != param.value.shape[-1]:
            raise _missing("SpectralNorm", "u/sigma statistics", path)
        weight = param.value.reshape(-1, param.value.shape[-1])
        u = u_stat.value
        for _ in range(self.n_steps):
            v = _l2_normalize(u @ weight.T, None, self.epsilon)
            u = _l2_normalize(v @ weight, None, self.epsilon)
        u, v = jax.lax.stop_gradient(u), jax.lax.stop_gradient(v)
        sigma = (v @ weight @ u.T)[0, 0]
        weight = weight / jnp.where(sigma != 0, sigma, 1)
        if update_stats:
            u_stat.value = u
            sigma_stat.value = sigma
        dtype = jnp.result_type(weight, u, v, sigma) if self.dtype is None else self.dtype
        return jnp.asarray(weight.reshape(param.value.shape), dtype)

    def __call__(self, x: jax.Array, update_stats: bool | None = None) -> Any:
        """Call ``layer_instance(x)`` with its weights spectrally normalized.

        ``update_stats`` overrides the mode for this call.
        """
        if update_stats is None:
            update_stats = not self.use_running_average
        values = {
            path: self._normalized(path, param, update_stats) for path, param in self._selected()
        }
        return _call_with(self.layer_instance, values, x)


def _check_steps(n_steps: Any) -> int:
    if isinstance(n_steps, bool) or not isinstance(n_steps, Integral) or n_steps < 0:
        raise ValueError(
            f"SpectralNorm n_steps must be a non-negative integer (0 turns the normalization "
            f"off), got {n_steps!r}. Pass e.g. n_steps=1."
        )
    return int(n_steps)

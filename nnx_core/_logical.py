"""Logical axis names: rules mapping them to mesh axes, constraints and annotated initializers.

A Variable names its dimensions (``sharding_names=("embed", "mlp")``); *rules* say which mesh
axis each logical name is laid out on (``{"embed": "model"}``). Rules are given per call or set
for a block of code with :func:`logical_axis_rules`; a name without a rule is taken to be a
mesh axis name itself, and a mesh axis the mesh does not have means "replicated".
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._variable_metadata import with_metadata
from ._variables import Variable

Rules = Mapping[str, Any] | Sequence[tuple[str, Any]]
F = TypeVar("F", bound=Callable[..., Any])

_RULES: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "nnx_core_logical_axis_rules", default=None
)


def normalize_rules(rules: Rules) -> dict[str, Any]:
    """Rules as a dict; in a sequence of pairs the first rule for a name wins.

    Raises:
        TypeError: ``rules`` is neither a mapping nor a sequence of ``(name, mesh_axes)`` pairs.
    """
    if isinstance(rules, Mapping):
        return dict(rules)
    out: dict[str, Any] = {}
    if isinstance(rules, (list, tuple)):
        for rule in rules:
            if not (
                isinstance(rule, (list, tuple)) and len(rule) == 2 and isinstance(rule[0], str)
            ):
                break
            out.setdefault(rule[0], rule[1])
        else:
            return out
    raise TypeError(
        f"Logical axis rules must be a mapping {{'embed': 'model'}} or a sequence of "
        f"(logical_name, mesh_axes) pairs [('embed', 'model')], got {rules!r}."
    )


def current_rules(rules: Rules | None = None) -> dict[str, Any] | None:
    """``rules`` if given, else those of the innermost :func:`logical_axis_rules` block."""
    return normalize_rules(rules) if rules is not None else _RULES.get()


def mesh_axes(
    names: tuple[Any, ...], rules: Mapping[str, Any] | None, mesh: Any = None
) -> PartitionSpec:
    """The PartitionSpec for logical ``names`` under ``rules``, replicating axes ``mesh`` lacks."""
    axes = []
    for name in names:
        axis = rules.get(name, name) if rules is not None and name is not None else name
        if mesh is not None and axis is not None:
            wanted = axis if isinstance(axis, tuple) else (axis,)
            if not all(a in mesh.axis_names for a in wanted):
                axis = None
        axes.append(axis)
    return PartitionSpec(*axes)


@contextlib.contextmanager
def logical_axis_rules(rules: Rules) -> Iterator[dict[str, Any]]:
    """Use ``rules`` (logical name -> mesh axes) inside the ``with`` block.

    They apply wherever no ``rules=`` is passed: ``get_partition_spec``, ``get_named_sharding``,
    ``shard``, ``create_sharded`` and ``with_logical_constraint``. Blocks nest; the innermost
    wins. Rules are a mapping or, as in flax, a sequence of ``(name, mesh_axes)`` pairs.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> s = nnx.State({"w": nnx.Param(jnp.ones((4, 2)), sharding_names=("embed", "mlp"))})
        >>> with nnx.logical_axis_rules([("embed", "data"), ("mlp", "model")]):
        ...     nnx.get_partition_spec(s)["w"].value
        P('data', 'model')

    Raises:
        TypeError: the rules are neither a mapping nor a sequence of pairs.
    """
    token = _RULES.set(normalize_rules(rules))
    try:
        yield _RULES.get() or {}
    finally:
        _RULES.reset(token)


def with_logical_constraint(
    x: Any,
    logical_axes: Sequence[str | None],
    *,
    rules: Rules | None = None,
    mesh: Mesh | None = None,
) -> Any:
    """``jax.lax.with_sharding_constraint`` with logical axis names (one per dimension of ``x``).

    The names go through ``rules`` (default: the enclosing :func:`logical_axis_rules`). The
    constraint is laid on ``mesh``, or on the mesh set with ``jax.set_mesh``; with neither,
    ``x`` is returned unchanged (as on a single device), so model code can call it anywhere.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> import nnx_core as nnx
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
        >>> def f(x):
        ...     return nnx.with_logical_constraint(x, ("batch", None), mesh=mesh,
        ...                                        rules={"batch": "data"})
        >>> jax.make_jaxpr(f)(jnp.ones((4, 2))).eqns[0].params["sharding"].spec
        P('data', None)
        >>> nnx.with_logical_constraint(jnp.ones(3), ("batch",)).shape  # no mesh: unchanged
        (3,)

    Raises:
        ValueError: the number of names differs from the number of dimensions of ``x``.
    """
    value = x.get_value() if isinstance(x, Variable) else x
    names = tuple(logical_axes)
    ndim = getattr(value, "ndim", None)
    if ndim is None or len(names) != ndim:
        raise ValueError(
            f"with_logical_constraint got {len(names)} logical axis name(s) {names} for a value "
            f"of shape {getattr(value, 'shape', type(value).__name__)}; give one name (or None) "
            "per dimension."
        )
    target = mesh if mesh is not None else jax.sharding.get_abstract_mesh()
    if not target.axis_names:
        return value
    spec = mesh_axes(names, current_rules(rules), target)
    sharding = NamedSharding(mesh, spec) if mesh is not None else spec
    return jax.lax.with_sharding_constraint(value, sharding)


def with_batch_constraint(x: Any, *, name: str = "batch") -> Any:
    """Lay the first axis of every array of ``x`` out as the rules lay the logical ``name``
    (``"batch"``), every other axis whole: an activation of data-parallel training.

    It does nothing unless a rule for ``name`` (:func:`logical_axis_rules`) and a mesh
    (``jax.set_mesh``) are in force, so a layer calls it unconditionally: a `Repeat` does
    between its blocks, so that over a mesh that splits the parameters (fully sharded data
    parallelism) XLA gathers each block's weights rather than the batch.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> import nnx_core as nnx
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
        >>> with jax.set_mesh(mesh), nnx.logical_axis_rules({"batch": "data"}):
        ...     jaxpr = jax.make_jaxpr(nnx.with_batch_constraint)(jnp.ones((4, 2)))
        >>> jaxpr.eqns[0].params["sharding"].spec
        P('data', None)
        >>> nnx.with_batch_constraint(jnp.ones(3)).shape  # no rule, no mesh: unchanged
        (3,)
    """
    rules = _RULES.get()
    if not rules or name not in rules or not jax.sharding.get_abstract_mesh().axis_names:
        return x

    def one(leaf: Any) -> Any:
        ndim = getattr(leaf, "ndim", 0)
        if not ndim:
            return leaf
        return with_logical_constraint(leaf, (name, *[None] * (ndim - 1)))

    return jax.tree.map(one, x)


def with_partitioning(initializer: F, sharding: Sequence[str | None], /, **metadata: Any) -> F:
    """Wrap ``initializer`` so that the Variables built from it carry ``sharding_names``.

    Layers build their parameters as ``Param(kernel_init(key, shape, dtype))``, so passing
    ``kernel_init=with_partitioning(init, ("embed", "mlp"))`` names the kernel's axes.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> init = nnx.with_partitioning(lambda key, shape, dtype: jnp.ones(shape, dtype),
        ...                              ("embed", "mlp"))
        >>> kernel = nnx.Param(init(jax.random.key(0), (4, 2), jnp.float32))
        >>> kernel.shape, kernel.sharding_names
        ((4, 2), ('embed', 'mlp'))

    Raises:
        TypeError: ``initializer`` is not callable or ``sharding`` is not a sequence of names.
    """
    if isinstance(sharding, str) or not isinstance(sharding, (list, tuple)):
        raise TypeError(
            f"with_partitioning expects one logical axis name (or None) per dimension, e.g. "
            f"('embed', 'mlp'), got {sharding!r}."
        )
    return with_metadata(initializer, sharding_names=tuple(sharding), **metadata)

"""Where every array of a run lives on the mesh: each Variable's `PartitionSpec` from its
logical axis names and the sharding rules, checked before anything is allocated or compiled.

For one Variable with names ``(n0, n1, ...)`` (its ``sharding_names``; none: all ``None``):

1. each name goes to the mesh axes its rule gives (`DEFAULT_RULES` merged with the config's
   ``sharding_rules``), or to the mesh axis of that name (metadata written for a mesh, e.g.
   ``[null, model]``), else nowhere; axes of size 1 are left out;
2. a dimension a rule the user wrote (or a mesh axis the metadata names) cannot split evenly is
   an error naming the Variable, its shape and the axis size; a default rule that does not
   divide leaves the dimension whole;
3. one mesh axis on two dimensions of a Variable is a conflict (an error naming both rules);
4. a parameter (a `Param`, or an optimizer's `OptState`) that no rule put on ``fsdp`` has its
   largest dimension that is still whole, divisible and not named by a rule that keeps it whole
   (``layers``) split over ``fsdp``. Parameters and their optimizer moments have the same names
   and shapes, so they get the same layout.

Example:
    >>> import jax.numpy as jnp
    >>> import nnx_core as nnx
    >>> from nnx_plugins.training._layout import Layout
    >>> layout = Layout.of({"data": 1, "fsdp": 1, "model": 1}, {})
    >>> kernel = nnx.Param(jnp.zeros((64, 256)), sharding_names=("embed", "mlp"))
    >>> tuple(layout.plan_spec(("kernel",), kernel, sizes={"data": 2, "fsdp": 4, "model": 2}))
    ('fsdp', 'model')
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import nnx_core as nnx

from .._errors import NnxError, NnxWarning
from .._text import format_path, suggest
from ..config._errors import ConfigError
from ._rules import BATCH_AXES, DEFAULT_RULES, axes_text

__all__ = [
    "Layout",
    "LayoutProblem",
    "LayoutError",
    "ShardingRulesWarning",
    "declared_names",
    "layout_error",
]

_NAME_KEYS = ("sharding_names", "out_sharding")


class ShardingRulesWarning(NnxWarning):
    """A ``sharding_rules`` entry names a logical axis no layer of the model declares."""


@dataclasses.dataclass(frozen=True)
class LayoutProblem:
    """What cannot be laid out, and where it comes from: ``("sharding_rules", name)`` for a
    rule, ``("model", *path)`` for a Variable's own metadata."""

    where: tuple[Any, ...]
    message: str


class LayoutError(NnxError, ValueError):
    """The Variables cannot be laid out on the mesh (see `Layout.shardings`)."""

    def __init__(self, problems: list[LayoutProblem]):
        self.problems = problems
        super().__init__("\n".join(p.message for p in problems))


def _names(variable: Any) -> tuple[Any, ...] | None:
    if not isinstance(variable, nnx.Variable):
        return None
    for key in _NAME_KEYS:
        names = variable.get_metadata(key, None)
        if names is not None:
            return tuple(names)
    return None


def _shape(variable: Any) -> tuple[int, ...]:
    value = variable.get_raw_value() if isinstance(variable, nnx.Variable) else variable
    return tuple(getattr(value, "shape", ()))


def _is_key(variable: Any) -> bool:
    value = variable.get_raw_value() if isinstance(variable, nnx.Variable) else variable
    dtype = getattr(value, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def declared_names(state: Any) -> set[str]:
    """Every logical axis name the Variables of ``state`` declare."""
    return {
        name
        for _, variable in state.flat_state()
        for name in (_names(variable) or ())
        if isinstance(name, str)
    }


@dataclasses.dataclass(frozen=True)
class Layout:
    """A mesh and the rules laying logical axis names on it.

    Attributes:
        mesh: the `jax.sharding.Mesh` (or, for planning without devices, its axis sizes).
        given: the ``sharding_rules`` the config wrote (name -> mesh axes).
        rules: `DEFAULT_RULES` with ``given`` over them.
    """

    mesh: Any
    given: Mapping[str, tuple[str, ...]]
    rules: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, mesh: Any, given: Mapping[str, tuple[str, ...]]) -> Layout:
        """The layout of ``mesh`` (a Mesh or ``{axis: size}``) under the rules ``given``.

        Raises:
            LayoutError: a rule names an axis the mesh does not have (a Mesh built by the
                user may have other axes than ``data``, ``fsdp``, ``model``).
        """
        axes = tuple(_sizes(mesh))
        problems = [
            LayoutProblem(
                ("sharding_rules", name),
                f"the rule {name}: {list(targets)} names mesh axes "
                f"{[a for a in targets if a not in axes]} that the mesh does not have (its "
                f"axes: {axes_text(axes)}). Use the mesh's axes, or null to keep {name} whole.",
            )
            for name, targets in given.items()
            if any(a not in axes for a in targets)
        ]
        if problems:
            raise LayoutError(problems)
        return cls(mesh, dict(given), {**DEFAULT_RULES, **given})

    # -- one Variable ------------------------------------------------------------------------
    def plan_spec(
        self, path: tuple[Any, ...], variable: Any, *, sizes: Mapping[str, int] | None = None
    ) -> PartitionSpec:
        """The `PartitionSpec` of ``variable`` (at ``path`` in the model).

        Raises:
            LayoutError: a dimension that its rule cannot split evenly, or a conflict.
        """
        spec, problems = self._spec(path, variable, _sizes(self.mesh) if sizes is None else sizes)
        if problems:
            raise LayoutError(problems)
        return spec

    def _spec(
        self, path: tuple[Any, ...], variable: Any, sizes: Mapping[str, int]
    ) -> tuple[PartitionSpec, list[LayoutProblem]]:
        shape = _shape(variable)
        names = _names(variable)
        where = format_path(("model", *path))
        if names is None or len(names) != len(shape):
            names = (None,) * len(shape)
        problems: list[LayoutProblem] = []
        axes: list[tuple[str, ...]] = []
        origins: list[str] = []
        for dim, (name, size) in enumerate(zip(names, shape)):
            targets, origin, strict = self._targets(name, path)
            targets = tuple(a for a in targets if a in sizes and sizes[a] > 1)
            parts = math.prod(sizes[a] for a in targets)
            if targets and size % parts:
                if strict:
                    problems.append(_indivisible(path, shape, dim, name, (targets, parts), origin))
                targets = ()
            axes.append(targets)
            origins.append(origin)
        problems += _conflicts(where, names, axes, origins, path)
        if not problems and self._fsdp_applies(variable, sizes, axes):
            _add_fsdp(axes, names, shape, sizes["fsdp"], self.rules)
        return _partition_spec(axes), problems

    def _targets(self, name: Any, path: tuple[Any, ...]) -> tuple[tuple[str, ...], str, bool]:
        """The mesh axes of a logical ``name``, where that comes from, and whether it is the
        user's (an indivisible dimension is then an error)."""
        if not isinstance(name, str):
            return (), "", False
        if name in self.given:
            return self.given[name], f"sharding_rules.{name}", True
        if name in self.rules:
            return self.rules[name], "the default rules", False
        if name in _sizes(self.mesh):
            return (name,), f"the sharding_names of {format_path(('model', *path))}", True
        return (), "", False

    @staticmethod
    def _fsdp_applies(variable: Any, sizes: Mapping[str, int], axes: list[tuple[str, ...]]) -> bool:
        return (
            sizes.get("fsdp", 1) > 1
            and isinstance(variable, (nnx.Param, nnx.OptState))
            and not _is_key(variable)
            and not any("fsdp" in t for t in axes)
        )

    # -- a whole state -----------------------------------------------------------------------
    def specs(self, state: Any) -> dict[tuple[Any, ...], PartitionSpec]:
        """Every Variable's spec (path -> spec), all problems reported at once.

        Raises:
            LayoutError: every dimension that cannot be split and every conflict.
        """
        sizes = _sizes(self.mesh)
        out, problems = {}, []
        for path, variable in state.flat_state():
            out[tuple(path)], found = self._spec(tuple(path), variable, sizes)
            problems += [p for p in found if p not in problems]
        if problems:
            raise LayoutError(problems)
        return out

    def shardings(self, state: Any) -> Any:
        """A State of `NamedSharding` leaves over the mesh, one per Variable of ``state``.

        Raises:
            LayoutError: as `specs`.
        """
        specs = self.specs(state)
        return nnx.State.from_flat_state(
            (path, variable.replace(NamedSharding(self.mesh, specs[tuple(path)])))
            for path, variable in state.flat_state()
        )

    def batch_spec(self) -> PartitionSpec:
        """The batch's first axis over ``data`` and ``fsdp`` (those the mesh has)."""
        axes = tuple(a for a in BATCH_AXES if a in _sizes(self.mesh))
        return PartitionSpec(axes if axes else None)

    @contextlib.contextmanager
    def activations(self) -> Iterator[None]:
        """Inside the block, the mesh is set (``jax.set_mesh``) and the logical name ``batch``
        laid on the batch's axes, so that the activations a `Repeat` passes between its blocks
        are split like the batch (`nnx_core.with_batch_constraint`): over ``fsdp``, XLA then
        gathers each block's weights instead of the batch. The train step is traced inside."""
        axes = self.batch_spec()[0]
        rules = {"batch": axes} if axes else {}
        with jax.set_mesh(self.mesh), nnx.logical_axis_rules(rules):
            yield

    def batch_parts(self) -> int:
        """How many parts the batch is split into."""
        sizes = _sizes(self.mesh)
        return math.prod(sizes[a] for a in BATCH_AXES if a in sizes)

    def warn_unused(self, state: Any) -> list[str]:
        """Warn (`ShardingRulesWarning`) about the rules naming what no Variable declares;
        return those names."""
        declared = declared_names(state)
        unused = sorted(set(self.given) - declared)
        if unused:
            hints = "".join(suggest(name, sorted(declared)) for name in unused)
            warnings.warn(
                f"sharding_rules names {unused}, which no layer of the model declares; those "
                f"rules do nothing.{hints} The model's logical axis names: "
                f"{', '.join(sorted(declared)) or 'none'}.",
                ShardingRulesWarning,
                stacklevel=2,
            )
        return unused


def _partition_spec(axes: list[tuple[str, ...]]) -> PartitionSpec:
    """The spec of per-dimension mesh axes, without trailing whole dimensions: the spelling XLA
    gives a step's outputs, so that a step's inputs and outputs compare equal (else the second
    step compiles again)."""
    entries: list[Any] = [t[0] if len(t) == 1 else (t or None) for t in axes]
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries)


def _sizes(mesh: Any) -> dict[str, int]:
    if isinstance(mesh, Mesh):
        return dict(mesh.shape)
    return dict(mesh)


def _indivisible(
    path: tuple[Any, ...],
    shape: tuple[int, ...],
    dim: int,
    name: str,
    split: tuple[tuple[str, ...], int],
    origin: str,
) -> LayoutProblem:
    targets, parts = split
    axis = f"mesh axis {targets[0]!r}" if len(targets) == 1 else f"mesh axes {list(targets)}"
    key = ("sharding_rules", name) if origin.startswith("sharding_rules") else ("model", *path)
    return LayoutProblem(
        key,
        f"{format_path(('model', *path))} has shape {shape}: dimension {dim} ({name!r}, size {shape[dim]}) cannot be "
        f"split over {axis} of size {parts}, which {origin} lays it on. Use a mesh whose "
        f"{'/'.join(targets)} size divides {shape[dim]}, or keep {name!r} whole "
        f"(sharding_rules: {{{name}: null}}).",
    )


def _conflicts(
    where: str,
    names: tuple[Any, ...],
    axes: list[tuple[str, ...]],
    origins: list[str],
    path: tuple[Any, ...],
) -> list[LayoutProblem]:
    seen: dict[str, int] = {}
    for dim, targets in enumerate(axes):
        for axis in targets:
            if axis not in seen:
                seen[axis] = dim
                continue
            first = seen[axis]
            mine = [o for o in (origins[first], origins[dim]) if o.startswith("sharding_rules")]
            key = ("sharding_rules", mine[0].split(".", 1)[1]) if mine else ("model", *path)
            return [
                LayoutProblem(
                    key,
                    f"conflicting rules: {where} (names {names}) would be split over mesh axis "
                    f"{axis!r} on dimension {first} ({names[first]!r}, by {origins[first]}) and "
                    f"on dimension {dim} ({names[dim]!r}, by {origins[dim]}); a mesh axis "
                    f"splits one dimension of an array. Lay one of them elsewhere (e.g. "
                    f"sharding_rules: {{{names[dim]}: null}}).",
                )
            ]
    return []


def _add_fsdp(
    axes: list[tuple[str, ...]],
    names: tuple[Any, ...],
    shape: tuple[int, ...],
    size: int,
    rules: Mapping[str, tuple[str, ...]],
) -> None:
    """Put ``fsdp`` on the largest whole dimension it divides (not one a rule keeps whole)."""
    free = [
        dim
        for dim, (name, length) in enumerate(zip(names, shape))
        if not axes[dim] and length % size == 0 and not (name in rules and not rules[name])
    ]
    if free:
        best = max(free, key=lambda dim: (shape[dim], -dim))
        axes[best] = ("fsdp",)


def layout_error(config: Any, error: LayoutError) -> ConfigError:
    """A `LayoutError` as a `ConfigError`, each problem located where it comes from (the rule
    in ``sharding_rules``, else the layer)."""
    return ConfigError([config.problem(p.where, p.message) for p in error.problems])

"""Module: a plain mutable Python class whose attributes form a graph."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from ._filters import Filter, to_predicate
from ._graph import is_array, iter_nodes, register_internal
from ._pytree import HIDDEN, NODE_IMPL, Pytree
from ._variables import Intermediate, Perturbation, Variable, variable_name

M = TypeVar("M", bound="Module")
_MISSING = object()


class Module(Pytree):
    """Base class of models: assign Variables, arrays, submodules and plain lists/dicts of them.

    Attributes of any other type are static (part of the structure, not the state). No wrapper
    types are needed for containers, and no ``super().__init__()`` call.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class MLP(nnx.Module):
        ...     def __init__(self, sizes, *, rngs):
        ...         self.layers = [nnx.Param(jax.random.normal(rngs.params(), (a, b)))
        ...                        for a, b in zip(sizes[:-1], sizes[1:])]
        ...         self.deterministic = False
        ...     def __call__(self, x):
        ...         for w in self.layers:
        ...             x = jnp.tanh(x @ w)
        ...         return x
        >>> m = MLP([3, 4, 2], rngs=nnx.Rngs(0))
        >>> m(jnp.ones((1, 3))).shape
        (1, 2)
        >>> m.eval().deterministic
        True
        >>> print(m.summary())
        MLP: 20 parameters in 2 Variables (80 B)
        kind   variables  elements  bytes
        Param          2        20   80 B
    """

    # -- modes -------------------------------------------------------------------------------
    def set_attributes(
        self: M, *filters: Filter, raise_if_not_found: bool = True, **attributes: Any
    ) -> M:
        """Set ``attributes`` on every submodule (and this module) that already has them; with
        ``filters`` (e.g. ``nnx.Dropout``), only on the modules they select.

        Raises:
            ValueError: no (selected) module in the graph has one of the attributes.
        """
        found = set()
        pred = to_predicate(filters) if filters else None
        for path, module in self.iter_modules():
            if pred is not None and not pred(path, module):
                continue
            d = vars(module)
            for name, value in attributes.items():
                if name in d:
                    setattr(module, name, value)
                    found.add(name)
        missing = set(attributes) - found
        if missing and raise_if_not_found:
            raise ValueError(
                f"Could not find at least one instance of the following attributes: "
                f"{sorted(missing)} in the modules of {type(self).__name__}; pass "
                "raise_if_not_found=False to ignore."
            )
        return self

    def train(self: M, **attributes: Any) -> M:
        """Training mode: ``deterministic=False`` and ``use_running_average=False`` everywhere."""
        return self.set_attributes(
            deterministic=False, use_running_average=False, raise_if_not_found=False, **attributes
        )

    def eval(self: M, **attributes: Any) -> M:
        """Evaluation mode: ``deterministic=True`` and ``use_running_average=True`` everywhere."""
        return self.set_attributes(
            deterministic=True, use_running_average=True, raise_if_not_found=False, **attributes
        )

    # -- intermediates -----------------------------------------------------------------------
    def sow(
        self,
        variable_type: type[Variable],
        name: str,
        value: Any,
        *,
        reduce_fn: Callable[[Any, Any], Any] = lambda prev, new: (*prev, new),
        init_fn: Callable[[], Any] = tuple,
    ) -> None:
        """Record ``value`` in the Variable ``name`` of kind ``variable_type`` (a tuple by default).

        Example:
            >>> import jax.numpy as jnp
            >>> import nnx_core as nnx
            >>> class M(nnx.Module):
            ...     def __call__(self, x):
            ...         self.sow(nnx.Intermediate, "h", x * 2)
            ...         return x
            >>> m = M(); _ = m(jnp.ones(2)); _ = m(jnp.ones(2))
            >>> len(m.h.value), m.h.value[0].tolist()
            (2, [2.0, 2.0])

        Raises:
            ValueError: ``name`` holds something that is not a ``variable_type`` Variable.
        """
        current = vars(self).get(name, _MISSING)
        if current is _MISSING:
            setattr(self, name, variable_type(reduce_fn(init_fn(), value)))
        elif isinstance(current, variable_type):
            current.value = reduce_fn(current.value, value)
        else:
            raise ValueError(_wrong_holder("sow", self, name, current, variable_type))

    def perturb(self, name: str, value: Any, variable_type: type[Variable] = Perturbation) -> Any:
        """Return ``value`` plus the Variable ``name`` (zeros, created on the first call).

        Differentiating a loss with respect to the ``Perturbation`` kind then gives the
        gradient with respect to the intermediate ``value``.

        Example:
            >>> import jax.numpy as jnp
            >>> import nnx_core as nnx
            >>> class M(nnx.Module):
            ...     def __call__(self, x):
            ...         return 3.0 * self.perturb("h", x)
            >>> m = M(); _ = m(jnp.ones(2))
            >>> grads = nnx.grad(lambda m: m(jnp.ones(2)).sum(), wrt=nnx.Perturbation)(m)
            >>> grads["h"].value.tolist()
            [3.0, 3.0]

        Raises:
            ValueError: ``name`` holds something that is not a ``variable_type`` Variable.
        """
        current = vars(self).get(name, _MISSING)
        if current is _MISSING:
            zeros = jax.tree_util.tree_map(jnp.zeros_like, value)
            setattr(self, name, variable_type(zeros))
            return jax.tree_util.tree_map(operator.add, zeros, value)
        if not isinstance(current, variable_type):
            raise ValueError(_wrong_holder("perturb", self, name, current, variable_type))
        return jax.tree_util.tree_map(operator.add, current.get_value(), value)

    # -- traversal ---------------------------------------------------------------------------
    def iter_modules(self) -> Iterator[tuple[tuple[Any, ...], Module]]:
        """Yield ``(path, module)`` for this module and every submodule, once each."""
        for path, x in iter_nodes(self):
            if isinstance(x, Module):
                yield path, x

    def iter_children(self) -> Iterator[tuple[str, Module]]:
        """Yield ``(name, module)`` for the direct submodule attributes."""
        for name, value in sorted(vars(self).items()):
            if isinstance(value, Module) and name not in HIDDEN:
                yield name, value

    # -- display -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        text = super().__repr__()
        counts = _kind_counts(self)
        if not counts:
            return text
        total = [sum(c[i] for c in counts.values()) for i in range(2)]
        parts = [f"{k}: {n:,} ({_bytes(b)})" for k, (n, b) in counts.items()]
        if len(parts) > 1:
            parts.append(f"Total: {total[0]:,} ({_bytes(total[1])})")
        head, sep, rest = text.partition("\n")
        return f"{head} # {', '.join(parts)}{sep}{rest}"

    def summary(self, *filters: Filter) -> str:
        """A table of Variable counts, element counts and bytes per Variable kind."""
        pred = to_predicate(filters if filters else ...)
        rows: dict[str, list[int]] = {}
        for path, x in iter_nodes(self):
            if not (isinstance(x, Variable) or is_array(x)) or not pred(path, x):
                continue
            value = x.value if isinstance(x, Variable) else x
            kind = _kind_name(type(x)) if isinstance(x, Variable) else "array"
            row = rows.setdefault(kind, [0, 0, 0])
            row[0] += 1
            row[1] += int(getattr(value, "size", 0))
            row[2] += int(getattr(value, "nbytes", 0))
        params = rows.get("Param", [0, 0, 0])
        total = [sum(r[i] for r in rows.values()) for i in range(3)]
        head = (
            f"{type(self).__name__}: {params[1]:,} parameters in {total[0]} Variables "
            f"({_bytes(total[2])})"
        )
        width = max([len(k) for k in rows] + [5])
        cells = [
            (kind, f"{n}", f"{size:,}", _bytes(nbytes)) for kind, (n, size, nbytes) in rows.items()
        ]
        w_elems = max([len(c[2]) for c in cells] + [8])
        w_bytes = max([len(c[3]) for c in cells] + [5])
        lines = [
            head,
            f"{'kind':<{width}}  variables  {'elements':>{w_elems}}  {'bytes':>{w_bytes}}",
        ]
        for kind, n, size, nbytes in cells:
            lines.append(f"{kind:<{width}}  {n:>9}  {size:>{w_elems}}  {nbytes:>{w_bytes}}")
        return "\n".join(lines)


def _wrong_holder(where: str, module: Module, name: str, current: Any, kind: type) -> str:
    """The message, with flax.nnx's phrases ("to be a Variable, got" / "to be of type")."""
    expected = (
        f"to be of type {kind.__name__}" if isinstance(current, Variable) else "to be a Variable"
    )
    return (
        f"{where}: expected attribute {name!r} of {type(module).__name__} {expected}, got "
        f"{type(current).__name__}. Use another name for the {kind.__name__} values."
    )


def _kind_counts(node: Module) -> dict[str, list[int]]:
    """Elements and bytes per Variable kind under ``node`` (Rng keys and counts together as
    RngState), for the first line of its repr (as flax.nnx's)."""
    counts: dict[str, list[int]] = {}
    for _, x in iter_nodes(node):
        if isinstance(x, Variable):
            kind = _kind_group(type(x))
            value = x.get_value()
            row = counts.setdefault(kind, [0, 0])
            row[0] += int(getattr(value, "size", 0))
            row[1] += int(getattr(value, "nbytes", 0))
    return counts


def _kind_group(cls: type[Variable]) -> str:
    """The kind name, with the kinds of an Rng stream's state (keys, counts) as RngState."""
    for base in cls.__mro__:
        if base is Variable:
            break
        if _kind_name(base) == "RngState":
            return "RngState"
    return _kind_name(cls)


def _kind_name(cls: type[Variable]) -> str:
    try:
        return variable_name(cls)
    except KeyError:
        return cls.__name__


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


# the same node handling as every Pytree, registered under its own name for error messages
register_internal(Module, NODE_IMPL)

__all__ = ["Module", "Intermediate"]

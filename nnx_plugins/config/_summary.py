"""Abstract model summaries: shapes, counts and bytes per layer and per Variable kind.

The model is built under `jax.eval_shape`, so no parameter memory is allocated.

Example:
    >>> from nnx_plugins.config._summary import summarize
    >>> s = summarize({"model": {"type": "Linear", "in_features": 3, "out_features": 4}})
    >>> s.total_count, s.total_bytes, s.by_kind
    (16, 64, {'Param': (16, 64)})
    >>> [(v.name, v.shape) for v in s.layers[0].variables]
    [('bias', (4,)), ('kernel', (3, 4))]
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

import nnx_core

from .._text import format_path
from ._build import build
from ._load import Config, load_config

__all__ = ["VariableRow", "LayerRow", "Summary", "summarize", "owner_node"]


@dataclasses.dataclass(frozen=True)
class VariableRow:
    name: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    count: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class LayerRow:
    path: str
    type: str
    variables: tuple[VariableRow, ...]

    @property
    def count(self) -> int:
        return sum(v.count for v in self.variables)

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.variables)


@dataclasses.dataclass(frozen=True)
class Summary:
    """The tables of `summarize`; ``state`` is the model's abstract state."""

    config: Config
    layers: tuple[LayerRow, ...]
    by_kind: dict[str, tuple[int, int]]
    state: Any = None

    @property
    def total_count(self) -> int:
        return sum(c for c, _ in self.by_kind.values())

    @property
    def total_bytes(self) -> int:
        return sum(b for _, b in self.by_kind.values())


def _itemsize(struct: Any) -> int:

    if jax.dtypes.issubdtype(struct.dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), struct.dtype))
        return math.prod(data.shape) * np.dtype(data.dtype).itemsize
    return np.dtype(struct.dtype).itemsize


def owner_node(
    model: dict[str, Any], path: tuple[Any, ...]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The deepest config node along ``path`` and its path (config attributes mirror fields)."""
    node: Any = model
    where: tuple[Any, ...] = ()
    best: tuple[tuple[Any, ...], dict[str, Any]] = ((), model)
    for key in path:
        child = (
            node.get(key)
            if isinstance(node, dict)
            else (
                node[key]
                if isinstance(node, list) and isinstance(key, int) and key < len(node)
                else None
            )
        )
        if child is None:
            break
        node, where = child, (*where, key)
        if isinstance(node, dict) and "type" in node:
            best = (where, node)
    return best


def summarize(config: Any, *, registry: Any = None) -> Summary:
    """Build the model of ``config`` abstractly and tabulate its Variables.

    Raises:
        ConfigError: the config is invalid, or a layer raised while being built.
    """

    validated = load_config(config, registry=registry)
    abstract = jax.eval_shape(lambda: nnx_core.state(build(validated, registry=registry)))
    rows: dict[tuple[Any, ...], tuple[str, list[VariableRow]]] = {}
    by_kind: dict[str, tuple[int, int]] = {}
    for path, variable in abstract.flat_state():
        where, node = owner_node(validated.model, tuple(path))
        struct = variable.value
        count = math.prod(struct.shape)
        nbytes = count * _itemsize(struct)
        kind = nnx_core.variable_name(type(variable))
        name = format_path(tuple(path)[len(where) :])
        row = VariableRow(name, kind, tuple(struct.shape), str(struct.dtype), count, nbytes)
        rows.setdefault(where, (node["type"], []))[1].append(row)
        old = by_kind.get(kind, (0, 0))
        by_kind[kind] = (old[0] + count, old[1] + nbytes)
    layers = tuple(
        LayerRow(format_path(("model", *where)), kind, tuple(items))
        for where, (kind, items) in rows.items()
    )
    return Summary(validated, layers, by_kind, abstract)

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
from nnx_layers import Repeat

from .._text import format_path
from ..registry._registry import default_registry
from ._build import build
from ._load import Config, load_config

__all__ = [
    "VariableRow",
    "LayerRow",
    "Summary",
    "summarize",
    "owner_node",
    "with_outputs",
    "spell_output",
]


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
    """One layer's Variables; ``blocks`` > 1 inside a `Repeat` (the Variables hold that many
    blocks on a leading axis). A `Repeat` has a row of its own (``note`` says what it holds)
    with the Variables of all its blocks. ``output``: the layer's abstract output for a
    batch, when the model was run abstractly (`with_outputs`)."""

    path: str
    type: str
    variables: tuple[VariableRow, ...]
    blocks: int = 1
    note: str = ""
    output: Any = None

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
    repeats = dict(_repeats(validated.model, (), registry))
    layers: list[LayerRow] = []
    for where, (kind, items) in rows.items():
        outer = [w for w in repeats if where[: len(w)] == w]
        for w in outer:
            if not any(row.path == format_path(("model", *w)) for row in layers):
                layers.append(_repeat_row(w, repeats, rows))
        blocks = math.prod(repeats[w][0] for w in outer)
        layers.append(LayerRow(format_path(("model", *where)), kind, tuple(items), blocks))
    return Summary(validated, tuple(layers), by_kind, abstract)


def _repeats(node: Any, where: tuple[Any, ...], registry: Any) -> Any:
    """``(path, (count, block type))`` for every `Repeat` node of a config, outermost first."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _repeats(item, (*where, i), registry)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("type"), str) and isinstance(node.get("block"), dict):
        layer = (registry or default_registry()).get("layer", node["type"])
        if isinstance(layer, type) and issubclass(layer, Repeat):
            yield where, (node["count"], node["block"].get("type"))
    for key, value in node.items():
        yield from _repeats(value, (*where, key), registry)


def _repeat_row(where: tuple[Any, ...], repeats: dict[Any, Any], rows: dict[Any, Any]) -> LayerRow:
    count, block = repeats[where]
    inside = [v for w, (_, items) in rows.items() if w[: len(where)] == where for v in items]
    outer = [w for w in repeats if where[: len(w)] == w and w != where]
    blocks = math.prod(repeats[w][0] for w in outer)
    note = f"{count} blocks of {block}, stacked on a leading axis of {count} (rows below)"
    return LayerRow(format_path(("model", *where)), "Repeat", tuple(inside), blocks, note)


def with_outputs(summary: Summary, outputs: dict[tuple[Any, ...], Any]) -> list[LayerRow]:
    """The rows of ``summary`` in the order the layers ran, each layer that ran with its
    output (``outputs``: `ModelCheck.outputs`), a layer without Variables (an activation, a
    pooling) with a row of its own, and the rows of a layer's sublayers after its own.

    Example:
        >>> from nnx_plugins.config._shapes import check_model
        >>> from nnx_plugins.config._summary import spell_output, summarize, with_outputs
        >>> config = {"model": {"type": "Sequential", "layers": [
        ...     {"type": "Linear", "in_features": 3, "out_features": 4}, {"type": "relu"}]}}
        >>> import jax
        >>> from nnx_plugins.config._shapes import DataSpec
        >>> check = check_model(config, data=DataSpec(jax.ShapeDtypeStruct((3,), "float32"), "x"))
        >>> [(r.path, r.type, spell_output(r.output), r.count)
        ...  for r in with_outputs(summarize(config), check.outputs)]
        [('model.layers[0]', 'Linear', '(None, 4) float32', 16), ('model.layers[1]', 'relu', '(None, 4) float32', 0)]
    """
    rows = list(summary.layers)
    placed: list[LayerRow] = []
    for path, output in outputs.items():
        name = format_path(path)
        inside = [r for r in rows if r.path == name or r.path.startswith((name + ".", name + "["))]
        own = next((r for r in inside if r.path == name), None)
        if own is None:
            _, node = owner_node(summary.config.model, tuple(path[1:]))
            own = LayerRow(name, str(node.get("type", "?")), ())
        else:
            inside.remove(own)
        placed += [dataclasses.replace(own, output=output), *inside]
        rows = [r for r in rows if r not in inside and r.path != name]
    return placed + rows


def spell_output(output: Any, batch: int = 2) -> str:
    """An abstract output as Keras shows it: ``(None, 16) float32``, the batch axis (of size
    ``batch``, that of the abstract run) as None; ``?`` when not known.

    Example:
        >>> import jax
        >>> from nnx_plugins.config._summary import spell_output
        >>> spell_output(jax.ShapeDtypeStruct((2, 8, 8, 32), "float32"))
        '(None, 8, 8, 32) float32'
        >>> spell_output((jax.ShapeDtypeStruct((2, 4), "float32"),) * 2)
        '((None, 4) float32, (None, 4) float32)'
    """
    if output is None:
        return "?"
    if hasattr(output, "shape") and hasattr(output, "dtype"):
        sizes = [str(n) for n in output.shape]
        if sizes and output.shape[0] == batch:
            sizes[0] = "None"
        shape = f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"
        return f"{shape} {np.dtype(output.dtype).name}"
    if isinstance(output, (tuple, list)):
        return "(" + ", ".join(spell_output(o, batch) for o in output) + ")"
    if isinstance(output, dict):
        return "{" + ", ".join(f"{k}: {spell_output(v, batch)}" for k, v in output.items()) + "}"
    return type(output).__name__

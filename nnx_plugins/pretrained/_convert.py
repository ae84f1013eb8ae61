"""Converters: a family's ``config.json`` -> nnx config, and its tensor table, read both ways.

A `Converter` is data first: `Rule` rows, each naming a transformers tensor (``{i}`` for the
layer index of a per-layer tensor), the parameter path(s) it becomes in the model the config
builds, and the transform between them (``copy``, ``transpose``, ``conv``: OIHW -> HWIO,
``squeeze``: drop leading size-1 axes; a rule with several paths splits the transformed tensor
into equal parts along its last axis, e.g. GPT-2's fused ``c_attn``). A per-layer tensor fills
entry ``i`` of a `nnx_layers.Repeat`'s stacked parameter. Import applies the rules forwards
(`plan`, then `Plan.produce` one parameter at a time); export applies them backwards
(`to_transformers`). A rule without a path reads a tensor a checkpoint may hold that the model
does not use (a tied head saved anyway, a buffer): allowed, and dropped.

Example:
    >>> import numpy as np
    >>> from nnx_plugins.pretrained._convert import Rule, forward, backward
    >>> rule = Rule("h.{i}.attn.c_attn.weight", ("q", "k", "v"))
    >>> parts = forward(rule, np.arange(12.0).reshape(2, 6))
    >>> [p.tolist() for p in parts][0], backward(rule, parts).shape
    ([[0.0, 1.0], [6.0, 7.0]], (2, 6))
    >>> Rule("w", "kernel", "transpose").forward_shape((8, 3))
    [(3, 8)]
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import ml_dtypes
import numpy as np

from ._errors import PretrainedError

__all__ = [
    "Rule",
    "Converter",
    "Plan",
    "Target",
    "forward",
    "backward",
    "plan",
    "to_transformers",
    "table_rows",
    "path_text",
    "shown_name",
    "floating",
]

Transform = Literal["copy", "transpose", "conv", "squeeze"]
_TRANSFORMS = ("copy", "transpose", "conv", "squeeze")
_LAYER = "{i}"


@dataclasses.dataclass(frozen=True)
class Rule:
    """One row of a converter's table.

    Attributes:
        hf: the transformers tensor name; ``{i}`` stands for the layer index.
        nnx: the model's parameter path (``"blocks/block/attention/query/kernel"``), or
            several, one per equal part the tensor is split into along its last axis; ``()``:
            the tensor is allowed in a checkpoint but not used.
        transform: ``copy``, ``transpose`` (2-D), ``conv`` (OIHW -> HWIO) or ``squeeze``
            (drop ``leading`` size-1 axes).
        leading: how many leading axes ``squeeze`` drops.
        optional: a checkpoint may lack the tensor (its parameter keeps nothing: only for
            rules without a path, or parameters another rule also fills).
    """

    hf: str
    nnx: str | tuple[str, ...] = ()
    transform: Transform = "copy"
    leading: int = 1
    optional: bool = False

    def __post_init__(self) -> None:
        if self.transform not in _TRANSFORMS:
            raise ValueError(
                f"Rule {self.hf!r}: transform must be one of {_TRANSFORMS}, got {self.transform!r}."
            )
        if isinstance(self.nnx, str):
            object.__setattr__(self, "nnx", (self.nnx,))

    @property
    def targets(self) -> tuple[str, ...]:
        return self.nnx if isinstance(self.nnx, tuple) else (self.nnx,)

    @property
    def per_layer(self) -> bool:
        return _LAYER in self.hf

    def name(self, layer: int | None) -> str:
        return self.hf.replace(_LAYER, str(layer)) if layer is not None else self.hf

    def forward_shape(self, shape: Sequence[int]) -> list[tuple[int, ...]] | None:
        """The shapes of the parts a tensor of ``shape`` becomes; None if it cannot."""
        shape = tuple(shape)
        if self.transform == "transpose":
            if len(shape) != 2:
                return None
            shape = shape[::-1]
        elif self.transform == "conv":
            if len(shape) != 4:
                return None
            shape = (shape[2], shape[3], shape[1], shape[0])
        elif self.transform == "squeeze":
            if len(shape) < self.leading or any(s != 1 for s in shape[: self.leading]):
                return None
            shape = shape[self.leading :]
        parts = len(self.targets) or 1
        if not shape or shape[-1] % parts:
            return None if parts > 1 else [shape]
        return [(*shape[:-1], shape[-1] // parts)] * parts

    def backward_shape(self, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
        """The transformers shape whose parts have ``shapes``."""
        first = tuple(shapes[0])
        shape = (*first[:-1], sum(s[-1] for s in shapes)) if first else first
        if self.transform == "transpose":
            return shape[::-1]
        if self.transform == "conv":
            return (shape[3], shape[2], shape[0], shape[1])
        if self.transform == "squeeze":
            return (1,) * self.leading + shape
        return shape


def forward(rule: Rule, array: np.ndarray) -> list[np.ndarray]:
    """``array`` (transformers' layout) as the parts of ``rule``'s paths (views when possible)."""
    if rule.transform == "transpose":
        array = array.T
    elif rule.transform == "conv":
        array = array.transpose(2, 3, 1, 0)
    elif rule.transform == "squeeze":
        array = array.reshape(array.shape[rule.leading :])
    parts = len(rule.targets) or 1
    return list(np.split(array, parts, axis=-1)) if parts > 1 else [array]


def backward(rule: Rule, parts: Sequence[np.ndarray]) -> np.ndarray:
    """The transformers tensor made of ``parts`` (the inverse of `forward`)."""
    array = np.concatenate(list(parts), axis=-1) if len(parts) > 1 else np.asarray(parts[0])
    if rule.transform == "transpose":
        array = array.T
    elif rule.transform == "conv":
        array = array.transpose(3, 2, 0, 1)
    elif rule.transform == "squeeze":
        array = array.reshape((1,) * rule.leading + array.shape)
    return np.ascontiguousarray(array)


def transposed(array: np.ndarray, dtype: Any = None, block: int = 256) -> np.ndarray:
    """``array.T`` (2-D) as a new contiguous array of ``dtype``, copied in square blocks:
    faster than numpy's strided copy of a large matrix (each block stays in cache; 256 rows
    and columns were the fastest of 64-512 on a 500 MB checkpoint's weights, 0.8 GB/s).

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.pretrained._convert import transposed
        >>> x = np.arange(12.0).reshape(3, 4)
        >>> bool((transposed(x, block=2) == x.T).all()), transposed(x).flags["C_CONTIGUOUS"]
        (True, True)
    """
    rows, columns = array.shape
    out = np.empty((columns, rows), dtype or array.dtype)
    for i in range(0, rows, block):
        for j in range(0, columns, block):
            out[j : j + block, i : i + block] = array[i : i + block, j : j + block].T
    return out


_PLAIN = re.compile(r"[\w.\-/:]+")


def shown_name(name: Any) -> str:
    r"""A tensor name (read from a checkpoint's header: anything) as a message shows it: as it
    is when made of letters, digits and ``._-/:``, else escaped (``repr``), so that a name
    holding a newline or a terminal's escape sequence cannot write lines of its own.

    Example:
        >>> from nnx_plugins.pretrained._convert import shown_name
        >>> shown_name("model.norm.weight"), shown_name("evil\nimported: all good")
        ('model.norm.weight', "'evil\\nimported: all good'")
    """
    return name if isinstance(name, str) and _PLAIN.fullmatch(name) else repr(name)


def floating(dtype: Any) -> bool:
    """Whether ``dtype`` is a floating-point dtype (numpy's, or ml_dtypes' bfloat16 and
    float8 types).

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.pretrained._convert import floating
        >>> floating(np.float16), floating("bfloat16"), floating(np.int32), floating(bool)
        (True, True, False, False)
    """
    try:
        ml_dtypes.finfo(np.dtype(dtype))
    except (TypeError, ValueError):
        return False
    return True


def _largest(array: np.ndarray, chunk: int = 1 << 22) -> float:
    """The largest finite magnitude in ``array``, read a chunk at a time (no copy of it)."""
    flat, largest = array.reshape(-1), 0.0
    for start in range(0, flat.size, chunk):
        part = flat[start : start + chunk]
        part = np.abs(part[np.isfinite(part)])
        if part.size:
            largest = max(largest, float(part.max()))
    return largest


@dataclasses.dataclass(frozen=True)
class Converter:
    """A family's converter, registered by architecture name in ``nnx.converters``.

    Attributes:
        config: ``config.json`` (a dict) -> the nnx config: ``{"model": ..., "task": ...,
            "data": ...}`` from registered layer types only. Raise `PretrainedError` (or
            ``ValueError``) naming a field it does not support and its value.
        table: ``config.json`` -> the `Rule` rows.
        layers: ``config.json`` -> the number of layers ``{i}`` runs over.
        prefix: a prefix of the tensor names that checkpoints of the base model lack (GPT-2's
            ``transformer.``): names without it are read as if they had it.
    """

    config: Callable[[Mapping[str, Any]], dict[str, Any]]
    table: Callable[[Mapping[str, Any]], Sequence[Rule]]
    layers: Callable[[Mapping[str, Any]], int]
    prefix: str = ""


def path_text(path: Sequence[Any]) -> str:
    return "/".join(map(str, path))


@dataclasses.dataclass
class Target:
    """How one model parameter is made: its pieces, one per layer (one if not stacked)."""

    path: tuple[Any, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    pieces: list[tuple[str, Rule, int]]  # (transformers name, rule, part index)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclasses.dataclass
class Plan:
    """Every parameter of the model and how to make it from the checkpoint."""

    targets: list[Target]
    source: Any
    where: Any = "the checkpoint"

    def produce(self, target: Target) -> Iterator[np.ndarray]:
        """The parameter's bytes in order: one contiguous array per piece (layer).

        Raises:
            PretrainedError: a value of a tensor is past the largest of the parameter's dtype
                (it would become inf: e.g. 70000 in float16), the tensor and value named.
        """
        for name, rule, part in target.pieces:
            actual = self.source_name(name)
            source = self.source.array(actual)
            try:
                with np.errstate(over="raise"):  # (a value past the dtype's largest: inf)
                    if rule.transform == "transpose" and len(rule.targets) == 1:
                        made = transposed(source, target.dtype)
                    else:
                        made = np.ascontiguousarray(forward(rule, source)[part], target.dtype)
            except FloatingPointError:
                raise PretrainedError(
                    self.where,
                    f"the tensor {shown_name(actual)} ({np.dtype(source.dtype).name}) holds "
                    f"values up to {_largest(source):.6g} in magnitude, past the largest "
                    f"{target.dtype.name} ({float(ml_dtypes.finfo(target.dtype).max):.6g}): "
                    f"they would become inf. Import it in a dtype that holds them (--dtype "
                    "bfloat16 or float32)",
                ) from None
            yield made

    def source_name(self, name: str) -> str:
        return self._names.get(name, name)

    _names: dict[str, str] = dataclasses.field(default_factory=dict)


def table_rows(
    converter: Converter, settings: Mapping[str, Any]
) -> list[tuple[str, Rule, int | None]]:
    """Every row of ``converter``'s table for ``settings`` (a ``config.json``): ``(transformers
    name, rule, layer index or None)``, a per-layer rule once per layer (export reads them).

    Example:
        >>> from nnx_plugins.pretrained._convert import Converter, Rule, table_rows
        >>> converter = Converter(config=dict, layers=lambda c: 2,
        ...     table=lambda c: [Rule("h.{i}.w", "blocks/block/w"), Rule("wte", "embed")])
        >>> [(name, layer) for name, _, layer in table_rows(converter, {})]
        [('h.0.w', 0), ('h.1.w', 1), ('wte', None)]
    """
    return _expand(converter.table(settings), converter.layers(settings))


def _expand(rules: Sequence[Rule], layers: int) -> list[tuple[str, Rule, int | None]]:
    rows = []
    for rule in rules:
        for layer in range(layers) if rule.per_layer else (None,):
            rows.append((rule.name(layer), rule, layer))
    return rows


def _aliases(prefix: str, names: Sequence[str], wanted: Sequence[str]) -> dict[str, str]:
    """Table name -> checkpoint name, for a checkpoint of the base model (no ``prefix``)."""
    if not prefix or any(n.startswith(prefix) for n in names):
        return {}
    return {w: w[len(prefix) :] for w in wanted if w.startswith(prefix)}


def plan(
    converter: Converter,
    source: Any,
    variables: Mapping[tuple[Any, ...], tuple[tuple[int, ...], Any]],
    *,
    where: Any,
    dtype: np.dtype | None,
) -> Plan:
    """Match the checkpoint's tensors to the model's parameters through ``converter``'s table.

    Args:
        converter: the family's converter.
        source: the checkpoint (`Source`: ``names``, ``shape``, ``dtype``, ``array``).
        variables: the model's parameters, path -> (shape, dtype), in the model's order.
        where: the checkpoint directory, for messages.
        dtype: the dtype of every parameter; None: each keeps its tensor's.

    Raises:
        PretrainedError: every missing, unexpected or misshapen tensor by its transformers
            name (all of them at once; a name that is not plain shown escaped: `shown_name`),
            a tensor of an integer or boolean dtype read into a parameter (parameters are
            floating-point), or a parameter the table does not fill.
    """
    settings = source.settings()
    rules, layers = converter.table(settings), converter.layers(settings)
    present = set(source.names())
    _check_layers(rules, layers, present, converter.prefix, where)
    rows = _expand(rules, layers)
    aliases = _aliases(converter.prefix, sorted(present), [name for name, _, _ in rows])
    missing, misshapen, integral, used = [], [], [], set()
    pieces: dict[tuple[str, ...], dict[int | None, tuple[str, Rule, int]]] = {}
    wanted = {path_text(p): p for p in variables}
    for name, rule, layer in rows:
        actual = aliases.get(name, name)
        if actual not in present:
            if not rule.optional:
                missing.append(shown_name(actual))
            continue
        used.add(actual)
        problem = _shape_problem(rule, layer, source.shape(actual), variables, wanted)
        if problem:
            misshapen.append(f"{shown_name(actual)}: {problem}")
            continue
        kind = np.dtype(source.dtype(actual))
        if rule.targets and not floating(kind):
            integral.append(f"{shown_name(actual)} is {kind.name}")
            continue
        for part, target in enumerate(rule.targets):
            pieces.setdefault(target, {})[layer] = (actual, rule, part)
    extra = [shown_name(name) for name in sorted(present - used)]
    problems = []
    if missing:
        problems.append(f"missing tensors: {_listed(missing, ', ')}")
    if extra:
        problems.append(f"unexpected tensors: {_listed(extra, ', ')}")
    if misshapen:
        problems.append("tensors of the wrong shape: " + _listed(misshapen, "; "))
    if integral:
        problems.append(
            "tensors of a dtype that is not floating-point, where the model's parameters are "
            "(a file relabelled or damaged, or not a model's weights): " + _listed(integral, "; ")
        )
    if problems:
        raise PretrainedError(
            where,
            f"the checkpoint does not fit its config.json ({' | '.join(problems)}). The "
            "tensors are named as transformers names them; the config.json may be of another "
            "model size, or the files damaged",
        )
    targets = [
        _target(path, shape, kind, pieces, source, dtype, where)
        for path, (shape, kind) in variables.items()
    ]
    result = Plan(targets, source, where)
    result._names = aliases
    return result


_LISTED = 40
"""The most tensor names an error lists (then "and N more")."""


def _listed(names: Sequence[str], separator: str) -> str:
    shown = separator.join(names[:_LISTED])
    return shown + (f"{separator}and {len(names) - _LISTED:,} more" if len(names) > _LISTED else "")


def _check_layers(
    rules: Sequence[Rule], layers: int, present: set[str], prefix: str, where: Any
) -> None:
    """Refuse, before the table is expanded, a config.json describing more layers than the
    checkpoint has tensors (a hostile ``num_hidden_layers: 1000000000`` would otherwise expand
    billions of names)."""
    required = [rule for rule in rules if rule.per_layer and not rule.optional]
    if not required or layers <= len(present):
        return
    rule, held = required[0], 0
    while held < len(present) and (
        rule.name(held) in present or rule.name(held).removeprefix(prefix) in present
    ):
        held += 1
    raise PretrainedError(
        where,
        f"the checkpoint does not fit its config.json: config.json describes {layers:,} layers "
        f"but the checkpoint holds {len(present):,} tensors, those of {held:,} layer(s) "
        f"({rule.name(0)!r} ...). The config.json is of another model, or was edited",
    )


def _shape_problem(
    rule: Rule,
    layer: int | None,
    shape: tuple[int, ...],
    variables: Mapping[tuple[Any, ...], tuple[tuple[int, ...], Any]],
    wanted: Mapping[str, tuple[Any, ...]],
) -> str | None:
    expected = []
    for target in rule.targets:
        path = wanted.get(target)
        if path is None:
            raise PretrainedError(
                "converter",
                f"its rule for {rule.hf!r} names the parameter {target!r}, which the model its "
                f"config builds does not have (it has e.g. {', '.join(list(wanted)[:4])}). "
                "Fix the converter's table",
            )
        full = variables[path][0]
        expected.append(full[1:] if layer is not None else full)
    if not rule.targets:
        return None
    got = rule.forward_shape(shape)
    if got != [tuple(e) for e in expected]:
        return f"shape {tuple(shape)}, expected {rule.backward_shape(expected)}"
    return None


def _target(
    path: tuple[Any, ...],
    shape: tuple[int, ...],
    kind: Any,
    pieces: Mapping[str, Mapping[int | None, tuple[str, Rule, int]]],
    source: Any,
    dtype: np.dtype | None,
    where: Any,
) -> Target:
    found = pieces.get(path_text(path), {})
    layered = [k for k in found if k is not None]
    if None in found and not layered:
        ordered = [found[None]]
    elif layered and len(layered) == shape[0] and None not in found:
        ordered = [found[i] for i in range(shape[0])]
    else:
        raise PretrainedError(
            where,
            f"the converter fills no tensor (or not every layer) into the model's parameter "
            f"{path_text(path)} {tuple(shape)}; the checkpoint lacks it or the converter's table "
            "is incomplete",
        )
    if dtype is None:
        dtypes = {np.dtype(source.dtype(name)) for name, _, _ in ordered}
        chosen = dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)
    else:
        chosen = np.dtype(dtype)
    return Target(path, tuple(shape), chosen, ordered)


def to_transformers(
    converter: Converter, settings: Mapping[str, Any], state: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The table applied backwards: the model's parameters (``path text -> array``, as
    `path_text` spells the paths) as transformers' tensors (``name -> array``).

    Raises:
        PretrainedError: a parameter the table reads is absent from ``state``.

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.pretrained._convert import Converter, Rule, to_transformers
        >>> converter = Converter(config=dict, layers=lambda c: 2,
        ...     table=lambda c: [Rule("h.{i}.w", "blocks/block/w", "transpose")])
        >>> out = to_transformers(converter, {}, {"blocks/block/w": np.zeros((2, 3, 5))})
        >>> {name: array.shape for name, array in out.items()}
        {'h.0.w': (5, 3), 'h.1.w': (5, 3)}
    """
    tensors = {}
    for name, rule, layer in _expand(converter.table(settings), converter.layers(settings)):
        if not rule.targets:
            continue
        parts = []
        for target in rule.targets:
            if target not in state:
                raise PretrainedError(
                    "the model",
                    f"the table reads the parameter {target!r} (for {name}), which the "
                    "model does not have",
                    action="export",
                )
            value = np.asarray(state[target])
            parts.append(value[layer] if layer is not None else value)
        tensors[name] = backward(rule, parts)
    return tensors


class MemorySource:
    """A checkpoint held in memory (``name -> array``) with its ``config.json``: what `plan`
    reads, for tests and round trips.

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.pretrained._convert import MemorySource
        >>> source = MemorySource({"n_layer": 1}, {"w": np.zeros((2, 3), np.float32)})
        >>> source.names(), source.shape("w"), source.dtype("w").name
        (['w'], (2, 3), 'float32')
    """

    def __init__(self, config: Mapping[str, Any], tensors: Mapping[str, np.ndarray]):
        self._config, self._tensors = dict(config), {k: np.asarray(v) for k, v in tensors.items()}

    def names(self) -> list[str]:
        return sorted(self._tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._tensors[name].shape)

    def dtype(self, name: str) -> np.dtype:
        return self._tensors[name].dtype

    def array(self, name: str) -> np.ndarray:
        return self._tensors[name]

    def settings(self) -> Mapping[str, Any]:
        return self._config

"""Validating a model config tree: every problem collected, every node normalized.

The walker resolves each node's ``type`` through the registry (importing only the plugins the
config names), validates the node with the layer's pydantic model, and recurses into nested
layer fields itself so that every problem gets its full path and file position. A nested node
must be a layer of the class the field's annotation names (``cell: RNNCellBase``).

A function layer's node keeps only the arguments that differ from the function's defaults:
``{type: leaky_relu, negative_slope: 0.01}`` normalizes to ``{type: leaky_relu}``, which builds
the bare function.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any

import pydantic

from .._text import close_matches, suggest
from ..registry._errors import PluginError
from ._errors import Problem
from ._fields import LAYER_KINDS, FieldSpec, LayerSpec, layer_spec
from ._messages import condense
from ._source import Source
from ._types import to_json

__all__ = ["Walker", "describe"]

Path = tuple[Any, ...]
#: errors of the config's own field types, whose messages already say what was received
_OWN_ERRORS = ("dtype", "initializer", "activation", "variable")


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types (``1 == 1.0 == True`` do not count)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _short_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxtuple, short.maxdict = 20, 12, 12, 8
    short.maxstring = short.maxother = short.maxlong = 70
    return short


_SHORT = _short_repr()


def describe(value: Any) -> str:
    """A short description of a received value for error messages: at most 60 characters of
    its repr, which is built bounded (a huge or deeply nested value is not repr'd whole).

    Example:
        >>> from nnx_plugins.config._walk import describe
        >>> describe([1, 2])
        'list [1, 2]'
        >>> deep = 1
        >>> for _ in range(100_000):
        ...     deep = [deep]
        >>> describe(deep)
        'list [[[[[[[[[[[[[[[[[[[[[...]]]]]]]]]]]]]]]]]]]]'
    """
    text = _SHORT.repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}"


class Walker:
    """Validates layer nodes against one `Source`, collecting `Problem` objects."""

    def __init__(self, source: Source, registry: Any, prefer: Mapping[str, str] | None = None):
        self.source, self.registry = source, registry
        self.prefer = dict(prefer or {})
        self.problems: list[Problem] = []

    @property
    def context(self) -> dict[str, Any]:
        return {"registry": self.registry, "prefer": self.prefer}

    def add(self, path: Path, message: str, *, at_key: bool = False) -> None:
        self.problems.append(self.source.problem(path, message, at_key=at_key))

    def spec_of(self, value: Any, path: Path) -> LayerSpec | None:
        """Resolve the ``type`` of the node at ``path``; report why if it cannot be resolved."""
        if not isinstance(value, Mapping):
            self.add(
                path,
                f"expected a layer config: a mapping with a 'type' key, got {describe(value)}.",
            )
            return None
        if "type" not in value:
            keys = [k for k in value if isinstance(k, str)]
            close = close_matches("type", keys, cutoff=0.5)
            hint = f" Is {close[0]!r} a misspelling of 'type'?" if close else ""
            self.add(path, f"missing the 'type' key naming the layer.{hint}")
            return None
        name = value["type"]
        if not isinstance(name, str):
            self.add((*path, "type"), f"'type' must be a layer name, got {describe(name)}.")
            return None
        try:
            obj = self.registry.get("layer", name, prefer=self.prefer)
            return layer_spec(name, obj, registry=self.registry)
        except PluginError as error:
            self.add((*path, "type"), str(error))
            return None
        except Exception as error:  # noqa: BLE001 - a layer whose signature cannot be modelled
            self.add(
                (*path, "type"),
                f"cannot derive a config model for {name!r}: {type(error).__name__}: {error}",
            )
            return None

    def node(
        self, value: Any, path: Path, *, within: tuple[str, FieldSpec] | None = None
    ) -> dict[str, Any] | None:
        """Return the normalized node at ``path``, or ``None`` after recording its problems.

        ``within`` names the parent layer and field a nested node fills, to check its class.
        """
        before = len(self.problems)
        spec = self.spec_of(value, path)
        if spec is None:
            return None
        if within is not None:
            self._check_accepted(spec, within, path)
        normalized = self._validate(spec, value, path)
        if not spec.custom:
            for field in spec.fields:
                if field.kind in LAYER_KINDS and field.name in value:
                    child = self._children(
                        (spec.name, field), value[field.name], (*path, field.name)
                    )
                    if normalized is not None:
                        normalized[field.name] = child
        return normalized if len(self.problems) == before else None

    def _check_accepted(self, spec: LayerSpec, within: tuple[str, FieldSpec], path: Path) -> None:
        parent, field = within
        if not field.accepts or (
            isinstance(spec.obj, type) and issubclass(spec.obj, field.accepts)
        ):
            return
        wanted = " or ".join(c.__qualname__ for c in field.accepts)
        got = spec.obj.__qualname__ if isinstance(spec.obj, type) else "a function"
        self.add(
            (*path, "type"),
            f"{parent}.{field.name} takes a {wanted} layer, got {spec.name!r} ({got}). "
            f"Give a layer whose class is a {wanted}.",
        )

    def _children(self, within: tuple[str, FieldSpec], value: Any, path: Path) -> Any:
        field = within[1]
        if field.kind == "layer":
            return (
                None if value is None and field.optional else self.node(value, path, within=within)
            )
        if field.kind == "layers" and isinstance(value, (list, tuple)):
            return [self.node(item, (*path, i), within=within) for i, item in enumerate(value)]
        if field.kind == "layer_map" and isinstance(value, Mapping):
            return {
                key: self.node(item, (*path, key), within=within) for key, item in value.items()
            }
        return None  # wrong container type: reported by the pydantic model

    def _validate(self, spec: LayerSpec, value: Mapping, path: Path) -> dict[str, Any] | None:
        data = dict(value)
        if spec.custom:
            data.pop("type", None)
        try:
            validated = spec.model.model_validate(data, context=self.context)
        except pydantic.ValidationError as error:
            self._report(error, spec, path)
            return None
        except Exception as error:  # noqa: BLE001 - a custom config_model may raise anything
            self.add(path, f"validating {spec.name} raised {type(error).__name__}: {error}")
            return None
        dumped = validated.model_dump(mode="python", by_alias=True)
        nested = (
            {f.name for f in spec.fields if f.kind in LAYER_KINDS} if not spec.custom else set()
        )
        normalized: dict[str, Any] = {"type": spec.name}
        for key, item in dumped.items():
            if key == "type":
                continue
            if key in nested:  # replaced by the normalized children in `node`, unless defaulted
                normalized[key] = [] if isinstance(item, (list, tuple)) else item
                continue
            try:
                normalized[key] = to_json(item)
            except TypeError as problem:
                self.add((*path, key), f"{problem}.")
        if spec.is_activation:  # a function layer names only what differs from its defaults
            defaults = {n: f.default for n, f in spec.model.model_fields.items() if n != "type_"}
            for field in spec.fields:
                default = defaults.get(f"f_{field.name}")
                if field.name in normalized and not field.required:
                    if _same(normalized[field.name], to_json(default)):
                        del normalized[field.name]
        return normalized

    def _report(self, error: pydantic.ValidationError, spec: LayerSpec, path: Path) -> None:
        names = [f.name for f in spec.fields if f.kind != "opaque"]
        if spec.custom:
            names = [f.alias or n for n, f in spec.model.model_fields.items()]
        items = error.errors(include_url=False)
        misspelt = {
            close
            for item in items
            if item["type"] == "extra_forbidden" and len(item["loc"]) == 1
            for close in close_matches(item["loc"][0], names)[:1]
        }
        plain = [i for i in items if i["type"] in ("missing", "extra_forbidden")]
        for item in plain:
            loc = tuple(item["loc"])
            if item["type"] == "missing" and len(loc) == 1 and loc[0] in misspelt:
                continue  # the misspelt key's "did you mean" already says it
            where = (*path, *loc)
            kind = item["type"]
            if kind == "extra_forbidden" and len(loc) == 1:
                opaque = spec.field(str(loc[0]))
                reason = (
                    f"{loc[0]!r} cannot be set from a config (its value has no config spelling)."
                    if opaque is not None
                    else f"unknown key {loc[0]!r} for {spec.name}.{suggest(loc[0], names)} "
                    f"Valid keys: {', '.join(names)}."
                )
                self.add(where, reason, at_key=True)
            elif kind == "missing":  # (located at the node: the file it came from)
                self.add(where, f"missing required key {loc[-1]!r} for {spec.name}.")
        others = [i for i in items if i not in plain]
        custom = {tuple(i["loc"]) for i in others if i["type"].startswith(_OWN_ERRORS)}
        for loc, message, received in condense(others):
            text = message if loc in custom else f"{message} (got {describe(received)})"
            self.add((*path, *loc), text if text.endswith((".", "?")) else f"{text}.")

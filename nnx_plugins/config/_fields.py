"""Deriving a layer's config model from its ``__init__`` signature and annotations.

Every parameter except ``self`` and ``rngs`` becomes a field; for a function registered as a
layer (an activation such as ``leaky_relu``), every parameter after the first (the input).
Its *kind* decides how a config spells it: ``plain`` (validated against the annotation, with
strict scalars and the constraints it declares: ``Literal`` strings,
``Annotated[float, annotated_types.Interval(...)]`` ranges), ``dtype`` (a name),
``initializer`` (a name or ``{type: name, ...arguments}``), ``activation`` (a registered name),
``layer`` / ``layers`` / ``layer_map`` (nested layer configs), or ``opaque`` (not expressible in
a config: the field is left out and must keep its default). A layer may instead supply its own
pydantic model as the class attribute ``config_model``.

Example:
    >>> from nnx_plugins import layer_spec
    >>> from nnx_layers import Linear
    >>> spec = layer_spec("Linear", Linear)
    >>> [(f.name, f.kind) for f in spec.fields][:4]
    [('in_features', 'plain'), ('out_features', 'plain'), ('use_bias', 'plain'), ('dtype', 'dtype')]
    >>> spec.required
    ('in_features', 'out_features')
    >>> from nnx_layers import leaky_relu
    >>> [(f.name, f.default) for f in layer_spec("leaky_relu", leaky_relu).fields]
    [('negative_slope', 0.01)]
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import inspect
import types
import typing
from typing import Any, Literal

import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field

import nnx_core

from ..registry._registry import default_registry
from ._scalars import strict_type
from ._types import (
    activation_type,
    dtype_type,
    initializer_type,
    layer_type,
    normalize_dtype,
    normalize_initializer,
    to_json,
)

__all__ = ["FieldSpec", "LayerSpec", "layer_spec", "LAYER_KINDS"]

LAYER_KINDS = ("layer", "layers", "layer_map")
_EMPTY = inspect.Parameter.empty
_DTYPE_PARAMS = {"preferred_element_type"}


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One constructor argument as a config field."""

    name: str
    kind: str
    annotation: Any
    default: Any
    parameter_kind: inspect._ParameterKind
    optional: bool = False
    accepts: tuple[type, ...] = ()

    @property
    def required(self) -> bool:
        return (
            self.default is _EMPTY and self.parameter_kind is not inspect.Parameter.VAR_POSITIONAL
        )


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """How a registered layer (or activation) reads from and writes to a config.

    Attributes:
        name: the registered name (the config's ``type``).
        obj: the layer class, or the activation function.
        fields: the config fields in signature order (empty for activations).
        model: the pydantic model validating one config mapping (nested layers unchecked).
        custom: ``True`` if the layer supplied ``config_model`` itself.
        takes_rngs: whether the constructor has an ``rngs`` parameter.

    A field of a nested-layer kind has ``accepts``: the Module classes its annotation names
    (empty when any layer will do, as for ``Module`` or ``Callable``).
    """

    name: str
    obj: Any
    fields: tuple[FieldSpec, ...]
    model: type[BaseModel]
    custom: bool = False
    takes_rngs: bool = False

    @property
    def is_activation(self) -> bool:
        return not isinstance(self.obj, type)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.required)

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)


def _origin_args(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    return typing.get_origin(annotation), typing.get_args(annotation)


def _is_module(annotation: Any) -> bool:

    return isinstance(annotation, type) and issubclass(annotation, nnx_core.Module)


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    origin, args = _origin_args(annotation)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = tuple(a for a in args if a is not type(None))
        return (rest[0] if len(rest) == 1 else typing.Union[rest]), True  # noqa: UP007
    return annotation, False


def _layer_shape(annotation: Any) -> str | None:
    """``one`` / ``list`` / ``dict`` if ``annotation`` holds Modules, else ``None``."""
    inner, _ = _strip_optional(annotation)
    origin, args = _origin_args(inner)
    if _is_module(inner):
        return "one"
    if origin in (typing.Union, types.UnionType) and any(_is_module(a) for a in args):
        return "one"
    if origin in (list, tuple, cabc.Sequence) and args and _layer_shape(args[0]) == "one":
        return "list"
    if origin in (dict, cabc.Mapping) and len(args) == 2 and _layer_shape(args[1]) == "one":
        return "dict"
    return None


def _module_classes(annotation: Any) -> tuple[type, ...]:
    """The Module subclasses a nested-layer annotation asks for; ``()`` if any layer will do."""
    inner, _ = _strip_optional(annotation)
    origin, args = _origin_args(inner)
    if origin in (list, tuple, cabc.Sequence):
        return _module_classes(args[0]) if args else ()
    if origin in (dict, cabc.Mapping):
        return _module_classes(args[1]) if len(args) == 2 else ()
    members = args if origin in (typing.Union, types.UnionType) else (inner,)
    if any(m is nnx_core.Module or not _is_module(m) for m in members):
        return ()
    return tuple(members)


def _is_callable_annotation(annotation: Any) -> bool:
    inner, _ = _strip_optional(annotation)
    return inner is cabc.Callable or typing.get_origin(inner) is cabc.Callable


def _is_dtype_default(default: Any) -> bool:

    return isinstance(default, np.dtype) or (
        isinstance(default, type) and hasattr(default, "dtype")
    )


def _is_initializer_default(default: Any) -> bool:
    try:
        normalize_initializer(default)
    except Exception:  # noqa: BLE001
        return False
    return not isinstance(default, (str, cabc.Mapping))


def _classify(param: inspect.Parameter, annotation: Any) -> str:
    """Decide a parameter's field kind from its annotation, name and default."""
    name, default = param.name, param.default
    if param.kind is inspect.Parameter.VAR_POSITIONAL:
        return (
            "layers"
            if annotation is _EMPTY
            or _layer_shape(annotation)
            or _is_callable_annotation(annotation)
            or annotation is Any
            else "plain"
        )
    shape = _layer_shape(annotation) if annotation is not _EMPTY else None
    if shape is not None:
        return {"one": "layer", "list": "layers", "dict": "layer_map"}[shape]
    if name.endswith("_init") or name == "init" or _is_initializer_default(default):
        return "initializer"
    if name.endswith("dtype") or name in _DTYPE_PARAMS or _is_dtype_default(default):
        return "dtype"
    if name.endswith("activation") or name.endswith("_fn") or _is_callable_annotation(annotation):
        return "activation"
    if default is not _EMPTY:
        try:
            to_json(default)
        except TypeError:
            return "opaque"
    return "plain"


def _plain_type(annotation: Any) -> Any:
    if annotation is _EMPTY:
        return Any
    strict = strict_type(annotation)
    try:
        adapter = pydantic.TypeAdapter(strict)
        adapter.json_schema()
    except Exception:  # noqa: BLE001 - anything pydantic cannot model is accepted as-is
        return Any
    return strict


def _field_type(spec: FieldSpec) -> Any:
    if spec.kind == "dtype":
        return dtype_type()
    if spec.kind == "initializer":
        return initializer_type()
    if spec.kind == "activation":
        return activation_type()
    if spec.kind == "layer":
        return layer_type("optional" if spec.optional else "one")
    if spec.kind in ("layers", "layer_map"):
        shape = layer_type("list" if spec.kind == "layers" else "dict")
        varargs = spec.parameter_kind is inspect.Parameter.VAR_POSITIONAL
        return shape | None if spec.optional and not varargs else shape
    return _plain_type(spec.annotation)


def _pydantic_default(spec: FieldSpec, registry: Any) -> Any:
    if spec.required:
        return ...
    if spec.kind == "layers" and spec.parameter_kind is inspect.Parameter.VAR_POSITIONAL:
        return []
    default = spec.default
    if spec.kind == "initializer":
        return normalize_initializer(default)
    if spec.kind == "dtype":
        return normalize_dtype(default)
    if spec.kind == "activation" and callable(default):
        return registry.name_of(default)
    return to_json(default) if spec.kind == "plain" else default


def _hints(target: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the raw ones
        return dict(getattr(target, "__annotations__", {}))


def _parameters(obj: Any) -> tuple[list[inspect.Parameter], dict[str, Any]]:
    """The parameters a config may set, and their annotations: a class's ``__init__`` minus
    ``self``; a function's parameters after its input (none if it has no signature)."""
    target = obj.__init__ if isinstance(obj, type) else obj
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):  # a builtin or C function: nothing a config can set
        return [], {}
    if isinstance(obj, type):
        parameters = parameters[1:] if parameters and parameters[0].name == "self" else parameters
    else:
        skipped = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
        parameters = [p for p in parameters[1:] if p.kind not in skipped and p.name != "rngs"]
    return parameters, _hints(target)


def _activation_default_ok(default: Any, registry: Any) -> bool:
    if default is _EMPTY or default is None or not callable(default):
        return True
    try:
        registry.name_of(default)
    except Exception:  # noqa: BLE001 - an unregistered default has no config spelling
        return False
    return True


def _derive_fields(obj: Any, registry: Any) -> tuple[tuple[FieldSpec, ...], bool]:
    parameters, hints = _parameters(obj)
    fields, takes_rngs = [], False
    for param in parameters:
        if param.name == "rngs":
            takes_rngs = True
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        annotation = hints.get(param.name, _EMPTY)
        _, optional = _strip_optional(annotation) if annotation is not _EMPTY else (None, False)
        kind = _classify(param, annotation)
        if kind == "activation" and not _activation_default_ok(param.default, registry):
            kind = "opaque"
        accepts = _module_classes(annotation) if kind in LAYER_KINDS else ()
        fields.append(
            FieldSpec(
                param.name,
                kind,
                annotation,
                param.default,
                param.kind,
                optional or param.default is None,
                accepts,
            )
        )
    return tuple(fields), takes_rngs


def _make_model(name: str, fields: tuple[FieldSpec, ...], registry: Any) -> type[BaseModel]:
    definitions: dict[str, Any] = {
        "type_": (Literal[name], Field(alias="type")),
    }
    for spec in fields:
        if spec.kind == "opaque":
            continue
        definitions[f"f_{spec.name}"] = (
            _field_type(spec),
            Field(_pydantic_default(spec, registry), alias=spec.name),
        )
    title = name.replace(".", "_")
    config = ConfigDict(
        extra="forbid", arbitrary_types_allowed=True, title=name, validate_default=False
    )
    return pydantic.create_model(f"{title}Config", __config__=config, **definitions)


_CACHE: dict[tuple[str, Any], LayerSpec] = {}


def layer_spec(name: str, obj: Any, *, registry: Any = None) -> LayerSpec:
    """Return the config description of the layer class or activation ``obj`` named ``name``.

    Args:
        name: its registered name.
        obj: a `nnx_core.Module` subclass, or an activation function.
        registry: used to name activation defaults; the default registry when omitted.

    Raises:
        TypeError: a custom ``config_model`` is not a pydantic model.
    """
    key = (name, obj)
    if key in _CACHE:
        return _CACHE[key]
    if registry is None:
        registry = default_registry()
    fields, takes_rngs = _derive_fields(obj, registry)
    if not isinstance(obj, type):
        spec = LayerSpec(name, obj, fields, _make_model(name, fields, registry))
    else:
        custom = getattr(obj, "config_model", None)
        if custom is not None:
            if not (isinstance(custom, type) and issubclass(custom, BaseModel)):
                raise TypeError(
                    f"{obj.__qualname__}.config_model must be a pydantic BaseModel subclass, "
                    f"got {custom!r}."
                )
            spec = LayerSpec(name, obj, fields, custom, True, takes_rngs)
        else:
            spec = LayerSpec(
                name, obj, fields, _make_model(name, fields, registry), False, takes_rngs
            )
    _CACHE[key] = spec
    return spec

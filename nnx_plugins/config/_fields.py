"""Deriving a layer's config model from its ``__init__`` signature and annotations.

Every parameter except ``self`` and ``rngs`` becomes a field; for a function registered as a
layer (an activation such as ``leaky_relu``), every parameter after the first (the input).
Its *kind* decides how a config spells it: ``plain`` (validated against the annotation, with
strict scalars and the constraints it declares: ``Literal`` strings,
``Annotated[float, annotated_types.Interval(...)]`` ranges), ``dtype`` (a name),
``initializer`` (a name or ``{type: name, ...arguments}``), ``activation`` (a registered
function's name, or ``{type: name, ...arguments}``; a function that stands in for a default
such as ``attention_fn`` must take the same inputs), ``variable`` (a registered Variable kind's
name), ``layer`` / ``layers`` / ``layer_map`` (nested layer configs), or ``opaque`` (not
expressible in a config: the field is left out and must keep its default). A layer may instead supply its own
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
import functools
import inspect
import types
import typing
from typing import Annotated, Any, Literal

import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationInfo, WithJsonSchema
from pydantic_core import PydanticCustomError

import nnx_core

from .._text import suggest
from ..registry._registry import default_registry
from ._bound import BoundFunction
from ._messages import condense
from ._scalars import strict_type
from ._types import (
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
    factory: bool = False  # a layer field given as a function of ``rngs`` (`Repeat`'s block)

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


def _is_factory(annotation: Any) -> bool:
    """``Callable[[Rngs], Module]``: a function that builds a layer (a layer spec in configs)."""
    inner, _ = _strip_optional(annotation)
    origin, args = _origin_args(inner)
    return origin is cabc.Callable and bool(args) and _is_module(args[-1])


def _layer_shape(annotation: Any) -> str | None:
    """``one`` / ``list`` / ``dict`` if ``annotation`` holds Modules, else ``None``."""
    inner, _ = _strip_optional(annotation)
    origin, args = _origin_args(inner)
    if _is_module(inner) or _is_factory(inner):
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


def _is_variable_kind(default: Any, annotation: Any) -> bool:
    """A Variable class as the default, or ``type[Variable]`` in the annotation."""
    if isinstance(default, type) and issubclass(default, nnx_core.Variable):
        return True
    inner, _ = _strip_optional(annotation)
    origin, args = _origin_args(inner)
    members = args if origin in (typing.Union, types.UnionType) else (inner,)
    return any(
        typing.get_origin(m) is type
        and isinstance(typing.get_args(m)[0], type)
        and issubclass(typing.get_args(m)[0], nnx_core.Variable)
        for m in members
    )


def _is_dtype_default(default: Any) -> bool:
    if isinstance(default, type) and issubclass(default, nnx_core.Variable):
        return False  # (a Variable class has a ``dtype`` attribute too)
    return isinstance(default, np.dtype) or (
        isinstance(default, type) and hasattr(default, "dtype")
    )


def _is_scalar_annotation(annotation: Any) -> bool:
    """``int``/``float``/``bool``/``str`` (optionally ``Annotated``): never an initializer."""
    inner, _ = _strip_optional(annotation)
    if typing.get_origin(inner) is typing.Annotated:
        inner = typing.get_args(inner)[0]
    return inner in (int, float, bool, str)


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
    by_name = (name.endswith("_init") or name == "init") and not _is_scalar_annotation(annotation)
    if by_name or _is_initializer_default(default):
        return "initializer"
    if _is_variable_kind(default, annotation):
        return "variable"
    callable_annotation = _is_callable_annotation(annotation)  # (``promote_dtype`` is one)
    dtype_name = name.endswith("dtype") or name in _DTYPE_PARAMS
    if (dtype_name and not callable_annotation) or _is_dtype_default(default):
        return "dtype"
    if name.endswith("activation") or name.endswith("_fn") or callable_annotation:
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
        return initializer_type(optional=spec.optional)
    if spec.kind == "activation":
        return _activation_type(_inputs(spec.default))
    if spec.kind == "variable":
        return _variable_kind_type()
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
        return None if default is None else normalize_initializer(default)
    if spec.kind == "dtype":
        return normalize_dtype(default)
    if spec.kind == "activation" and callable(default):
        return registry.name_of(default)
    if spec.kind == "variable" and isinstance(default, type):
        return nnx_core.variable_name(default)
    return to_json(default) if spec.kind == "plain" else default


_FUNCTION_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"]},
        {"type": "null"},
    ]
}


def _inputs(function: Any) -> tuple[str, ...] | None:
    """The required positional parameters of ``function`` (``None``: unknown or no function)."""
    if not callable(function):
        return None
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in parameters if p.kind in positional and p.default is _EMPTY)


def _activation_error(template: str, **values: Any) -> PydanticCustomError:
    return PydanticCustomError("activation", template, values)


def _function_node(value: Any, registry: Any) -> dict[str, Any]:
    """``{type: name, ...arguments}`` for a function argument written or held any way."""
    if isinstance(value, BoundFunction):
        return {"type": registry.name_of(value.function), **value.arguments}
    if isinstance(value, functools.partial) and not value.args:
        return {"type": registry.name_of(value.func), **value.keywords}
    if callable(value) and not isinstance(value, (str, type)):
        return {"type": registry.name_of(value)}
    if isinstance(value, str):
        return {"type": value}
    if isinstance(value, cabc.Mapping) and isinstance(value.get("type"), str):
        return dict(value)
    raise _activation_error(
        "expected a function's name such as 'relu', or its name and arguments such as "
        "{example}, got {value}.",
        example="{type: leaky_relu, negative_slope: 0.2}",
        value=repr(value),
    )


def normalize_function(
    value: Any, registry: Any, prefer: Any = None, inputs: tuple[str, ...] | None = None
) -> Any:
    """The config spelling of a function argument: its name, or ``{type, ...arguments}``.

    ``inputs`` are the required inputs of the layer's default function: a function taking
    other inputs cannot stand in for it (``attention_fn: relu`` is refused).
    """
    if value is None:
        return None
    try:
        node = _function_node(value, registry)
        name = node["type"]
        obj = registry.get("layer", name, prefer=prefer)
    except PydanticCustomError:
        raise
    except Exception as error:  # noqa: BLE001 - unknown, colliding or failed: say which
        raise _activation_error("{error}", error=str(error)) from None
    if isinstance(obj, type):
        raise _activation_error("{value} is a layer, not a function.", value=repr(name))
    takes = _inputs(obj)
    if inputs is not None and takes is not None and len(takes) != len(inputs):
        raise _activation_error(
            "{value} cannot stand in here: it takes ({takes}), and this argument is called "
            "with ({inputs}).",
            value=repr(name),
            takes=", ".join(takes),
            inputs=", ".join(inputs),
        )
    arguments = {k: v for k, v in node.items() if k != "type"}
    if not arguments:
        return name
    spec = layer_spec(name, obj, registry=registry)
    context = {"registry": registry, "prefer": prefer}
    try:
        validated = spec.model.model_validate({"type": name, **arguments}, context=context)
    except pydantic.ValidationError as error:
        # (the inputs after the first are given by the caller, not by the config)
        items = [
            item
            for item in error.errors(include_url=False)
            if not (item["type"] == "missing" and item["loc"][:1] and item["loc"][0] in takes)
        ]
        if items:
            raise _activation_error(
                "invalid arguments for {value}: {problems}",
                value=repr(name),
                problems="; ".join(_argument_problem(item, spec) for item in items),
            ) from None
        validated = spec.model.model_construct(**{f"f_{k}": v for k, v in arguments.items()})
    dumped = validated.model_dump(by_alias=True)
    kept = {
        key: to_json(dumped[key])
        for key in arguments
        if to_json(dumped[key]) != to_json(spec.model.model_fields[f"f_{key}"].default)
    }
    return {"type": name, **kept} if kept else name


def _argument_problem(item: cabc.Mapping[str, Any], spec: LayerSpec) -> str:
    """One invalid argument of a function given with arguments, as ``name: what``."""
    loc = ".".join(map(str, item["loc"]))
    if item["type"] == "extra_forbidden":
        names = [f.name for f in spec.fields]
        return f"unknown argument {loc!r}.{suggest(loc, names)} Its arguments: {', '.join(names)}"
    _, message, _ = condense([item], keep=0)[0]
    return f"{loc}: {message} (got {item['input']!r})"


def _activation_type(inputs: tuple[str, ...] | None) -> Any:
    """The field type of a function argument (``gate_fn``, ``attention_fn``, ...)."""

    def validate(value: Any, info: ValidationInfo) -> Any:
        context = info.context or {}
        registry = context.get("registry") or default_registry()
        return normalize_function(value, registry, context.get("prefer"), inputs)

    return Annotated[Any, PlainValidator(validate), WithJsonSchema(_FUNCTION_SCHEMA)]


def _variable_kind_type() -> Any:
    """The field type of a Variable kind argument: a registered kind's name."""

    def validate(value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        if isinstance(value, type) and issubclass(value, nnx_core.Variable):
            return nnx_core.variable_name(value)
        if not isinstance(value, str):
            raise PydanticCustomError(
                "variable",
                "expected a Variable kind's name such as 'Param', got {value}.",
                {"value": repr(value)},
            )
        registry = (info.context or {}).get("registry") or default_registry()
        try:
            registry.get("variable", value)
        except Exception as error:  # noqa: BLE001 - unknown or broken: say which
            raise PydanticCustomError("variable", "{error}", {"error": str(error)}) from None
        return value

    schema = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    return Annotated[Any, PlainValidator(validate), WithJsonSchema(schema)]


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
                kind == "layer" and _is_factory(annotation),
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

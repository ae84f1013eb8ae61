"""Building models from validated configs (`build`), and configs from built models (`to_config`).

Example:
    >>> from nnx_plugins import build, load_config, to_config
    >>> config = load_config({"model": {
    ...     "type": "Sequential",
    ...     "layers": [{"type": "Linear", "in_features": 4, "out_features": 8},
    ...                {"type": "relu"},
    ...                {"type": "Linear", "in_features": 8, "out_features": 2}]}})
    >>> model = build(config)
    >>> [layer["type"] for layer in to_config(model)["layers"]]
    ['Linear', 'relu', 'Linear']
    >>> to_config(model) == config.model
    True
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import pydantic

import nnx_core
from nnx_core import Rngs
from nnx_layers import initializers

from ..registry._registry import Registry, default_registry
from ._bound import BoundFunction, tuplify
from ._errors import ConfigError, Problem
from ._fields import LAYER_KINDS, FieldSpec, layer_spec
from ._load import Config, load_config
from ._source import Source, source_from
from ._walk import Walker

__all__ = ["build", "to_config"]


def _is_node(config: Any) -> bool:
    return isinstance(config, Mapping) and "model" not in config and "type" in config


class _BuildFailure(Exception):
    """Every layer that raised while a model was built: ``(path, message, cause)`` each."""

    def __init__(self, failures: list[tuple[tuple[Any, ...], str, BaseException]]):
        super().__init__(failures[0][1])
        self.failures = failures


def _place(spec_fields: tuple[FieldSpec, ...], values: dict[str, Any]) -> tuple[list, dict]:
    has_varargs = any(f.parameter_kind is inspect.Parameter.VAR_POSITIONAL for f in spec_fields)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for field in spec_fields:
        if field.name not in values:
            continue
        kind = field.parameter_kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(values[field.name])
        elif kind is inspect.Parameter.POSITIONAL_ONLY or (
            has_varargs and kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ):
            args.append(values[field.name])
        else:
            kwargs[field.name] = values[field.name]
    return args, kwargs


class _Builder:
    """Builds validated nodes; a layer that raises is recorded (with its path) and building
    goes on with its siblings, so that every failing layer is reported at once."""

    def __init__(self, registry: Registry, prefer: Mapping[str, str], rngs: Any):
        self.registry, self.prefer, self.rngs = registry, dict(prefer), rngs
        self.failures: list[tuple[tuple[Any, ...], str, BaseException]] = []

    def root(self, node: Mapping[str, Any], path: tuple[Any, ...]) -> Any:
        """Build ``node``; raise `_BuildFailure` listing every layer that raised."""
        module = self.node(node, path)
        if self.failures:
            raise _BuildFailure(self.failures)
        return module

    def value(self, field: FieldSpec, raw: Any, validated: Any, path: tuple[Any, ...]) -> Any:

        if raw is None and field.kind not in ("plain",):
            return None
        if field.kind == "dtype":
            return jnp.dtype(raw)
        if field.kind == "initializer":
            arguments = {k: v for k, v in raw.items() if k != "type"}
            return initializers.get(raw["type"], **tuplify(arguments))
        if field.kind == "activation":
            if isinstance(raw, Mapping):  # a function with arguments: a BoundFunction
                return self.node(raw, path)
            return self.registry.get("layer", raw, prefer=self.prefer)
        if field.kind == "variable":
            return self.registry.get("variable", raw)
        if field.kind == "layer":
            return self.factory(raw, path) if field.factory else self.node(raw, path)
        if field.kind == "layers":
            return [self.node(item, (*path, i)) for i, item in enumerate(raw)]
        if field.kind == "layer_map":
            return {key: self.node(item, (*path, key)) for key, item in raw.items()}
        value = getattr(validated, f"f_{field.name}")
        return (
            value
            if isinstance(field.annotation, type) and field.annotation is list
            else tuplify(value)
        )

    def factory(self, node: Mapping[str, Any], path: tuple[Any, ...]) -> Any:
        """A function of ``rngs`` building ``node`` (for a layer that builds its sublayer
        itself, as `Repeat` does); a layer failing inside is reported at its own path."""

        def build_node(rngs: Any) -> Any:
            inner = _Builder(self.registry, self.prefer, rngs)
            return inner.root(node, path)

        return build_node

    def node(self, node: Mapping[str, Any], path: tuple[Any, ...]) -> Any:
        obj = self.registry.get("layer", node["type"], prefer=self.prefer)
        spec = layer_spec(node["type"], obj, registry=self.registry)
        if spec.is_activation:
            return self.function(spec, node, path)
        if spec.custom:
            data = {k: v for k, v in node.items() if k != "type"}
            validated = spec.model.model_validate(data)
            args: list[Any] = []
            kwargs = {name: getattr(validated, name) for name in type(validated).model_fields}
        else:
            context = {"registry": self.registry, "prefer": self.prefer}
            validated = spec.model.model_validate(node, context=context)
            before = len(self.failures)
            values = {
                f.name: self.value(f, node[f.name], validated, (*path, f.name))
                for f in spec.fields
                if f.kind != "opaque"
            }
            if len(self.failures) > before:
                return None  # a nested layer failed: this one cannot be built
            args, kwargs = _place(spec.fields, values)
        if spec.takes_rngs:
            kwargs["rngs"] = self.rngs
        try:
            return obj(*args, **kwargs)
        except _BuildFailure as nested:  # a sublayer it built itself (`factory`) failed
            self.failures.extend(nested.failures)
            return None
        except Exception as error:  # noqa: BLE001 - any layer error is reported with its path
            message = f"building {spec.name} raised {type(error).__name__}: {error}"
            self.failures.append((path, message, error))
            return None

    def function(self, spec: Any, node: Mapping[str, Any], path: tuple[Any, ...]) -> Any:
        """The function itself, or a `BoundFunction` when the node sets arguments."""
        given = [f for f in spec.fields if f.name in node]
        if not given:
            return spec.obj
        context = {"registry": self.registry, "prefer": self.prefer}
        try:
            validated = spec.model.model_validate(node, context=context)
        except pydantic.ValidationError:
            # A function given as another layer's argument (`attention_fn`) leaves its later
            # inputs to the caller; the node was validated by load_config already.
            validated = spec.model.model_construct(**{f"f_{f.name}": node[f.name] for f in given})
        arguments = {f.name: self.value(f, node[f.name], validated, (*path, f.name)) for f in given}
        return BoundFunction(spec.obj, arguments)


def build(config: Any, *, rngs: Any = None, registry: Registry | None = None) -> Any:
    """Build the model a config describes.

    Args:
        config: a `Config`, a file path, a full config mapping (with ``model``), or a single
            layer node mapping (with ``type``), as `to_config` returns.
        rngs: the `nnx_core.Rngs` the layers draw from; ``Rngs(0)`` when omitted.
        registry: where names resolve; `default_registry()` when omitted.

    Raises:
        ConfigError: the config is invalid (nothing is built), or a layer raised while being
            built (reported with its path).

    Example:
        >>> from nnx_plugins import build
        >>> build({"type": "Linear", "in_features": 2, "out_features": 3}).kernel.shape
        (2, 3)
    """
    registry = registry or default_registry()
    if _is_node(config):
        config = {"model": config}
    validated = load_config(config, registry=registry)
    if rngs is None:
        rngs = Rngs(0)
    try:
        return _Builder(registry, validated.prefer, rngs).root(validated.model, ("model",))
    except _BuildFailure as failure:
        raise build_error(validated, failure) from failure.failures[0][2]


def located(config: Config) -> Source:
    """The positions of a loaded config's values: those it was loaded with (its overrides
    located at themselves), else read again from its file (none for a dict)."""
    if config._source is not None:
        return config._source
    if os.path.isfile(config.source):
        try:
            return source_from(config.source)
        except ConfigError:  # (changed since it was loaded: report without positions)
            pass
    return Source(config.source, config.model)


def build_error(config: Config, failure: _BuildFailure) -> ConfigError:
    """The `ConfigError` of a failed build: each failing layer at its path and position."""
    source = located(config)
    return ConfigError([source.problem(path, message) for path, message, _ in failure.failures])


def _raw(module: Any, path: tuple[Any, ...], registry: Registry) -> dict[str, Any]:
    """The config of ``module`` with Python values (dtypes, initializer objects, functions)."""

    if isinstance(module, BoundFunction):
        return {"type": registry.name_of(module.function), **module.arguments}
    if isinstance(module, functools.partial) and not module.args:
        return {"type": registry.name_of(module.func), **module.keywords}
    if not isinstance(module, nnx_core.Module):
        return {"type": registry.name_of(module)}
    name = registry.name_of(type(module))
    spec = layer_spec(name, type(module), registry=registry)
    fields = (
        [(n, None) for n in spec.model.model_fields]
        if spec.custom
        else [(f.name, f) for f in spec.fields]
    )
    node: dict[str, Any] = {"type": name}
    for field_name, field in fields:
        if not hasattr(module, field_name):
            raise ValueError(
                f"to_config cannot read {type(module).__qualname__}.{field_name} at "
                f"{'.'.join(map(str, path))}: store each constructor argument as an attribute of "
                "the same name, or give the class a config_model."
            )
        value = getattr(module, field_name)
        if field is None or field.kind not in (*LAYER_KINDS, "opaque"):
            node[field_name] = value
        elif field.kind == "opaque":
            if value is not field.default and value != field.default:
                raise ValueError(
                    f"to_config cannot express {type(module).__qualname__}.{field_name} = "
                    f"{value!r} at {'.'.join(map(str, path))}: it has no config spelling."
                )
        elif field.kind == "layer":
            node[field_name] = None if value is None else _raw(value, (*path, field_name), registry)
        elif value is None:
            node[field_name] = None
        elif field.kind == "layers":
            node[field_name] = [
                _raw(v, (*path, field_name, i), registry) for i, v in enumerate(value)
            ]
        else:
            node[field_name] = {
                k: _raw(v, (*path, field_name, k), registry) for k, v in value.items()
            }
    return node


def to_config(module: Any, *, registry: Registry | None = None) -> dict[str, Any]:
    """Return the normalized config of a built layer, such that ``build`` rebuilds it.

    The round trip law: ``to_config(build(c)) == load_config({"model": c}).model``.

    Raises:
        ValueError: an attribute needed by the config is missing or has no config spelling.
        UnknownNameError: the layer (or an activation) is not registered.

    Example:
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear
        >>> from nnx_plugins import to_config
        >>> to_config(Linear(2, 3, rngs=Rngs(0)))["kernel_init"]["type"]
        'variance_scaling'
    """
    registry = registry or default_registry()
    raw = _raw(module, ("model",), registry)
    walker = Walker(Source("<to_config>", raw), registry)
    normalized = walker.node(raw, ())
    if walker.problems or normalized is None:
        raise ConfigError(walker.problems or [Problem((), "could not normalize the config.")])
    return normalized

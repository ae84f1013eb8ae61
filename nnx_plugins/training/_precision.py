"""``train.precision``: the compute dtype of every layer that has a ``dtype`` argument.

``precision: bfloat16`` sets ``dtype: bfloat16`` on every layer of the model config whose
constructor takes a ``dtype`` and whose config leaves it unset (``null``): such layers compute
in bfloat16 while their parameters (``param_dtype``), the gradients and the optimizer state stay
float32. A layer given an explicit ``dtype`` keeps it. The tasks compute their losses in
float32. The saved ``config.yaml`` keeps the model as written, with ``train.precision``.

Example:
    >>> from nnx_plugins import load_config
    >>> from nnx_plugins.training._precision import layers_with_dtype, with_precision
    >>> config = load_config({"model": {"type": "Sequential", "layers": [
    ...     {"type": "Linear", "in_features": 4, "out_features": 4},
    ...     {"type": "relu"},
    ...     {"type": "LayerNorm", "num_features": 4, "dtype": "float32"}]}})
    >>> [layer.get("dtype") for layer in with_precision(config, "bfloat16").model["layers"]]
    ['bfloat16', None, 'float32']
    >>> {"Linear", "Conv", "Embed", "MultiHeadAttention"} <= set(layers_with_dtype())
    True
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config._fields import LAYER_KINDS, layer_spec
from ..config._load import Config
from ..registry._errors import PluginError
from ..registry._registry import Registry, default_registry

__all__ = ["with_precision", "model_config", "layers_with_dtype"]


def _apply(node: Any, dtype: str, registry: Registry) -> Any:
    if isinstance(node, list):
        return [_apply(item, dtype, registry) for item in node]
    if not isinstance(node, dict) or not isinstance(node.get("type"), str):
        return node
    try:
        obj = registry.get("layer", node["type"])
    except PluginError:
        return node
    if not isinstance(obj, type):
        return node  # (a function: no dtype of its own)
    spec = layer_spec(node["type"], obj, registry=registry)
    out = dict(node)
    for field in spec.fields:
        if field.kind in LAYER_KINDS and field.name in out:
            value = out[field.name]
            out[field.name] = (
                {k: _apply(v, dtype, registry) for k, v in value.items()}
                if field.kind == "layer_map" and isinstance(value, dict)
                else _apply(value, dtype, registry)
            )
        elif field.name == "dtype" and field.kind == "dtype" and out.get("dtype") is None:
            out["dtype"] = dtype
    return out


def with_precision(config: Config, precision: str, *, registry: Registry | None = None) -> Config:
    """``config`` with every unset layer ``dtype`` set to ``precision`` (``float32``: as is)."""
    if precision == "float32":
        return config
    model = _apply(config.model, precision, registry or default_registry())
    return dataclasses.replace(config, model=model)


def model_config(config: Config) -> Config:
    """The config a run builds its model from: ``train.precision`` applied."""
    train = config.sections.get("train")
    return with_precision(config, getattr(train, "precision", "float32"))


def layers_with_dtype(*, registry: Registry | None = None) -> list[str]:
    """The registered layers ``train.precision`` reaches: those whose constructor takes ``dtype``."""
    registry = registry or default_registry()
    found = []
    for name, obj in sorted(registry.load_kind("layer").items()):
        if isinstance(obj, type):
            field = layer_spec(name, obj, registry=registry).field("dtype")
            if field is not None and field.kind == "dtype":
                found.append(name)
    return found

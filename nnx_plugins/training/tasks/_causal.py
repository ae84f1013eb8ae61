"""Whether a model config sees ahead: the first built-in layer that lets a position read the
tokens after it, judged from the validated config alone (nothing is built).

A `MultiHeadAttention` or `SelfAttention` sees ahead unless ``is_causal`` is true (or it
decodes with its cache, causal by construction); a `MaskedLM` attends to every position by
design. The walk descends only through nnx_layers' own layers (`Sequential`, `Residual`,
`Repeat`, `TransformerBlock`, `CausalLM`, ...), which call their sublayers as documented; a
third-party layer may call its sublayers with a causal mask of its own, so what it holds is
not judged, nor is a `MultiHeadAttention` with another ``attention_fn`` than the built-in
``dot_product_attention``.

Example:
    >>> from nnx_plugins import load_config
    >>> from nnx_plugins.training.tasks._causal import first_acausal
    >>> attention = {"type": "MultiHeadAttention", "num_heads": 1, "in_features": 8}
    >>> model = {"type": "Sequential", "layers": [{"type": "Embed", "num_embeddings": 9,
    ...          "features": 8}, {"type": "Residual", "block": attention}]}
    >>> first_acausal(load_config({"model": model}).model)
    (('model', 'layers', 1, 'block'), 'MultiHeadAttention has is_causal: false')
    >>> attention["is_causal"] = True
    >>> first_acausal(load_config({"model": model}).model) is None
    True
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from nnx_layers import MaskedLM, MultiHeadAttention, SelfAttention, dot_product_attention

from ...config._fields import LAYER_KINDS, layer_spec
from ...registry._errors import PluginError
from ...registry._registry import Registry, default_registry

__all__ = ["first_acausal"]

Path = tuple[Any, ...]


def first_acausal(
    model: Mapping[str, Any],
    *,
    registry: Registry | None = None,
    prefer: Mapping[str, str] | None = None,
) -> tuple[Path, str] | None:
    """``(path, what)`` of the first layer of ``model`` (a validated ``model`` section, as
    ``load_config(...).model`` holds it) that sees the positions after each position, in the
    config's order; ``None`` when no layer it can judge does (see the module docstring).

    ``what`` says what was found: ``"SelfAttention has is_causal: false"`` or ``"the model
    is a MaskedLM"``.
    """
    registry = registry or default_registry()
    for path, node, layer in _judged(model, ("model",), registry, dict(prefer or {})):
        if layer is MaskedLM:
            what = "the model is a MaskedLM" if path == ("model",) else "a MaskedLM"
            return path, what
        if not (node.get("is_causal") is True or node.get("decode") is True):
            return path, f"{layer.__name__} has is_causal: false"
    return None


def _judged(
    node: Any, path: Path, registry: Registry, prefer: dict[str, str]
) -> Iterator[tuple[Path, Mapping[str, Any], type]]:
    """The layers under ``node`` whose causality is known (attention, MaskedLM), depth
    first, with their paths."""
    if not (isinstance(node, Mapping) and isinstance(node.get("type"), str)):
        return
    try:
        layer = registry.get("layer", node["type"], prefer=prefer)
    except PluginError:  # (the config was validated: no layer of this name here)
        return
    if layer is MaskedLM or layer is SelfAttention:
        yield path, node, layer
        return
    if layer is MultiHeadAttention:
        if _built_in_attention(node, registry, prefer):
            yield path, node, layer
        return
    if not (isinstance(layer, type) and layer.__module__.split(".")[0] == "nnx_layers"):
        return  # (a function, or a third-party layer: how it calls its sublayers is its own)
    for field in layer_spec(node["type"], layer, registry=registry).fields:
        value = node.get(field.name)
        if field.kind not in LAYER_KINDS or value is None:
            continue
        if isinstance(value, list):
            items: Any = enumerate(value)
        elif field.kind == "layer_map" and isinstance(value, Mapping):
            items = value.items()
        else:
            items = [(None, value)]
        for key, child in items:
            where = (*path, field.name) if key is None else (*path, field.name, key)
            yield from _judged(child, where, registry, prefer)


def _built_in_attention(node: Mapping[str, Any], registry: Registry, prefer: Any) -> bool:
    """Whether a `MultiHeadAttention` node attends with the built-in ``dot_product_attention``,
    which honours the ``is_causal`` the layer passes it."""
    name = node.get("attention_fn", "dot_product_attention")
    if not isinstance(name, str):  # (a function bound to arguments: not judged)
        return False
    try:
        return registry.get("layer", name, prefer=prefer) is dot_product_attention
    except PluginError:
        return False

"""``ViTForImageClassification``: a patch `Conv` (OIHW kernels made HWIO: the model takes
NHWC images), a class token and learned positions, pre-norm blocks, a final `LayerNorm`, and
the classifier on the class token.

Example:
    >>> from nnx_plugins.pretrained.converters._vit import VIT
    >>> model = VIT.config({"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
    ...     "intermediate_size": 64, "image_size": 16, "patch_size": 4, "num_channels": 3,
    ...     "id2label": {"0": "cat", "1": "dog"}})["model"]
    >>> model["patch_embed"]["kernel_size"], model["head"]["out_features"], model["image_size"]
    ([4, 4], 2, 16)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._convert import Converter, Rule
from ._common import Unsupported, activation, flag, number, size

__all__ = ["VIT"]

_BLOCK = "blocks/block"


def _labels(config: Mapping[str, Any]) -> int:
    labels = config.get("id2label")
    if isinstance(labels, Mapping) and labels:
        return len(labels)
    if "num_labels" in config:
        return size(config, "num_labels")
    raise Unsupported("neither 'id2label' nor 'num_labels' says how many classes there are")


def _config(config: Mapping[str, Any]) -> dict[str, Any]:
    width = size(config, "hidden_size")
    patch = size(config, "patch_size", 16)
    epsilon = number(config, "layer_norm_eps", 1e-12)
    norm = {"type": "LayerNorm", "num_features": width, "epsilon": epsilon}
    block = {
        "type": "TransformerBlock",
        "attention": {
            "type": "SelfAttention",
            "in_features": width,
            "num_heads": size(config, "num_attention_heads"),
            "qkv_bias": flag(config, "qkv_bias", True),
            "out_bias": True,
        },
        "mlp": {
            "type": "MLP",
            "features": width,
            "hidden": size(config, "intermediate_size"),
            "activation": activation(config, "hidden_act", "gelu"),
        },
        "attention_norm": norm,
        "mlp_norm": norm,
    }
    model = {
        "type": "ImageClassifier",
        "patch_embed": {
            "type": "Conv",
            "in_features": size(config, "num_channels", 3),
            "out_features": width,
            "kernel_size": [patch, patch],
            "strides": [patch, patch],
            "padding": "VALID",
        },
        "blocks": {
            "type": "Repeat",
            "count": size(config, "num_hidden_layers"),
            "block": block,
            "sharding_name": "layers",
        },
        "norm": norm,
        "head": {"type": "Linear", "in_features": width, "out_features": _labels(config)},
        "image_size": size(config, "image_size", 224),
    }
    return {"model": model, "task": {"type": "classification"}}


def _pair(hf: str, nnx: str, weight: str = "transpose", scale: str = "kernel") -> list[Rule]:
    return [Rule(f"{hf}.weight", f"{nnx}/{scale}", weight), Rule(f"{hf}.bias", f"{nnx}/bias")]


def _table(config: Mapping[str, Any]) -> list[Rule]:
    layer = "vit.encoder.layer.{i}"
    attention = f"{_BLOCK}/attention"
    qkv = []
    for name in ("query", "key", "value"):
        hf = f"{layer}.attention.attention.{name}"
        qkv.append(Rule(f"{hf}.weight", f"{attention}/{name}/kernel", "transpose"))
        if flag(config, "qkv_bias", True):
            qkv.append(Rule(f"{hf}.bias", f"{attention}/{name}/bias"))
    return [
        Rule("vit.embeddings.cls_token", "class_token", "squeeze", leading=2),
        Rule("vit.embeddings.position_embeddings", "position_embedding", "squeeze", leading=1),
        *_pair("vit.embeddings.patch_embeddings.projection", "patch_embed", "conv"),
        *qkv,
        *_pair(f"{layer}.attention.output.dense", f"{attention}/out"),
        *_pair(f"{layer}.intermediate.dense", f"{_BLOCK}/mlp/up"),
        *_pair(f"{layer}.output.dense", f"{_BLOCK}/mlp/down"),
        *_pair(f"{layer}.layernorm_before", f"{_BLOCK}/attention_norm", "copy", "scale"),
        *_pair(f"{layer}.layernorm_after", f"{_BLOCK}/mlp_norm", "copy", "scale"),
        *_pair("vit.layernorm", "norm", "copy", "scale"),
        *_pair("classifier", "head"),
        Rule("vit.pooler.dense.weight", optional=True),
        Rule("vit.pooler.dense.bias", optional=True),
    ]


VIT = Converter(
    config=_config, table=_table, layers=lambda config: size(config, "num_hidden_layers")
)

"""``BertForMaskedLM``: learned position and token-type embeddings with a `LayerNorm`,
post-norm blocks (`SelfAttention` with biases, a gelu `MLP`), and the masked-LM head (dense,
activation, `LayerNorm`, then the token embedding transposed plus a bias). Its task is
``language_model``: the import gives it ``text`` data with ``masking`` (the tokenizer's mask
token), so the task's loss is the masked-LM loss.

Example:
    >>> from nnx_plugins.pretrained.converters._bert import BERT
    >>> model = BERT.config({"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
    ...                      "intermediate_size": 64, "vocab_size": 100})["model"]
    >>> model["type"], model["blocks"]["block"]["post_norm"], model["transform"]["layers"][1]
    ('MaskedLM', True, {'type': 'gelu', 'approximate': False})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._convert import Converter, Rule
from ._common import activation, flag, number, reject, size

__all__ = ["BERT"]

_BLOCK = "blocks/block"


def _config(config: Mapping[str, Any]) -> dict[str, Any]:
    reject(config, "position_embedding_type", ("absolute",), "relative position embeddings")
    reject(config, "is_decoder", (False,), "a causal BERT")
    width = size(config, "hidden_size")
    vocab = size(config, "vocab_size")
    epsilon = number(config, "layer_norm_eps", 1e-12)
    norm = {"type": "LayerNorm", "num_features": width, "epsilon": epsilon}
    act = activation(config, "hidden_act", "gelu")
    block = {
        "type": "TransformerBlock",
        "attention": {
            "type": "SelfAttention",
            "in_features": width,
            "num_heads": size(config, "num_attention_heads"),
            "qkv_bias": True,
            "out_bias": True,
        },
        "mlp": {
            "type": "MLP",
            "features": width,
            "hidden": size(config, "intermediate_size"),
            "activation": act,
        },
        "attention_norm": norm,
        "mlp_norm": norm,
        "post_norm": True,
    }
    tied = flag(config, "tie_word_embeddings", True)
    model = {
        "type": "MaskedLM",
        "embed": {"type": "Embed", "num_embeddings": vocab, "features": width},
        "position_embed": {
            "type": "Embed",
            "num_embeddings": size(config, "max_position_embeddings", 512),
            "features": width,
        },
        "blocks": {
            "type": "Repeat",
            "count": size(config, "num_hidden_layers"),
            "block": block,
            "sharding_name": "layers",
        },
        "transform": {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": width, "out_features": width},
                act if isinstance(act, dict) else {"type": act},
                norm,
            ],
        },
        "type_embed": {
            "type": "Embed",
            "num_embeddings": size(config, "type_vocab_size", 2),
            "features": width,
        },
        "embed_norm": norm,
        "head": None
        if tied
        else {"type": "Linear", "in_features": width, "out_features": vocab, "use_bias": False},
    }
    return {"model": model, "task": {"type": "language_model"}}


def _linear(hf: str, nnx: str) -> list[Rule]:
    return [Rule(f"{hf}.weight", f"{nnx}/kernel", "transpose"), Rule(f"{hf}.bias", f"{nnx}/bias")]


def _norm(hf: str, nnx: str) -> list[Rule]:
    return [Rule(f"{hf}.weight", f"{nnx}/scale"), Rule(f"{hf}.bias", f"{nnx}/bias")]


def _table(config: Mapping[str, Any]) -> list[Rule]:
    layer = "bert.encoder.layer.{i}"
    attention = f"{_BLOCK}/attention"
    rules = [
        Rule("bert.embeddings.word_embeddings.weight", "embed/embedding"),
        Rule("bert.embeddings.position_embeddings.weight", "position_embed/embedding"),
        Rule("bert.embeddings.token_type_embeddings.weight", "type_embed/embedding"),
        *_norm("bert.embeddings.LayerNorm", "embed_norm"),
        *_linear(f"{layer}.attention.self.query", f"{attention}/query"),
        *_linear(f"{layer}.attention.self.key", f"{attention}/key"),
        *_linear(f"{layer}.attention.self.value", f"{attention}/value"),
        *_linear(f"{layer}.attention.output.dense", f"{attention}/out"),
        *_norm(f"{layer}.attention.output.LayerNorm", f"{_BLOCK}/attention_norm"),
        *_linear(f"{layer}.intermediate.dense", f"{_BLOCK}/mlp/up"),
        *_linear(f"{layer}.output.dense", f"{_BLOCK}/mlp/down"),
        *_norm(f"{layer}.output.LayerNorm", f"{_BLOCK}/mlp_norm"),
        *_linear("cls.predictions.transform.dense", "transform/layers/0"),
        *_norm("cls.predictions.transform.LayerNorm", "transform/layers/2"),
        Rule("cls.predictions.bias", "bias"),
        Rule("cls.predictions.decoder.bias", optional=True),  # (the same bias, when saved)
        Rule("bert.embeddings.position_ids", optional=True),  # (a buffer of older files)
    ]
    for pooler in ("bert.pooler.dense.weight", "bert.pooler.dense.bias"):
        rules.append(Rule(pooler, optional=True))  # (a pretraining checkpoint's pooler)
    if flag(config, "tie_word_embeddings", True):
        return [*rules, Rule("cls.predictions.decoder.weight", optional=True)]
    return [*rules, Rule("cls.predictions.decoder.weight", "head/kernel", "transpose")]


BERT = Converter(
    config=_config,
    table=_table,
    layers=lambda config: size(config, "num_hidden_layers"),
    prefix="bert.",
)

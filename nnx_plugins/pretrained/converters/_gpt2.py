"""``GPT2LMHeadModel``: learned positions, pre-norm blocks with a fused query/key/value
projection (``c_attn``, split three ways), a gelu `MLP`, `LayerNorm`s and a head tied to the
token embedding. GPT-2's ``Conv1D`` weights are stored ``(in, out)`` already: no transposes.

Example:
    >>> from nnx_plugins.pretrained.converters._gpt2 import GPT2
    >>> model = GPT2.config({"n_embd": 32, "n_head": 4, "n_layer": 2, "vocab_size": 100,
    ...                      "n_positions": 64})["model"]
    >>> model["position_embed"], model["head"]
    ({'type': 'Embed', 'num_embeddings': 64, 'features': 32}, None)
    >>> [rule.nnx for rule in GPT2.table({}) if rule.hf.endswith("c_attn.weight")][0][1]
    'blocks/block/attention/key/kernel'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._convert import Converter, Rule
from ._common import activation, flag, number, reject, size

__all__ = ["GPT2"]

_BLOCK = "blocks/block"


def _config(config: Mapping[str, Any]) -> dict[str, Any]:
    reject(config, "scale_attn_by_inverse_layer_idx", (False,), "scaled attention per layer")
    reject(config, "scale_attn_weights", (True,), "unscaled attention")
    reject(config, "add_cross_attention", (False,), "cross-attention")
    width, heads = size(config, "n_embd"), size(config, "n_head")
    epsilon = number(config, "layer_norm_epsilon", 1e-5)
    norm = {"type": "LayerNorm", "num_features": width, "epsilon": epsilon}
    positions = size(config, "n_positions", 1024)
    block = {
        "type": "TransformerBlock",
        "attention": {
            "type": "SelfAttention",
            "in_features": width,
            "num_heads": heads,
            "qkv_bias": True,
            "out_bias": True,
            "is_causal": True,
        },
        "mlp": {
            "type": "MLP",
            "features": width,
            "hidden": 4 * width if config.get("n_inner") is None else size(config, "n_inner"),
            "activation": activation(config, "activation_function", "gelu_new"),
        },
        "attention_norm": norm,
        "mlp_norm": norm,
    }
    model = {
        "type": "CausalLM",
        "embed": {"type": "Embed", "num_embeddings": size(config, "vocab_size"), "features": width},
        "blocks": {
            "type": "Repeat",
            "count": size(config, "n_layer"),
            "block": block,
            "sharding_name": "layers",
        },
        "norm": norm,
        "head": None,
        "position_embed": {"type": "Embed", "num_embeddings": positions, "features": width},
        "max_length": positions,
    }
    if not flag(config, "tie_word_embeddings", True):
        vocab = model["embed"]["num_embeddings"]
        model["head"] = {
            "type": "Linear",
            "in_features": width,
            "out_features": vocab,
            "use_bias": False,
        }
    return {"model": model, "task": {"type": "language_model"}}


def _table(config: Mapping[str, Any]) -> list[Rule]:
    layer = "transformer.h.{i}"
    attention, mlp = f"{_BLOCK}/attention", f"{_BLOCK}/mlp"
    rules = [
        Rule("transformer.wte.weight", "embed/embedding"),
        Rule("transformer.wpe.weight", "position_embed/embedding"),
        Rule(f"{layer}.ln_1.weight", f"{_BLOCK}/attention_norm/scale"),
        Rule(f"{layer}.ln_1.bias", f"{_BLOCK}/attention_norm/bias"),
        Rule(
            f"{layer}.attn.c_attn.weight",
            tuple(f"{attention}/{p}/kernel" for p in ("query", "key", "value")),
        ),
        Rule(
            f"{layer}.attn.c_attn.bias",
            tuple(f"{attention}/{p}/bias" for p in ("query", "key", "value")),
        ),
        Rule(f"{layer}.attn.c_proj.weight", f"{attention}/out/kernel"),
        Rule(f"{layer}.attn.c_proj.bias", f"{attention}/out/bias"),
        Rule(f"{layer}.ln_2.weight", f"{_BLOCK}/mlp_norm/scale"),
        Rule(f"{layer}.ln_2.bias", f"{_BLOCK}/mlp_norm/bias"),
        Rule(f"{layer}.mlp.c_fc.weight", f"{mlp}/up/kernel"),
        Rule(f"{layer}.mlp.c_fc.bias", f"{mlp}/up/bias"),
        Rule(f"{layer}.mlp.c_proj.weight", f"{mlp}/down/kernel"),
        Rule(f"{layer}.mlp.c_proj.bias", f"{mlp}/down/bias"),
        Rule("transformer.ln_f.weight", "norm/scale"),
        Rule("transformer.ln_f.bias", "norm/bias"),
        Rule(f"{layer}.attn.bias", optional=True),  # (causal-mask buffers of older files)
        Rule(f"{layer}.attn.masked_bias", optional=True),
    ]
    if flag(config, "tie_word_embeddings", True):
        return [*rules, Rule("lm_head.weight", optional=True)]
    return [*rules, Rule("lm_head.weight", "head/kernel", "transpose")]


GPT2 = Converter(
    config=_config,
    table=_table,
    layers=lambda config: size(config, "n_layer"),
    prefix="transformer.",
)

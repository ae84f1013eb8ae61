"""Llama-style decoders: ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``,
``Qwen3ForCausalLM``.

One structure: a `CausalLM` whose blocks are pre-norm `TransformerBlock`s of a grouped-query
`SelfAttention` (RoPE, causal) and a SwiGLU `GatedMLP`, with `RMSNorm`s. The families differ in
small settings: Qwen2 has biases on the query/key/value projections, Qwen3 an RMSNorm on each
query and key head (and an explicit head size), Mistral a sliding attention window, Llama the
``llama3`` RoPE scaling (any of them may have it) and optional biases.

Example:
    >>> from nnx_plugins.pretrained.converters._decoder import QWEN3
    >>> config = QWEN3.config({"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
    ...     "head_dim": 16, "intermediate_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
    ...     "rms_norm_eps": 1e-6, "max_position_embeddings": 64})
    >>> attention = config["model"]["blocks"]["block"]["attention"]
    >>> attention["head_dim"], attention["qk_norm"], config["model"]["head"]["out_features"]
    (16, 'rms', 100)
    >>> [rule.hf for rule in QWEN3.table({"tie_word_embeddings": True})][-1]
    'lm_head.weight'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._convert import Converter, Rule
from ._common import Unsupported, activation, flag, number, reject, rope, size

__all__ = ["LLAMA", "MISTRAL", "QWEN2", "QWEN3"]

_ATTENTION = "blocks/block/attention"
_MLP = "blocks/block/mlp"


def _biases(config: Mapping[str, Any], family: str) -> tuple[bool, bool]:
    """(query/key/value biases, output bias) of ``family``."""
    if family == "qwen2":
        return True, False
    bias = flag(config, "attention_bias", False)
    return bias, bias


def _window(config: Mapping[str, Any], family: str) -> int | None:
    if family == "mistral":
        window = config.get("sliding_window")
        return None if window is None else size(config, "sliding_window")
    if flag(config, "use_sliding_window", False):
        raise Unsupported(
            "'use_sliding_window' is true: a sliding window on some layers only "
            "(max_window_layers) is not supported; set it to false"
        )
    return None


def _model(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    width = size(config, "hidden_size")
    heads = size(config, "num_attention_heads")
    kv_heads = size(config, "num_key_value_heads", heads)
    head_dim = width // heads if config.get("head_dim") is None else size(config, "head_dim")
    epsilon = number(config, "rms_norm_eps", 1e-6)
    vocab = size(config, "vocab_size")
    qkv_bias, out_bias = _biases(config, family)
    attention: dict[str, Any] = {
        "type": "SelfAttention",
        "in_features": width,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "qkv_bias": qkv_bias,
        "out_bias": out_bias,
        "rope": rope(config),
        "is_causal": True,
    }
    if family == "qwen3":
        attention.update(qk_norm="rms", qk_norm_epsilon=epsilon)
    window = _window(config, family)
    if window is not None:
        attention["sliding_window"] = window
    norm = {"type": "RMSNorm", "num_features": width, "epsilon": epsilon}
    mlp = {
        "type": "GatedMLP",
        "features": width,
        "hidden": size(config, "intermediate_size"),
        "activation": activation(config, "hidden_act", "silu"),
        "use_bias": flag(config, "mlp_bias", False),
    }
    block = {
        "type": "TransformerBlock",
        "attention": attention,
        "mlp": mlp,
        "attention_norm": norm,
        "mlp_norm": norm,
    }
    tied = flag(config, "tie_word_embeddings", False)
    return {
        "type": "CausalLM",
        "embed": {"type": "Embed", "num_embeddings": vocab, "features": width},
        "blocks": {
            "type": "Repeat",
            "count": size(config, "num_hidden_layers"),
            "block": block,
            "sharding_name": "layers",
        },
        "norm": norm,
        "head": None
        if tied
        else {"type": "Linear", "in_features": width, "out_features": vocab, "use_bias": False},
        "max_length": None
        if config.get("max_position_embeddings") is None
        else size(config, "max_position_embeddings"),
    }


def _config(family: str) -> Any:
    def convert(config: Mapping[str, Any]) -> dict[str, Any]:
        reject(config, "pretraining_tp", (1,), "split projections")
        return {"model": _model(config, family), "task": {"type": "language_model"}}

    return convert


def _projection(hf: str, nnx: str, bias: bool) -> list[Rule]:
    rules = [Rule(f"{hf}.weight", f"{nnx}/kernel", "transpose")]
    return rules + ([Rule(f"{hf}.bias", f"{nnx}/bias")] if bias else [])


def _table(family: str) -> Any:
    def table(config: Mapping[str, Any]) -> list[Rule]:
        layer = "model.layers.{i}"
        qkv_bias, out_bias = _biases(config, family)
        mlp_bias = flag(config, "mlp_bias", False)
        rules = [Rule("model.embed_tokens.weight", "embed/embedding")]
        for hf, nnx in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")):
            rules += _projection(f"{layer}.self_attn.{hf}", f"{_ATTENTION}/{nnx}", qkv_bias)
        rules += _projection(f"{layer}.self_attn.o_proj", f"{_ATTENTION}/out", out_bias)
        if family == "qwen3":
            rules += [
                Rule(f"{layer}.self_attn.q_norm.weight", f"{_ATTENTION}/query_norm/scale"),
                Rule(f"{layer}.self_attn.k_norm.weight", f"{_ATTENTION}/key_norm/scale"),
            ]
        for hf, nnx in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
            rules += _projection(f"{layer}.mlp.{hf}", f"{_MLP}/{nnx}", mlp_bias)
        rules += [
            Rule(f"{layer}.input_layernorm.weight", "blocks/block/attention_norm/scale"),
            Rule(f"{layer}.post_attention_layernorm.weight", "blocks/block/mlp_norm/scale"),
            Rule(f"{layer}.self_attn.rotary_emb.inv_freq", optional=True),  # (older files)
            Rule("model.norm.weight", "norm/scale"),
        ]
        if flag(config, "tie_word_embeddings", False):
            return [*rules, Rule("lm_head.weight", optional=True)]  # (tied: saved or not)
        return [*rules, Rule("lm_head.weight", "head/kernel", "transpose")]

    return table


def _layers(config: Mapping[str, Any]) -> int:
    return size(config, "num_hidden_layers")


LLAMA = Converter(config=_config("llama"), table=_table("llama"), layers=_layers)
MISTRAL = Converter(config=_config("mistral"), table=_table("mistral"), layers=_layers)
QWEN2 = Converter(config=_config("qwen2"), table=_table("qwen2"), layers=_layers)
QWEN3 = Converter(config=_config("qwen3"), table=_table("qwen3"), layers=_layers)

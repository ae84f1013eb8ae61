"""Shared corpus: the smallest valid arguments of every registered layer (activations need none)."""

_BLOCK = {
    "type": "TransformerBlock",
    "attention": {"type": "SelfAttention", "in_features": 8, "num_heads": 2},
    "mlp": {"type": "MLP", "features": 8, "hidden": 16},
    "attention_norm": {"type": "RMSNorm", "num_features": 8},
    "mlp_norm": {"type": "LayerNorm", "num_features": 8},
}

ARGUMENTS = {
    "Linear": {"in_features": 3, "out_features": 4},
    "Embed": {"num_embeddings": 10, "features": 4},
    "Conv": {"in_features": 1, "out_features": 2, "kernel_size": [3, 3], "padding": "VALID"},
    "ConvTranspose": {"in_features": 2, "out_features": 1, "kernel_size": [3], "strides": 2},
    "BatchNorm": {"num_features": 4, "momentum": 0.9, "use_running_average": True},
    "LayerNorm": {"num_features": 4, "param_dtype": "bfloat16"},
    "RMSNorm": {"num_features": 4, "scale_init": {"type": "constant", "value": 0.5}},
    "Dropout": {"rate": 0.25, "broadcast_dims": [0]},
    "Flatten": {},
    "Sequential": {
        "layers": [{"type": "Linear", "in_features": 3, "out_features": 4}, {"type": "relu"}]
    },
    "Residual": {
        "block": {"type": "Linear", "in_features": 4, "out_features": 4},
        "shortcut": {"type": "LayerNorm", "num_features": 4},
    },
    "Parallel": {
        "branches": {
            "left": {"type": "Linear", "in_features": 3, "out_features": 2},
            "right": {"type": "Sequential", "layers": [{"type": "gelu"}]},
        },
        "combine": "dict",
    },
    "acme.GatedDense": {
        "in_features": 4,
        "out_features": 3,
        "lora_rank": 2,
        "gate_activation": "acme.Swish",
        "kernel_init": "he_normal",
    },
    # attention, the linear family, recurrence, more normalization, Reshape
    "MultiHeadAttention": {"num_heads": 2, "in_features": 4, "decode": False, "is_causal": True},
    "LinearGeneral": {"in_features": [2, 3], "out_features": 4, "axis": [-2, -1]},
    "Einsum": {"einsum_str": "btd,dh->bth", "kernel_shape": [3, 4], "bias_shape": [4]},
    "PReLU": {"negative_slope_init": {"type": "constant", "value": 0.25}},
    "LoRA": {
        "in_features": 3,
        "lora_rank": 2,
        "out_features": 4,
        "base_module": {"type": "Linear", "in_features": 3, "out_features": 4},
    },
    "LoRALinear": {"in_features": 3, "out_features": 4, "lora_rank": 2},
    "LSTMCell": {"in_features": 3, "hidden_features": 4, "carry_init": "ones"},
    "OptimizedLSTMCell": {"in_features": 3, "hidden_features": 4, "gate_fn": "relu"},
    "GRUCell": {"in_features": 3, "hidden_features": 4, "param_dtype": "bfloat16"},
    "SimpleCell": {"in_features": 3, "hidden_features": 4, "residual": True},
    "RNN": {
        "cell": {"type": "GRUCell", "in_features": 3, "hidden_features": 4},
        "reverse": True,
        "keep_order": True,
    },
    "Bidirectional": {
        "forward_rnn": {
            "type": "RNN",
            "cell": {"type": "LSTMCell", "in_features": 3, "hidden_features": 2},
        },
        "backward_rnn": {
            "type": "RNN",
            "cell": {"type": "GRUCell", "in_features": 3, "hidden_features": 2},
        },
        "time_major": True,
    },
    "GroupNorm": {"num_features": 8, "num_groups": None, "group_size": 2},
    "InstanceNorm": {"num_features": 4, "feature_axes": [1, 2]},
    "WeightNorm": {
        "layer_instance": {"type": "Linear", "in_features": 3, "out_features": 4},
        "feature_axes": None,
    },
    "SpectralNorm": {
        "layer_instance": {"type": "Conv", "in_features": 1, "out_features": 2, "kernel_size": [3]},
        "n_steps": 2,
        "update_stats": False,
    },
    "Reshape": {"shape": [4, -1]},
    "PositionEmbed": {"max_length": 8, "features": 4, "decode": True},
    "Repeat": {"count": 2, "block": {"type": "Linear", "in_features": 3, "out_features": 3}},
    # the transformer family the converters build (nnx_plugins.pretrained)
    "RoPE": {"theta": 500000.0, "embedding_size": 4, "max_seq_len": 16, "scaling": "llama3"},
    "SelfAttention": {
        "in_features": 8,
        "num_heads": 2,
        "num_kv_heads": 1,
        "qk_norm": "rms",
        "rope": {"type": "RoPE"},
        "is_causal": True,
    },
    "MLP": {"features": 4, "hidden": 8},
    "GatedMLP": {"features": 4, "hidden": 8, "lora_rank": 2},
    "TransformerBlock": {k: v for k, v in _BLOCK.items() if k != "type"},
    "CausalLM": {
        "embed": {"type": "Embed", "num_embeddings": 10, "features": 8},
        "blocks": {"type": "Repeat", "count": 2, "block": _BLOCK},
        "norm": {"type": "RMSNorm", "num_features": 8},
        "max_length": 16,
    },
    "MaskedLM": {
        "embed": {"type": "Embed", "num_embeddings": 10, "features": 8},
        "position_embed": {"type": "Embed", "num_embeddings": 16, "features": 8},
        "blocks": _BLOCK,
        "transform": {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": 8, "out_features": 8},
                {"type": "gelu"},
                {"type": "LayerNorm", "num_features": 8},
            ],
        },
    },
    "ImageClassifier": {
        "patch_embed": {
            "type": "Conv",
            "in_features": 3,
            "out_features": 8,
            "kernel_size": [4, 4],
            "strides": [4, 4],
        },
        "blocks": _BLOCK,
        "norm": {"type": "LayerNorm", "num_features": 8},
        "head": {"type": "Linear", "in_features": 8, "out_features": 3},
        "image_size": 8,
    },
}

NESTED = {
    "type": "Sequential",
    "layers": [
        {"type": "Conv", "in_features": 1, "out_features": 4, "kernel_size": [3, 3]},
        {"type": "BatchNorm", "num_features": 4},
        {"type": "relu"},
        {"type": "Flatten"},
        {
            "type": "Residual",
            "block": {"type": "acme.GatedDense", "in_features": 256, "out_features": 256},
        },
        {"type": "Dropout", "rate": 0.1},
        {"type": "Linear", "in_features": 256, "out_features": 10},
    ],
}

# ~1e12 parameters (14.6 TB to train with adam): refused before anything is allocated
HUGE = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 64, out_features: 1000000}
    - {type: Linear, in_features: 1000000, out_features: 1000000}
    - {type: Linear, in_features: 1000000, out_features: 10}
data: {type: digits, layout: flat}
train: {steps: 1}
"""

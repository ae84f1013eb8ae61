"""Shared corpus: the smallest valid arguments of every registered layer (activations need none)."""

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

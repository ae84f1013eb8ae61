"""A small GPT from a config (the layers of examples/text_gpt.yaml, narrower), shared by the
generation tests."""

import nnx_core as nnx
from nnx_plugins import build

VOCAB, WIDTH, LENGTH = 13, 16, 24


def block(width: int = WIDTH) -> dict:
    """A pre-norm decoder block: causal self-attention, then an MLP, each in a residual."""
    attention = {"type": "MultiHeadAttention", "num_heads": 2, "in_features": width}
    return {
        "type": "Sequential",
        "layers": [
            {
                "type": "Residual",
                "block": {
                    "type": "Sequential",
                    "layers": [
                        {"type": "LayerNorm", "num_features": width},
                        {**attention, "is_causal": True, "decode": False},
                    ],
                },
            },
            {
                "type": "Residual",
                "block": {
                    "type": "Sequential",
                    "layers": [
                        {"type": "LayerNorm", "num_features": width},
                        {"type": "Linear", "in_features": width, "out_features": 2 * width},
                        {"type": "gelu"},
                        {"type": "Linear", "in_features": 2 * width, "out_features": width},
                    ],
                },
            },
        ],
    }


def gpt_config(*, vocab: int = VOCAB, length: int = LENGTH, blocks: int = 2) -> dict:
    """The model section of a GPT; embeddings drawn wide so that greedy decoding varies."""
    wide = {"type": "normal", "stddev": 1.0}
    return {
        "type": "Sequential",
        "layers": [
            {"type": "Embed", "num_embeddings": vocab, "features": WIDTH, "embedding_init": wide},
            {
                "type": "PositionEmbed",
                "max_length": length,
                "features": WIDTH,
                "embedding_init": wide,
            },
            *[block() for _ in range(blocks)],
            {"type": "LayerNorm", "num_features": WIDTH},
            {"type": "Linear", "in_features": WIDTH, "out_features": vocab},
        ],
    }


def gpt(seed: int = 0, **kwargs) -> nnx.Module:
    return build(gpt_config(**kwargs), rngs=nnx.Rngs(seed))

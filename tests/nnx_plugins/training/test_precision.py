"""train.precision: bfloat16 compute in every layer with a dtype, float32 parameters and state."""

import jax.numpy as jnp
import numpy as np

import nnx_core as nnx
from nnx_plugins import load_config, train
from nnx_plugins.training._precision import layers_with_dtype, with_precision

NESTED = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Conv", "in_features": 1, "out_features": 4, "kernel_size": [3, 3]},
            {
                "type": "Residual",
                "block": {
                    "type": "Sequential",
                    "layers": [
                        {"type": "GroupNorm", "num_features": 4, "num_groups": 2},
                        {"type": "relu"},
                    ],
                },
            },
            {"type": "Flatten"},
            {"type": "Linear", "in_features": 256, "out_features": 10, "dtype": "float32"},
        ],
    }
}


def test_every_unset_dtype_is_set_nested_layers_included():
    model = with_precision(load_config(NESTED), "bfloat16").model
    assert model["layers"][0]["dtype"] == "bfloat16"
    assert model["layers"][1]["block"]["layers"][0]["dtype"] == "bfloat16"
    assert model["layers"][3]["dtype"] == "float32"  # (explicit: kept)
    assert with_precision(load_config(NESTED), "float32").model == load_config(NESTED).model


def test_the_layers_it_reaches_are_those_with_a_dtype_argument():
    reached = layers_with_dtype()
    assert {
        "Linear",
        "Conv",
        "Embed",
        "LayerNorm",
        "BatchNorm",
        "MultiHeadAttention",
        "GroupNorm",
    } <= set(reached)
    assert "Dropout" not in reached and "relu" not in reached


def test_a_bfloat16_run_computes_in_bfloat16_and_keeps_float32_state(tmp_path):
    config = {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": 64, "out_features": 64},
                {"type": "relu"},
                {"type": "Linear", "in_features": 64, "out_features": 10},
            ],
        },
        "optimizer": {"type": "adam", "learning_rate": 0.01},
        "data": {"type": "digits", "layout": "flat"},
        "train": {"steps": 60, "batch_size": 64, "precision": "bfloat16"},
    }
    result = train(config, run_dir=tmp_path, progress=False)
    assert result.test_accuracy > 0.8
    assert result.model.layers[0].dtype == jnp.bfloat16
    assert result.model(jnp.ones((1, 64))).dtype == jnp.bfloat16
    kinds = {
        np.dtype(v.value.dtype).name
        for _, v in nnx.state(result.optimizer).flat_state()
        if jnp.issubdtype(v.value.dtype, jnp.floating)
    }
    assert kinds == {"float32"}
    assert {
        np.dtype(v.value.dtype).name for _, v in nnx.state(result.model, nnx.Param).flat_state()
    } == {"float32"}
    saved = (tmp_path / "config.yaml").read_text()
    assert "precision: bfloat16" in saved and "dtype: bfloat16" not in saved


def test_training_md_lists_the_builtin_layers_it_reaches():
    import pathlib
    import re

    text = pathlib.Path(__file__).resolve().parents[3].joinpath("docs", "training.md").read_text()
    paragraph = text[
        text.index("### train.precision") : text.index("### A loss that is not finite")
    ]
    listed = set(re.findall(r"`([A-Z][A-Za-z]+)`", paragraph.split("(today:")[1].split(")")[0]))
    assert listed == set(layers_with_dtype())

"""Imported models compute what transformers (PyTorch) computes: relative max difference
<= 1e-4 in float32 on the committed fixtures (reference outputs written by make_fixtures.py)."""

import json
import shutil

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import nnx_core as nnx
import nnx_plugins
from nnx_plugins import import_hf

from .conftest import CAUSAL, FIXTURES, reference, relative_error

TOLERANCE = 1e-4


@nnx.jit
def _run(model, inputs, options):
    """The model on ``inputs`` (one compiled program: faster than op by op)."""
    return model(inputs, **options)


def _model(directory):
    model = nnx_plugins.load(directory / "checkpoint")
    model.eval()
    return model


@pytest.mark.parametrize("family", CAUSAL)
def test_causal_lm_logits_equal_transformers(family, imported):
    model, ref = _model(imported(family)), reference(family)
    assert relative_error(_run(model, ref["input_ids"], {}), ref["logits"]) <= TOLERANCE
    mask = ref["padded_attention_mask"].astype(bool)
    padded = _run(model, ref["padded_input_ids"], {"mask": mask})  # positions: cumsum(mask) - 1
    assert relative_error(np.asarray(padded)[mask], ref["padded_logits"][mask]) <= TOLERANCE


def test_masked_lm_logits_equal_transformers(imported):
    model, ref = _model(imported("bert")), reference("bert")
    mask = ref["attention_mask"].astype(bool)
    logits = _run(model, ref["input_ids"], {"mask": mask, "token_types": ref["token_type_ids"]})
    assert relative_error(np.asarray(logits)[mask], ref["logits"][mask]) <= TOLERANCE


def test_image_classifier_logits_equal_transformers(imported):
    model, ref = _model(imported("vit")), reference("vit")
    assert relative_error(_run(model, ref["pixel_values_nhwc"], {}), ref["logits"]) <= TOLERANCE


def test_older_rope_scaling_fields_import_the_same_model(tmp_path, copy_of):
    """config.json as transformers < 5 wrote it (rope_theta + rope_scaling) gives the same
    logits as rope_parameters (transformers 5)."""
    source = copy_of("llama")
    config = json.loads((source / "config.json").read_text())
    parameters = config.pop("rope_parameters")
    config["rope_theta"] = parameters.pop("rope_theta")
    config["rope_scaling"] = {**parameters, "type": parameters.pop("rope_type")}
    (source / "config.json").write_text(json.dumps(config))
    import_hf(source, tmp_path / "out")
    ref = reference("llama")
    logits = _run(_model(tmp_path / "out"), ref["input_ids"], {})
    assert relative_error(logits, ref["logits"]) <= TOLERANCE


def test_a_bfloat16_checkpoint_stays_bfloat16_unless_dtype_says(tmp_path):
    source = tmp_path / "bf16"
    shutil.copytree(FIXTURES / "qwen2", source)
    tensors = load_file(str(source / "model.safetensors"))
    save_file(
        {k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()},
        str(source / "model.safetensors"),
        metadata={"format": "pt"},
    )
    kept = import_hf(source, tmp_path / "kept")
    model = nnx_plugins.load(kept.checkpoint)
    assert kept.dtype == "bfloat16"
    assert model.embed.embedding.value.dtype == jnp.bfloat16
    assert model.blocks.block.attention.query.kernel.value.dtype == jnp.bfloat16
    wide = import_hf(source, tmp_path / "wide", dtype="float32")
    weights = nnx_plugins.load(wide.checkpoint).blocks.block.mlp.up.kernel.value
    assert wide.dtype == "float32" and weights.dtype == jnp.float32
    expected = tensors["model.layers.1.mlp.up_proj.weight"].astype(ml_dtypes.bfloat16).T
    np.testing.assert_array_equal(np.asarray(weights[1]), expected.astype(np.float32))

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


def test_an_imported_model_decodes_a_left_padded_batch_as_transformers_computes_it(imported):
    """Mistral (grouped heads, sliding window 4): the prompt as one chunk, then a token per step,
    equals transformers' logits of the whole padded batch."""
    model, ref = _model(imported("mistral")), reference("mistral")
    tokens, mask = ref["padded_input_ids"], ref["padded_attention_mask"].astype(bool)
    model.set_attributes(decode=True)
    model.init_cache((tokens.shape[0], tokens.shape[1] + 1, model.features))
    step = nnx.jit(lambda model, x, m: model(x, mask=m))
    split = tokens.shape[1] - 3
    pieces = [step(model, tokens[:, :split], mask[:, :split])]
    pieces += [
        step(model, tokens[:, t : t + 1], mask[:, t : t + 1]) for t in range(split, tokens.shape[1])
    ]
    decoded = np.concatenate([np.asarray(p) for p in pieces], axis=1)
    assert relative_error(decoded[mask], ref["padded_logits"][mask]) <= TOLERANCE


@pytest.mark.parametrize("family", ["gpt2", "bert", "vit"])
def test_every_imported_parameter_has_logical_axis_names(family, imported):
    entries = nnx_plugins.read_manifest(imported(family) / "checkpoint")["entries"]
    for key, entry in entries.items():
        names = entry["metadata"].get("sharding_names")
        assert names is not None and len(names) == len(entry["shape"]), key

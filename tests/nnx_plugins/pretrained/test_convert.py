"""Converter tables read both ways, the conformance check, and finding converters by name."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

import nnx_core
import nnx_plugins
from nnx_plugins import Converter, PretrainedError, Rule, register_converter
from nnx_plugins.pretrained._convert import backward, forward, path_text, to_transformers
from nnx_plugins.pretrained._import import find_converter
from nnx_plugins.testing import PartCheckError, check_converter

from .conftest import FAMILIES, FIXTURES

ARCHITECTURES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "bert": "BertForMaskedLM",
    "vit": "ViTForImageClassification",
}


@pytest.mark.parametrize(
    ("rule", "shape"),
    [
        (Rule("w", "k", "transpose"), (3, 5)),
        (Rule("w", "k", "conv"), (8, 3, 4, 4)),
        (Rule("w", "k", "squeeze", leading=2), (1, 1, 6)),
        (Rule("w", ("q", "k", "v")), (4, 9)),
        (Rule("w", ("q", "k"), "transpose"), (6, 4)),
    ],
)
def test_every_transform_is_undone_by_its_inverse(rule, shape):
    array = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    parts = forward(rule, array)
    assert [p.shape for p in parts] == rule.forward_shape(shape)
    assert rule.backward_shape([p.shape for p in parts]) == shape
    np.testing.assert_array_equal(backward(rule, parts), array)


def test_a_rule_with_an_unknown_transform():
    with pytest.raises(ValueError, match="transform must be one of"):
        Rule("w", "k", "flip")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_built_in_converters_conform(family):
    settings = json.loads((FIXTURES / family / "config.json").read_text())
    tensors = check_converter(ARCHITECTURES[family], settings)
    on_disk = {}
    for path in FIXTURES.joinpath(family).glob("*.safetensors"):
        on_disk.update({k: v.shape for k, v in load_file(str(path)).items()})
    assert tensors == on_disk  # (every tensor transformers saved, and no other)


@pytest.mark.parametrize("family", ["gpt2", "qwen3", "vit"])
def test_the_table_backwards_gives_the_transformers_tensors_back(family, imported):
    """Export's direction: the imported parameters through the table reversed equal the
    checkpoint the import read (bit for bit)."""
    model = nnx_plugins.load(imported(family) / "checkpoint")
    state = {path_text(p): np.asarray(v.value) for p, v in nnx_core.state(model).flat_state()}
    settings = json.loads((FIXTURES / family / "config.json").read_text())
    _, converter = find_converter(ARCHITECTURES[family])
    exported = to_transformers(converter, settings, state)
    original = load_file(str(FIXTURES / family / "model.safetensors"))
    assert sorted(exported) == sorted(original)
    for name, array in original.items():
        np.testing.assert_array_equal(exported[name], array, err_msg=name)


def test_a_converter_that_misses_a_parameter_fails_the_check(nnx_registry):
    broken = Converter(
        config=lambda c: {"model": {"type": "Linear", "in_features": 2, "out_features": 2}},
        table=lambda c: [Rule("w", "kernel", "transpose")],
        layers=lambda c: 0,
    )
    register_converter("checks.Broken", broken)
    with pytest.raises(PartCheckError, match="fills no tensor .* into the model's parameter bias"):
        check_converter("checks.Broken", {})


def test_a_converter_naming_a_parameter_the_model_lacks_fails_the_check(nnx_registry):
    wrong = Converter(
        config=lambda c: {"model": {"type": "Linear", "in_features": 2, "out_features": 2}},
        table=lambda c: [Rule("w", "weights", "transpose"), Rule("b", "bias")],
        layers=lambda c: 0,
    )
    register_converter("checks.Wrong", wrong)
    with pytest.raises(
        PartCheckError, match="cannot export the model: the table reads the parameter 'weights'"
    ):
        check_converter("checks.Wrong", {})


def test_a_pack_converter_is_found_by_its_architecture(nnx_registry):
    register_converter("checks.TinyForCausalLM", Converter(config=dict, table=list, layers=len))
    assert find_converter("TinyForCausalLM")[0] == "checks.TinyForCausalLM"
    register_converter("others.TinyForCausalLM", Converter(config=dict, table=list, layers=len))
    with pytest.raises(PretrainedError, match="several packs convert 'TinyForCausalLM'"):
        find_converter("TinyForCausalLM")


def test_registering_something_that_is_not_a_converter(nnx_registry):
    with pytest.raises(
        nnx_plugins.PluginLoadError,
        match="provides converter 'checks.Nothing' as an object with no 'config'",
    ):
        register_converter("checks.Nothing", object())
    with pytest.raises(nnx_plugins.PluginNameError, match="without a namespace"):
        register_converter("FalconForCausalLM", Converter(config=dict, table=list, layers=len))


def test_the_streamed_sha256_is_the_files_whatever_the_pieces(tmp_path):
    import hashlib

    from nnx_plugins.pretrained._write import _Hashing

    arrays = [np.arange(n, dtype=np.float32) for n in (1, 5, 64, 3)]
    with open(tmp_path / "t.bin", "wb") as handle:
        out = _Hashing(handle, chunk=7)
        for array in arrays:
            out.write(array)
    data = (tmp_path / "t.bin").read_bytes()
    assert data == b"".join(a.tobytes() for a in arrays)
    assert out.written == len(data)
    assert out.digest.hexdigest() == hashlib.sha256(data).hexdigest()

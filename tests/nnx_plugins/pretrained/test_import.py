"""nnx import hf: what it writes, and every bad input refused with nothing written."""

import json
import os
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import nnx_plugins
from nnx_plugins import PretrainedError, import_hf
from nnx_plugins.pretrained._source import MAX_JSON_DEPTH
from nnx_plugins.training._config import load_train_config

from .conftest import FIXTURES


def _weights(source):
    return load_file(str(source / "model.safetensors"))


def _save(source, tensors):
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})


def _refused(source, out, match, **options):
    with pytest.raises(PretrainedError, match=match):
        import_hf(source, out, **options)
    assert not out.exists() or not any(out.iterdir())
    leftovers = [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp-")]
    assert leftovers == []


# -- what an import writes -------------------------------------------------------------------
def test_an_import_writes_a_config_a_checkpoint_and_the_tokenizer(imported):
    out = imported("mistral")  # (the sharded fixture)
    assert sorted(os.listdir(out)) == [
        "checkpoint",
        "config.json",
        "config.yaml",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    config = load_train_config(out / "config.yaml")
    assert config.sections["checkpoint"].init_from == str(out / "checkpoint")
    assert config.sections["task"].type == "language_model"
    tokenizer = config.sections["tokenizer"]
    assert tokenizer.type == "hf" and tokenizer.arguments["path"] == str(out / "tokenizer.json")
    assert tokenizer.arguments["eos_token_ids"] == [79]  # generation_config.json's
    assert config.sections["data"].arguments["tokenizer"]["type"] == "hf"
    attention = config.model["blocks"]["block"]["attention"]
    assert attention["sliding_window"] == 4 and attention["num_kv_heads"] == 2
    manifest = nnx_plugins.read_manifest(out / "checkpoint")
    assert manifest["run"]["imported_from"]["architecture"] == "MistralForCausalLM"
    kernel = manifest["entries"]["model/blocks/block/attention/query/kernel"]
    assert kernel["shape"] == [2, 32, 32] and kernel["metadata"]["sharding_names"] == [
        "layers",
        "embed",
        "heads",
    ]


def test_the_config_names_registered_layer_types_only(imported):
    text = (imported("gpt2") / "config.yaml").read_text()
    types = {
        line.split("type:")[1].split(",")[0].strip(" {}")
        for line in text.splitlines()
        if "type:" in line
    }
    registry = nnx_plugins.default_registry()
    layers = set(registry.names("layer"))
    parts = {"language_model", "hf", "text", "adamw"}
    assert types - parts <= layers and "CausalLM" in types


def test_the_command_imports_and_reports(tmp_path):
    out = tmp_path / "tiny"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nnx_plugins.cli._main",
            "import",
            "hf",
            str(FIXTURES / "vit"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "imported ViTForImageClassification" in done.stdout and (out / "checkpoint").is_dir()
    assert "its config has no data" in done.stdout and "nnx generate" not in done.stdout
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "nnx_plugins.cli._main",
            "import",
            "hf",
            str(FIXTURES / "vit"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert "not empty" in again.stderr


def test_an_empty_destination_directory_is_used(tmp_path):
    (tmp_path / "empty").mkdir()
    import_hf(FIXTURES / "bert", tmp_path / "empty")
    assert (tmp_path / "empty" / "config.yaml").is_file()


def test_base_model_names_without_the_prefix_are_read(tmp_path, copy_of):
    source = copy_of("gpt2")
    _save(source, {k.removeprefix("transformer."): v for k, v in _weights(source).items()})
    import_hf(source, tmp_path / "out")
    before = nnx_plugins.load(tmp_path / "out" / "checkpoint").embed.embedding.value
    np.testing.assert_array_equal(before, _weights(FIXTURES / "gpt2")["transformer.wte.weight"])


# -- bad input -------------------------------------------------------------------------------
def test_a_source_without_config_json(tmp_path, copy_of):
    source = copy_of("llama")
    (source / "config.json").unlink()
    _refused(source, tmp_path / "out", "it has no config.json")


def test_a_source_that_does_not_exist(tmp_path):
    _refused(tmp_path / "nowhere", tmp_path / "out", "no such directory")


def test_an_architecture_without_a_converter_lists_the_registered_ones(tmp_path, copy_of):
    source = copy_of("llama")
    config = json.loads((source / "config.json").read_text())
    config["architectures"] = ["FalconForCausalLM"]
    (source / "config.json").write_text(json.dumps(config))
    _refused(
        source,
        tmp_path / "out",
        r"no converter is registered for the architecture 'FalconForCausalLM'\. Registered: .*LlamaForCausalLM",
    )


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        (
            "rope_parameters",
            {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0},
            r"'rope_parameters\.rope_type' is 'yarn'.*'default' and 'llama3' only",
        ),
        ("hidden_act", "gelu_fast", r"'hidden_act' is 'gelu_fast'"),
        ("use_sliding_window", True, r"'use_sliding_window' is true"),
        ("hidden_size", "32", r"'hidden_size' must be a positive whole number, got '32'"),
        ("head_dim", 0, r"'head_dim' must be a positive whole number, got 0"),
        ("max_position_embeddings", "64", r"'max_position_embeddings' must be a positive whole"),
        ("rope_parameters", "x", r"'rope_parameters' must be an object or null, got 'x'"),
    ],
)
def test_a_config_field_the_converter_does_not_support(tmp_path, copy_of, field, value, match):
    source = copy_of("llama")
    config = json.loads((source / "config.json").read_text())
    config[field] = value
    (source / "config.json").write_text(json.dumps(config))
    _refused(source, tmp_path / "out", match)


def test_old_style_rope_scaling_of_another_type(tmp_path, copy_of):
    source = copy_of("mistral")
    config = json.loads((source / "config.json").read_text())
    config.pop("rope_parameters")
    config["rope_scaling"] = {"type": "dynamic", "factor": 2.0}
    (source / "config.json").write_text(json.dumps(config))
    _refused(source, tmp_path / "out", r"'rope_scaling\.type' is 'dynamic'")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("[1, 2, 3]", "must hold a JSON object"),
        ('{"architectures": ', "is not valid JSON"),
        ("[" * 5000 + "]" * 5000, "nested too deeply|must hold a JSON object"),
        ('{"a": ' * (MAX_JSON_DEPTH + 2) + "1" + "}" * (MAX_JSON_DEPTH + 2), "nests more than"),
        (
            '{"architectures": "LlamaForCausalLM"}',
            "'architectures' must be a list of class names such as .*, got text of 16 characters",
        ),
    ],
)
def test_a_config_json_that_is_not_an_object_or_too_deep(tmp_path, copy_of, content, match):
    source = copy_of("llama")
    (source / "config.json").write_text(content)
    _refused(source, tmp_path / "out", match)


def test_a_huge_config_json(tmp_path, copy_of, monkeypatch):
    monkeypatch.setattr("nnx_plugins.pretrained._source.MAX_JSON_BYTES", 1000)
    source = copy_of("llama")
    (source / "config.json").write_text(json.dumps({"pad": "x" * 2000}))
    _refused(source, tmp_path / "out", r"config\.json: it holds 2,0\d\d bytes, more than 1,000")


def test_missing_extra_and_misshapen_tensors_are_named(tmp_path, copy_of):
    source = copy_of("llama")
    tensors = _weights(source)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.layers.0.self_attn.extra.weight"] = np.zeros((2,), np.float32)
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((8, 32), np.float32)
    _save(source, tensors)
    with pytest.raises(PretrainedError) as caught:
        import_hf(source, tmp_path / "out")
    message = str(caught.value)
    assert "missing tensors: model.layers.1.mlp.up_proj.weight" in message
    assert "unexpected tensors: model.layers.0.self_attn.extra.weight" in message
    assert "model.layers.0.self_attn.k_proj.weight: shape (8, 32), expected (16, 32)" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("layers", [10**9, 10])
def test_a_config_json_with_more_layers_than_the_checkpoint(tmp_path, copy_of, layers):
    """A hostile layer count is refused before the converter's table is expanded (10**9
    layers would expand billions of names); a long list of missing tensors is cut short."""
    source = copy_of("llama")
    config = json.loads((source / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (source / "config.json").write_text(json.dumps(config))
    if layers > 100:
        _refused(
            source,
            tmp_path / "out",
            r"config\.json describes 1,000,000,000 layers but the checkpoint holds \d+ "
            r"tensors, those of 2 layer\(s\) \('model\.layers\.0\.",
        )
    else:
        _refused(source, tmp_path / "out", r"missing tensors: model\.layers\.2\..*, and \d+ more")


def test_a_safetensors_header_bomb(tmp_path, copy_of):
    source = copy_of("llama")
    with open(source / "model.safetensors", "r+b") as handle:
        handle.write(struct.pack("<Q", 2**62))
    _refused(
        source,
        tmp_path / "out",
        r"declares a header of 4,611,686,018,427,387,904 bytes, more than the 100,000,000",
    )


def test_a_truncated_safetensors_file(tmp_path, copy_of):
    source = copy_of("llama")
    path = source / "model.safetensors"
    os.truncate(path, path.stat().st_size - 100)
    _refused(
        source,
        tmp_path / "out",
        r"model\.safetensors: is truncated: its header places tensor data up to byte",
    )


def test_a_safetensors_header_that_lies_about_a_tensor(tmp_path, copy_of):
    source = copy_of("llama")
    path = source / "model.safetensors"
    raw = path.read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + length])
    name = "model.norm.weight"
    start = header[name]["data_offsets"][0]
    header[name]["data_offsets"] = [start, start + 4]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length :])
    _refused(
        source, tmp_path / "out", r"model\.norm\.weight'.*is 128 bytes, but its data_offsets span 4"
    )


def test_a_malformed_tokenizer_json_is_refused_naming_the_file_and_place(tmp_path, copy_of):
    source = copy_of("llama")
    (source / "tokenizer.json").write_text(
        '{"version": "1.0", "model": {"type": "BPE", "vocab": 3}}'
    )
    _refused(source, tmp_path / "out", r"tokenizer\.json: .*not a tokenizer\.json .*line 1, column")


def test_a_destination_that_exists_and_is_not_empty(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(
        PretrainedError, match="is a directory that is not empty; nothing was written"
    ):
        import_hf(FIXTURES / "llama", out)
    assert os.listdir(out) == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def test_a_destination_that_is_a_file(tmp_path):
    (tmp_path / "out").write_text("mine")
    with pytest.raises(PretrainedError, match="names an existing file"):
        import_hf(FIXTURES / "llama", tmp_path / "out")
    assert (tmp_path / "out").read_text() == "mine"


@pytest.mark.parametrize("name", ["../outside.safetensors", "/etc/passwd", "sub/dir.safetensors"])
def test_a_shard_index_naming_files_outside_the_source(tmp_path, copy_of, name):
    source = copy_of("mistral")
    index = json.loads((source / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = name
    (source / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(source, tmp_path / "out", "not a plain file name inside the model directory")


def test_a_shard_index_symlink_leading_out(tmp_path, copy_of):
    source = copy_of("mistral")
    outside = tmp_path / "elsewhere.safetensors"
    os.replace(source / "model-00003-of-00003.safetensors", outside)
    os.symlink(outside, source / "model-00003-of-00003.safetensors")
    _refused(source, tmp_path / "out", "a symlink leading out of the model directory")


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda p: os.symlink("/dev/zero", p),
            r"not a regular file but a device or pipe \(a symlink to /dev/zero\)",
        ),
        (lambda p: os.symlink(p.parent / "gone", p), r"a symlink to .*gone, which does not exist"),
        (lambda p: p.mkdir(), "not a regular file but a directory: give the weights as a file"),
    ],
)
def test_weights_that_are_not_a_regular_file(tmp_path, copy_of, make, match):
    source = copy_of("llama")
    os.remove(source / "model.safetensors")
    make(source / "model.safetensors")
    _refused(source, tmp_path / "out", r"model\.safetensors: is " + match)


def test_a_shard_index_naming_a_broken_symlink(tmp_path, copy_of):
    source = copy_of("mistral")
    os.remove(source / "model-00003-of-00003.safetensors")
    os.symlink(source / "gone", source / "model-00003-of-00003.safetensors")
    _refused(
        source,
        tmp_path / "out",
        r"names model-00003-of-00003\.safetensors, which is a symlink to .*gone, which does not exist",
    )


def test_only_pytorch_weights(tmp_path, copy_of):
    source = copy_of("llama")
    os.replace(source / "model.safetensors", source / "pytorch_model.bin")
    _refused(
        source,
        tmp_path / "out",
        r"neither model\.safetensors nor .*pytorch_model\.bin.*Only safetensors",
    )


def test_a_bad_dtype(tmp_path):
    _refused(FIXTURES / "llama", tmp_path / "out", "--dtype must be one of", dtype="int8")


def test_a_full_disk_leaves_nothing_behind(tmp_path, monkeypatch):
    import errno

    def full(folder, *args, **kwargs):
        (pathlib.Path(folder) / "tensors.safetensors").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("nnx_plugins.pretrained._import.write_checkpoint", full)
    _refused(
        FIXTURES / "vit",
        tmp_path / "out",
        r"writing it failed: no space left on the device \(ENOSPC\); nothing was left behind",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_interrupted_import_leaves_nothing_behind(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("nnx_plugins.pretrained._import.write_checkpoint", interrupted)
    with pytest.raises(KeyboardInterrupt):
        import_hf(FIXTURES / "vit", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("data: {type: text, path: a.txt}", "nnx generate"),
        ("data: {type: text, path: a.txt, masking: {probability: 0.15}}", "masked LM"),
        ("task: {type: classification}", "its config has no data"),
    ],
)
def test_the_hint_after_an_import_fits_what_the_model_does(tmp_path, data, expected):
    from nnx_plugins.cli._import import _next_steps

    config = tmp_path / "config.yaml"
    config.write_text(f"model: {{type: Linear}}\n{data}\n")
    hint = _next_steps(config, tmp_path / "checkpoint")
    assert expected in hint
    assert ("nnx generate" in hint) == (expected == "nnx generate")


@pytest.mark.parametrize(
    ("family", "says", "not_said"),
    [
        ("vit", ["nnx predict", "data.type=npz data.path=images.npz"], ["nnx generate", "text"]),
        ("llama", ["nnx generate", "nnx train config.yaml data.path=notes.txt"], ["nnx predict"]),
        ("bert", ["A masked LM", "data.path=notes.txt"], ["nnx generate", "nnx predict"]),
    ],
)
def test_the_config_header_says_how_to_use_the_kind_of_model_imported(
    imported, family, says, not_said
):
    # (an image classifier's said "nnx generate" and "fine-tune on your text")
    text = (imported(family) / "config.yaml").read_text(encoding="utf-8")
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    assert all(part in header for part in says), header
    assert not any(part in header for part in not_said), header

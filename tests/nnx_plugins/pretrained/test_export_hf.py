"""export_hf: import -> export gives back transformers' files (tensors bit-equal, config.json
equal) for the seven fixtures; LoRA adapters merged as the layers compute them; every refusal
with nothing written."""

import errno
import json
import os

import numpy as np
import pytest
import yaml
from safetensors.numpy import load_file

import nnx_core as nnx
import nnx_plugins
from nnx_layers import LoRAParam
from nnx_plugins import ExportError, PretrainedError, export_hf, import_hf
from nnx_plugins.cli._main import main

from .conftest import FAMILIES, FIXTURES, relative_error


def originals(family: str) -> dict[str, np.ndarray]:
    tensors = {}
    for name in os.listdir(FIXTURES / family):
        if name.endswith(".safetensors"):
            tensors.update(load_file(str(FIXTURES / family / name)))
    return tensors


@pytest.mark.parametrize("family", FAMILIES)
def test_import_then_export_gives_back_the_files(imported, tmp_path, family):
    source = imported(family)
    out = tmp_path / "out"
    result = export_hf(source / "config.yaml", checkpoint=source / "checkpoint", out=out)
    exported, original = load_file(str(out / "model.safetensors")), originals(family)
    assert sorted(exported) == sorted(original)
    for name, tensor in original.items():
        assert exported[name].dtype == tensor.dtype and np.array_equal(exported[name], tensor), name
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (FIXTURES / family / "config.json").read_text()
    )
    for side in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (FIXTURES / family / side).is_file():
            assert (out / side).read_bytes() == (FIXTURES / family / side).read_bytes()
    assert (result.tensors, result.adapters) == (len(original), 0)
    assert result.size == (out / "model.safetensors").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # (no temporary left)


def with_adapters(model: dict, rank: int, alpha: float) -> dict:
    block = model["blocks"]["block"]
    for part in ("attention", "mlp"):
        block[part] = {**block[part], "lora_rank": rank, "lora_alpha": alpha}
    return model


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The tiny Llama with rank-2 adapters (alpha 4) on every projection, adapters drawn at
    random (a fine-tuned run's), saved as a config and a checkpoint."""
    folder = tmp_path_factory.mktemp("tuned")
    imported = import_hf(FIXTURES / "llama", folder / "tiny")
    config = yaml.safe_load(imported.config.read_text())
    config["model"] = with_adapters(config["model"], 2, 4.0)
    (folder / "tiny" / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    model = nnx_plugins.build_model(folder / "tiny" / "config.yaml")
    nnx_plugins.load(imported.checkpoint, into=model, allow_missing=LoRAParam)
    rng = np.random.default_rng(0)
    for _, variable in nnx.state(model, LoRAParam).flat_state():
        variable.value = rng.normal(0, 0.3, variable.value.shape).astype(np.float32)
    checkpoint = nnx_plugins.save(model, folder / "tuned-checkpoint")
    return folder / "tiny", checkpoint, model


def test_adapters_are_merged_into_the_kernels(tuned, tmp_path):
    folder, checkpoint, model = tuned
    result = export_hf(folder / "config.yaml", checkpoint=checkpoint, out=tmp_path / "out")
    assert result.adapters == 7  # (q, k, v, o, gate, up, down: each stacked over 2 blocks)
    exported = load_file(str(tmp_path / "out" / "model.safetensors"))
    query = model.blocks.block.attention.query
    a, b = np.asarray(query.lora.lora_a.value), np.asarray(query.lora.lora_b.value)
    kernel = np.asarray(query.kernel.value)
    expected = (kernel[1] + 2.0 * a[1] @ b[1]).T  # (alpha 4 / rank 2)
    np.testing.assert_allclose(
        exported["model.layers.1.self_attn.q_proj.weight"], expected, rtol=1e-6
    )
    # the exported directory imported again computes what the model with adapters computes
    again = import_hf(tmp_path / "out", tmp_path / "again")
    merged = nnx_plugins.load(again.checkpoint)
    tokens = np.arange(12).reshape(2, 6) % 300
    assert relative_error(merged(tokens), model(tokens)) < 1e-5


def test_a_model_of_other_sizes_is_refused(imported, tmp_path):
    source = imported("llama")
    config = yaml.safe_load((source / "config.yaml").read_text())
    config["model"]["blocks"]["count"] = 1
    (tmp_path / "config.json").write_bytes((source / "config.json").read_bytes())
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    checkpoint = nnx_plugins.save(
        nnx_plugins.build_model(tmp_path / "config.yaml"), tmp_path / "ckpt"
    )
    with pytest.raises(
        ExportError,
        match=r"the model does not have the parameters .*config\.json describes "
        r"\(blocks/block/attention/key/kernel: \(1, 32, 16\) in the model, \(2, 32, 16\) in "
        r"config\.json; .* and \d+ more\)\. Export a model",
    ):
        export_hf(tmp_path / "config.yaml", checkpoint=checkpoint, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_config_without_its_transformers_config_is_refused(imported, tmp_path):
    source = imported("llama")
    config = yaml.safe_load((source / "config.yaml").read_text())
    with pytest.raises(
        ExportError, match=r"transformers config\.json is needed .* the config is not a file"
    ):
        export_hf(config, checkpoint=source / "checkpoint", out=tmp_path / "out")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(ExportError, match=r"there is no config\.json beside .*config\.yaml"):
        export_hf(tmp_path / "config.yaml", checkpoint=source / "checkpoint", out=tmp_path / "out")
    result = export_hf(
        config,
        checkpoint=source / "checkpoint",
        out=tmp_path / "out",
        hf_config=source / "config.json",
    )
    assert result.architecture == "LlamaForCausalLM"


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"architectures": "LlamaForCausalLM"}, PretrainedError, r"'architectures' must be a list"),
        (
            {"architectures": ["FooForCausalLM"]},
            PretrainedError,
            r"no converter is registered for the architecture 'FooForCausalLM'",
        ),
        ({"hidden_size": 64}, ExportError, r"does not have the parameters"),
    ],
)
def test_a_bad_transformers_config_is_refused(imported, tmp_path, change, error, match):
    source = imported("llama")
    settings = {**json.loads((source / "config.json").read_text()), **change}
    (tmp_path / "config.json").write_text(json.dumps(settings))
    with pytest.raises(error, match=match):
        export_hf(
            source / "config.yaml",
            checkpoint=source / "checkpoint",
            out=tmp_path / "out",
            hf_config=tmp_path / "config.json",
        )
    assert not (tmp_path / "out").exists()


def test_a_transformers_config_that_is_a_device_is_refused_unread(imported, tmp_path):
    source = imported("llama")
    with pytest.raises(PretrainedError, match=r"config\.json cannot be read: it is a character"):
        export_hf(
            source / "config.yaml",
            checkpoint=source / "checkpoint",
            out=tmp_path / "out",
            hf_config="/dev/zero",
        )
    assert not (tmp_path / "out").exists()


def test_an_existing_output_and_a_full_disk_leave_everything_as_it_was(
    imported, tmp_path, monkeypatch
):
    source = imported("qwen3")
    (tmp_path / "out").mkdir()
    with pytest.raises(ExportError, match=r"the output .*out exists \(a folder\)"):
        export_hf(source / "config.yaml", checkpoint=source / "checkpoint", out=tmp_path / "out")
    real_open = open

    def full(path, mode="r", *args, **kwargs):
        if str(path).endswith("model.safetensors") and "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full)
    with pytest.raises(ExportError, match=r"cannot write .*new: no space left on the device"):
        export_hf(source / "config.yaml", checkpoint=source / "checkpoint", out=tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_command(imported, tmp_path, capsys):
    source = imported("gpt2")
    argv = ["export", "hf", str(source / "config.yaml"), "--checkpoint", str(source / "checkpoint")]
    assert main([*argv, "--out", str(tmp_path / "gpt2")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path / 'gpt2'}: GPT2LMHeadModel, ")
    assert "load it with transformers' AutoModelForCausalLM.from_pretrained" in out
    assert main([*argv, "--out", str(tmp_path / "gpt2")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nnx: error: the output") and "Traceback" not in err

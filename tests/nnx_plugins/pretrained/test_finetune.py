"""Fine-tuning an imported model: `nnx train DST/config.yaml data.path=notes.txt` starts from
the imported weights (checkpoint.init_from), LoRA adapters declared by overrides train alone,
and the result exports back to transformers' names with the adapters merged."""

import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file

import nnx_core as nnx
import nnx_plugins
from nnx_layers import LoRAParam
from nnx_plugins.cli._main import main

NOTES = "The quick brown fox jumps over the lazy dog. Once upon a time there was a model. " * 8

ADAPTERS = [
    "model.blocks.block.attention.lora_rank=2",
    "model.blocks.block.mlp.lora_rank=2",
    "model.blocks.block.attention.lora_alpha=4",
    "optimizer.trainable=[LoRAParam]",
    "optimizer.learning_rate=0.05",
]
SHORT = ["train.steps=3", "train.batch_size=2", "data.seq_len=16", "train.log_interval=3"]


@pytest.fixture(scope="module")
def tuned(imported, tmp_path_factory):
    """The tiny Llama (a copy of its import) fine-tuned 3 steps, adapters only, by the
    command; ``(DST, run directory)``."""
    folder = tmp_path_factory.mktemp("finetune")
    destination = folder / "tiny-llama"
    shutil.copytree(imported("llama"), destination)
    (folder / "notes.txt").write_text(NOTES, encoding="utf-8")
    argv = ["train", str(destination / "config.yaml"), f"data.path={folder / 'notes.txt'}"]
    argv += [*ADAPTERS, *SHORT, "--run-dir", str(folder / "run"), "--no-progress"]
    assert main(argv) == 0
    return destination, folder / "run"


def test_the_run_starts_from_the_imported_weights_and_trains_the_adapters_only(tuned):
    destination, run = tuned
    base = nnx_plugins.load(destination / "checkpoint")
    trained = nnx_plugins.load(run / "checkpoints")
    frozen = nnx.All(nnx.Param, nnx.Not(LoRAParam))
    before = dict(nnx.state(base, nnx.Param).flat_state())
    after = dict(nnx.state(trained, frozen).flat_state())
    assert set(after) == set(before) and len(before) == 12
    for path, variable in before.items():
        assert np.array_equal(after[path].value, variable.value), path
    adapters = dict(nnx.state(trained, LoRAParam).flat_state())
    assert len(adapters) == 14  # (a and b of q, k, v, o, gate, up, down)
    lora_b = [v.value for p, v in adapters.items() if p[-1] == "lora_b"]
    assert all(np.abs(np.asarray(b)).max() > 0 for b in lora_b)


def test_the_fine_tuned_model_exports_to_transformers_with_the_adapters_merged(
    tuned, tmp_path, capsys
):
    """The run's own config.yaml (the overrides applied) and checkpoint; transformers' config.json
    is not beside it, so --hf-config names the import's."""
    destination, run = tuned
    argv = ["export", "hf", str(run / "config.yaml"), "--checkpoint", str(run / "checkpoints")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "there is no config.json beside" in err and "--hf-config" in err
    argv += ["--hf-config", str(destination / "config.json"), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    assert "7 LoRA projections merged" in capsys.readouterr().out
    trained = nnx_plugins.load(run / "checkpoints")
    again = nnx_plugins.import_hf(tmp_path / "out", tmp_path / "again")
    merged = nnx_plugins.load(again.checkpoint)
    tokens = np.arange(10).reshape(2, 5) + 3
    ours, theirs = np.asarray(trained(tokens)), np.asarray(merged(tokens))
    assert np.abs(ours - theirs).max() / np.abs(ours).max() < 1e-5
    exported = load_file(str(tmp_path / "out" / "model.safetensors"))
    base = nnx_plugins.load(destination / "checkpoint").blocks.block.mlp.up.kernel.value
    assert not np.array_equal(exported["model.layers.0.mlp.up_proj.weight"], np.asarray(base[0]).T)

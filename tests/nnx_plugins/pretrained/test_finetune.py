"""Fine-tuning an imported model: `nnx train DST/config.yaml data.path=notes.txt` starts from
the imported weights (checkpoint.init_from), LoRA adapters declared by overrides train alone,
and the result exports back to transformers' names with the adapters merged."""

import re
import shutil

import numpy as np
import pytest
import yaml
from safetensors.numpy import load_file

import nnx_core as nnx
import nnx_plugins
from nnx_layers import LoRAParam
from nnx_plugins.cli._main import main
from nnx_plugins.training._run_dir import LOCK_NAME as LOCK

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


@pytest.fixture
def tuned_copy(tuned, tmp_path):
    """A copy of the fine-tuned run directory (resuming changes it)."""
    run = tmp_path / "run"
    shutil.copytree(tuned[1], run)
    return run


def test_a_run_read_with_a_tokenizer_resumes_and_its_checkpoint_evaluates(tuned_copy):
    # (both refused with "set data.level: tokenizer", a value no config takes)
    config = str(shutil.copy(tuned_copy / "config.yaml", tuned_copy.parent / "config.yaml"))
    argv = ["train", config, "train.steps=4", "--run-dir", str(tuned_copy), "--resume"]
    assert main([*argv, "--no-progress"]) == 0
    assert nnx_plugins.load(tuned_copy / "checkpoints").blocks.block.attention is not None
    assert (tuned_copy / "checkpoints" / "step_00000004").is_dir()
    assert main(["eval", config, "--checkpoint", str(tuned_copy / "checkpoints")]) == 0


def test_a_resume_without_the_tokenizer_is_refused_and_leaves_the_run_as_it_was(tuned_copy, capsys):
    config = yaml.safe_load((tuned_copy / "config.yaml").read_text(encoding="utf-8"))
    del config["tokenizer"], config["data"]["tokenizer"]  # (the resolved config has both)
    edited = tuned_copy.parent / "no-tokenizer.yaml"
    edited.write_text(yaml.safe_dump(config), encoding="utf-8")
    files = lambda: {  # noqa: E731 - (the lock file records who holds it, and when)
        p: p.read_bytes() for p in tuned_copy.rglob("*") if p.is_file() and p.name != LOCK
    }
    before = files()
    argv = ["train", str(edited), "train.steps=5", "--run-dir", str(tuned_copy), "--resume"]
    assert main([*argv, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"token ids are those of the tokenizer '.*tokenizer\.json'", err), err
    assert "this config has no tokenizer section" in err and "add the run's tokenizer" in err
    # (the resolved config.yaml was rewritten with steps: 5 before the checkpoint was read)
    assert files() == before


def test_a_resume_under_other_trained_variables_names_the_change_first(tuned_copy, capsys):
    # (before: 49 lines of optimizer.opt_state shapes, and "rename it as damaged")
    config = str(shutil.copy(tuned_copy / "config.yaml", tuned_copy.parent / "config.yaml"))
    argv = ["train", config, "optimizer.trainable=[Param]", "--run-dir", str(tuned_copy)]
    assert main([*argv, "--resume", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert re.search(
        r"this config's optimizer section\(s\) differ from the config the run's checkpoints were "
        r"written with \(optimizer\.trainable: \['LoRAParam'\] in the run's, \['Param'\] in this "
        r"one\).*put the run's values back.*or train into a new --run-dir",
        err,
    ), err
    assert re.search(r"\.\.\. and \d+ more", err) and "damaged" not in err
    assert len(err.splitlines()) <= 8


def test_a_run_started_from_a_checkpoint_read_with_a_tokenizer_needs_that_tokenizer(
    tuned, tmp_path, capsys
):
    # (it trained on bytes: ids 0-255 of a model whose ids mean the tokenizer's tokens)
    config = yaml.safe_load((tuned[1] / "config.yaml").read_text(encoding="utf-8"))
    del config["tokenizer"], config["data"]["tokenizer"]
    config["checkpoint"]["init_from"] = str(tuned[1] / "checkpoints")
    edited = tmp_path / "bytes.yaml"
    edited.write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = ["train", str(edited), "--run-dir", str(tmp_path / "run"), "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert re.search(
        r"bytes\.yaml:\d+:\d+: checkpoint\.init_from: the run starts from this checkpoint's "
        r"weights, but the checkpoint's token ids are those of the tokenizer "
        r"'.*tokenizer\.json' \(type 'hf'\); this config has no tokenizer section",
        err,
    ), err
    assert not (tmp_path / "run").exists()


def test_the_imported_model_without_its_tokenizer_is_refused_before_training_on_bytes(
    imported, tmp_path, capsys
):
    # (it trained the 320-token model on byte ids 0-255, silently)
    destination = shutil.copytree(imported("llama"), tmp_path / "tiny-llama")
    config = yaml.safe_load((destination / "config.yaml").read_text(encoding="utf-8"))
    del config["tokenizer"]  # (the data section reads the text with it)
    (destination / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    argv = ["train", str(destination / "config.yaml"), f"data.path={tmp_path / 'notes.txt'}"]
    assert main([*argv, *SHORT, "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert re.search(
        r"checkpoint\.init_from: the run starts from this checkpoint's weights, but the "
        r"checkpoint's token ids are those of the tokenizer 'tokenizer\.json' \(type 'hf'\); "
        r"this config has no tokenizer section, so it reads the text as bytes",
        err,
    ), err
    assert not (tmp_path / "run").exists()

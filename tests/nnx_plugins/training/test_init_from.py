"""checkpoint.init_from: a run starts from a checkpoint's weights (relative to the config file);
only LoRAParam adapters may be missing; with trainable [LoRAParam] only they train, the other
weights stay bit-identical; every mismatch is refused before a step, located in the config."""

import pathlib

import jax
import numpy as np
import pytest
import yaml

import nnx_core as nnx
import nnx_plugins
from nnx_layers import LoRAParam
from nnx_plugins import CheckpointError, ConfigError, train
from nnx_plugins.cli._main import main

MLP = {
    "type": "Sequential",
    "layers": [
        {"type": "Linear", "in_features": 64, "out_features": 16},
        {"type": "relu"},
        {"type": "Linear", "in_features": 16, "out_features": 10},
    ],
}


def with_adapters(model: dict, rank: int = 2) -> dict:
    """``model`` with each Linear a LoRALinear of rank ``rank``."""
    layers = [
        {**layer, "type": "LoRALinear", "lora_rank": rank} if layer["type"] == "Linear" else layer
        for layer in model["layers"]
    ]
    return {**model, "layers": layers}


def run_config(model: dict, init_from, **optimizer) -> dict:
    return {
        "model": model,
        "data": {"type": "digits", "layout": "flat"},
        "optimizer": {"type": "adam", "learning_rate": 0.05, **optimizer},
        "train": {"steps": 6, "batch_size": 32, "log_interval": 6},
        "checkpoint": {"init_from": str(init_from)},
    }


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A checkpoint of the MLP (no adapters) with weights a fresh build does not have."""
    folder = tmp_path_factory.mktemp("pretrained")
    model = nnx_plugins.build(MLP, rngs=nnx.Rngs(7))
    return nnx_plugins.save(model, folder / "checkpoint", step=100), model


def params(model, kinds=nnx.Param) -> dict:
    return {path: np.asarray(v.value) for path, v in nnx.state(model, kinds).flat_state()}


@pytest.fixture(scope="module")
def tuned(pretrained, tmp_path_factory):
    """The MLP with adapters fine-tuned from the pretrained checkpoint, adapters only."""
    checkpoint, _ = pretrained
    config = run_config(with_adapters(MLP), checkpoint, trainable=["LoRAParam"])
    return train(config, run_dir=tmp_path_factory.mktemp("tuned") / "run", progress=False)


def test_only_the_adapters_train_and_the_rest_stays_bit_identical(pretrained, tuned):
    _, base = pretrained
    frozen = nnx.All(nnx.Param, nnx.Not(LoRAParam))
    after = params(tuned.model, frozen)
    before = params(base)
    assert set(after) == set(before) and len(after) == 4
    for path, value in before.items():
        assert after[path].dtype == value.dtype and np.array_equal(after[path], value), path
    adapters = params(tuned.model, LoRAParam)
    assert len(adapters) == 4
    assert all(np.abs(v).max() > 0 for p, v in adapters.items() if p[-1] == "lora_b")
    # (the run's own checkpoint holds both: the base weights and the trained adapters)
    saved = nnx_plugins.load(tuned.checkpoint)
    kernel, lora_b = ("layers", 0, "kernel"), ("layers", 0, "lora", "lora_b")
    assert np.array_equal(params(saved, frozen)[kernel], before[kernel])
    assert np.array_equal(params(saved, LoRAParam)[lora_b], adapters[lora_b])


def test_fresh_adapters_change_nothing_at_the_start(pretrained, tmp_path):
    """With a learning rate of 0, the run's model computes what the pretrained one does."""
    checkpoint, base = pretrained
    config = run_config(with_adapters(MLP), checkpoint, learning_rate=0.0)
    config["train"]["steps"] = 1
    result = train(config, run_dir=tmp_path / "run", progress=False)
    x = np.linspace(-1, 1, 64 * 3, dtype=np.float32).reshape(3, 64)
    np.testing.assert_array_equal(result.model(x), base(x))


def test_a_relative_path_is_relative_to_the_config_file(pretrained, tmp_path):
    checkpoint, base = pretrained
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "weights").symlink_to(checkpoint, target_is_directory=True)
    config = run_config(MLP, "weights", learning_rate=0.0)
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert (
        main(
            [
                "train",
                str(folder / "config.yaml"),
                "--run-dir",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
        == 0
    )
    model = nnx_plugins.load(tmp_path / "run" / "checkpoints")
    assert all(np.array_equal(v, params(base)[p]) for p, v in params(model).items())
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["checkpoint"]["init_from"] == str(folder / "weights")


def test_a_resumed_run_starts_from_its_own_checkpoint(pretrained, tmp_path):
    """Resuming does not read init_from again (it may be gone): the run's checkpoint wins."""
    checkpoint, _ = pretrained
    copy = tmp_path / "copy"
    nnx_plugins.save(nnx_plugins.load(checkpoint), copy)
    config = run_config(MLP, copy)
    first = train(config, run_dir=tmp_path / "run", progress=False, stop_at=3)
    next(copy.iterdir()).unlink()  # (the pretrained checkpoint is now corrupt)
    resumed = train(config, run_dir=tmp_path / "run", progress=False, resume=True)
    assert (first.step, resumed.step) == (3, 6)
    whole = train(run_config(MLP, checkpoint), run_dir=tmp_path / "whole", progress=False)
    for path, value in params(whole.model).items():
        np.testing.assert_array_equal(params(resumed.model)[path], value)


def write_job(folder: pathlib.Path, model: dict, init_from) -> pathlib.Path:
    folder.mkdir(exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(run_config(model, init_from)), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (
            {
                **MLP,
                "layers": [
                    *MLP["layers"],
                    {"type": "Linear", "in_features": 10, "out_features": 10},
                ],
            },
            r"model\.layers\[3\]\.kernel: missing from the checkpoint \(the model has a Param",
        ),
        (
            {**MLP, "layers": MLP["layers"][:2]},
            r"model\.layers\[2\]\.kernel: unexpected entry in the checkpoint",
        ),
        (
            {
                **MLP,
                "layers": [
                    {"type": "Linear", "in_features": 64, "out_features": 8},
                    {"type": "relu"},
                    {"type": "Linear", "in_features": 8, "out_features": 10},
                ],
            },
            r"model\.layers\[0\]\.kernel: the checkpoint holds float32\(64, 16\) but the model "
            r"expects float32\(64, 8\)",
        ),
    ],
)
def test_a_checkpoint_that_does_not_fit_is_refused_before_a_step(
    pretrained, tmp_path, model, match
):
    checkpoint, _ = pretrained
    path = write_job(tmp_path / "job", model, checkpoint)
    with pytest.raises(CheckpointError, match=match) as raised:
        train(str(path), run_dir=tmp_path / "run", progress=False)
    assert str(raised.value).startswith(f"cannot start from checkpoint {checkpoint}:")
    first = raised.value.problems[0]
    assert first.startswith(f"{path}:") and "checkpoint.init_from: the run starts from" in first
    assert "but LoRAParam adapters (they start fresh)" in first
    assert not (tmp_path / "run").exists()  # (the refused run leaves no directory behind)


def test_a_refused_run_leaves_its_default_directory_name_free(pretrained, tmp_path, monkeypatch):
    """Without --run-dir the next attempt takes runs/<name> again, not runs/<name>-1; a folder
    that was there before is kept."""
    checkpoint, _ = pretrained
    monkeypatch.chdir(tmp_path)
    bad = write_job(tmp_path / "job", {**MLP, "layers": MLP["layers"][:2]}, checkpoint)
    with pytest.raises(CheckpointError, match=r"unexpected entry in the checkpoint"):
        train(str(bad), progress=False)
    assert (tmp_path / "runs").is_dir() and not list((tmp_path / "runs").iterdir())
    (tmp_path / "mine").mkdir()
    with pytest.raises(CheckpointError, match=r"unexpected entry in the checkpoint"):
        train(str(bad), run_dir=tmp_path / "mine", progress=False)
    assert (tmp_path / "mine" / "config.yaml").is_file()
    good = write_job(tmp_path / "job", MLP, checkpoint)
    assert train(str(good), progress=False).run_dir == pathlib.Path("runs") / "config"


def test_a_missing_checkpoint_is_refused_on_the_command_line(tmp_path, capsys):
    path = write_job(tmp_path / "job", MLP, "nowhere")
    argv = ["train", str(path), "--run-dir", str(tmp_path / "run"), "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"cannot start from checkpoint {tmp_path / 'job' / 'nowhere'}:" in err
    assert "no such directory." in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["", "  ", 3, ["a"]])
def test_init_from_must_name_a_path(value):
    config = {"model": MLP, "checkpoint": {"init_from": value}}
    with pytest.raises(ConfigError, match=r"checkpoint\.init_from: "):
        nnx_plugins.load_train_config(config)


def test_adapters_the_checkpoint_holds_are_loaded(tuned, tmp_path):
    """Starting from a checkpoint with adapters (a fine-tuned run's) loads them too."""
    again = train(
        {
            **run_config(with_adapters(MLP), tuned.checkpoint, learning_rate=0.0),
            "train": {"steps": 1, "batch_size": 32},
        },
        run_dir=tmp_path / "again",
        progress=False,
    )
    leaves = jax.tree_util.tree_leaves
    for a, b in zip(
        leaves(nnx.state(tuned.model, LoRAParam)), leaves(nnx.state(again.model, LoRAParam))
    ):
        np.testing.assert_array_equal(a, b)

"""nnx train FILE [KEY=VALUE...]: the run keeps its resolved config, which reproduces it alone."""

import json

import numpy as np
import yaml
from safetensors.numpy import load_file

from nnx_plugins.cli._main import main

BASE = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 64, out_features: 16}
    - {type: relu}
    - {type: Linear, in_features: "${model.layers[0].out_features}", out_features: 10}
optimizer: {type: adam, learning_rate: 0.01}
data: {type: digits, layout: flat}
train: {steps: 100, batch_size: 16, seed: 1}
"""


def tensors(run_dir):
    (checkpoint,) = sorted((run_dir / "checkpoints").iterdir())
    return checkpoint, load_file(checkpoint / "tensors.safetensors")


def test_a_run_saves_its_resolved_config_and_reproduces_from_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yaml").write_text(BASE)
    (tmp_path / "configs" / "run.yaml").write_text("include: [base.yaml]\ntrain: {seed: 2}\n")
    monkeypatch.chdir(tmp_path)
    argv = ["train", "configs/run.yaml", "--no-progress", "--run-dir", "first", "train.steps=3"]
    assert main([*argv, "model.layers[0].out_features=8"]) == 0
    saved = yaml.safe_load((tmp_path / "first" / "config.yaml").read_text())
    assert saved["train"]["steps"] == 3 and saved["train"]["seed"] == 2
    assert saved["model"]["layers"][2]["in_features"] == 8 and "include" not in saved
    assert saved["checkpoint"] == {
        "dir": "checkpoints",
        "interval": None,
        "keep": 3,
        "keep_best": None,
    }
    checkpoint, first = tensors(tmp_path / "first")
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    assert manifest["config"] == saved and manifest["step"] == 3

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.yaml").write_text((tmp_path / "first" / "config.yaml").read_text())
    monkeypatch.chdir(elsewhere)
    assert main(["train", "config.yaml", "--no-progress", "--run-dir", "again"]) == 0
    _, again = tensors(elsewhere / "again")
    assert sorted(first) == sorted(again)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    capsys.readouterr()


def test_a_bad_override_stops_training_before_anything_is_written(tmp_path, monkeypatch, capsys):
    (tmp_path / "base.yaml").write_text(BASE)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "base.yaml", "--no-progress", "train.step=3"]) == 1
    err = capsys.readouterr().err
    assert (
        "<override train.step=3>:1:7: train.step: unknown key 'step'. Did you mean 'steps'?" in err
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.yaml"]

"""Choosing the run directory: runs/<name>, then the first free runs/<name>-N; --resume takes
the run whose newest checkpoint was written last."""

import os
import pathlib

import pytest

import nnx_plugins
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._run_dir import LOCK_NAME, RunError, choose_run_dir
from nnx_plugins.training.checkpoints._save import step_directory

CONFIG = {"model": {"type": "Linear", "in_features": 2, "out_features": 2}}


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tiny.yaml"
    path.write_text("model: {type: Linear, in_features: 2, out_features: 2}\n")
    return load_train_config(path)


def checkpointed(run_dir, when):
    """``run_dir`` holding one checkpoint whose files date from ``when`` (seconds)."""
    model = nnx_plugins.build(CONFIG["model"])
    where = nnx_plugins.save(model, step_directory(run_dir / "checkpoints", 1), step=1)
    os.utime(where, (when, when))
    (run_dir / LOCK_NAME).touch()
    return run_dir


def test_the_first_free_number_is_taken(config):
    runs = pathlib.Path("runs")
    assert choose_run_dir(config, None, False) == runs / "tiny"
    (runs / "tiny").mkdir(parents=True)
    assert choose_run_dir(config, None, False) == runs / "tiny"  # (empty: free)
    (runs / "tiny" / "metrics.jsonl").touch()
    assert choose_run_dir(config, None, False) == runs / "tiny-1"
    (runs / "tiny-1").mkdir()
    (runs / "tiny-1" / "x").touch()
    (runs / "tiny-3").mkdir()
    (runs / "tiny-3" / "x").touch()
    assert choose_run_dir(config, None, False) == runs / "tiny-2"  # (-1 taken, -2 free)
    (runs / "tiny-2").symlink_to("nowhere")  # (a dangling link is not free either)
    assert choose_run_dir(config, None, False) == runs / "tiny-4"


def test_resume_takes_the_run_whose_newest_checkpoint_is_newest(config):
    runs = pathlib.Path("runs")
    assert choose_run_dir(config, None, True) == runs / "tiny"  # (none yet: the first)
    checkpointed(runs / "tiny", 1_000_000)
    checkpointed(runs / "tiny-2", 3_000_000)
    checkpointed(runs / "tiny-1", 2_000_000)
    (runs / "tiny-9").mkdir()  # (no checkpoint: never resumed)
    (runs / "tinyx").mkdir()
    assert choose_run_dir(config, None, True) == runs / "tiny-2"
    os.utime(runs / "tiny-1" / "checkpoints" / "step_00000001", (4_000_000, 4_000_000))
    assert choose_run_dir(config, None, True) == runs / "tiny-1"
    assert choose_run_dir(config, None, False) == runs / "tiny-3"


def test_a_config_from_python_runs_in_runs_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert choose_run_dir(load_train_config(CONFIG), None, False) == pathlib.Path("runs/run")


def test_an_explicit_run_directory_is_checked(config, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunError, match=r"--run-dir .*file is a file, not a directory"):
        choose_run_dir(config, tmp_path / "file", False)
    with pytest.raises(RunError, match=r"--run-dir is empty"):
        choose_run_dir(config, "", False)
    assert choose_run_dir(config, tmp_path / "new", False) == tmp_path / "new"

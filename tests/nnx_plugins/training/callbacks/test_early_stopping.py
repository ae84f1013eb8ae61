"""early_stopping: stops after `patience` evaluations without improvement; restore_best; resume."""

import json

import numpy as np
import pytest

import nnx_core as nnx
from nnx_plugins import ConfigError, read_manifest, train
from nnx_plugins.testing import check_callback
from nnx_plugins.training.callbacks._early_stopping import EarlyStopping

BASE = {
    "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    "optimizer": {"type": "adam", "learning_rate": 0.02},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 60, "batch_size": 32, "eval_interval": 5, "log_interval": 5},
}


def with_callbacks(*callbacks, **sections):
    return {**BASE, **sections, "callbacks": list(callbacks)}


def evaluations(run_dir, split="test"):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def test_it_stops_after_patience_evaluations_without_improvement(tmp_path):
    stop = {"type": "early_stopping", "metric": "test.loss", "min_delta": 100.0, "patience": 2}
    result = train(with_callbacks(stop), run_dir=tmp_path, progress=False)
    assert result.stopped_by == "early_stopping" and result.step == 15  # (evaluations at 5, 10, 15)
    assert [r["step"] for r in evaluations(tmp_path)] == [5, 10, 15]
    manifest = read_manifest(result.checkpoint)
    assert manifest["step"] == 15 and manifest["run"]["stopped_by"] == "early_stopping"
    again = train(with_callbacks(stop), run_dir=tmp_path, progress=False, resume=True)
    assert again.steps_trained == 0 and again.step == 15  # (a stopped run stays stopped)


def test_restore_best_puts_the_best_weights_back(tmp_path):
    # (mode max on the loss: the first evaluation is the "best", so the end restores it)
    stop = {
        "type": "early_stopping",
        "metric": "test.loss",
        "mode": "max",
        "patience": 3,
        "restore_best": True,
    }
    result = train(with_callbacks(stop), run_dir=tmp_path, progress=False)
    first = evaluations(tmp_path)[0]
    assert result.step == 20 and first["step"] == 5
    assert result.metrics["loss"] == pytest.approx(first["loss"], rel=1e-6)
    saved = nnx.state(result.model, nnx.Param)
    entries = read_manifest(result.checkpoint)["entries"]
    assert "early_stopping_best/kernel" in entries and saved is not None


def test_a_resumed_run_stops_where_an_uninterrupted_one_does(tmp_path):
    stop = {
        "type": "early_stopping",
        "metric": "test.accuracy",
        "mode": "max",
        "min_delta": 0.02,
        "patience": 2,
    }
    whole = train(with_callbacks(stop), run_dir=tmp_path / "whole", progress=False)
    config = with_callbacks(stop, checkpoint={"interval": 5})
    train(config, run_dir=tmp_path / "parts", progress=False, stop_at=10)
    resumed = train(config, run_dir=tmp_path / "parts", progress=False, resume=True)
    assert resumed.step == whole.step and resumed.stopped_by == whole.stopped_by
    np.testing.assert_allclose(resumed.model.kernel.value, whole.model.kernel.value, rtol=1e-6)


def test_a_metric_the_run_does_not_report_is_refused_before_training(tmp_path):
    stop = {"type": "early_stopping", "metric": "test.acuracy"}
    with pytest.raises(
        ConfigError,
        match=r"callbacks\[0\]\.metric: 'test.acuracy' is not a value this run reports\. Did you mean 'test.accuracy'\? Reported at each evaluation: test\.loss, test\.accuracy",
    ):
        train(with_callbacks(stop), run_dir=tmp_path, progress=False)
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    "arguments, match",
    [
        ({"metric": "loss"}, r"metric names a reported value as split\.key"),
        ({"patience": 0}, r"patience must be at least 1, got 0"),
        ({"min_delta": -1.0}, r"min_delta must be >= 0, got -1\.0"),
    ],
)
def test_bad_arguments(arguments, match):
    with pytest.raises(ValueError, match=match):
        EarlyStopping(**arguments)


def test_conforms():
    assert check_callback(
        "early_stopping", {"metric": "test.accuracy", "mode": "max"}
    ).watches() == {"metric": "test.accuracy"}

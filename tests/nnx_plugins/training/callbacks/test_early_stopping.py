"""early_stopping: stops after `patience` evaluations without improvement; restore_best; resume."""

import json
import sys

import numpy as np
import pytest

from nnx_plugins import ConfigError, SelectionWarning, evaluate, read_manifest, train
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


def evaluations(run_dir, split="val"):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def test_it_stops_after_patience_evaluations_without_improvement(tmp_path):
    stop = {"type": "early_stopping", "metric": "val.loss", "min_delta": 100.0, "patience": 2}
    result = train(with_callbacks(stop), run_dir=tmp_path, progress=False)
    assert result.stopped_by == "early_stopping" and result.step == 15  # (evaluations at 5, 10, 15)
    assert [r["step"] for r in evaluations(tmp_path)] == [5, 10, 15]
    assert [r["step"] for r in evaluations(tmp_path, "test")] == [
        15
    ]  # (the test split: at the end)
    manifest = read_manifest(result.checkpoint)
    assert manifest["step"] == 15 and manifest["run"]["stopped_by"] == "early_stopping"
    again = train(with_callbacks(stop), run_dir=tmp_path, progress=False, resume=True)
    assert again.steps_trained == 0 and again.step == 15  # (a stopped run stays stopped)


def test_restore_best_puts_the_best_weights_back_and_says_so(tmp_path, capsys):
    # (mode max on the loss: the first evaluation is the "best", so the end restores it)
    from rich.console import Console

    stop = {
        "type": "early_stopping",
        "metric": "val.loss",
        "mode": "max",
        "patience": 3,
        "restore_best": True,
    }
    console = Console(file=sys.stdout, width=1000)
    result = train(with_callbacks(stop), run_dir=tmp_path, progress=False, console=console)
    first = evaluations(tmp_path)[0]
    assert result.step == 20 and first["step"] == 5
    out = capsys.readouterr().out
    assert (
        "early_stopping: restored the weights of step 5, the best by val.loss "
        f"({first['loss']:.6g}, max); the last evaluation, at step 20, gave" in out
    )
    assert "step     20/60  test (the weights of step 5) loss" in out
    last = evaluations(tmp_path, "test")[-1]  # (the log's last line says whose weights)
    assert last["step"] == 20 and last["restored_step"] == 5
    assert result.metrics == {k: v for k, v in last.items() if k in result.metrics}
    entries = read_manifest(result.checkpoint)["entries"]
    assert "early_stopping_best/kernel" in entries
    assert evaluate(with_callbacks(stop), result.checkpoint)["loss"] == pytest.approx(
        result.metrics["loss"], rel=1e-6
    )


def test_the_final_evaluation_reaches_the_callbacks(tmp_path):
    # (the issue: restore_best restored step 950 though the last step, 1000, was better)
    stop = {"type": "early_stopping", "metric": "val.loss", "patience": 50, "restore_best": True}
    config = with_callbacks(stop, train={**BASE["train"], "steps": 12, "eval_interval": 5})
    result = train(config, run_dir=tmp_path, progress=False)
    seen = [r["step"] for r in evaluations(tmp_path)]
    assert seen == [5, 10, 12]  # (the last step, 12, is no multiple of 5: evaluated all the same)
    state = read_manifest(result.checkpoint)["run"]["callbacks"][0]["state"]
    best = min(evaluations(tmp_path), key=lambda r: r["loss"])
    assert state["best_step"] == best["step"] and state["last"] == evaluations(tmp_path)[-1]["loss"]


def test_a_resumed_run_stops_where_an_uninterrupted_one_does(tmp_path):
    stop = {
        "type": "early_stopping",
        "metric": "val.accuracy",
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
    stop = {"type": "early_stopping", "metric": "val.acuracy"}
    with pytest.raises(
        ConfigError,
        match=r"callbacks\[0\]\.metric: 'val.acuracy' is not a value this run reports\. Did you mean 'val.accuracy'\? Reported at each evaluation: val\.loss, val\.accuracy, test\.loss, test\.accuracy\.$",
    ):
        train(with_callbacks(stop), run_dir=tmp_path, progress=False)
    assert not (tmp_path / "checkpoints").exists()


def test_without_a_validation_split_val_is_not_reported(tmp_path):
    stop = {"type": "early_stopping"}
    config = with_callbacks(stop, data={**BASE["data"], "validation": 0})
    with pytest.raises(
        ConfigError,
        match=r"callbacks\[0\]\.metric: 'val.loss' is not a value this run reports\. Reported at "
        r"each evaluation: test\.loss, test\.accuracy \(the data has no validation split: give it "
        r"one, data\.validation, or watch test\.loss\)\.$",
    ):
        train(config, run_dir=tmp_path, progress=False)


def test_watching_the_test_split_works_with_a_warning(tmp_path):
    stop = {"type": "early_stopping", "metric": "test.loss", "min_delta": 100.0, "patience": 2}
    with pytest.warns(
        SelectionWarning,
        match=r"callbacks\[0\]\.metric watches test\.loss: the test split is then used to choose "
        r"the model, and its final figures are biased upwards; watch val\.loss instead\.",
    ):
        result = train(with_callbacks(stop), run_dir=tmp_path, progress=False)
    assert result.step == 15 and [r["step"] for r in evaluations(tmp_path, "test")] == [5, 10, 15]


def test_a_resume_watching_another_metric_starts_its_best_anew(tmp_path):
    # (a loss of ~0.3 is never compared with accuracies of ~0.9)
    loss = {"type": "early_stopping", "metric": "val.loss", "patience": 2}
    config = with_callbacks(loss, checkpoint={"interval": 10})
    train(config, run_dir=tmp_path, progress=False, stop_at=10)
    accuracy = {**loss, "metric": "val.accuracy", "mode": "max", "min_delta": 0.5}
    resumed = train(
        with_callbacks(accuracy, checkpoint={"interval": 10}),
        run_dir=tmp_path,
        progress=False,
        resume=True,
    )
    state = read_manifest(resumed.checkpoint)["run"]["callbacks"][0]["state"]
    assert state["metric"] == "val.accuracy" and state["best_step"] == 15
    assert resumed.step == 25 and resumed.stopped_by == "early_stopping"


@pytest.mark.parametrize(
    "saved",
    [
        {"metric": "val.loss", "mode": "min", "best": "0.5", "best_step": 5, "wait": 0},
        {"metric": "val.loss", "mode": "min", "best": [0.5], "best_step": 5, "wait": 0},
        {"metric": "val.loss", "mode": "min", "best": 0.5, "best_step": "5", "wait": 0},
        {"metric": "val.loss", "mode": "max", "best": 0.5, "best_step": 5, "wait": 3},
        {"best": 0.5, "best_step": 5, "wait": 3},
    ],
)
def test_a_state_of_another_metric_or_malformed_is_not_taken(saved):
    stop = EarlyStopping(metric="val.loss", patience=2)
    stop.restore(saved)
    assert (stop.best, stop.best_step, stop.wait) == (None, None, 0)
    assert stop.after_eval(None, 10, {"val": {"loss": 9.0}}) is False and stop.best == 9.0


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
        "early_stopping", {"metric": "val.accuracy", "mode": "max"}
    ).watches() == {"metric": "val.accuracy"}

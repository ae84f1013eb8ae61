"""nnx config validate agrees with nnx train: what train refuses before starting, validate
refuses with the same located message."""

import pytest

from nnx_plugins import ConfigError, DataError, SelectionWarning, train
from nnx_plugins.cli._main import main
from nnx_plugins.training._validate import check_config

MODEL = "model: {type: Linear, in_features: 64, out_features: 10}\n"
DIGITS = "data: {type: digits, layout: flat}\n"


def both(tmp_path, capsys, text):
    """(train's error message, validate's stderr) for the config ``text``."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises((ConfigError, DataError)) as info:
        train(path, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    assert main(["config", "validate", str(path)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and ": ok" not in captured.out
    return str(info.value), captured.err


@pytest.mark.parametrize(
    "text, message",
    [
        (
            MODEL + DIGITS + "metrics: [r2]\n",
            "c.yaml:3:11: metrics[0]: metric 'r2' reads predictions, targets, which the task "
            "'classification' does not give (it gives logits, labels, loss).",
        ),
        (
            MODEL + DIGITS + "callbacks: [{type: early_stopping, metric: val.acuracy}]\n",
            "callbacks[0].metric: 'val.acuracy' is not a value this run reports. "
            "Did you mean 'val.accuracy'?",
        ),
        (
            MODEL + DIGITS + "checkpoint: {keep_best: {metric: val.los}}\n",
            "checkpoint.keep_best.metric: 'val.los' is not a value this run reports. Did you "
            "mean 'val.loss'?",
        ),
        (
            "model: {type: Linear, in_features: 10, out_features: 10}\ndata: {type: diabetes}\n",
            "c.yaml:2:7: data: diabetes: classification needs one integer class index per "
            "example, but its targets are float32[] per example.",
        ),
        (
            MODEL + DIGITS + "loggers: [jsonl, {type: csv, file: config.yaml}]\n",
            "loggers[1].file: 'config.yaml' is the resolved config, which the run writes itself",
        ),
        (
            MODEL + DIGITS + "optimizer: {type: adam, learning_rate: 0.1, accumulate_steps: 200}\n",
            "optimizer.accumulate_steps: accumulate_steps 200 makes each update read 200",
        ),
        (
            MODEL
            + "data: {type: digits, layout: flat, validation: 0}\ncallbacks: [early_stopping]\n",
            "callbacks[0].metric: 'val.loss' is not a value this run reports.",
        ),
        (  # (a model without adapters: nothing would train)
            MODEL
            + DIGITS
            + "optimizer: {type: adam, learning_rate: 0.1, trainable: [LoRAParam]}\n",
            "c.yaml:3:56: optimizer.trainable: [LoRAParam] selects no Variable of the model, so "
            "the run would train nothing: the model holds Variables of the kinds Param. List the "
            "kinds to train (e.g. trainable: [Param]), or give the model Variables of the kinds "
            "listed (LoRAParam adapters: set lora_rank on its layers).",
        ),
    ],
)
def test_validate_refuses_what_train_refuses_with_the_same_message(tmp_path, capsys, text, message):
    refused, printed = both(tmp_path, capsys, text)
    assert message in refused and message in printed


def test_labels_outside_the_classes_are_found_by_validate(tmp_path, capsys):
    import numpy as np

    y = np.r_[np.zeros(40, int), [12], np.zeros(9, int)]
    np.savez(tmp_path / "d.npz", x=np.ones((50, 64)), y=y)
    text = MODEL + "data: {type: npz, path: d.npz}\ntrain: {batch_size: 8}\n"
    refused, printed = both(tmp_path, capsys, text)
    message = "data: d.npz: label y[40] is 12, outside the model's 10 classes (0 to 9)."
    assert message in refused and message in printed


def test_a_run_config_that_train_accepts_is_ok(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(
        MODEL + DIGITS + "callbacks: [{type: early_stopping, metric: val.accuracy, mode: max}]\n"
    )
    assert main(["config", "validate", str(path)]) == 0
    assert "ok (Linear); float32[2,64] -> float32[2,10] from the data (digits, layout flat)" in (
        capsys.readouterr().out
    )
    (tmp_path / "m.yaml").write_text(MODEL)  # (a model alone: no data assumed)
    assert main(["config", "validate", str(tmp_path / "m.yaml")]) == 0
    assert "shapes not checked" in capsys.readouterr().out


def test_watching_the_test_split_is_a_warning_at_its_place(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        MODEL + DIGITS + "checkpoint: {keep_best: {metric: test.accuracy, mode: max}}\n"
    )
    with pytest.warns(
        SelectionWarning, match=r"checkpoint\.keep_best\.metric watches test\.accuracy"
    ) as seen:
        check_config(path)
    assert seen[0].filename == str(path) and seen[0].lineno == 3

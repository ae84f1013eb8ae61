"""Making a run's parts from its config: the checks that need more than one section."""

import numpy as np
import pytest

from nnx_plugins import ConfigError, DataError, train
from nnx_plugins.training._assembly import assemble
from nnx_plugins.training._config import load_train_config

MODEL = {"type": "Linear", "in_features": 10, "out_features": 1}


def parts(**sections):
    return assemble(load_train_config({"model": MODEL, **sections}))


def test_the_task_metrics_and_the_config_metrics():
    made = parts(task={"type": "regression"}, data={"type": "diabetes"}, metrics=["mse"])
    assert list(made.metric_objects()) == ["loss", "mse", "mae", "r2"]
    assert list(made.train_metrics) == ["mae"]
    assert made.reported() == ["test.loss", "test.mse", "test.mae", "test.r2"]
    with_ema = parts(task="regression", data="diabetes", callbacks=["ema"])
    assert with_ema.splits() == ["test", "test_ema"] and "test_ema.r2" in with_ema.reported()


def test_a_metric_the_task_cannot_feed_is_located(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 10, out_features: 1}\n"
        "task: {type: regression}\n"
        "data: {type: diabetes}\n"
        "metrics: [mae, accuracy]\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"c\.yaml:4:16: metrics\[1\]: metric 'accuracy' reads logits, labels, which the task "
        r"'regression' does not give \(it gives predictions, targets, loss\)",
    ):
        assemble(load_train_config(path))


def test_keep_best_must_watch_a_reported_value():
    with pytest.raises(
        ConfigError,
        match=r"checkpoint\.keep_best\.metric: 'test\.r3' is not a value this run reports\. Did you mean 'test\.r2'",
    ):
        parts(task="regression", data="diabetes", checkpoint={"keep_best": {"metric": "test.r3"}})


def test_data_errors_are_located_at_their_argument(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 10, out_features: 1}\n"
        "data:\n  type: npz\n  path: missing.npz\n"
    )
    with pytest.raises(DataError, match=r"c\.yaml:4:9: data\.path: no such file '.*missing\.npz'"):
        assemble(load_train_config(path))
    np.savez(tmp_path / "bad.npz", x=np.ones((3, 2)), y=np.zeros(2, int))
    path.write_text(path.read_text().replace("missing.npz", "bad.npz"))
    with pytest.raises(
        DataError, match=r"c\.yaml:3:3: data: bad\.npz: 'x' has 3 examples but 'y' has 2"
    ):
        train(path, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # (refused before the run directory is made)

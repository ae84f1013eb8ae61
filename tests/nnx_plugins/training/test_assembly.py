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
    assert made.reported() == [
        *("val.loss", "val.mse", "val.mae", "val.r2"),
        *("test.loss", "test.mse", "test.mae", "test.r2"),
    ]
    with_ema = parts(task="regression", data="diabetes", callbacks=["ema"])
    assert with_ema.splits(final=False) == ["val", "val_ema"]
    assert with_ema.splits(final=True) == ["val", "val_ema", "test", "test_ema"]
    assert {"val_ema.r2", "test_ema.r2"} <= set(with_ema.reported())
    alone = parts(task="regression", data={"type": "diabetes", "validation": 0})
    assert alone.splits(final=False) == ["test"] and "val.loss" not in alone.reported()


def test_two_metrics_of_one_type_are_both_reported():
    made = parts(
        model={"type": "Linear", "in_features": 64, "out_features": 10},
        data={"type": "digits", "layout": "flat"},
        metrics=["accuracy", {"type": "top_k_accuracy", "k": 3}, {"type": "top_k_accuracy"}],
    )
    assert list(made.metric_objects()) == ["loss", "accuracy", "top_3_accuracy", "top_5_accuracy"]


@pytest.mark.parametrize(
    "metric, match",
    [
        (
            {"type": "test.same_key", "scale": 2.0},
            r"metrics\[1\]: metric 'test.same_key' \{'scale': 2\.0\} reports its value as "
            r"'same', as metric 'test.same_key' \{'scale': 1\.0\} does already",
        ),
        (
            {"type": "test.loss_key"},
            r"metrics\[1\]: metric 'test.loss_key' reports its value as 'loss', the name of "
            r"the run's own loss",
        ),
        (
            {"type": "test.bad_key"},
            r"metrics\[1\]: metric 'test.bad_key' reports its value as 'update', which cannot be "
            r"a report key",
        ),
    ],
)
def test_metrics_reported_under_one_key_are_refused(nnx_registry, metric, match):
    from nnx_core.metrics import Average
    from nnx_plugins import register_metric

    class Keyed(Average):
        requires = ("loss",)

        def __init__(self, scale: float = 1.0):
            super().__init__()
            self.scale = scale

    for name, key in (
        ("test.same_key", "same"),
        ("test.loss_key", "loss"),
        ("test.bad_key", "update"),
    ):
        register_metric(name)(type(f"Keyed{key.title()}", (Keyed,), {"key": key}))

    with pytest.raises(ConfigError, match=match):
        parts(
            task="regression",
            data="diabetes",
            metrics=[{"type": "test.same_key", "scale": 1.0}, metric],
        )


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
        match=r"checkpoint\.keep_best\.metric: 'val\.r3' is not a value this run reports\. Did you mean 'val\.r2'",
    ):
        parts(task="regression", data="diabetes", checkpoint={"keep_best": {"metric": "val.r3"}})


@pytest.mark.parametrize(
    "data, match",
    [
        (
            {"type": "diabetes", "validation": 1.0},
            r"data\.validation: expected a fraction in \[0, 1\) \(0: no validation split\), got 1\.0",
        ),
        ({"type": "diabetes", "validation": "a lot"}, r"data\.validation: expected a fraction"),
        ({"type": "diabetes", "validation": True}, r"data\.validation: expected a fraction"),
    ],
)
def test_a_validation_fraction_is_checked_where_it_is_written(data, match):
    with pytest.raises(ConfigError, match=match):
        parts(task="regression", data=data)


def test_a_streaming_dataset_has_no_fraction_to_hold_out(nnx_registry):
    from acme_layers.waves import Waves

    from nnx_plugins import register_dataset

    waves = {"type": "acme.waves", "validation": 0.2}
    with pytest.raises(
        DataError,
        match=r"<dict>: data\.validation: dataset 'acme\.waves' \(acme-layers 0\.1\.0\) gives a "
        r"validation split of its own \(val_batches\); remove data\.validation to use it",
    ):
        parts(task="regression", data=waves)
    assert parts(task="regression", data={"type": "acme.waves"}).validation

    @register_dataset("test.stream")
    class Stream(Waves):
        val_batches = None  # (no validation split)

    with pytest.raises(
        DataError,
        match=r"data\.validation: dataset 'test\.stream' \(registered in-process\) cannot hold "
        r"examples out \(it has no hold_out\(\)\) and gives no validation split of its own",
    ):
        parts(task="regression", data={"type": "test.stream", "validation": 0.2})
    assert not parts(task="regression", data={"type": "test.stream"}).validation


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


def test_every_built_in_part_says_what_it_is_in_one_plain_line():
    # (`nnx <kind>s show NAME` prints the first line of a part's docstring)
    from nnx_plugins.registry._registry import default_registry

    registry = default_registry()
    for kind in ("task", "dataset", "metric", "logger", "callback"):
        for name, cls in registry.load_kind(kind).items():
            if "." in name:
                continue
            line = (cls.__doc__ or "").strip().splitlines()[0]
            assert line.endswith(".") and "`" not in line and len(line) <= 96, (kind, name, line)

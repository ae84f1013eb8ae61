"""A pack's run parts misbehaving: each ends in one error naming the part, its distribution and
what it did (no traceback at the CLI), before anything starts where it can be known, and
with the checkpoints written before kept."""

import importlib.metadata as metadata
import json

import numpy as np
import pytest
import yaml

from nnx_plugins import ConfigError, RunPartError, train
from nnx_plugins.cli._main import main
from nnx_plugins.testing import fake_distribution, isolated_registry
from nnx_plugins.training._part_calls import PartLabel, check_batch, check_scalar

HOSTILE = fake_distribution(
    "hostile-pack",
    "2.3",
    entry_points={
        "nnx.loggers": {"hostile.boom": "tests.nnx_plugins.training.hostile_parts:BoomLogger"},
        "nnx.callbacks": {
            "hostile.flaky": "tests.nnx_plugins.training.hostile_parts:FlakyCallback"
        },
        "nnx.datasets": {
            "hostile.shifty": "tests.nnx_plugins.training.hostile_parts:Shifty",
            "hostile.broken": "tests.nnx_plugins.training.hostile_parts:Broken",
        },
        "nnx.metrics": {
            "hostile.per_class": "tests.nnx_plugins.training.hostile_parts:PerClassMetric"
        },
        "nnx.tasks": {
            "hostile.per_example": "tests.nnx_plugins.training.hostile_parts:PerExampleLoss"
        },
    },
)

CONFIG = {
    "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 20, "batch_size": 32, "eval_interval": 5, "log_interval": 5},
    "checkpoint": {"interval": 5},
}


@pytest.fixture(autouse=True)
def hostile_registry():
    installed = [d for d in metadata.distributions() if d.metadata["Name"] == "nnx-jax"]
    with isolated_registry(distributions=[*installed, HOSTILE]) as registry:
        yield registry


def cli_train(tmp_path, config, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    status = main(["train", str(path), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    return status, capsys.readouterr().err


def test_a_logger_raising_mid_run_is_named_and_the_checkpoints_before_are_kept(tmp_path, capsys):
    config = {**CONFIG, "loggers": ["jsonl", {"type": "hostile.boom", "at": 10}]}
    status, err = cli_train(tmp_path, config, capsys)
    assert status == 1 and "Traceback" not in err
    assert (
        "logger 'hostile.boom' at loggers[1] (hostile-pack 2.3) failed in write(dict): "
        "RuntimeError: the log server went away. Report it to the authors of hostile-pack, or "
        "leave the part out." in err
    )
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_00000005"]


def test_a_callback_raising_is_named(tmp_path):
    config = {**CONFIG, "callbacks": [{"type": "hostile.flaky", "at": 10}]}
    with pytest.raises(
        RunPartError,
        match=r"^callback 'hostile.flaky' at callbacks\[0\] \(hostile-pack 2\.3\) failed in "
        r"after_eval\(run, 10, dict\): KeyError: 'val'",
    ) as info:
        train(config, run_dir=tmp_path, progress=False)
    assert info.value.plugin.distribution == "hostile-pack" and info.value.path == ("callbacks", 0)
    assert (tmp_path / "checkpoints" / "step_00000005").is_dir()


def test_a_dataset_whose_batches_change_shape_is_named(tmp_path, capsys):
    config = {**CONFIG, "data": {"type": "hostile.shifty", "at": 7}}
    status, err = cli_train(tmp_path, config, capsys)
    assert status == 1 and "Traceback" not in err
    assert (
        "dataset 'hostile.shifty' (hostile-pack 2.3) gave the batch of step 7 whose inputs are "
        "float32[32,63], but its describe() promised float32[32, 64]" in err
    )
    assert (tmp_path / "run" / "checkpoints" / "step_00000005").is_dir()


def test_a_metric_giving_a_vector_is_refused_before_training(tmp_path):
    config = {**CONFIG, "metrics": ["hostile.per_class"]}
    with pytest.raises(
        ConfigError,
        match=r"<dict>: metrics\[0\]: metric 'hostile.per_class' at metrics\[0\] \(hostile-pack "
        r"2\.3\) gives float32\[10\] from compute\(\) for 'hostile.per_class'; a metric reports "
        r"one number",
    ):
        train(config, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_task_whose_loss_is_not_a_number_is_refused_before_training(tmp_path):
    config = {**CONFIG, "task": {"type": "hostile.per_example"}}
    with pytest.raises(
        ConfigError,
        match=r"<dict>: task: task 'hostile.per_example' \(hostile-pack 2\.3\) returned a loss of "
        r"float32\[2\] from loss\(outputs, batch\); the loss must be one float number",
    ):
        train(config, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_dataset_whose_describe_raises_in_train_and_in_validate(tmp_path, capsys):
    config = {**CONFIG, "data": {"type": "hostile.broken"}}
    status, err = cli_train(tmp_path, config, capsys)
    message = (
        "data: dataset 'hostile.broken' (hostile-pack 2.3) failed in describe(): "
        "ZeroDivisionError: division by zero"
    )
    assert status == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
    assert main(["config", "validate", str(tmp_path / "c.yaml")]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_check_batch_names_what_is_wrong():
    import jax

    from nnx_plugins.training.data._base import DataInfo

    info = DataInfo(
        "toy", jax.ShapeDtypeStruct((3,), "float32"), jax.ShapeDtypeStruct((), "int32"), "toy"
    )
    label = PartLabel("dataset", "digits", ("data",))
    good = {"inputs": np.zeros((4, 3), np.float32), "targets": np.zeros(4, np.int32)}
    assert check_batch(label, good, info, rows=4, what="b")["inputs"].shape == (4, 3)
    with pytest.raises(
        RunPartError, match=r"gave b that is not a dict with 'inputs' and 'targets'"
    ):
        check_batch(label, [1, 2], info, rows=4, what="b")
    with pytest.raises(
        RunPartError, match=r"gave b whose targets are int32\[3\], but its describe"
    ):
        check_batch(label, {**good, "targets": np.zeros(3, np.int32)}, info, rows=4, what="b")
    with pytest.raises(RunPartError, match=r"whose inputs are int32\[4,3\], but its describe\(\) "):
        check_batch(label, {**good, "inputs": np.zeros((4, 3), np.int32)}, info, rows=4, what="b")
    with pytest.raises(RunPartError, match=r"reported 'x' as 'abc': compute\(\) must return one"):
        check_scalar(label, "x", "abc")
    assert check_scalar(label, "x", np.float32(0.5)) == 0.5


def test_a_part_raising_an_error_of_the_project_passes_it_unchanged():
    from nnx_plugins import DataError

    label = PartLabel("dataset", "digits", ("data",))
    with pytest.raises(DataError, match=r"^bad data$"):
        with label.calling("batch(0, 8, 0)"):
            raise DataError("bad data")
    assert json.dumps(str(label)).startswith("\"dataset 'digits' (nnx-jax")


def in_process_callback(name, **methods):
    from nnx_plugins import Callback, register_callback

    register_callback(name)(type(name.replace(".", "_"), (Callback,), methods))
    return {**CONFIG, "callbacks": [name]}


@pytest.mark.parametrize(
    "methods, match",
    [
        (
            {"after_eval": lambda self, run, step, results: np.array([True, False])},
            r"callback 'test\.cb' at callbacks\[0\] \(registered in-process\) failed in "
            r"after_eval\(\.\.\.\): its answer: ValueError: The truth value",
        ),
        (
            {"nodes": lambda self: {"kept": 3}},
            r"callback 'test\.cb' .* gave int as the model 'kept' of nodes\(\); a callback's "
            r"models must be nnx Modules",
        ),
        (
            {"state": lambda self: {"when": object()}},
            r"callback 'test\.cb' .* gave a state\(\) that JSON cannot hold \(TypeError",
        ),
        (
            {"watches": lambda self: ["val.loss"]},
            r"callbacks: callback 'test\.cb' .* failed in watches\(\): ValueError",
        ),
    ],
)
def test_a_callback_breaking_its_promises_is_named(nnx_registry, tmp_path, methods, match):
    config = in_process_callback("test.cb", **methods)
    with pytest.raises((RunPartError, ConfigError), match=match):
        train(config, run_dir=tmp_path, progress=False)


def test_a_dataset_breaking_its_promises_is_named(nnx_registry, tmp_path):
    from nnx_plugins import register_dataset
    from nnx_plugins.training.data._bundled import Digits

    @register_dataset("test.no_epochs")
    class NoEpochs(Digits):
        def __init__(self):
            super().__init__(layout="flat")

        def steps_per_epoch(self, batch_size):
            return 0

    @register_dataset("test.empty_val")
    class EmptyVal(NoEpochs):
        def steps_per_epoch(self, batch_size):
            return Digits.steps_per_epoch(self, batch_size)

        def val_batches(self, batch_size):
            return iter(())

    with pytest.raises(
        RunPartError, match=r"dataset 'test\.no_epochs' .* gave 0 from steps_per_epoch\(32\)"
    ):
        train({**CONFIG, "data": "test.no_epochs"}, run_dir=tmp_path / "a", progress=False)
    with pytest.raises(
        RunPartError,
        match=r"dataset 'test\.empty_val' .* gave no batch from val_batches\(1024\): a split the "
        r"run evaluates needs at least one example",
    ):
        train({**CONFIG, "data": "test.empty_val"}, run_dir=tmp_path / "b", progress=False)


def test_a_task_whose_output_check_raises_is_named(nnx_registry, tmp_path, capsys):
    from nnx_plugins import register_task
    from nnx_plugins.training.tasks._classification import Classification

    @register_task("test.picky")
    class Picky(Classification):
        def check_output(self, output, info):
            raise AttributeError("'NoneType' object has no attribute 'shape'")

    config = {**CONFIG, "task": "test.picky"}
    with pytest.raises(
        RunPartError,
        match=r"task 'test\.picky' \(registered in-process\) failed in check_output\(output, "
        r"info\): AttributeError",
    ):
        train(config, run_dir=tmp_path / "run", progress=False)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert main(["config", "validate", str(tmp_path / "c.yaml")]) == 1
    assert "task 'test.picky' (registered in-process) failed in check_output" in (
        capsys.readouterr().err
    )

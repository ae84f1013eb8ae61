"""The built-in loggers: what each writes, how a resume truncates it, TensorBoard reading it back."""

import csv
import json

import pytest

from nnx_plugins.testing import check_logger
from nnx_plugins.training.loggers._base import Logger
from nnx_plugins.training.loggers._csv import CsvLogger
from nnx_plugins.training.loggers._jsonl import JsonlLogger, read_records
from nnx_plugins.training.loggers._tensorboard import TensorBoardLogger

RECORDS = [
    {"step": 10, "split": "train", "loss": 1.5, "accuracy": 0.5},
    {"step": 20, "split": "train", "loss": 1.0, "accuracy": 0.7},
    {"step": 20, "split": "test", "loss": 1.1, "accuracy": 0.65},
    {"step": 30, "split": "train", "loss": 0.5, "accuracy": 0.9},
]


def log(logger, run_dir, start, records):
    logger.open(run_dir, start)
    for record in records:
        logger.write(dict(record))
    logger.close()


@pytest.mark.parametrize("name", ["jsonl", "csv", "tensorboard"])
def test_every_builtin_logger_conforms(name, tmp_path):
    assert check_logger(name, run_dir=tmp_path / "run")


def test_jsonl_keeps_the_records_up_to_the_resumed_step(tmp_path):
    log(JsonlLogger(), tmp_path, 0, RECORDS)
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 40, "spl')  # (a torn line of a killed run)
    log(JsonlLogger(), tmp_path, 20, [RECORDS[3]])
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == RECORDS
    assert read_records(tmp_path / "metrics.jsonl", start=10) == RECORDS[:1]


def test_csv_is_a_long_table_resumed_like_jsonl(tmp_path):
    log(CsvLogger(), tmp_path, 0, RECORDS)
    log(CsvLogger(), tmp_path, 20, [RECORDS[3]])
    with open(tmp_path / "metrics.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["step", "split", "name", "value"]
    assert rows[1:3] == [["10", "train", "loss", "1.5"], ["10", "train", "accuracy", "0.5"]]
    assert [r[0] for r in rows[1:]] == ["10", "10", "20", "20", "20", "20", "30", "30"]


def test_tensorboard_event_files_are_read_by_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log(TensorBoardLogger(), tmp_path, 0, RECORDS)
    log(TensorBoardLogger(), tmp_path, 20, [{"step": 30, "split": "train", "loss": 0.25}])
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {
        "train/loss",
        "train/accuracy",
        "test/loss",
        "test/accuracy",
    }
    losses = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert losses == [(10, 1.5), (20, 1.0), (30, 0.25)]  # (the first run's step 30 was purged)


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: CsvLogger(file="../out.csv"),
            r"file must be a plain file name inside the run directory",
        ),
        (
            lambda: TensorBoardLogger(dir="/tmp/elsewhere"),
            r"dir must be a folder inside the run directory",
        ),
        (
            lambda: TensorBoardLogger(dir="a/../../b"),
            r"dir must be a folder inside the run directory",
        ),
    ],
)
def test_loggers_stay_inside_the_run_directory(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_tensorboard_without_its_writer_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboardX" else real(name, *a),
    )
    with pytest.raises(ValueError, match=r"pip install 'nnx-jax\[tensorboard\]'"):
        TensorBoardLogger()


def test_a_logger_must_write():
    with pytest.raises(NotImplementedError, match=r"Logger does not define write\(\)"):
        Logger().write({})


@pytest.mark.parametrize("logger", [JsonlLogger(), CsvLogger()])
def test_writing_before_open_is_a_programming_error(logger):
    with pytest.raises(RuntimeError, match=r"Logger\.write before open\(\)"):
        logger.write({"step": 1, "split": "train"})


@pytest.mark.parametrize(
    "body, cause",
    [
        ("raise TypeError('Descriptors cannot be created directly')", "TypeError: Descriptors"),
        ("raise SystemExit(3)", "SystemExit: 3"),
        ("raise ImportError('libfoo.so: cannot open shared object file')", "ImportError: libfoo"),
    ],
)
def test_a_tensorboardx_that_fails_to_import_is_reported_before_the_run(
    tmp_path, monkeypatch, capsys, body, cause
):
    import sys

    from nnx_plugins.cli._main import main

    broken = tmp_path / "site" / "tensorboardX"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(body + "\n")
    for name in [n for n in sys.modules if n == "tensorboardX" or n.startswith("tensorboardX.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: {type: Linear, in_features: 64, out_features: 10}\n"
        "data: {type: digits, layout: flat}\n"
        "train: {steps: 2}\n"
        "loggers: [jsonl, tensorboard]\n"
    )
    message = (
        "loggers[1]: logger 'tensorboard' refused it: the tensorboard logger writes through "
        f"tensorboardX, which is installed but fails to import ({cause}"
    )
    assert main(["config", "validate", str(config)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert main(["train", str(config), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not (tmp_path / "run").exists()

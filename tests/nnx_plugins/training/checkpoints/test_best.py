"""checkpoint.keep_best: every evaluation counts (the last included), a best of another metric
is never compared, and a malformed best.json is replaced, as its docstring promises."""

import json
import sys

import pytest

from nnx_plugins import train
from nnx_plugins.training.checkpoints._best import read_best, write_best

CONFIG = {
    "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    "optimizer": {"type": "adam", "learning_rate": 0.02},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 22, "batch_size": 32, "eval_interval": 5, "log_interval": 5},
    "checkpoint": {"interval": 5, "keep": 1, "keep_best": {"metric": "val.loss"}},
}


def val_rows(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == "val"]


def best(run_dir):
    return json.loads((run_dir / "checkpoints" / "best.json").read_text())


def test_every_evaluation_counts_the_last_included(tmp_path):
    train(CONFIG, run_dir=tmp_path, progress=False)
    rows = val_rows(tmp_path)
    assert [r["step"] for r in rows] == [5, 10, 15, 20, 22]
    winner = min(rows, key=lambda r: r["loss"])
    assert best(tmp_path)["step"] == winner["step"] and best(tmp_path)["value"] == winner["loss"]
    assert (tmp_path / "checkpoints" / best(tmp_path)["directory"]).is_dir()


def test_a_resume_watching_another_metric_chooses_its_best_anew(tmp_path, capsys):
    from rich.console import Console

    train(CONFIG, run_dir=tmp_path, progress=False, stop_at=10)
    assert best(tmp_path)["metric"] == "val.loss"
    accuracy = {
        **CONFIG,
        "checkpoint": {
            **CONFIG["checkpoint"],
            "keep_best": {"metric": "val.accuracy", "mode": "max"},
        },
    }
    console = Console(file=sys.stdout, width=1000)
    train(accuracy, run_dir=tmp_path, progress=False, resume=True, console=console)
    assert "by val.loss (min); this run keeps the best by val.accuracy (max), chosen anew" in (
        capsys.readouterr().out
    )
    later = [r for r in val_rows(tmp_path) if r["step"] > 10]
    winner = max(later, key=lambda r: r["accuracy"])
    assert best(tmp_path)["metric"] == "val.accuracy" and best(tmp_path)["step"] == winner["step"]


@pytest.mark.parametrize(
    "value",
    ['"0.1"', "[0.1]", '{"v": 0.1}', "NaN", "true", "null"],
)
def test_a_malformed_best_json_is_replaced_by_a_new_best(tmp_path, value):
    train(CONFIG, run_dir=tmp_path, progress=False, stop_at=10)
    path = tmp_path / "checkpoints" / "best.json"
    record = best(tmp_path)
    path.write_text(path.read_text().replace(json.dumps(record["value"]), value))
    assert read_best(tmp_path / "checkpoints") is None
    train(CONFIG, run_dir=tmp_path, progress=False, resume=True)
    assert isinstance(best(tmp_path)["value"], float) and best(tmp_path)["step"] > 10


@pytest.mark.parametrize(
    "record",
    [
        {"step": "5", "directory": "step_00000005", "value": 0.1},
        {"step": 5, "directory": "../../etc", "value": 0.1},
        {"step": 5, "directory": "step_00000006", "value": 0.1},
        {"step": -5, "directory": "step_-0000005", "value": 0.1},
        {"step": 5, "directory": "step_00000005", "value": 0.1, "mode": "most"},
        [1, 2, 3],
    ],
)
def test_read_best_refuses_records_that_lie(tmp_path, record):
    (tmp_path / "best.json").write_text(json.dumps(record))
    assert read_best(tmp_path) is None
    write_best(tmp_path, step=5, metric="val.loss", mode="min", value=0.1)
    assert read_best(tmp_path, metric="val.loss", mode="min")["step"] == 5
    assert read_best(tmp_path, metric="val.loss", mode="max") is None

"""ema: an average of the weights, evaluated beside them and checkpointed; exact on resume."""

import json

import numpy as np
import pytest

from nnx_plugins import read_manifest, train
from nnx_plugins.testing import check_callback
from nnx_plugins.training.callbacks._ema import Ema

CONFIG = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Linear", "in_features": 64, "out_features": 32},
            {"type": "BatchNorm", "num_features": 32},
            {"type": "relu"},
            {"type": "Linear", "in_features": 32, "out_features": 10},
        ],
    },
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 40, "batch_size": 32, "eval_interval": 20},
    "callbacks": [{"type": "ema", "decay": 0.9}],
    "checkpoint": {"interval": 20},
}


def test_the_average_is_evaluated_and_checkpointed(tmp_path):
    result = train(CONFIG, run_dir=tmp_path, progress=False)
    splits = [
        json.loads(line)["split"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    # (val and val_ema at steps 20 and 40; the test splits at the end)
    assert splits.count("val_ema") == 2 and splits.count("test_ema") == splits.count("test") == 1
    entries = read_manifest(result.checkpoint)["entries"]
    assert {"ema/layers/0/kernel", "ema/layers/1/mean"} <= set(entries)


def test_the_average_resumes_exactly(tmp_path):
    whole = train(CONFIG, run_dir=tmp_path / "whole", progress=False)
    train(CONFIG, run_dir=tmp_path / "parts", progress=False, stop_at=20)
    resumed = train(CONFIG, run_dir=tmp_path / "parts", progress=False, resume=True)
    from safetensors.numpy import load_file

    a = load_file(str(whole.checkpoint / "tensors.safetensors"))
    b = load_file(str(resumed.checkpoint / "tensors.safetensors"))
    assert not np.allclose(a["ema/layers/0/kernel"], a["model/layers/0/kernel"])
    np.testing.assert_allclose(a["ema/layers/0/kernel"], b["ema/layers/0/kernel"], rtol=1e-6)


def test_early_stopping_may_watch_the_average(tmp_path):
    config = {
        **CONFIG,
        "train": {**CONFIG["train"], "eval_interval": 10},
        "callbacks": [
            {"type": "ema"},
            {
                "type": "early_stopping",
                "metric": "val_ema.loss",
                "patience": 1,
                "min_delta": 100.0,
            },
        ],
    }
    assert train(config, run_dir=tmp_path, progress=False).stopped_by == "early_stopping"


def test_two_averages_are_both_kept_under_names_of_their_own(tmp_path):
    config = {
        **CONFIG,
        "train": {**CONFIG["train"], "steps": 20},
        "callbacks": [
            {"type": "ema", "decay": 0.5},
            {"type": "ema", "decay": 0.99},
            {"type": "early_stopping", "metric": "val_ema_1.loss", "patience": 5},
        ],
    }
    result = train(config, run_dir=tmp_path, progress=False)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    by_split = {r["split"]: r["loss"] for r in records if r["split"] != "train"}
    assert set(by_split) == {"val", "val_ema_0", "val_ema_1", "test", "test_ema_0", "test_ema_1"}
    assert by_split["val_ema_0"] != by_split["val_ema_1"]
    entries = read_manifest(result.checkpoint)["entries"]
    a, b = entries["ema_0/layers/0/kernel"], entries["ema_1/layers/0/kernel"]
    assert a["shape"] == b["shape"] and "ema/layers/0/kernel" not in entries


def test_decay_is_checked():
    with pytest.raises(ValueError, match=r"decay must be in \[0, 1\), got 1\.0"):
        Ema(decay=1.0)
    assert check_callback("ema", {"decay": 0.5}).decay == 0.5

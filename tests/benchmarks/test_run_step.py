"""benchmarks/run_step.py runs: the step of `nnx train` in both precisions (no timing asserted)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import run_step  # noqa: E402


def test_both_precisions_build_the_run_and_step(tmp_path, monkeypatch):
    monkeypatch.setitem(
        run_step.MODELS,
        "tiny",
        {
            "model": {"type": "Linear", "in_features": 64, "out_features": 10},
            "data": {"type": "digits", "layout": "flat"},
            "train": {"batch_size": 16},
        },
    )
    for precision in ("float32", "bfloat16"):
        plan, model, optimizer, place = run_step.make_run("tiny", precision, str(tmp_path))
        assert plan.config.sections["train"].precision == precision
        assert model.dtype == (None if precision == "float32" else np.dtype(precision))
        seconds, feeding = run_step.runner(plan, model, optimizer, place)(2)
        assert 0 <= feeding <= seconds
    found = run_step.measure("tiny", steps=2, repeats=1)
    assert set(found) == {"float32", "bfloat16"} and all(t > 0 for t, _ in found.values())

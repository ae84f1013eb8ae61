"""benchmarks/transformer_step.py runs: a tiny decoder, the three steps agree (no timing)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import _gpt  # noqa: E402
import transformer_step  # noqa: E402

TINY = _gpt.Config(layers=1, width=16, heads=2, seq=8, batch=2, vocab=32)


def test_three_steps_agree_on_equal_parameters_and_run_every_variant():
    pure = transformer_step.check_losses(TINY)
    first, second, steps = transformer_step.first_calls(TINY, pure, rounds=1)
    assert set(steps) == set(transformer_step.VARIANTS)
    assert all(len(first[name]) == len(second[name]) == 1 for name in steps)


def test_losses_that_differ_stop_the_benchmark(monkeypatch):
    monkeypatch.setattr(_gpt, "copy_into_flax", lambda pure, model: None)  # flax keeps its own
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        transformer_step.check_losses(TINY)

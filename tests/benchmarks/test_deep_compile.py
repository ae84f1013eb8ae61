"""benchmarks/deep_compile.py runs (no timing asserted): a first-call process reports its
times, loss and device peak memory (None where the device reports none)."""

import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import _gpt  # noqa: E402
import deep_compile  # noqa: E402


def test_a_first_call_process_reports_times_loss_and_peak_memory():
    cfg = _gpt.Config(layers=2, width=16, heads=2, seq=8, batch=2, vocab=32)
    found = deep_compile.child("ours-repeat", cfg)
    assert found["first_wall"] > found["second_wall"] > 0
    assert found["loss"] > 0
    stats = jax.devices()[0].memory_stats()
    if stats and "peak_bytes_in_use" in stats:
        assert found["peak_bytes"] >= found["peak_above_state"] > 0
    else:
        assert found["peak_bytes"] is None and found["peak_above_state"] is None

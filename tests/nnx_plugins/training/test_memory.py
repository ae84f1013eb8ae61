"""The memory estimate of a run, and the refusal of runs that cannot fit."""

import optax
import pytest

from nnx_plugins import ConfigError, train
from nnx_plugins.config._shapes import check_model
from nnx_plugins.training import _memory
from nnx_plugins.training._memory import (
    MemoryEstimate,
    available_memory,
    check_memory,
    estimate_memory,
    human_bytes,
    trainable_kinds,
)

MLP = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Linear", "in_features": 64, "out_features": 32},
            {"type": "BatchNorm", "num_features": 32},
            {"type": "Linear", "in_features": 32, "out_features": 10},
        ],
    },
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 2, "batch_size": 16},
}


def test_the_estimate_counts_variables_gradients_and_optimizer_state():
    state = check_model(MLP).state
    params = 4 * (64 * 32 + 32 + 32 + 32 + 32 * 10 + 10)  # kernels, biases, BatchNorm scale/bias
    stats = 4 * 2 * 32  # BatchNorm mean and var
    adam = estimate_memory(state, optax.adam(1e-3), trainable_kinds(["Param"]))
    assert adam == MemoryEstimate(params + stats, params, 2 * params + 4)  # mu, nu, count
    sgd = estimate_memory(state, optax.sgd(1e-3), trainable_kinds(["Param", "BatchStat"]))
    assert (sgd.gradient_bytes, sgd.optimizer_bytes) == (params + stats, 0)
    assert adam.total_bytes == 4 * params + stats + 4


def test_available_memory_is_positive():
    available, what = available_memory()
    assert available > 0 and what in ("available host memory",) or "device" in what


def test_a_run_over_the_limit_is_refused_unless_allowed(monkeypatch, tmp_path):
    monkeypatch.setattr(_memory, "available_memory", lambda: (1000, "available host memory"))
    with pytest.raises(
        ConfigError,
        match=r"<dict>: model: training this model needs at least 38\.9 KB \(9\.9 KB of Variables, .* but only "
        r"1000 B of available host memory is free",
    ):
        train(MLP, run_dir=tmp_path / "refused", progress=False)
    assert not (tmp_path / "refused").exists()
    result = train(MLP, run_dir=tmp_path / "allowed", progress=False, allow_large=True)
    assert result.step == 2


def test_check_memory_passes_what_fits():
    config = check_model(MLP).config
    small = MemoryEstimate(1, 1, 1)
    assert check_memory(small, config, allow_large=False) is small


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [(0, "0 B"), (1536, "1.5 KB"), (5 * 1024**3, "5.0 GB"), (2**50, "1024.0 TB")],
)
def test_human_bytes(nbytes, text):
    assert human_bytes(nbytes) == text

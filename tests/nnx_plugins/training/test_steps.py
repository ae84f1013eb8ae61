"""The jitted steps: gradient accumulation equals one big batch; the first non-finite step."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx
import nnx_plugins
from nnx_plugins import train
from nnx_plugins.training._steps import all_finite, make_steps
from nnx_plugins.training.tasks._classification import Classification

MLP = {
    "type": "Sequential",
    "layers": [
        {"type": "Linear", "in_features": 64, "out_features": 32},
        {"type": "relu"},
        {"type": "Linear", "in_features": 32, "out_features": 10},
    ],
}


def params(model):
    return [np.asarray(v.value) for _, v in nnx.state(model, nnx.Param).flat_state()]


def run(tmp_path, name, batch_size, accumulate):
    config = {
        "model": MLP,
        "optimizer": {"type": "adam", "learning_rate": 0.01, "accumulate_steps": accumulate},
        "data": {"type": "digits", "layout": "flat"},
        "train": {"steps": 25, "batch_size": batch_size, "seed": 4},
    }
    return train(config, run_dir=tmp_path / name, progress=False)


def test_accumulated_micro_batches_reach_the_parameters_of_one_big_batch(tmp_path):
    big = run(tmp_path, "big", 32, 1)
    accumulated = run(tmp_path, "accumulated", 8, 4)
    for a, b in zip(params(big.model), params(accumulated.model)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert accumulated.step == big.step == 25  # (train.steps counts updates)
    different = run(tmp_path, "small", 8, 1)
    assert not np.allclose(params(different.model)[0], params(big.model)[0], atol=1e-3)


def test_batch_norm_statistics_move_through_every_micro_batch():
    model = nnx_plugins.build(
        {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": 2, "out_features": 2},
                {"type": "BatchNorm", "num_features": 2, "momentum": 0.5},
            ],
        }
    )
    optimizer = nnx.Optimizer(model, optax.sgd(0.0), wrt=nnx.Param)
    steps = make_steps(Classification(), {}, None, accumulate=2, key=("bn-test",))
    batch = {
        "inputs": np.arange(8, dtype=np.float32).reshape(4, 2),
        "targets": np.zeros(4, np.int32),
    }
    steps.train(model, optimizer, batch, jnp.int32(0), np.int32(1))
    reference = nnx_plugins.build(
        {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": 2, "out_features": 2},
                {"type": "BatchNorm", "num_features": 2, "momentum": 0.5},
            ],
        }
    )
    for rows in (slice(0, 2), slice(2, 4)):  # (two forward passes in training mode, in order)
        reference(jnp.asarray(batch["inputs"][rows]))
    np.testing.assert_allclose(
        model.layers[1].mean.value, reference.layers[1].mean.value, rtol=1e-6
    )


def test_the_first_non_finite_step_is_kept_on_the_device():
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    steps = make_steps(Classification(), {}, None, accumulate=1, key=("nan-test",))
    good = {"inputs": np.ones((2, 2), np.float32), "targets": np.zeros(2, np.int32)}
    bad = {"inputs": np.full((2, 2), np.nan, np.float32), "targets": np.zeros(2, np.int32)}
    flag = jnp.int32(0)
    for step, batch in enumerate((good, bad, good, bad), 1):
        _, _, flag = steps.train(model, optimizer, batch, flag, np.int32(step))
        assert isinstance(flag, jax.Array)
    assert int(flag) == 2
    assert not all_finite(model, optimizer)


@pytest.mark.parametrize("value, finite", [(1.0, True), (np.inf, False), (np.nan, False)])
def test_all_finite(value, finite):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 2})
    model.bias.value = model.bias.value.at[0].set(value)
    assert all_finite(model) is finite

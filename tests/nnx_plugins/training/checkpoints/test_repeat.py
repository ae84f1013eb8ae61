"""Checkpoints of Repeat models, and the conversion named when stacked and unrolled blocks meet."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx
from nnx_layers import Repeat
from nnx_plugins import CheckpointError, build, load, save
from nnx_plugins.training.checkpoints._repeat import conversion_hints

BLOCK = {
    "type": "Sequential",
    "layers": [
        {"type": "Linear", "in_features": 8, "out_features": 8},
        {"type": "BatchNorm", "num_features": 8},
        {"type": "relu"},
    ],
}
STACKED = {
    "type": "Sequential",
    "layers": [
        {"type": "Linear", "in_features": 4, "out_features": 8},
        {"type": "Repeat", "count": 3, "block": BLOCK},
    ],
}
UNROLLED = {
    "type": "Sequential",
    "layers": [
        {"type": "Linear", "in_features": 4, "out_features": 8},
        {"type": "Sequential", "layers": [BLOCK] * 3},
    ],
}


def test_a_repeat_model_round_trips_with_its_optimizer_and_batch_stats(tmp_path):
    model = build(STACKED)
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    x = jnp.linspace(-1, 1, 8).reshape(2, 4)

    @nnx.jit
    def step(model, optimizer):
        grads = nnx.grad(lambda m: (m(x) ** 2).mean())(model)
        optimizer.update(model, grads)

    step(model, optimizer)
    where = save(model, tmp_path / "c", optimizer=optimizer)
    fresh = build(STACKED)
    fresh_optimizer = nnx.Optimizer(fresh, optax.adam(1e-2), wrt=nnx.Param)
    load(where, into=fresh, optimizer=fresh_optimizer)
    for (path, a), (_, b) in zip(
        nnx.state(model).flat_state(), nnx.state(fresh).flat_state(), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a.value), np.asarray(b.value), str(path))
    assert fresh.layers[1].block.layers[1].mean.value.shape == (3, 8)
    rebuilt = load(where)  # from the manifest's config
    np.testing.assert_array_equal(
        rebuilt.layers[1].block.layers[0].kernel.value, model.layers[1].block.layers[0].kernel.value
    )


def test_loading_an_unrolled_checkpoint_into_a_repeat_names_from_layers(tmp_path):
    where = save(build(UNROLLED), tmp_path / "u")
    target = build(STACKED)
    before = np.asarray(target.layers[1].block.layers[0].kernel.value)
    with pytest.raises(CheckpointError) as caught:
        load(where, into=target)
    first = caught.value.problems[0]
    assert first.startswith("model.layers[1] is a Repeat of 3 blocks stacked on a leading axis")
    assert "3 unrolled blocks (model.layers[1].layers[0]" in first
    assert "Repeat.from_layers(model.layers[1].layers)" in first
    np.testing.assert_array_equal(target.layers[1].block.layers[0].kernel.value, before)


def test_the_named_conversion_works(tmp_path):
    unrolled = build(UNROLLED)
    where = save(unrolled, tmp_path / "u")
    restored = load(where, into=build(UNROLLED))
    stacked = Repeat.from_layers(restored.layers[1].layers)
    x = jnp.ones((2, 8))
    np.testing.assert_allclose(stacked(x), unrolled.layers[1](x), rtol=1e-5, atol=1e-6)


def test_loading_a_repeat_checkpoint_into_an_unrolled_model_names_unstack(tmp_path):
    where = save(build(STACKED), tmp_path / "r")
    with pytest.raises(
        CheckpointError,
        match=r"(?s)holds model.layers\[1\] as a Repeat of 3 "
        r"blocks.*unrolled \(model.layers\[1\].layers\[0\].*repeat.unstack\(\)",
    ):
        load(where, into=build(UNROLLED))


def test_other_mismatches_get_no_conversion_hint(tmp_path):
    where = save(build({"type": "Linear", "in_features": 2, "out_features": 3}), tmp_path / "l")
    with pytest.raises(CheckpointError) as caught:
        load(where, into=build(STACKED))
    assert not any("Repeat" in p for p in caught.value.problems)
    assert conversion_hints(object(), {"entries": {}}) == []

"""How a run on one device builds its model and optimizer: one compiled program for a small
model (`create_local`), eagerly for a large one (`ONE_PROGRAM_VARIABLES`)."""

import pathlib

import jax
import numpy as np
import pytest

import nnx_core as nnx
from nnx_plugins.training import _plan
from nnx_plugins.training._assembly import assemble
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._plan import ONE_PROGRAM_VARIABLES, make_plan, setup

# (a test here counts the programs trained_model compiles: none may come from the cache)
pytestmark = pytest.mark.fresh_compile_cache

CONFIG = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Linear", "in_features": 64, "out_features": 32},
            {"type": "relu"},
            {"type": "Linear", "in_features": 32, "out_features": 10},
        ],
    },
    "data": {"type": "digits", "layout": "flat"},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "train": {"steps": 2, "batch_size": 8},
}


@pytest.fixture
def plan(tmp_path):
    config = load_train_config(CONFIG)
    return make_plan(config, assemble(config), pathlib.Path(tmp_path))


def _values(*nodes):
    leaves = jax.tree.leaves(nnx.state(nodes))
    return [
        np.asarray(
            jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        )
        for x in leaves
    ]


@pytest.mark.parametrize(
    ("variables", "one_program"),
    [(4, True), (ONE_PROGRAM_VARIABLES, True), (ONE_PROGRAM_VARIABLES + 1, False), (None, False)],
)
def test_a_small_model_is_built_by_one_program_a_large_one_eagerly(
    plan, monkeypatch, variables, one_program
):
    calls = []
    real = _plan.create_local

    def spy(make):
        calls.append(make)
        return real(make)

    monkeypatch.setattr(_plan, "create_local", spy)
    model, optimizer = setup(plan, None, variables=variables)
    assert bool(calls) == one_program
    assert isinstance(optimizer, nnx.Optimizer) and model.layers[0].kernel.value.shape == (64, 32)


def test_both_ways_give_the_same_values(plan):
    one = setup(plan, None, variables=4)
    eager = setup(plan, None, variables=None)
    for a, b in zip(_values(*one), _values(*eager), strict=True):
        np.testing.assert_array_equal(a, b)


def test_trained_model_fills_an_abstract_build_and_refuses_another_shape(tmp_path):
    import copy

    from nnx_plugins import train
    from nnx_plugins.training._loop import trained_model
    from nnx_plugins.training.checkpoints._save import CheckpointError

    result = train(CONFIG, run_dir=tmp_path / "run", progress=False)
    model = trained_model(CONFIG, result.checkpoint)
    np.testing.assert_array_equal(
        np.asarray(model.layers[0].kernel.value), np.asarray(result.model.layers[0].kernel.value)
    )
    wider = copy.deepcopy(CONFIG)
    wider["model"]["layers"][0]["out_features"] = 48
    with pytest.raises(
        CheckpointError,
        match=r"layers\[0\]\.kernel: the checkpoint holds float32\(64, 32\) but the model expects float32\(64, 48\)",
    ):
        trained_model(wider, result.checkpoint)


def test_trained_model_compiles_no_program(tmp_path):
    """Filling an abstract build puts the checkpoint's arrays on the device without a program
    (``jnp.asarray`` would compile one per shape: 10-50 ms each in a fresh process)."""
    from nnx_plugins import train
    from nnx_plugins.training._loop import trained_model

    result = train(CONFIG, run_dir=tmp_path / "run", progress=False)
    compiled = []

    def listen(name, seconds, **_):
        if name == "/jax/core/compile/backend_compile_duration":
            compiled.append(name)

    jax.clear_caches()  # (what an earlier call compiled would hide a compile)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        model = trained_model(CONFIG, result.checkpoint)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiled == []
    assert model.layers[2].kernel.value.shape == (32, 10)

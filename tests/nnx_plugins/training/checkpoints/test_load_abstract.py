"""load() without ``into`` builds the model abstractly (nothing initialized, never two copies),
fills it from the checkpoint, and falls back to a plain build where a layer cannot be built so."""

import jax
import numpy as np

import nnx_plugins
from nnx_plugins.training.checkpoints import _load

LINEAR = {"type": "Linear", "in_features": 64, "out_features": 10}


def test_load_builds_the_model_abstractly_and_fills_it(tmp_path, monkeypatch):
    saved = nnx_plugins.build(LINEAR)
    where = nnx_plugins.save(saved, tmp_path / "c")
    traced = []
    real = _load.build

    def spy(config):
        model = real(config)
        traced.append(isinstance(model.kernel.value, jax.core.Tracer))
        return model

    monkeypatch.setattr(_load, "build", spy)
    loaded = nnx_plugins.load(where)
    assert traced == [True]  # (one build, under eval_shape: no random initialization)
    assert isinstance(loaded.kernel.value, jax.Array)
    np.testing.assert_array_equal(loaded.kernel.value, saved.kernel.value)
    np.testing.assert_array_equal(loaded.bias.value, saved.bias.value)


def test_a_model_that_cannot_be_built_abstractly_is_built_as_usual(tmp_path, monkeypatch):
    saved = nnx_plugins.build(LINEAR)
    where = nnx_plugins.save(saved, tmp_path / "c")

    def refuses(function):
        raise TypeError("this layer reads a concrete value in its constructor")

    monkeypatch.setattr(_load.nnx_core, "eval_shape", refuses)
    loaded = nnx_plugins.load(where)
    np.testing.assert_array_equal(loaded.kernel.value, saved.kernel.value)

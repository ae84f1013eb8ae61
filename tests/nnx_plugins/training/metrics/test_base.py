"""What metrics share: the loss average, report keys, the values they require."""

import jax.numpy as jnp

from nnx_plugins.training.metrics._base import Loss, metric_key, missing_values, requirements
from nnx_plugins.training.metrics._builtin import R2, TopKAccuracy


def test_loss_is_a_masked_mean():
    loss = Loss()
    loss.update(loss=jnp.array([2.0, 4.0]))
    loss.update(loss=jnp.array([6.0, 100.0]), mask=jnp.array([1, 0]))
    assert float(loss.compute()) == 4.0


def test_keys_and_requirements():
    assert metric_key(TopKAccuracy(k=2), "top_k_accuracy") == "top_2_accuracy"
    assert metric_key(R2(), "r2") == "r2"
    assert requirements(R2) == ("predictions", "targets") and requirements(object) == ()
    assert missing_values(R2, ("logits", "labels", "loss")) == ["predictions", "targets"]

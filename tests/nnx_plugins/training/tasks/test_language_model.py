"""The language_model task: next-token cross-entropy over counted tokens."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nnx_plugins import ArrayDataset, DataError
from nnx_plugins.testing import check_task
from nnx_plugins.training.tasks._language_model import LanguageModel


def test_the_loss_is_the_mean_over_counted_tokens():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 5)), jnp.float32)
    targets = jnp.array([[1, 2, 3], [4, 0, 0]])
    mask = jnp.array([[1, 1, 1], [1, 0, 0]])
    loss, values = LanguageModel().loss(logits, {"targets": targets, "mask": mask})
    each = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    assert float(loss) == pytest.approx(float((each * mask).sum() / 4))
    unmasked, _ = LanguageModel().loss(logits, {"targets": targets})
    assert float(unmasked) == pytest.approx(float(each.mean()))
    assert set(values) == {"logits", "labels", "mask", "loss"}


def test_the_output_must_be_token_logits(tmp_path):
    (tmp_path / "t.txt").write_text("hello world " * 50)
    check_task(
        "language_model",
        data={"type": "text", "path": str(tmp_path / "t.txt"), "seq_len": 8},
        output_shape=(8, 256),
    )
    from nnx_plugins.training.data._text import TextDataset

    info = TextDataset(str(tmp_path / "t.txt"), seq_len=8).describe()
    assert LanguageModel().check_output(jax.ShapeDtypeStruct((2, 8, 256), "float32"), info) is None
    message = LanguageModel().check_output(jax.ShapeDtypeStruct((2, 8, 100), "float32"), info)
    assert (
        "a language model over the 256 tokens of t.txt needs logits of shape (batch, 8, 256)"
        in message
    )


def test_the_data_must_be_token_sequences():
    data = ArrayDataset(
        np.zeros((4, 8), np.float32),
        np.zeros((4, 8), np.int32),
        np.zeros((1, 8), np.float32),
        np.zeros((1, 8), np.int32),
        name="f",
    )
    with pytest.raises(
        DataError,
        match=r"f: a language model reads token ids, one sequence per example, but its inputs are float32\[8\]",
    ):
        LanguageModel().check_data(data, data.describe(), None)

"""Data and tasks held to each other before training: token ids within the model's Embed and
logits, complex data, a text stride of 0, too many accumulated micro-batches."""

import numpy as np
import pytest

from nnx_plugins import ConfigError, DataError, train
from nnx_plugins.training._contracts import first_embedding

LM = {
    "type": "Sequential",
    "layers": [
        {"type": "Embed", "num_embeddings": 64, "features": 8},
        {"type": "Linear", "in_features": 8, "out_features": 64},
    ],
}


def lm_config(tmp_path, x, y, model=LM):
    np.savez(tmp_path / "t.npz", x=x, y=y)
    return {
        "model": model,
        "task": {"type": "language_model"},
        "data": {"type": "npz", "path": str(tmp_path / "t.npz")},
        "train": {"steps": 2, "batch_size": 4},
    }


def tokens(count=40, seq=6):
    return np.random.default_rng(0).integers(0, 64, size=(count, seq))


@pytest.mark.parametrize(
    "where, value, match",
    [
        ((7, 2), 999, r"token id x\[7, 2\] is 999, outside the 64 rows of the model's Embed at "),
        ((3, 0), -1, r"token id x\[3, 0\] is -1, outside the 64 rows"),
        ((35, 5), 64, r"token id x\[35, 5\] is 64"),  # (in the test rows: indexed in the file)
    ],
)
def test_token_ids_outside_the_embed_are_named_before_training(tmp_path, where, value, match):
    x = tokens()
    x[where] = value
    with pytest.raises(
        DataError,
        match=r"<dict>: data: t\.npz: " + match + r".*model\.layers\[0\] \(ids 0 to 63\)",
    ):
        train(lm_config(tmp_path, x, tokens()), run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_target_ids_outside_the_logits_are_named(tmp_path):
    wide = {**LM, "layers": [{**LM["layers"][0], "num_embeddings": 1000}, LM["layers"][1]]}
    y = tokens()
    y[5, 1] = 500
    with pytest.raises(
        DataError,
        match=r"data: t\.npz: target token id y\[5, 1\] is 500, outside the model's 64 token "
        r"logits \(ids 0 to 63\)",
    ):
        train(lm_config(tmp_path, tokens(), y, wide), run_dir=tmp_path / "run", progress=False)


def test_first_embedding_is_found_in_document_order():
    nested = {
        "type": "Sequential",
        "layers": [
            {"type": "relu"},
            {"type": "Residual", "block": {"type": "Embed", "num_embeddings": 9, "features": 2}},
        ],
    }
    assert first_embedding(nested) == (("model", "layers", 1, "block"), 9)
    assert first_embedding({"type": "Linear", "in_features": 2, "out_features": 2}) is None


def test_complex_inputs_are_refused(tmp_path):
    np.savez(tmp_path / "c.npz", x=np.ones((20, 4), np.complex64), y=np.zeros(20, int))
    config = {
        "model": {"type": "Linear", "in_features": 4, "out_features": 2},
        "data": {"type": "npz", "path": str(tmp_path / "c.npz")},
    }
    with pytest.raises(
        DataError,
        match=r"c\.npz: x holds complex values \(complex64\); inputs and targets must be real",
    ):
        train(config, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_text_stride_of_zero_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("hello " * 50)
    config = {
        "model": LM,
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": str(tmp_path / "a.txt"), "stride": 0},
    }
    with pytest.raises(
        ConfigError,
        match=r"data\.stride: dataset 'text' refused it: stride must be at least 1, got 0 \(leave "
        r"stride out for windows that do not overlap\)",
    ):
        train(config, run_dir=tmp_path / "run", progress=False)


def test_too_many_accumulated_micro_batches_name_accumulate_steps(tmp_path):
    config = {
        "model": {"type": "Linear", "in_features": 64, "out_features": 10},
        "data": {"type": "digits", "layout": "flat"},
        "optimizer": {"type": "adam", "learning_rate": 0.01, "accumulate_steps": 200},
        "train": {"steps": 2, "batch_size": 64},
    }
    with pytest.raises(
        ConfigError,
        match=r"<dict>: optimizer\.accumulate_steps: accumulate_steps 200 makes each update read "
        r"200 micro-batches of train\.batch_size 64 \(12,800 rows\), more than the training data "
        r"gives in an epoch \(digits has 1294 training examples .*\); at most 20 micro-batches "
        r"of 64 fit: lower accumulate_steps to 20 or less\.",
    ):
        train(config, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()

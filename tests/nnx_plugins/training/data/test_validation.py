"""The validation split of every dataset: held out of the training part with the run's seed
(arrays), the file's own (npz x_val/y_val), a stretch before the test split (text), a pack's
own (val_batches), or none (data.validation: 0)."""

import numpy as np
import pytest

from nnx_plugins import ArrayDataset, DataError, register_dataset, train
from nnx_plugins.training.data._base import DEFAULT_VALIDATION
from nnx_plugins.training.data._bundled import Diabetes, Digits
from nnx_plugins.training.data._npz import NpzDataset
from nnx_plugins.training.data._text import TextDataset


def test_digits_hold_a_seeded_tenth_of_the_training_part_out():
    whole, data = Digits(layout="flat"), Digits(layout="flat")
    assert data.hold_out(None, seed=3) and DEFAULT_VALIDATION == 0.1
    assert (len(data.x_train), len(data.x_val), len(data.x_test)) == (1294, 144, 359)
    rows = {r.tobytes() for r in whole.x_train}
    val = {r.tobytes() for r in data.x_val}
    train_rows = {r.tobytes() for r in data.x_train}
    assert val <= rows and train_rows <= rows and not val & train_rows  # (disjoint, no test rows)
    again, other = Digits(layout="flat"), Digits(layout="flat")
    again.hold_out(None, seed=3), other.hold_out(None, seed=4)
    np.testing.assert_array_equal(again.y_val, data.y_val)
    assert not np.array_equal(other.x_val, data.x_val)
    np.testing.assert_array_equal(data.x_test, whole.x_test)


def test_a_fraction_and_none():
    data = Diabetes()
    assert data.hold_out(0.25, seed=0) and (len(data.x_train), len(data.x_val)) == (266, 88)
    assert not data.hold_out(0, seed=0) and data.x_val is None and len(data.x_train) == 354
    assert list(data.val_batches(64)) == []


@pytest.mark.parametrize(
    "fraction, match",
    [
        (1.0, r"validation must be a fraction in \[0, 1\) \(0: no validation split\), got 1\.0"),
        (-0.1, r"validation must be a fraction in \[0, 1\)"),
        ("0.1", r"validation must be a fraction in \[0, 1\), got '0\.1'"),
        (0.999, r"toy has 3 training example\(s\): too few to hold 0\.999 of them out"),
    ],
)
def test_bad_fractions(fraction, match):
    x = np.zeros((3, 2), np.float32)
    data = ArrayDataset(x, np.zeros(3, int), x[:1], np.zeros(1, int), name="toy")
    with pytest.raises(DataError, match=match) as info:
        data.hold_out(fraction, seed=0)
    assert info.value.key == "validation"


def test_given_validation_arrays_are_the_split():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    data = ArrayDataset(x, np.arange(6), x[:2], np.arange(2), x_val=x[:3], y_val=np.arange(3))
    assert data.hold_out(None, seed=0) and len(data.x_train) == 6 and len(data.x_val) == 3
    with pytest.raises(DataError, match=r"has validation arrays of its own \(x_val, y_val\)"):
        data.hold_out(0.2, seed=0)
    with pytest.raises(DataError, match=r"x_val was given without y_val"):
        ArrayDataset(x, np.arange(6), x, np.arange(6), x_val=x).hold_out(None, seed=0)


def test_npz_validation_arrays(tmp_path):
    x, y = np.ones((20, 3)), np.arange(20) % 2
    np.savez(tmp_path / "v.npz", x=x, y=y, x_val=x[:4], y_val=y[:4])
    data = NpzDataset(str(tmp_path / "v.npz"))
    assert data.hold_out(None, seed=0) and (len(data.x_train), len(data.x_val)) == (16, 4)
    assert [name for name, _, _ in data.label_arrays()] == ["y", "y", "y_val"]
    np.savez(tmp_path / "half.npz", x=x, y=y, x_val=x[:4])
    with pytest.raises(
        DataError, match=r"half\.npz holds the array 'x_val' but not 'y_val'; a split needs both"
    ):
        NpzDataset(str(tmp_path / "half.npz")).hold_out(None, seed=0)


def test_npz_validation_in_a_run_is_located(tmp_path):
    x, y = np.ones((20, 64)), np.arange(20) % 2
    np.savez(tmp_path / "v.npz", x=x, y=y, x_val=x[:4], y_val=y[:4])
    config = {
        "model": {"type": "Linear", "in_features": 64, "out_features": 2},
        "data": {"type": "npz", "path": str(tmp_path / "v.npz"), "validation": 0.2},
        "train": {"steps": 2, "batch_size": 4},
    }
    with pytest.raises(
        DataError, match=r"<dict>: data\.validation: v\.npz has validation arrays of its own"
    ):
        train(config, run_dir=tmp_path / "run", progress=False)


def test_text_holds_a_stretch_out_before_the_test_split(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("abcdefghij" * 100)
    data = TextDataset(str(path), seq_len=8, test_fraction=0.1)
    assert data.hold_out(None, seed=0)
    tokens, cut = data.tokens, len(data.tokens) - 100
    val = np.concatenate([b["inputs"][b["mask"] > 0] for b in data.val_batches(4)])
    np.testing.assert_array_equal(val, tokens[cut - 90 : cut - 1])  # (10% of the 900 train tokens)
    assert data._starts.max() + 8 < cut - 90  # (no training window reaches into it)
    assert not data.hold_out(0, seed=0) and list(data.val_batches(4)) == []
    with pytest.raises(
        DataError, match=r"too few for training windows of seq_len 8 plus a validation"
    ):
        data.hold_out(0.995, seed=0)


def test_a_streaming_dataset_gives_its_own_split(nnx_registry, tmp_path):
    from acme_layers.waves import Waves

    @register_dataset("test.waves_with_val")
    class WithVal(Waves):
        def val_batches(self, batch_size):
            return self.test_batches(batch_size)

    config = {
        "model": {"type": "Linear", "in_features": 1, "out_features": 1},
        "task": {"type": "regression"},
        "data": {"type": "test.waves_with_val", "examples": 64},
        "train": {"steps": 4, "batch_size": 16, "eval_interval": 2},
        "callbacks": [{"type": "early_stopping", "metric": "val.mse"}],
    }
    result = train(config, run_dir=tmp_path, progress=False)
    splits = [r["split"] for r in result_records(tmp_path)]
    assert splits.count("val") == 2 and splits.count("test") == 1 and result.step == 4


def result_records(run_dir):
    import json

    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

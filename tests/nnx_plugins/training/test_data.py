"""Datasets: the bundled digits, .npz files, seeded batching that is a pure function of the step."""

import numpy as np
import pytest

from nnx_plugins.training._data import DataError, Dataset, epoch_order, load_digits, load_npz


def test_digits_fixed_split_and_layouts():
    images = load_digits(layout="NHWC")
    flat = load_digits(layout="flat")
    assert images.x_train.shape == (1438, 8, 8, 1) and images.x_test.shape == (359, 8, 8, 1)
    assert flat.x_train.shape == (1438, 64) and flat.x_test.shape == (359, 64)
    np.testing.assert_array_equal(images.x_test.reshape(359, 64), flat.x_test)
    assert images.x_train.dtype == np.float32 and images.y_train.dtype == np.int32
    assert 0.0 == images.x_train.min() and images.x_train.max() == 1.0
    assert images.num_classes == 10 and sorted(set(images.y_test.tolist())) == list(range(10))


def test_digits_match_scikit_learn():
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    flat = load_digits(layout="flat")
    np.testing.assert_array_equal(flat.x_test * 16, bunch.data[4::5])
    np.testing.assert_array_equal(flat.y_train[:4], bunch.target[:4])


def test_batches_are_a_pure_function_of_seed_and_step():
    data = load_digits(layout="flat")
    per_epoch = data.steps_per_epoch(100)
    assert per_epoch == 14
    a = data.batch(20, 100, seed=3)
    b = data.batch(20, 100, seed=3)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(data.batch(20, 100, seed=4)[1], a[1])
    # one epoch visits distinct examples
    seen = np.concatenate([data.batch(s, 100, seed=0)[1] for s in range(per_epoch)])
    order = epoch_order(0, 0, 1438)[: per_epoch * 100]
    np.testing.assert_array_equal(seen, data.y_train[order])
    assert len(set(order.tolist())) == per_epoch * 100
    # the next epoch is another permutation
    assert not np.array_equal(epoch_order(0, 1, 1438), epoch_order(0, 0, 1438))


def test_batch_larger_than_the_training_set():
    data = Dataset(
        np.zeros((3, 2), np.float32),
        np.zeros(3, np.int32),
        np.zeros((1, 2), np.float32),
        np.zeros(1, np.int32),
        "tiny",
    )
    with pytest.raises(
        DataError,
        match=r"tiny has 3 training examples, fewer than one batch of 8; "
        r"lower train\.batch_size",
    ):
        data.batch(0, 8, 0)


def test_npz_with_and_without_a_test_split(tmp_path):
    x = np.arange(20, dtype=np.float64).reshape(10, 2)
    y = np.arange(10) % 3
    np.savez(tmp_path / "plain.npz", x=x, y=y)
    data = load_npz(tmp_path / "plain.npz", test_fraction=0.2)
    assert data.x_train.shape == (8, 2) and data.x_test.shape == (2, 2)
    assert data.x_train.dtype == np.float32 and data.y_test.tolist() == [2, 0]
    np.savez(tmp_path / "named.npz", inputs=x, labels=y, xt=x[:3], yt=y[:3])
    data = load_npz(tmp_path / "named.npz", x="inputs", y="labels", x_test="xt", y_test="yt")
    assert data.x_train.shape == (10, 2) and data.x_test.shape == (3, 2)
    assert data.num_classes == 3 and data.name == "named.npz"


@pytest.mark.parametrize(
    "arrays, options, match",
    [
        ({"x": np.ones((4, 2))}, {}, r"has no array 'y'; it holds \['x'\]\. Set data\.x / data\.y"),
        (
            {"x": np.ones((4, 2)), "y": np.zeros(3, int)},
            {},
            r"'x' has 4 examples but 'y' has 3 labels",
        ),
        (
            {"x": np.ones((4, 2)), "y": np.zeros(4)},
            {},
            r"labels 'y' must be integer class indices, got float64",
        ),
        (
            {"x": np.array([object(), None], dtype=object), "y": np.zeros(2, int)},
            {},
            r"cannot read .* as an \.npz file",
        ),
    ],
)
def test_npz_errors(tmp_path, arrays, options, match):
    np.savez(tmp_path / "d.npz", **arrays)
    with pytest.raises(DataError, match=match):
        load_npz(tmp_path / "d.npz", **options)


def test_missing_or_unreadable_files(tmp_path):
    with pytest.raises(DataError, match=r"data\.path: no such file '.*nope\.npz'"):
        load_npz(tmp_path / "nope.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(DataError, match=r"data\.path: cannot read '.*text\.npz' as an \.npz file"):
        load_npz(tmp_path / "text.npz")

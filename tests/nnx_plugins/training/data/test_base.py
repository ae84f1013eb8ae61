"""ArrayDataset: seeded batching that is a pure function of the step; narrowing; checks."""

import numpy as np
import pytest

from nnx_plugins import ArrayDataset, DataError
from nnx_plugins.training.data._base import Dataset, epoch_order, narrow
from nnx_plugins.training.data._bundled import Digits


def test_batches_are_a_pure_function_of_seed_and_step():
    data = Digits(layout="flat")
    per_epoch = data.steps_per_epoch(100)
    assert per_epoch == 14
    a = data.batch(20, 100, seed=3)
    b = data.batch(20, 100, seed=3)
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert not np.array_equal(data.batch(20, 100, seed=4)["targets"], a["targets"])
    seen = np.concatenate([data.batch(s, 100, seed=0)["targets"] for s in range(per_epoch)])
    order = epoch_order(0, 0, 1438)[: per_epoch * 100]
    np.testing.assert_array_equal(seen, data.y_train[order])
    assert len(set(order.tolist())) == per_epoch * 100
    assert not np.array_equal(epoch_order(0, 1, 1438), epoch_order(0, 0, 1438))


def test_test_batches_cover_the_test_split_once():
    data = Digits(layout="flat")
    batches = list(data.test_batches(100))
    assert [len(b["targets"]) for b in batches] == [100, 100, 100, 59]
    np.testing.assert_array_equal(np.concatenate([b["targets"] for b in batches]), data.y_test)


def test_batch_larger_than_the_training_set():
    data = ArrayDataset(
        np.zeros((3, 2)), np.zeros(3, int), np.zeros((1, 2)), np.zeros(1, int), name="tiny"
    )
    with pytest.raises(
        DataError,
        match=r"tiny has 3 training examples, fewer than one batch of 8; lower train\.batch_size",
    ):
        data.batch(0, 8, 0)


@pytest.mark.parametrize(
    "arrays, match",
    [
        (
            (np.ones((4, 2)), np.zeros(3), np.ones((1, 2)), np.zeros(1)),
            r"toy: 'x' has 4 examples but 'y' has 3",
        ),
        (
            (np.ones((4, 2)), np.zeros(4), np.ones((2, 2)), np.zeros(1)),
            r"toy: 'x_test' has 2 examples but 'y_test' has 1",
        ),
        (
            (np.ones((4, 2)), np.zeros(4), np.ones((1, 3)), np.zeros(1)),
            r"'x' has examples of shape \(2,\) but 'x_test' of shape \(3,\)",
        ),
        (
            (np.ones((4, 2)), np.zeros((4, 2)), np.ones((1, 2)), np.zeros(1)),
            r"'y' has examples of shape \(2,\) but 'y_test' of shape \(\)",
        ),
        (
            (np.array(["a", "b"]), np.zeros(2), np.array(["c"]), np.zeros(1)),
            r"toy: x holds <U1 values; inputs and targets must be numbers",
        ),
        (
            (np.float32(3.0), np.zeros(2), np.ones((1, 2)), np.zeros(1)),
            r"toy: x is a single value \(float32, shape \(\)\)",
        ),
        (
            (np.array([[1.0, np.nan]]), np.zeros(1), np.ones((1, 2)), np.zeros(1)),
            r"toy: x\[0, 1\] is nan: inputs and targets must be finite",
        ),
        (
            (np.ones((1, 2)), np.array([np.inf]), np.ones((1, 2)), np.zeros(1)),
            r"toy: y\[0\] is inf",
        ),
        (
            (np.ones((2, 2)), np.array([1, 2**31 + 5]), np.ones((1, 2)), np.zeros(1, int)),
            r"toy: y\[1\] is 2147483653, which does not fit in int32",
        ),
        (
            (np.ones((2, 2)), np.array([1, 7 + 2**32]), np.ones((1, 2)), np.zeros(1, int)),
            r"toy: y\[1\] is 4294967303, which does not fit in int32",
        ),
    ],
)
def test_arrays_that_do_not_fit_are_refused_naming_what(arrays, match):
    with pytest.raises(DataError, match=match):
        _ = ArrayDataset(*arrays, name="toy").arrays


def test_narrow_keeps_what_jax_keeps():
    assert narrow(np.zeros(2, np.float64), "x").dtype == np.float32
    assert narrow(np.zeros(2, np.int64), "x").dtype == np.int32
    assert narrow(np.zeros(2, np.uint64), "x").dtype == np.uint32
    for dtype in (np.uint8, np.int16, np.float16, np.bool_, np.int32):
        assert narrow(np.zeros(2, dtype), "x").dtype == dtype
    with pytest.raises(DataError, match=r"x\[0\] is 1099511627776, which does not fit in uint32"):
        narrow(np.array([2**40], np.uint64), "x")


def test_the_interface_says_what_a_dataset_lacks():
    class Half(Dataset):
        pass

    with pytest.raises(NotImplementedError, match=r"Half does not define describe\(\)"):
        Half().describe()
    with pytest.raises(NotImplementedError, match=r"Half has no epochs: give train\.steps"):
        Half().steps_per_epoch(8)
    with pytest.raises(NotImplementedError, match=r"Half does not define batch\(\)"):
        Half().batch(0, 8, 0)
    with pytest.raises(NotImplementedError, match=r"Half does not define test_batches\(\)"):
        Half().test_batches(8)
    assert Half().state() == {} and Half().check_state({}) is None and Half().label_arrays() == ()
    with pytest.raises(NotImplementedError, match=r"ArrayDataset gives no arrays"):
        _ = ArrayDataset().arrays

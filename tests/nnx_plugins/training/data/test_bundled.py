"""The data sets scikit-learn bundles: digits and diabetes, fixed splits."""

import numpy as np

from nnx_plugins.training.data._bundled import Diabetes, Digits


def test_digits_fixed_split_and_layouts():
    images, flat = Digits(layout="NHWC"), Digits(layout="flat")
    assert images.x_train.shape == (1438, 8, 8, 1) and images.x_test.shape == (359, 8, 8, 1)
    assert flat.x_train.shape == (1438, 64) and flat.x_test.shape == (359, 64)
    np.testing.assert_array_equal(images.x_test.reshape(359, 64), flat.x_test)
    assert images.x_train.dtype == np.float32 and images.y_train.dtype == np.int32
    assert 0.0 == images.x_train.min() and images.x_train.max() == 1.0
    info = images.describe()
    assert info.classes == 10 and sorted(set(images.y_test.tolist())) == list(range(10))
    assert info.inputs.shape == images.x_train.shape[1:] and info.targets.shape == ()


def test_digits_match_scikit_learn():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    flat = Digits(layout="flat")
    np.testing.assert_array_equal(flat.x_test * 16, bunch.data[4::5])
    np.testing.assert_array_equal(flat.y_train[:4], bunch.target[:4])


def test_diabetes_matches_scikit_learn_with_a_fixed_split():
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True, scaled=False)
    raw = Diabetes(standardize=False)
    np.testing.assert_allclose(raw.x_test, x[4::5], rtol=1e-6)
    np.testing.assert_allclose(raw.y_test, y[4::5])
    assert raw.x_train.shape == (354, 10) and raw.y_train.dtype == np.float32
    scaled = Diabetes()
    np.testing.assert_allclose(scaled.x_train.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(scaled.x_train.std(axis=0), 1.0, atol=1e-5)
    info = scaled.describe()
    assert info.classes is None and info.targets.shape == () and info.inputs.shape == (10,)

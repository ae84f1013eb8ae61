"""The data sets scikit-learn bundles (no download): ``digits`` and ``diabetes``.

Both split the same fixed way: every fifth example (1-based positions 5, 10, ...) is a test
example. The tables are read straight from scikit-learn's data files when they are where they
should be (importing scikit-learn itself takes seconds).

Example:
    >>> from nnx_plugins.training.data._bundled import Diabetes, Digits
    >>> data = Digits(layout="NHWC")
    >>> data.x_train.shape, data.x_test.shape, data.describe().classes
    ((1438, 8, 8, 1), (359, 8, 8, 1), 10)
    >>> batch = data.batch(step=0, batch_size=32, seed=0)
    >>> batch["inputs"].shape, batch["targets"].shape, batch["targets"].dtype.name
    ((32, 8, 8, 1), (32,), 'int32')
    >>> Diabetes().x_train.shape, Diabetes().y_test.shape
    ((354, 10), (88,))
"""

from __future__ import annotations

import importlib.util
import os
from typing import Literal

import jax
import numpy as np

from ._base import ArrayDataset, DataInfo

__all__ = ["Digits", "Diabetes", "every_fifth", "sklearn_data_file"]

_DIGITS = {"flat": (64,), "NHWC": (8, 8, 1)}
_LAYOUT_HINT = (
    "(data.layout: flat gives digits as float32[64], for a Linear first layer; NHWC as "
    "float32[8,8,1], for a Conv.)"
)


def sklearn_data_file(name: str) -> str | None:
    """The path of a file scikit-learn bundles in ``sklearn/datasets/data``, if present."""
    spec = importlib.util.find_spec("sklearn")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(location, "datasets", "data", name)
        if os.path.isfile(path):
            return path
    return None


def every_fifth(count: int) -> np.ndarray:
    """The test mask of the bundled sets: every fifth example.

    Example:
        >>> from nnx_plugins.training.data._bundled import every_fifth
        >>> every_fifth(10).nonzero()[0].tolist()
        [4, 9]
    """
    return np.arange(count) % 5 == 4


def _digits_table() -> np.ndarray:
    path = sklearn_data_file("digits.csv.gz")
    if path is not None:
        return np.loadtxt(path, delimiter=",", dtype=np.float32)
    from sklearn.datasets import load_digits  # (here: it takes seconds)

    bunch = load_digits()
    return np.concatenate([bunch.data, bunch.target[:, None]], axis=1).astype(np.float32)


class Digits(ArrayDataset):
    """scikit-learn's bundled 8x8 digits (1797 images, 10 classes), scaled to [0, 1].

    Args:
        layout: ``NHWC`` gives ``(N, 8, 8, 1)`` images (for convolutions), ``flat`` gives
            ``(N, 64)`` vectors (for a ``Linear`` first layer).
    """

    path_arguments = ()

    def __init__(self, *, layout: Literal["NHWC", "flat"] = "NHWC"):
        super().__init__(name="digits")
        self.layout = layout

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        table = _digits_table()
        x = (table[:, :64] / 16.0).astype(np.float32).reshape(-1, *_DIGITS[self.layout])
        y = table[:, 64].astype(np.int32)
        test = every_fifth(len(x))
        return x[~test], y[~test], x[test], y[test]

    def describe(self) -> DataInfo:
        """Known without reading the table."""
        return DataInfo(
            "digits",
            jax.ShapeDtypeStruct(_DIGITS[self.layout], np.float32),
            jax.ShapeDtypeStruct((), np.int32),
            f"data (digits, layout {self.layout})",
            classes=10,
            hint=_LAYOUT_HINT,
        )


class Diabetes(ArrayDataset):
    """scikit-learn's bundled diabetes data: 442 patients, 10 features, a regression target.

    The target is the disease progression (25-346) one year later.

    The features are standardized with the mean and standard deviation of the training split
    (``standardize: false`` keeps the raw values); the targets are as recorded.
    """

    path_arguments = ()

    def __init__(self, *, standardize: bool = True):
        super().__init__(name="diabetes")
        self.standardize = standardize

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        data_file = sklearn_data_file("diabetes_data_raw.csv.gz")
        target_file = sklearn_data_file("diabetes_target.csv.gz")
        if data_file is not None and target_file is not None:
            x, y = np.loadtxt(data_file), np.loadtxt(target_file)
        else:  # pragma: no cover - an unusual scikit-learn layout
            from sklearn.datasets import load_diabetes  # (here: it takes seconds)

            x, y = load_diabetes(return_X_y=True, scaled=False)
        test = every_fifth(len(x))
        if self.standardize:
            mean, std = x[~test].mean(axis=0), x[~test].std(axis=0)
            x = (x - mean) / np.where(std > 0, std, 1.0)
        x, y = x.astype(np.float32), y.astype(np.float32)
        return x[~test], y[~test], x[test], y[test]

    def describe(self) -> DataInfo:
        """Known without reading the table."""
        return DataInfo(
            "diabetes",
            jax.ShapeDtypeStruct((10,), np.float32),
            jax.ShapeDtypeStruct((), np.float32),
            "data (diabetes)",
        )

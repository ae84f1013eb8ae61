"""Datasets for ``nnx train``: the bundled digits and a user's ``.npz`` file; seeded batching.

The order of the training examples is a pure function of ``(seed, epoch)``, and the batch of a
step a pure function of ``(seed, step)``: a resumed run sees exactly the batches an
uninterrupted run would have seen.

Example:
    >>> from nnx_plugins.training._data import Dataset, load_digits
    >>> data = load_digits(layout="NHWC")
    >>> data.x_train.shape, data.x_test.shape, data.num_classes
    ((1438, 8, 8, 1), (359, 8, 8, 1), 10)
    >>> x, y = data.batch(step=0, batch_size=32, seed=0)
    >>> x.shape, y.shape, y.dtype.name
    ((32, 8, 8, 1), (32,), 'int32')
    >>> bool((data.batch(5, 32, 0)[1] == data.batch(5, 32, 0)[1]).all())
    True
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any

import numpy as np

from .._errors import NnxError

__all__ = ["Dataset", "DataError", "load_digits", "load_npz", "load_dataset", "epoch_order"]


class DataError(NnxError, ValueError):
    """A data file is missing, unreadable or does not hold the arrays the config names."""


def epoch_order(seed: int, epoch: int, size: int) -> np.ndarray:
    """The permutation of ``range(size)`` used in ``epoch``: a pure function of its arguments.

    Example:
        >>> from nnx_plugins.training._data import epoch_order
        >>> epoch_order(0, 3, 5).tolist() == epoch_order(0, 3, 5).tolist()
        True
        >>> sorted(epoch_order(0, 3, 5).tolist())
        [0, 1, 2, 3, 4]
    """
    return np.random.default_rng([seed, epoch]).permutation(size)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Train and test arrays; labels are ``int32`` class indices."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    name: str = "data"

    @property
    def num_classes(self) -> int:
        """``max(label) + 1`` over both splits."""
        return int(max(self.y_train.max(initial=0), self.y_test.max(initial=0))) + 1

    def steps_per_epoch(self, batch_size: int) -> int:
        """Full batches per epoch (the remainder of each shuffled epoch is dropped).

        Raises:
            DataError: the training set is smaller than one batch.
        """
        steps = len(self.x_train) // batch_size
        if steps == 0:
            raise DataError(
                f"{self.name} has {len(self.x_train)} training examples, fewer than "
                f"one batch of {batch_size}; lower train.batch_size."
            )
        return steps

    def batch(self, step: int, batch_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The training batch of global ``step``."""
        per_epoch = self.steps_per_epoch(batch_size)
        epoch, index = divmod(step, per_epoch)
        order = epoch_order(seed, epoch, len(self.x_train))
        take = order[index * batch_size : (index + 1) * batch_size]
        return self.x_train[take], self.y_train[take]


def _split_every_fifth(x: np.ndarray, y: np.ndarray, name: str) -> Dataset:
    test = np.arange(len(x)) % 5 == 4
    return Dataset(x[~test], y[~test], x[test], y[test], name)


def _shape(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "flat":
        return x.reshape(len(x), -1)
    return x[..., None] if x.ndim == 3 else x


def load_digits(*, layout: str = "NHWC") -> Dataset:
    """scikit-learn's bundled 8x8 digits, scaled to ``[0, 1]``; every fifth image is a test image.

    ``layout="NHWC"`` gives ``(N, 8, 8, 1)`` images, ``layout="flat"`` gives ``(N, 64)``.
    """
    table = _digits_table()
    x = table[:, :64].reshape(-1, 8, 8).astype(np.float32) / 16.0
    y = table[:, 64].astype(np.int32)
    return _split_every_fifth(_shape(x, layout), y, "digits")


def _digits_table() -> np.ndarray:
    """The ``(1797, 65)`` digits table (64 pixels then the label) that scikit-learn bundles.

    Read straight from scikit-learn's data file when it is where it should be: importing
    scikit-learn itself takes seconds.
    """
    spec = importlib.util.find_spec("sklearn")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(location, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            return np.loadtxt(path, delimiter=",", dtype=np.float32)
    from sklearn.datasets import load_digits as sklearn_digits  # (here: it takes seconds)

    bunch = sklearn_digits()
    return np.concatenate([bunch.data, bunch.target[:, None]], axis=1).astype(np.float32)


def load_npz(
    path: str | os.PathLike[str],
    *,
    x: str = "x",
    y: str = "y",
    x_test: str = "x_test",
    y_test: str = "y_test",
    test_fraction: float = 0.2,
) -> Dataset:
    """Arrays from an ``.npz`` file (read without pickle); the test split is ``x_test``/``y_test``
    when present, else the last ``test_fraction`` of the examples.

    Raises:
        DataError: the file is missing or unreadable, a named array is missing, or the
            arrays do not fit together.
    """
    name = os.fspath(path)
    try:
        with np.load(name, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except FileNotFoundError:
        raise DataError(f"data.path: no such file {name!r}.") from None
    except (OSError, ValueError) as error:
        raise DataError(f"data.path: cannot read {name!r} as an .npz file: {error}") from None
    for key in (x, y):
        if key not in arrays:
            raise DataError(
                f"{name} has no array {key!r}; it holds {sorted(arrays)}. Set "
                f"data.x / data.y to the names of the inputs and labels."
            )
    has_test = x_test in arrays and y_test in arrays
    xs, ys = arrays[x], arrays[y]
    if len(xs) != len(ys):
        raise DataError(f"{name}: {x!r} has {len(xs)} examples but {y!r} has {len(ys)} labels.")
    if not np.issubdtype(ys.dtype, np.integer):
        raise DataError(f"{name}: labels {y!r} must be integer class indices, got {ys.dtype}.")
    if has_test:
        parts = (xs, ys, arrays[x_test], arrays[y_test])
    else:
        cut = len(xs) - max(1, int(round(len(xs) * test_fraction)))
        parts = (xs[:cut], ys[:cut], xs[cut:], ys[cut:])
    x_tr, y_tr, x_te, y_te = parts
    return Dataset(
        np.asarray(x_tr, np.float32),
        np.asarray(y_tr, np.int32),
        np.asarray(x_te, np.float32),
        np.asarray(y_te, np.int32),
        os.path.basename(name),
    )


def load_dataset(section: Any) -> Dataset:
    """The `Dataset` a validated ``data`` section describes."""
    if section.type == "digits":
        return load_digits(layout=section.layout)
    return load_npz(
        section.path,
        x=section.x,
        y=section.y,
        x_test=section.x_test,
        y_test=section.y_test,
        test_fraction=section.test_fraction,
    )

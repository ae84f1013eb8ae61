"""What a dataset is to a run: `DataInfo`, the `Dataset` interface and `ArrayDataset`.

A batch is a dict of numpy arrays: ``inputs``, ``targets`` and, where some positions do not
count, ``mask``. The batch of a step is a pure function of ``(seed, step)``: a resumed run sees
exactly the batches an uninterrupted run would have seen (docs/design/runs.md).

Example:
    >>> import numpy as np
    >>> from nnx_plugins.training.data._base import ArrayDataset
    >>> x = np.arange(20, dtype=np.float32).reshape(10, 2)
    >>> data = ArrayDataset(x[:8], np.arange(8), x[8:], np.arange(2), name="toy")
    >>> data.describe().inputs, data.describe().classes
    (ShapeDtypeStruct(shape=(2,), dtype=float32), 8)
    >>> batch = data.batch(step=0, batch_size=4, seed=0)
    >>> sorted(batch), batch["inputs"].shape, batch["targets"].dtype.name
    (['inputs', 'targets'], (4, 2), 'int32')
    >>> [b["inputs"].shape[0] for b in data.test_batches(1)]
    [1, 1]
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

from ..._errors import NnxError

__all__ = [
    "DataError",
    "DataInfo",
    "Dataset",
    "ArrayDataset",
    "epoch_order",
    "narrow",
    "check_finite",
    "check_split",
]

Batch = dict[str, np.ndarray]


class DataError(NnxError, ValueError):
    """Data cannot be read or does not fit the run; ``.key`` is the ``data`` argument concerned.

    Example:
        >>> from nnx_plugins import DataError
        >>> error = DataError("no such file 'a.npz'.", key="path")
        >>> str(error), error.key
        ("no such file 'a.npz'.", 'path')
    """

    def __init__(self, message: str, *, key: str | None = None):
        super().__init__(message)
        self.message = message
        self.key = key


@dataclasses.dataclass(frozen=True)
class DataInfo:
    """What one example of a dataset holds.

    Attributes:
        name: the dataset's name, for messages (``digits``, ``train.npz``).
        inputs, targets: shape and dtype of one example's inputs and targets.
        origin: where the inputs come from, for messages (``data (digits, layout flat)``).
        classes: ``max(label) + 1`` when the targets are class indices known in advance.
        vocab_size: the number of token ids, for token data.
        hint: added when the first layer cannot take the inputs.
        masked: whether batches carry a ``mask``.
    """

    name: str
    inputs: jax.ShapeDtypeStruct
    targets: jax.ShapeDtypeStruct
    origin: str
    classes: int | None = None
    vocab_size: int | None = None
    hint: str = ""
    masked: bool = False


def epoch_order(seed: int, epoch: int, size: int) -> np.ndarray:
    """The permutation of ``range(size)`` used in ``epoch``: a pure function of its arguments.

    Example:
        >>> from nnx_plugins.training.data._base import epoch_order
        >>> epoch_order(0, 3, 5).tolist() == epoch_order(0, 3, 5).tolist()
        True
        >>> sorted(epoch_order(0, 3, 5).tolist())
        [0, 1, 2, 3, 4]
    """
    return np.random.default_rng([seed, epoch]).permutation(size)


@functools.lru_cache(maxsize=2)
def _cached_order(seed: int, epoch: int, size: int) -> np.ndarray:
    return epoch_order(seed, epoch, size)


class Dataset:
    """The interface a run uses (a pack's dataset need not subclass it: see the design page).

    Subclasses define `describe`, `batch` and `test_batches` (and `steps_per_epoch` unless
    the data has no epochs); `state` / `check_state` say what a checkpoint must agree on.
    ``path_arguments`` names the ``__init__`` arguments that are file paths, resolved against
    the config file's folder.
    """

    name: str = "data"
    path_arguments: tuple[str, ...] = ("path",)

    @classmethod
    def resolve_path(cls, value: str, folder: str) -> str:
        """A path argument as given in a config file in ``folder``: relative to that folder."""
        return value if os.path.isabs(value) else os.path.join(folder, value)

    def describe(self) -> DataInfo:
        """What a batch holds; cheap where possible (``nnx config validate`` asks it)."""
        raise NotImplementedError(f"{type(self).__name__} does not define describe().")

    def steps_per_epoch(self, batch_size: int) -> int:
        """Full batches per epoch; what ``train.epochs`` counts."""
        raise NotImplementedError(f"{type(self).__name__} has no epochs: give train.steps.")

    def batch(self, step: int, batch_size: int, seed: int) -> Batch:
        """The training batch of global ``step``: a pure function of the arguments."""
        raise NotImplementedError(f"{type(self).__name__} does not define batch().")

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        """The test split, in batches of at most ``batch_size``; it ends."""
        raise NotImplementedError(f"{type(self).__name__} does not define test_batches().")

    def label_arrays(self) -> tuple[tuple[str, np.ndarray, int], ...]:
        """The targets held in memory for the task to check, as ``(name, array, offset)``: the
        array's name in the source and the index of its first row there; ``()`` if streamed."""
        return ()

    def state(self) -> dict[str, Any]:
        """JSON-able facts saved with each checkpoint (e.g. a vocabulary)."""
        return {}

    def check_state(self, saved: Mapping[str, Any]) -> str | None:
        """Why a checkpoint's saved `state` does not fit this data (``None``: it fits)."""
        return None


def narrow(array: np.ndarray, what: str) -> np.ndarray:
    """``array`` in a dtype JAX keeps without 64-bit mode: float64 -> float32, int64 -> int32
    (and uint64 -> uint32) when every value fits, bool and narrower types as they are.

    Raises:
        DataError: a 64-bit integer value that does not fit in 32 bits (the first, with its
            index), a non-numeric dtype, or no example axis.

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.training.data._base import narrow
        >>> narrow(np.array([1.5]), "x").dtype.name, narrow(np.array([3]), "y").dtype.name
        ('float32', 'int32')
        >>> narrow(np.array([1, 2**31 + 5]), "y")
        Traceback (most recent call last):
        ...
        nnx_plugins.training.data._base.DataError: y[1] is 2147483653, which does not fit in int32 (the largest is 2147483647); ...
    """
    if array.ndim == 0:
        raise DataError(
            f"{what} is a single value ({array.dtype.name}, shape ()); it needs one row per "
            "example (shape (examples, ...))."
        )
    kind = array.dtype.kind
    if kind not in "biufc" or array.dtype.hasobject:
        raise DataError(
            f"{what} holds {array.dtype} values; inputs and targets must be numbers or "
            "booleans (convert strings to numbers or token ids first)."
        )
    if array.dtype == np.float64:
        return array.astype(np.float32)
    if array.dtype == np.complex128:
        return array.astype(np.complex64)
    if array.dtype in (np.int64, np.uint64):
        target = np.int32 if array.dtype == np.int64 else np.uint32
        limits = np.iinfo(target)
        bad = np.flatnonzero((array < limits.min) | (array > limits.max))
        if bad.size:
            index = np.unravel_index(bad[0], array.shape)
            where = ", ".join(map(str, index))
            raise DataError(
                f"{what}[{where}] is {array[index]}, which does not fit in "
                f"{np.dtype(target).name} (the largest is {limits.max}); JAX computes in 32 "
                "bits. Fix the value, or store it in a float type if it is not an index."
            )
        return array.astype(target)
    return array


class ArrayDataset(Dataset):
    """A dataset of in-memory arrays: ``(x_train, y_train, x_test, y_test)``.

    Give the arrays to ``__init__``, or override `load_arrays` (read once, on first use, so
    that ``describe`` of a subclass that overrides it stays cheap). Arrays are narrowed to
    what JAX keeps (`narrow`) and must be finite; each epoch's order is `epoch_order`, and the remainder of an
    epoch that does not fill a batch is skipped.
    """

    def __init__(
        self,
        x_train: Any = None,
        y_train: Any = None,
        x_test: Any = None,
        y_test: Any = None,
        *,
        name: str = "data",
    ):
        self._given = (x_train, y_train, x_test, y_test)
        self.name = name

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The four arrays (called once); by default, those given to ``__init__``."""
        if any(part is None for part in self._given):
            raise NotImplementedError(
                f"{type(self).__name__} gives no arrays: pass them to ArrayDataset.__init__ "
                "or override load_arrays()."
            )
        x, y, x_test, y_test = self._given
        return np.asarray(x), np.asarray(y), np.asarray(x_test), np.asarray(y_test)

    @functools.cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The four arrays, checked to fit together and narrowed."""
        names = ("x", "y", "x_test", "y_test")
        parts = [
            narrow(np.asarray(a), f"{self.name}: {n}") for a, n in zip(self.load_arrays(), names)
        ]
        for array, key in zip(parts, names):
            check_finite(array, f"{self.name}: {key}")
        check_split(parts[0], parts[1], self.name, ("x", "y"))
        check_split(parts[2], parts[3], self.name, ("x_test", "y_test"))
        for (train, test), (a, b) in zip(((0, 2), (1, 3)), (("x", "x_test"), ("y", "y_test"))):
            if parts[train].shape[1:] != parts[test].shape[1:]:
                raise DataError(
                    f"{self.name}: {a!r} has examples of shape {parts[train].shape[1:]} but "
                    f"{b!r} of shape {parts[test].shape[1:]}; both splits need the same shape."
                )
        return parts[0], parts[1], parts[2], parts[3]

    @property
    def x_train(self) -> np.ndarray:
        return self.arrays[0]

    @property
    def y_train(self) -> np.ndarray:
        return self.arrays[1]

    @property
    def x_test(self) -> np.ndarray:
        return self.arrays[2]

    @property
    def y_test(self) -> np.ndarray:
        return self.arrays[3]

    def describe(self) -> DataInfo:
        x, y, _, y_test = self.arrays
        classes = None
        if np.issubdtype(y.dtype, np.integer) and y.ndim == 1:
            classes = int(max(y.max(initial=0), y_test.max(initial=0))) + 1
        return DataInfo(
            self.name,
            jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
            jax.ShapeDtypeStruct(y.shape[1:], y.dtype),
            f"data ({self.name})",
            classes=classes,
        )

    def steps_per_epoch(self, batch_size: int) -> int:
        """Full batches per epoch.

        Raises:
            DataError: the training set is smaller than one batch.
        """
        steps = len(self.x_train) // batch_size
        if steps == 0:
            raise DataError(
                f"{self.name} has {len(self.x_train)} training examples, fewer than one batch "
                f"of {batch_size}; lower train.batch_size."
            )
        return steps

    def batch(self, step: int, batch_size: int, seed: int) -> Batch:
        epoch, index = divmod(step, self.steps_per_epoch(batch_size))
        take = _cached_order(seed, epoch, len(self.x_train))[
            index * batch_size : (index + 1) * batch_size
        ]
        return {"inputs": self.x_train[take], "targets": self.y_train[take]}

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        for start in range(0, len(self.x_test), batch_size):
            stop = start + batch_size
            yield {"inputs": self.x_test[start:stop], "targets": self.y_test[start:stop]}

    def label_arrays(self) -> tuple[tuple[str, np.ndarray, int], ...]:
        return (("y", self.y_train, 0), ("y_test", self.y_test, 0))


def check_split(x: np.ndarray, y: np.ndarray, name: str, keys: tuple[str, str]) -> None:
    """Refuse inputs and targets of different lengths (named by their ``keys``)."""
    if len(x) != len(y):
        raise DataError(
            f"{name}: {keys[0]!r} has {len(x)} examples but {keys[1]!r} has {len(y)}; each "
            "example needs one target."
        )


def check_finite(array: np.ndarray, what: str) -> None:
    """Refuse a float array holding NaN or inf, naming the first such value and its index."""
    if array.dtype.kind not in "fc" or array.size == 0:
        return
    finite = np.isfinite(array)
    if not finite.all():
        index = np.unravel_index(int(np.argmin(finite)), array.shape)
        raise DataError(
            f"{what}[{', '.join(map(str, index))}] is {array[index]}: inputs and targets must "
            "be finite (a NaN or inf makes every loss after it NaN). Fix or drop that example."
        )

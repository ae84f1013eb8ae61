"""What a dataset is to a run: `DataInfo`, the `Dataset` interface and `ArrayDataset`.

A batch is a dict of numpy arrays: ``inputs``, ``targets`` and, where some positions do not
count, ``mask``. The batch of a step is a pure function of ``(seed, step)``: a resumed run sees
exactly the batches an uninterrupted run would have seen (docs/design/runs.md). Besides the
training and test splits, a dataset may give a validation split (``val_batches``), its own or
held out of the training examples (``hold_out``).

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
    >>> data.hold_out(0.25, seed=0), data.x_train.shape, data.x_val.shape
    (True, (6, 2), (2, 2))
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
    "check_fraction",
    "first_outside",
    "held_out_rows",
    "DEFAULT_VALIDATION",
]

Batch = dict[str, np.ndarray]

#: the share of the training examples held out for validation when ``data.validation`` is unset
DEFAULT_VALIDATION = 0.1
#: the random stream of the held-out rows (the epochs' orders use ``[seed, epoch]``)
_VALIDATION_STREAM = 2**32 - 1


class DataError(NnxError, ValueError):
    """Data cannot be read or does not fit the run; ``.key`` is the ``data`` argument concerned
    and ``.problem``, once located, where the config writes it (a `Problem`).

    Example:
        >>> from nnx_plugins import DataError
        >>> error = DataError("no such file 'a.npz'.", key="path")
        >>> str(error), error.key
        ("no such file 'a.npz'.", 'path')
    """

    def __init__(self, message: str, *, key: str | None = None, problem: Any = None):
        super().__init__(message)
        self.message = message
        self.key = key
        self.problem = problem


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

    A validation split (split ``val``, what callbacks and ``checkpoint.keep_best`` watch) comes
    from one of two optional methods. A dataset that streams defines
    ``val_batches(batch_size) -> Iterator[batch]`` (bounded, like `test_batches`): its own
    split. A dataset that can set examples aside defines ``hold_out(fraction, *, seed) ->
    bool`` (`ArrayDataset` and the ``text`` dataset do): the run calls it before training with
    ``data.validation`` (``None`` when unset) and ``train.seed``, and it returns whether there
    is a validation split; ``val_batches`` then yields it. A dataset with neither has no
    validation split. ``validation`` is a key of the ``data`` section itself, so a dataset's
    ``__init__`` must not take an argument of that name.
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

    def input_arrays(self) -> tuple[tuple[str, np.ndarray, int], ...]:
        """The inputs held in memory, as `label_arrays` (token ids are checked against the
        model's ``Embed``); ``()`` if streamed."""
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
            index), a complex or non-numeric dtype, or no example axis.

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
    if kind == "c":
        raise DataError(
            f"{what} holds complex values ({array.dtype}); inputs and targets must be real "
            "numbers (a model would silently use the real part only). Give the real and "
            "imaginary parts as separate features, e.g. np.stack([z.real, z.imag], -1)."
        )
    if kind not in "biuf" or array.dtype.hasobject:
        raise DataError(
            f"{what} holds {array.dtype} values; inputs and targets must be numbers or "
            "booleans (convert strings to numbers or token ids first)."
        )
    if array.dtype == np.float64:
        return array.astype(np.float32)
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
    """A dataset of in-memory arrays: ``(x_train, y_train, x_test, y_test)`` and, optionally, a
    validation split of its own (``x_val``, ``y_val``).

    Give the arrays to ``__init__``, or override `load_arrays` (and `load_validation`; read once,
    on first use, so that ``describe`` of a subclass that overrides them stays cheap). Arrays
    are narrowed to what JAX keeps (`narrow`) and must be finite; each epoch's order is
    `epoch_order`, and the remainder of an epoch that does not fill a batch is skipped.

    Without validation arrays of its own, `hold_out` (called by the run with ``data.validation``
    and ``train.seed``) holds a seeded share of the training examples out as the validation
    split: ``x_train`` and ``y_train`` are then what is left for training.
    """

    def __init__(
        self,
        x_train: Any = None,
        y_train: Any = None,
        x_test: Any = None,
        y_test: Any = None,
        *,
        x_val: Any = None,
        y_val: Any = None,
        name: str = "data",
    ):
        self._given = (x_train, y_train, x_test, y_test)
        self._given_val = (x_val, y_val)
        self._holdout: tuple[float, int] | None = None  # (fraction, seed) of `hold_out`
        self._use_own = False  # (whether `hold_out` chose the data's own validation arrays)
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

    def load_validation(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The dataset's own validation arrays ``(x_val, y_val)`` (called once), or ``None``;
        by default those given to ``__init__``."""
        x_val, y_val = self._given_val
        if x_val is None and y_val is None:
            return None
        if x_val is None or y_val is None:
            given = "x_val" if y_val is None else "y_val"
            raise DataError(
                f"{self.name}: {given} was given without "
                f"{'y_val' if given == 'x_val' else 'x_val'}; a validation split needs both."
            )
        return np.asarray(x_val), np.asarray(y_val)

    @functools.cached_property
    def loaded(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The arrays as loaded, checked to fit together and narrowed, by split (``train``,
        ``test`` and, when the data has its own, ``val``): before any holding out."""
        names = {"train": ("x", "y"), "test": ("x_test", "y_test"), "val": ("x_val", "y_val")}
        x, y, x_test, y_test = self.load_arrays()
        raw = {"train": (x, y), "test": (x_test, y_test)}
        own = self.load_validation()
        if own is not None:
            raw["val"] = own
        parts = {}
        for split, arrays in raw.items():
            keys = names[split]
            pair = [narrow(np.asarray(a), f"{self.name}: {k}") for a, k in zip(arrays, keys)]
            for array, key in zip(pair, keys):
                check_finite(array, f"{self.name}: {key}")
            check_split(pair[0], pair[1], self.name, keys)
            parts[split] = (pair[0], pair[1])
        for split in parts:
            for i in (0, 1):
                train, other = parts["train"][i], parts[split][i]
                if train.shape[1:] != other.shape[1:]:
                    a, b = names["train"][i], names[split][i]
                    raise DataError(
                        f"{self.name}: {a!r} has examples of shape {train.shape[1:]} but {b!r} "
                        f"of shape {other.shape[1:]}; every split needs the same shape."
                    )
        return parts

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(x_train, y_train, x_test, y_test)``: the training part after any holding out."""
        return self.x_train, self.y_train, self.x_test, self.y_test

    def has_own_validation(self) -> bool:
        """Whether the data comes with validation arrays of its own (`load_validation`)."""
        return "val" in self.loaded

    def hold_out(self, fraction: float | None, *, seed: int) -> bool:
        """Choose the validation split; whether there is one.

        Args:
            fraction: ``None`` for the default (the data's own validation arrays, or
                `DEFAULT_VALIDATION` of the training examples), ``0`` for none, else the share
                of the training examples held out (drawn with ``seed``).
            seed: the run's ``train.seed``.

        Raises:
            DataError: a fraction outside ``[0, 1)``, a fraction given for data with validation
                arrays of its own, or too few training examples to hold any out.
        """
        check_fraction(fraction)
        self.__dict__.pop("_splits", None)
        if fraction == 0:
            self._holdout = None
            self._use_own = False
            return False
        self._use_own = self.has_own_validation()
        if self._use_own:
            if fraction is not None:
                raise DataError(
                    f"{self.name} has validation arrays of its own (x_val, y_val); remove "
                    "data.validation to use them, or set it to 0 to train without a "
                    "validation split.",
                    key="validation",
                )
            self._holdout = None
            return True
        fraction = DEFAULT_VALIDATION if fraction is None else fraction
        count = len(self.loaded["train"][0])
        if count - held_count(count, fraction) < 1:
            raise DataError(
                f"{self.name} has {count} training example(s): too few to hold "
                f"{fraction:g} of them out for validation. Give more data or set "
                "data.validation: 0.",
                key="validation",
            )
        self._holdout = (fraction, seed)
        return True

    @functools.cached_property
    def _splits(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        parts = dict(self.loaded)
        if not getattr(self, "_use_own", False):
            parts.pop("val", None)
        holdout = getattr(self, "_holdout", None)
        if holdout is not None:
            fraction, seed = holdout
            x, y = parts["train"]
            val, keep = held_out_rows(len(x), fraction, seed)
            parts["train"], parts["val"] = (x[keep], y[keep]), (x[val], y[val])
        return parts

    @property
    def x_train(self) -> np.ndarray:
        return self._splits["train"][0]

    @property
    def y_train(self) -> np.ndarray:
        return self._splits["train"][1]

    @property
    def x_test(self) -> np.ndarray:
        return self._splits["test"][0]

    @property
    def y_test(self) -> np.ndarray:
        return self._splits["test"][1]

    @property
    def x_val(self) -> np.ndarray | None:
        """The validation inputs (``None``: no validation split)."""
        return self._splits["val"][0] if "val" in self._splits else None

    @property
    def y_val(self) -> np.ndarray | None:
        return self._splits["val"][1] if "val" in self._splits else None

    def describe(self) -> DataInfo:
        x, y = self.loaded["train"]
        classes = None
        if np.issubdtype(y.dtype, np.integer) and y.ndim == 1:
            classes = int(max(part[1].max(initial=0) for part in self.loaded.values())) + 1
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
            held = " (after holding the validation split out)" if "val" in self._splits else ""
            raise DataError(
                f"{self.name} has {len(self.x_train)} training examples{held}, fewer than one "
                f"batch of {batch_size}; lower train.batch_size."
            )
        return steps

    def batch(self, step: int, batch_size: int, seed: int) -> Batch:
        epoch, index = divmod(step, self.steps_per_epoch(batch_size))
        take = _cached_order(seed, epoch, len(self.x_train))[
            index * batch_size : (index + 1) * batch_size
        ]
        return {"inputs": self.x_train[take], "targets": self.y_train[take]}

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        return _in_batches(self.x_test, self.y_test, batch_size)

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        """The validation split in batches of at most ``batch_size`` (none without one)."""
        if self.x_val is None or self.y_val is None:
            return iter(())
        return _in_batches(self.x_val, self.y_val, batch_size)

    def label_arrays(self) -> tuple[tuple[str, np.ndarray, int], ...]:
        names = {"train": "y", "test": "y_test", "val": "y_val"}
        return tuple((names[split], pair[1], 0) for split, pair in self.loaded.items())

    def input_arrays(self) -> tuple[tuple[str, np.ndarray, int], ...]:
        names = {"train": "x", "test": "x_test", "val": "x_val"}
        return tuple((names[split], pair[0], 0) for split, pair in self.loaded.items())


def _in_batches(x: np.ndarray, y: np.ndarray, batch_size: int) -> Iterator[Batch]:
    for start in range(0, len(x), batch_size):
        stop = start + batch_size
        yield {"inputs": x[start:stop], "targets": y[start:stop]}


def check_fraction(fraction: Any) -> None:
    """Refuse a validation fraction that is not ``None`` or a number in ``[0, 1)``."""
    if fraction is None:
        return
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise DataError(
            f"validation must be a fraction in [0, 1), got {fraction!r}.", key="validation"
        )
    if not 0 <= fraction < 1:
        raise DataError(
            f"validation must be a fraction in [0, 1) (0: no validation split), got {fraction}.",
            key="validation",
        )


def held_count(count: int, fraction: float) -> int:
    """How many of ``count`` examples a validation ``fraction`` holds out: at least one."""
    return max(1, int(round(count * fraction)))


def held_out_rows(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(validation rows, training rows)`` of ``count`` examples, each in increasing order: the
    validation rows drawn with ``seed`` (a stream of their own, apart from the epochs' orders).

    Example:
        >>> from nnx_plugins.training.data._base import held_out_rows
        >>> val, train = held_out_rows(10, 0.2, seed=0)
        >>> len(val), len(train), sorted(val.tolist() + train.tolist()) == list(range(10))
        (2, 8, True)
    """
    chosen = np.random.default_rng([seed, _VALIDATION_STREAM]).permutation(count)
    held = np.sort(chosen[: held_count(count, fraction)])
    keep = np.setdiff1d(np.arange(count), held)
    return held, keep


def first_outside(arrays: Any, size: int) -> tuple[str, str, int] | None:
    """The first id outside ``[0, size)`` among ``arrays`` (``(name, array, offset)`` triples,
    as `Dataset.label_arrays` gives them): ``(name, "i, j", value)``, its place in the source
    (the first index shifted by the offset), or ``None``.

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.training.data._base import first_outside
        >>> first_outside([("y", np.array([[0, 1], [7, -1]]), 10)], 4)
        ('y', '11, 0', 7)
    """
    for name, values, offset in arrays:
        values = np.asarray(values)
        bad = np.flatnonzero((values < 0) | (values >= size))
        if bad.size:
            index = np.unravel_index(int(bad[0]), values.shape)
            where = ", ".join(map(str, (int(index[0]) + offset, *map(int, index[1:]))))
            return name, where, int(values[index])
    return None


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

"""Calling a run's parts and holding them to their promises.

A task, dataset, metric, logger or callback may come from any installed pack. What one raises
while the run calls it (a logger's ``write``, a callback's ``after_eval``, a dataset's
``describe``) becomes one `RunPartError` naming the part, the distribution (and version) that
provides it and what it was doing, instead of a traceback from inside the pack; what one gives
back is checked where the run relies on it: each batch against what ``describe()`` promised
(`check_batch`), each metric's value a single number (`check_scalar`). The project's own
errors (`NnxError`: a full disk, bad data, a bad checkpoint) pass through unchanged: they say
what happened already.

Example:
    >>> from nnx_plugins.training._part_calls import PartLabel, RunPartError
    >>> label = PartLabel("logger", "jsonl", ("loggers", 0))
    >>> str(label)
    "logger 'jsonl' at loggers[0] (nnx-jax ...)"
    >>> try:
    ...     with label.calling("write(record)"):
    ...         raise OSError("the device is gone")
    ... except RunPartError as error:
    ...     print(error.message)
    logger 'jsonl' at loggers[0] (nnx-jax ...) failed in write(record): OSError: the device is gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

from .._errors import NnxError
from .._text import format_path
from ..config._shapes import spell
from ..registry._errors import PluginError, PluginInfo
from ..registry._providers import NOUN
from ..registry._registry import default_registry

__all__ = ["RunPartError", "PartLabel", "check_batch", "check_scalar", "guarded_batches"]


class RunPartError(PluginError):
    """A run part (task, dataset, metric, logger, callback) failed while the run called it, or
    gave what it had not promised; ``.plugin`` is its distribution, ``.part`` its label and
    ``.path`` where the config names it (``("callbacks", 1)``).

    Example:
        >>> from nnx_plugins import RunPartError
        >>> from nnx_plugins import PluginError
        >>> issubclass(RunPartError, PluginError)
        True
    """

    def __init__(
        self,
        message: str,
        *,
        plugin: PluginInfo | None,
        part: str,
        path: tuple[Any, ...] = (),
        fix: str = "",
    ):
        super().__init__(message, plugin=plugin, fix=fix)
        self.part, self.path = part, path


@dataclasses.dataclass(frozen=True)
class PartLabel:
    """Which part of a run an object is: its kind, its registered name and where the config
    names it (``("callbacks", 1)``; the position is shown when the section lists several)."""

    kind: str
    name: str
    path: tuple[Any, ...] = ()

    @functools.cached_property
    def plugin(self) -> PluginInfo | None:
        """The distribution that provides the part (``None``: not known to the registry)."""
        try:
            return default_registry().resolve(self.kind, self.name).plugin
        except Exception:  # noqa: BLE001 - a label must never fail: it names a failure
            return None

    def __str__(self) -> str:
        where = f" at {format_path(self.path)}" if len(self.path) > 1 else ""
        plugin = self.plugin
        by = "registered in-process" if plugin is not None and not plugin.version else plugin
        return f"{NOUN[self.kind]} {self.name!r}{where} ({by or 'not registered'})"

    def error(self, what: str, fix: str = "") -> RunPartError:
        """A `RunPartError` saying that this part ``what``."""
        text = f"{self} {what}"
        return RunPartError(
            text if text.endswith((".", ")", "?")) else f"{text}.",
            plugin=self.plugin,
            part=str(self),
            path=self.path,
            fix=fix or self._fix(),
        )

    def _fix(self) -> str:
        plugin = self.plugin
        if plugin is None or plugin.distribution == "nnx-jax":
            return ""
        if not plugin.version:
            return "Fix the class registered in this process."
        return f"Report it to the authors of {plugin.distribution}, or leave the part out."

    @contextlib.contextmanager
    def calling(self, what: str) -> Iterator[None]:
        """Inside the block, an exception (not the project's own errors) becomes a
        `RunPartError` saying this part failed in ``what``."""
        try:
            yield
        except NnxError:
            raise
        except Exception as error:  # noqa: BLE001 - whatever a pack's part raises is named
            raise self.failed(what, error) from error

    def failed(self, what: str, error: BaseException) -> RunPartError:
        """A `RunPartError` saying that this part raised ``error`` in ``what``."""
        text = str(error).strip()
        if len(text) > 500:
            text = text[:500] + " ..."
        cause = f"{type(error).__name__}: {text}" if text else type(error).__name__
        return self.error(f"failed in {what}: {cause}")


def _promised(struct: Any, rows: int | None) -> str:
    leading = "rows" if rows is None else str(rows)
    return f"{jax.numpy.dtype(struct.dtype).name}[{', '.join([leading, *map(str, struct.shape)])}]"


def check_batch(
    label: PartLabel, batch: Any, info: Any, *, rows: int | None, what: str
) -> dict[str, Any]:
    """``batch`` if it holds what ``info`` (the dataset's `DataInfo`) promised: a mapping with
    ``inputs`` and ``targets`` (and ``mask`` when masked) of the described example shapes and
    dtypes, ``rows`` of them (any number from 1 when ``rows`` is None).

    Raises:
        RunPartError: naming the dataset, the batch (``what``), what it held and what was promised.
    """
    if rows is not None and _as_promised(batch, info, rows):
        return batch  # (the common case, checked in a few microseconds: it runs every step)
    if not isinstance(batch, Mapping) or "inputs" not in batch or "targets" not in batch:
        held = sorted(map(str, batch)) if isinstance(batch, Mapping) else type(batch).__name__
        raise label.error(f"gave {what} that is not a dict with 'inputs' and 'targets': {held}.")
    structs = {"inputs": info.inputs, "targets": info.targets}
    if "mask" in batch:
        structs["mask"] = jax.ShapeDtypeStruct(info.targets.shape, np.float32)
    count = None
    for key, struct in structs.items():
        array = batch[key]
        shape = tuple(getattr(array, "shape", ()) or ())
        dtype = getattr(array, "dtype", None)
        size = shape[0] if shape else None
        count = size if count is None else count
        fits = shape[1:] == tuple(struct.shape) and size is not None and size >= 1
        fits = fits and (size == rows if rows is not None else size == count)
        if key != "mask" and fits:
            fits = dtype is not None and _same_dtype(dtype, struct.dtype)
        if not fits:
            raise label.error(
                f"gave {what} whose {key} are {spell(array)}, but its describe() promised "
                f"{_promised(struct, rows)}{' (its mask: one value per target)' if key == 'mask' else ''}"
                ": every batch must hold what describe() says, with the same number of rows "
                "in each array.",
            )
    for key in set(batch) - set(structs):
        if tuple(getattr(batch[key], "shape", ()) or ())[:1] != (count,):
            raise label.error(
                f"gave {what} whose {key!r} is {spell(batch[key])}: every array of a batch needs "
                f"one row per example ({count})."
            )
    return dict(batch)


def _as_promised(batch: Any, info: Any, rows: int) -> bool:
    """Whether ``batch`` is exactly a dict of ``inputs`` and ``targets`` as described."""
    if type(batch) is not dict or len(batch) != 2:
        return False
    inputs, targets = batch.get("inputs"), batch.get("targets")
    return (
        type(inputs) is np.ndarray
        and type(targets) is np.ndarray
        and inputs.dtype == info.inputs.dtype
        and targets.dtype == info.targets.dtype
        and inputs.shape == (rows, *info.inputs.shape)
        and targets.shape == (rows, *info.targets.shape)
    )


def _same_dtype(given: Any, promised: Any) -> bool:
    try:
        canonical = jax.dtypes.canonicalize_dtype
        return bool(canonical(np.dtype(given)) == canonical(np.dtype(promised)))
    except TypeError:
        return False


def guarded_batches(
    label: PartLabel, data: Any, method: str, info: Any, batch_size: int
) -> Iterator[dict[str, Any]]:
    """The batches of ``data``'s method ``method`` (``test_batches``, ``val_batches``), each
    checked against ``info`` (at most ``batch_size`` rows); ``label`` names ``data``."""
    with label.calling(f"{method}({batch_size})"):
        batches = iter(getattr(data, method)(batch_size))
    index = 0
    while True:
        with label.calling(f"{method}({batch_size})"):
            batch = next(batches, None)
        if batch is None:
            if index == 0:
                raise label.error(
                    f"gave no batch from {method}({batch_size}): a split the run evaluates "
                    "needs at least one example."
                )
            return
        index += 1
        checked = check_batch(label, batch, info, rows=None, what=f"{method} batch {index}")
        if len(checked["inputs"]) > batch_size:
            raise label.error(
                f"gave {method} batch {index} of {len(checked['inputs'])} rows when asked for at "
                f"most {batch_size}."
            )
        yield checked


def check_scalar(label: PartLabel, key: str, value: Any) -> float:
    """``value`` as a float, if it is one number (a metric's ``compute()``).

    Raises:
        RunPartError: it is not a single number (a vector, a string, ...).
    """
    try:
        array = np.asarray(value)
        if array.shape != () or array.dtype.kind not in "biuf":
            raise TypeError
        return float(array)
    except (TypeError, ValueError):
        raise label.error(
            f"reported {key!r} as {spell(value) if hasattr(value, 'shape') else repr(value)[:80]}"
            ": compute() must return one number (a scalar), e.g. the mean over the split."
        ) from None

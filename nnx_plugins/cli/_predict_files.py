"""The files of ``nnx predict``: the examples read (``.npz`` or ``.csv``, within the data
limits), the outputs written (whole or not at all).

Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> from nnx_plugins.cli._predict_files import output_columns
    >>> output_columns(np.zeros((4, 3), np.float32), classes=True, targets=["kind"])
    ['kind', 'logit_0', 'logit_1', 'logit_2']
    >>> output_columns(np.zeros((4, 2), np.float32), classes=False, targets=["a", "b"])
    ['a', 'b']
    >>> output_columns(np.zeros((4,), np.float32), classes=False, targets=[])
    ['output']
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._errors import NnxError
from .._files import usual_mode
from .._stopping import published, shielded
from .._text import os_problem
from ..training.data._base import check_finite, narrow
from ..training.data._csv import read_csv, read_header
from ..training.data._files import open_regular
from ..training.data._npz import read_npz

__all__ = [
    "PredictError",
    "SUFFIXES",
    "Inputs",
    "Outputs",
    "check_suffix",
    "check_output",
    "check_writable",
    "read_inputs",
    "write_outputs",
    "output_columns",
]


SUFFIXES = (".npz", ".csv")


class PredictError(NnxError, ValueError):
    """``nnx predict`` was given files it cannot use; the message names the file and the fix."""


def check_suffix(path: str, role: str) -> str:
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise PredictError(
            f"--{role} {path}: unknown extension {suffix or '(none)'!r}; nnx predict reads "
            "and writes .npz and .csv files."
        )
    return suffix


def check_output(path: str, *, overwrite: bool, input_path: str) -> None:
    """Refuse an output that exists (without ``overwrite``), that is the input, that is a
    directory, or whose folder does not exist.

    Raises:
        PredictError: naming the path and the fix.
    """
    if os.path.isdir(path) and not os.path.islink(path):  # (before its extension is asked)
        raise PredictError(f"--output {path} is a directory; give a file name.")
    check_suffix(path, "output")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        there = "is a file, not a folder" if os.path.lexists(folder) else "does not exist"
        fix = "give a path in a folder" if os.path.lexists(folder) else "create it first"
        raise PredictError(f"--output {path}: the folder {folder} {there}; {fix}.")
    if os.path.lexists(path):
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            raise PredictError(f"--output {path} is a directory; give a file name.")
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # (a device, a FIFO: not replaced)
            raise PredictError(
                f"--output {path} is not a regular file (a device, a FIFO or a socket); nnx "
                "predict writes a file of its own: give a file name."
            )
        if os.path.exists(input_path) and os.path.samefile(path, input_path):
            raise PredictError(f"--output {path} is the input file; give another file name.")
        if not overwrite:
            raise PredictError(
                f"--output {path} exists; give another file name, or --overwrite to replace it."
            )


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The examples of the input file, where they came from (for messages), and whether from a
    CSV (read as floats: integers such as token ids must come in an .npz)."""

    array: np.ndarray
    origin: str
    from_csv: bool = False


@dataclasses.dataclass(frozen=True)
class Outputs:
    """What the model gave: its ``outputs`` and the checkpoint they came from."""

    outputs: np.ndarray
    checkpoint: str
    step: int | None


def _data(config: Any) -> tuple[str, dict[str, Any]]:
    section = config.sections["data"]
    return section.type, dict(section.arguments)


def read_inputs(path: str, config: Any, *, key: str | None) -> Inputs:
    """The examples of ``path`` (``.npz``: the array ``key``; ``.csv``: the columns the
    config's ``csv`` data trains on, else every column), narrowed and checked finite.

    Raises:
        DataError: the file cannot be read (see `read_npz`, `read_csv`).
        PredictError: the array is missing, or the file holds no examples.
    """
    kind, arguments = _data(config)
    name = os.path.basename(path)
    if path.lower().endswith(".npz"):
        key = key or (arguments.get("x") if kind == "npz" else None) or "x"
        found = read_npz(path, [key], required=[])
        if key not in found:
            raise PredictError(
                f"--input {path} has no array {key[:40]!r}; it holds {_arrays(path)}. Choose one "
                "with --input-key."
            )
        array, origin = found[key], f"{name}: array {key[:40]!r}"
    else:
        if key is not None:
            raise PredictError("--input-key names an array of an .npz input; a .csv has columns.")
        columns = _csv_columns(path, kind, arguments)
        array = read_csv(path, columns)
        origin = f"{name}: {len(columns)} column{'s' * (len(columns) != 1)}"
    array = narrow(array, f"--input {name}")
    check_finite(array, f"--input {name}")
    if len(array) == 0:
        raise PredictError(f"--input {path} holds no examples (its first axis has size 0).")
    return Inputs(array, origin, from_csv=not path.lower().endswith(".npz"))


def _arrays(path: str) -> str:
    """The arrays of an .npz file, by name (at most 20 shown)."""
    try:
        with open_regular(path) as handle, zipfile.ZipFile(handle) as archive:
            names = sorted(n[:-4] for n in archive.namelist() if n.endswith(".npy"))
    except (OSError, zipfile.BadZipFile, ValueError):
        names = []
    if not names:
        return "no arrays"
    shown = ", ".join(repr(n[:40]) for n in names[:20])
    return f"the arrays {shown}" + (f" and {len(names) - 20:,} more" if len(names) > 20 else "")


def _csv_columns(path: str, kind: str, arguments: dict[str, Any]) -> list[str]:
    """The input columns: those the config's csv data trains on (by name), else all."""
    if kind != "csv":
        return read_header(path)
    if arguments.get("inputs"):
        return list(arguments["inputs"])
    target = arguments.get("target")
    targets = [target] if isinstance(target, str) else list(target or [])
    trained = arguments.get("path")
    if isinstance(trained, str) and os.path.isfile(trained):  # (its columns, in its order)
        names = read_header(trained, delimiter=arguments.get("delimiter", ","))
    else:
        names = read_header(path)
    return [c for c in names if c not in targets]


def output_columns(outputs: np.ndarray, *, classes: bool, targets: list[str]) -> list[str]:
    """The header of a CSV of ``outputs`` (one row per example)."""
    width = 1 if outputs.ndim == 1 else outputs.shape[1]
    if classes:
        return [targets[0] if len(targets) == 1 else "label", *(f"logit_{i}" for i in range(width))]
    if len(targets) == width:
        return list(targets)
    return ["output"] if width == 1 else [f"output_{i}" for i in range(width)]


def check_writable(path: str, output: Any) -> None:
    """Refuse, before the model runs, outputs a CSV cannot hold (more than one axis per
    example, or not one array).

    Raises:
        PredictError: naming the output's shape and the fix (.npz).
    """
    if not path.lower().endswith(".csv"):
        if not hasattr(output, "shape"):
            raise PredictError(
                f"the model returns {type(output).__name__}, not one array; nnx predict writes "
                "the output of a model that returns an array."
            )
        return
    if not hasattr(output, "shape") or len(output.shape) > 2:
        shape = getattr(output, "shape", type(output).__name__)
        raise PredictError(
            f"--output {path}: the model returns {shape} for a batch, more than one value "
            "or one row of values per example, which a CSV row cannot hold; write an .npz file."
        )


def _task_facts(config: Any) -> tuple[bool, list[str]]:
    kind, arguments = _data(config)
    target = arguments.get("target") if kind == "csv" else None
    targets = [target] if isinstance(target, str) else list(target or [])
    return config.sections["task"].type == "classification", targets


def write_outputs(path: str, result: Outputs, config: Any) -> str:
    """Write the outputs to ``path`` (``.npz`` or ``.csv``) through a temporary file moved
    into place; what was written, in words.

    Raises:
        PredictError: the file cannot be written (nothing is left behind).
    """
    outputs = result.outputs
    classes, targets = _task_facts(config)
    labels = outputs.argmax(-1).astype(np.int32) if classes and outputs.ndim == 2 else None
    with _replacing(path) as handle:
        if path.lower().endswith(".npz"):
            arrays = {"predictions": outputs, **({"labels": labels} if labels is not None else {})}
            np.savez(handle, **arrays)
        else:
            _write_csv(handle, outputs, labels, targets)
    what = f"predictions {outputs.dtype.name}[{','.join(map(str, outputs.shape))}]"
    return what + (f" and labels int32[{len(outputs)}]" if labels is not None else "")


def _write_csv(handle: Any, outputs: np.ndarray, labels: Any, targets: list[str]) -> None:
    columns = output_columns(outputs, classes=labels is not None, targets=targets)
    values = outputs.reshape(len(outputs), -1).astype(np.float64)
    formats = ["%.9g"] * values.shape[1]
    if labels is not None:
        values = np.concatenate([labels[:, None].astype(np.float64), values], axis=1)
        formats = ["%d", *formats]
    header = ",".join(_csv_name(c) for c in columns)
    np.savetxt(handle, values, fmt=formats, delimiter=",", header=header, comments="")


def _csv_name(name: str) -> str:
    return f'"{name}"' if any(c in name for c in ',"\n') else name


@contextlib.contextmanager
def _replacing(path: str) -> Iterator[Any]:
    """A binary file beside ``path``, moved onto it when the block succeeds (a symbolic link
    there is replaced, not followed), removed when it fails."""
    folder = os.path.dirname(os.path.abspath(path))
    temporary, handle = None, None
    try:
        with shielded():  # (a stop waits until the temporary is made and known: then removed)
            fd, temporary = tempfile.mkstemp(prefix=".nnx-predict-", dir=folder)
            handle = os.fdopen(fd, "wb")
        usual_mode(temporary)  # (mkstemp's 0600: the output is read as the umask allows)
        with handle:
            yield handle
        with shielded():  # (put in place and recorded together)
            os.replace(temporary, path)
            published(path)
    except BaseException as error:
        if handle is not None:
            handle.close()
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if isinstance(error, OSError):
            raise PredictError(f"cannot write --output {path}: {os_problem(error)}.") from None
        raise

"""``.npz`` files read within bounds, and the ``npz`` dataset.

Every array's header is read (and bounded: 64 KiB) before any data: its shape and dtype give
the bytes it needs, which must match what the archive holds and stay within `data_limit`, so a
header claiming shape ``(10**11, 64)``, a ``|V1000000000`` dtype or a zip bomb is refused
before memory is spent. An array is then read straight into its buffer, never more bytes than
its header promises; a truncated, corrupt, empty or non-zip file is a `DataError`. No pickle.

Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> from nnx_plugins.training.data._npz import NpzDataset, read_npz
    >>> path = os.path.join(tempfile.mkdtemp(), "d.npz")
    >>> np.savez(path, x=np.ones((10, 3)), y=np.arange(10) % 2)
    >>> {k: (v.shape, v.dtype.name) for k, v in read_npz(path, ["x", "y"]).items()}
    {'x': ((10, 3), 'float64'), 'y': ((10,), 'int64')}
    >>> data = NpzDataset(path)
    >>> data.x_train.dtype.name, data.x_train.shape, data.x_test.shape
    ('float32', (8, 3), (2, 3))
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import struct
import zipfile
import zlib
from collections.abc import Sequence
from typing import IO, Any

import jax
import numpy as np

from .._memory import human_bytes
from ._base import ArrayDataset, DataError, DataInfo, check_finite, check_split, narrow
from ._files import LIMIT_VARIABLE, check_size, open_regular

__all__ = ["NpzDataset", "read_npz", "npz_headers", "ArrayHeader"]

#: the longest .npy header read (numpy writes a few hundred bytes)
MAX_HEADER = 65536
#: a compressed member larger than EXPANSION_FLOOR once read may expand at most this many times
MAX_EXPANSION = 100
EXPANSION_FLOOR = 64 * 2**20
_MAGIC = b"\x93NUMPY"
_READ_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    struct.error,
)


@dataclasses.dataclass(frozen=True)
class ArrayHeader:
    """An array's header: what reading it will give, known before reading."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool
    offset: int
    info: zipfile.ZipInfo

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _problem(path: str, text: str) -> DataError:
    return DataError(f"{path}: {text}", key="path")


def _read_header(
    stream: IO[bytes], path: str, name: str
) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """Shape, dtype, Fortran order and the header's length, reading at most `MAX_HEADER` bytes."""
    magic = stream.read(8)
    if len(magic) < 8 or magic[:6] != _MAGIC:
        raise _problem(path, f"array {name!r} is not a .npy array (no NUMPY header).")
    major = magic[6]
    if major not in (1, 2, 3):
        raise _problem(path, f"array {name!r} has a .npy header of unknown version {major}.")
    size_format = "<H" if major == 1 else "<I"
    raw_size = stream.read(struct.calcsize(size_format))
    if len(raw_size) < struct.calcsize(size_format):
        raise _problem(path, f"array {name!r} ends inside its header: the file is truncated.")
    (length,) = struct.unpack(size_format, raw_size)
    if length > MAX_HEADER:
        raise _problem(
            path,
            f"array {name!r} has a header of {length:,} bytes (numpy writes a few hundred; the "
            f"limit is {MAX_HEADER:,}): the file is corrupt or crafted.",
        )
    header = stream.read(length)
    if len(header) < length:
        raise _problem(path, f"array {name!r} ends inside its header: the file is truncated.")
    reader = (
        np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    )
    try:
        shape, fortran, dtype = reader(io.BytesIO(raw_size + header))
    except Exception as error:  # noqa: BLE001 - any unreadable header (literal_eval, dtype) is bad data
        raise _problem(  # (numpy's message quotes the header: its type only)
            path,
            f"array {name!r} has an unreadable header of {length:,} bytes "
            f"({type(error).__name__}): the file is corrupt or not written by numpy.",
        ) from None
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise _problem(path, f"array {name!r} claims an invalid shape of {len(shape)} sizes.")
    return tuple(shape), np.dtype(dtype), bool(fortran), 8 + len(raw_size) + length


def npz_headers(handle: IO[bytes], path: str, names: Sequence[str]) -> dict[str, ArrayHeader]:
    """The headers of the arrays ``names`` present in the open archive ``handle``."""
    try:
        archive = zipfile.ZipFile(handle)
        members = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}
        found = {}
        for name in names:
            info = members.get(name)
            if info is None:
                continue
            with archive.open(info) as stream:
                shape, dtype, fortran, offset = _read_header(stream, path, name)
            found[name] = ArrayHeader(name, shape, dtype, fortran, offset, info)
    except DataError:
        raise
    except _READ_ERRORS as error:
        raise _problem(path, f"cannot read it as an .npz file ({_why(error)}).") from None
    return found


def _why(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _check_headers(path: str, headers: dict[str, ArrayHeader]) -> None:
    for header in headers.values():
        held = header.info.file_size - header.offset
        if header.dtype.hasobject:
            raise _problem(
                path,
                f"array {header.name!r} holds Python objects; only numbers are read (no pickle).",
            )
        if header.nbytes != held:
            raise _problem(
                path,
                f"array {header.name!r} claims shape {header.shape} of {header.dtype} "
                f"({header.nbytes:,} bytes) but the archive holds {max(held, 0):,} bytes of "
                "data for it: the file is truncated or crafted.",
            )
        _check_expansion(path, header)
    check_size(sum(h.nbytes for h in headers.values()), f"{path} (arrays {', '.join(headers)})")


def _check_expansion(path: str, header: ArrayHeader) -> None:
    """Refuse a large member that expands like a zip bomb, unless ``NNX_DATA_MAX_BYTES`` says
    how much the user allows."""
    info = header.info
    ratio = info.file_size / max(info.compress_size, 1)
    if ratio <= MAX_EXPANSION or info.file_size <= EXPANSION_FLOOR or LIMIT_VARIABLE in os.environ:
        return
    raise _problem(
        path,
        f"array {header.name!r} expands {ratio:,.0f} times ({human_bytes(info.compress_size)} "
        f"compressed, {human_bytes(info.file_size)} once read): an archive that expands more than "
        f"{MAX_EXPANSION} times past {human_bytes(EXPANSION_FLOOR)} is refused as a likely zip "
        f"bomb. If the data is genuine, set {LIMIT_VARIABLE} to the bytes you allow it.",
    )


def _read_array(archive: zipfile.ZipFile, header: ArrayHeader, path: str) -> np.ndarray:
    count = math.prod(header.shape)
    array = np.empty(header.shape[::-1] if header.fortran else header.shape, header.dtype)
    buffer = memoryview(array.reshape(-1).view(np.uint8)) if count else memoryview(b"")
    with archive.open(header.info) as stream:
        stream.read(header.offset)
        done = 0
        while done < len(buffer):
            got = stream.readinto(buffer[done : done + (1 << 24)])  # type: ignore[attr-defined]
            if not got:
                raise _problem(path, f"array {header.name!r} ends early: the file is truncated.")
            done += got
        if stream.read(1):
            raise _problem(path, f"array {header.name!r} holds more data than its header says.")
    return array.T if header.fortran else array


def read_npz(
    path: str | os.PathLike[str], names: Sequence[str], *, required: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """The arrays ``names`` of an ``.npz`` file (those present), each checked before it is read.

    Args:
        path: a regular file.
        names: the arrays wanted (without ``.npy``).
        required: those that must be present (default: all of ``names``).

    Raises:
        DataError: not a regular file, not a readable .npz, a required array missing, a
            header that lies or asks for more than `data_limit`, a truncated or corrupt array.
    """
    name = os.fspath(path)
    required = list(names if required is None else required)
    with open_regular(name) as handle:
        headers = npz_headers(handle, name, names)
        missing = [n for n in required if n not in headers]
        if missing:
            try:
                members = [i.filename for i in zipfile.ZipFile(handle).infolist()]
            except _READ_ERRORS:
                members = []
            arrays = sorted(m[:-4] for m in members if m.endswith(".npy"))
            if not arrays:  # (another kind of zip archive: its member names are not shown)
                raise DataError(
                    f"{name} holds no .npy array ({len(members):,} other members): it is a "
                    "zip archive but not an .npz file (write it with numpy.savez).",
                    key="path",
                )
            shown = ", ".join(repr(a[:40]) for a in arrays[:20])
            more = f" and {len(arrays) - 20:,} more" if len(arrays) > 20 else ""
            raise DataError(
                f"{name} has no array {missing[0]!r}; it holds the arrays {shown}{more}. Set "
                "data.x / data.y (and data.x_test / data.y_test) to the names of its arrays.",
                key="path",
            )
        _check_headers(name, headers)
        try:
            archive = zipfile.ZipFile(handle)
            return {n: _read_array(archive, h, name) for n, h in headers.items()}
        except DataError:
            raise
        except _READ_ERRORS as error:
            raise _problem(name, f"cannot read it as an .npz file ({_why(error)}).") from None


class NpzDataset(ArrayDataset):
    """Arrays from an ``.npz`` file: inputs ``x`` and targets ``y`` (and ``x_test``/``y_test``;
    without them the last ``test_fraction`` of the examples is the test split).

    Dtypes are kept (integer inputs such as token ids stay integers), except that 64-bit types
    become 32-bit ones (float64 -> float32; int64 -> int32 when every value fits).

    Args:
        path: the ``.npz`` file; relative to the config file.
        x, y, x_test, y_test: the names of the arrays in the file.
        test_fraction: the share held out when the file has no test arrays.
    """

    def __init__(
        self,
        path: str,
        *,
        x: str = "x",
        y: str = "y",
        x_test: str = "x_test",
        y_test: str = "y_test",
        test_fraction: float = 0.2,
    ):
        super().__init__(name=os.path.basename(path))
        if not 0 < test_fraction < 1:
            raise DataError(
                f"test_fraction must be in (0, 1), got {test_fraction}.", key="test_fraction"
            )
        self.path, self.keys, self.test_fraction = path, (x, y, x_test, y_test), test_fraction
        self._split_at: int | None = None  # (where the test rows start in the file's arrays)

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        x, y, x_test, y_test = self.keys
        arrays = read_npz(self.path, [x, y, x_test, y_test], required=[x, y])
        if x_test in arrays and y_test in arrays:
            self._split_at = None
            return arrays[x], arrays[y], arrays[x_test], arrays[y_test]
        # (checked whole, so that messages index the file's arrays, not a split of them)
        xs, ys = narrow(arrays[x], f"{self.name}: {x}"), narrow(arrays[y], f"{self.name}: {y}")
        check_finite(xs, f"{self.name}: {x}")
        check_finite(ys, f"{self.name}: {y}")
        check_split(xs, ys, self.name, (x, y))
        cut = len(xs) - max(1, int(round(len(xs) * self.test_fraction)))
        self._split_at = cut
        return xs[:cut], ys[:cut], xs[cut:], ys[cut:]

    def label_arrays(self) -> tuple[tuple[str, np.ndarray, int], ...]:
        _, y, _, y_test = self.keys
        train, test = self.y_train, self.y_test  # (read first: then the split is known)
        if self._split_at is None:
            return ((y, train, 0), (y_test, test, 0))
        return ((y, train, 0), (y, test, self._split_at))

    def describe(self) -> DataInfo:
        """From the headers of ``x`` and ``y`` (nothing else is read). The classes are not
        counted: a classification task checks every label against the model's outputs."""
        x, y, _, _ = self.keys
        with open_regular(self.path) as handle:
            headers = npz_headers(handle, self.path, [x, y])
        if x not in headers or y not in headers or not headers[x].shape:
            return super().describe()  # (reading reports what is wrong)
        return DataInfo(
            self.name,
            jax.ShapeDtypeStruct(headers[x].shape[1:], _narrowed(headers[x].dtype)),
            jax.ShapeDtypeStruct(headers[y].shape[1:], _narrowed(headers[y].dtype)),
            f"data ({self.name}, array {x!r})",
        )


def _narrowed(dtype: np.dtype) -> Any:
    return {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32}.get(dtype, dtype)

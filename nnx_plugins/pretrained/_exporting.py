"""What every export shares: `ExportError`, the trained model of a config and a checkpoint, and
writing the output so that it appears whole or not at all (never over an existing path).

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.pretrained._exporting import ExportError, new_output, write_file
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "model.bin"
    >>> write_file(new_output(out), b"abc").read_bytes()
    b'abc'
    >>> try:
    ...     new_output(out)
    ... except ExportError as error:
    ...     print(str(error).split(":")[0])
    the output ...model.bin exists (a file)
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from .._errors import NnxError
from .._files import usual_mode
from .._stopping import check, published, shielded
from .._text import os_problem
from ..training._loop import trained_model as trained_model_of
from ..training.checkpoints._manifest import read_manifest
from ..training.checkpoints._save import MANIFEST

__all__ = ["ExportError", "trained_model", "new_output", "write_file", "write_directory"]


class ExportError(NnxError, ValueError):
    """A model, checkpoint or output path that an export cannot take."""


def trained_model(config: Any, checkpoint: str | os.PathLike[str]) -> tuple[Any, dict[str, Any]]:
    """The model of ``config`` (as ``nnx train`` builds it) filled from ``checkpoint``, in
    evaluation mode; and the checkpoint's manifest.

    Raises:
        ConfigError: the config is invalid.
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
    """
    manifest = read_manifest(checkpoint)
    model = trained_model_of(config, manifest["directory"])
    model.eval()
    return model, manifest


def new_output(out: str | os.PathLike[str], *, file: bool = False) -> pathlib.Path:
    """``out`` as a path, after checking that nothing is there, that its folder exists and
    is not inside a checkpoint; a ``file`` output's path must not end with a separator.

    Raises:
        ExportError: ``out`` is empty or exists, or the folder it would go in does not, or
            lies inside a checkpoint.
    """
    text = os.fspath(out)
    if not text.strip():
        raise ExportError("--out is empty: give the path of the output to write.")
    if file and text.endswith((os.sep, "/")):
        raise ExportError(
            f"--out {text} ends with {text[-1]!r}, as a folder does, but this export writes one "
            "file: give its file name (e.g. model.jax)."
        )
    path = pathlib.Path(out)
    if os.path.lexists(path):
        kind = "folder" if path.is_dir() else "file"
        raise ExportError(
            f"the output {path} exists (a {kind}): an export never replaces anything. Remove "
            f"it or choose another --out."
        )
    parent = path.absolute().parent
    if not parent.is_dir():
        there = "is a file, not a folder" if os.path.lexists(parent) else "does not exist"
        raise ExportError(
            f"the output {path} cannot be written: its folder {parent} {there}. Create "
            f"it first or choose another --out."
        )
    for folder in (parent, *parent.parents):
        if (folder / MANIFEST).is_file():
            raise ExportError(
                f"the output {path} would be inside the checkpoint {folder}: a checkpoint holds "
                "its own files only (runs and nnx eval would no longer take it as one). "
                "Choose an --out outside it."
            )
    return path


def write_file(out: pathlib.Path, data: bytes) -> pathlib.Path:
    """Write ``data`` to ``out`` (checked by `new_output`) through a temporary file in the same
    folder, linked into place only when complete: ``out`` is whole or absent, never replaced.

    Raises:
        ExportError: the file cannot be written (a full disk, no permission), or something
            appeared at ``out`` meanwhile; nothing is left behind.
    """

    def fill(temporary: pathlib.Path) -> None:
        temporary.write_bytes(data)

    return _publish(out, fill, directory=False)


def write_directory(out: pathlib.Path, fill: Callable[[pathlib.Path], None]) -> pathlib.Path:
    """Make the directory ``out`` (checked by `new_output`): ``fill(folder)`` writes into a
    temporary folder beside it, renamed to ``out`` only when ``fill`` returned.

    Raises:
        ExportError: as `write_file`; whatever ``fill`` raises is raised after the temporary
            folder is removed.
    """
    return _publish(out, fill, directory=True)


def _publish(out: pathlib.Path, fill: Callable[[pathlib.Path], None], *, directory: bool) -> Any:
    parent = out.absolute().parent
    temporary = None
    try:
        with shielded():  # (a stop waits until the temporary is made and known: then removed)
            try:
                if directory:
                    temporary = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
                else:
                    handle, name = tempfile.mkstemp(prefix=f".{out.name}.", dir=parent)
                    os.close(handle)
                    temporary = pathlib.Path(name)
                usual_mode(temporary)  # (0700 / 0600: the export is read as the umask allows)
            except OSError as error:
                raise ExportError(f"cannot write into {parent}: {os_problem(error)}.") from None
        fill(temporary)
        check()  # (a stop whose own raise was lost: nothing is put in place)
        with shielded():  # (put in place and recorded together)
            if directory:
                _rename_new(temporary, out)
                temporary = None
            else:
                os.link(temporary, out)  # (fails if out appeared meanwhile: never replaced)
            published(out)
    except FileExistsError:
        raise ExportError(
            f"the output {out} was written by another process while this export ran (it did "
            f"not exist when the export started): an export never replaces anything. Nothing "
            f"of this export was written; choose another --out."
        ) from None
    except OSError as error:
        raise ExportError(
            f"cannot write {out}: {os_problem(error)}. Nothing was written; free space or fix "
            f"permissions, or choose another --out."
        ) from None
    finally:
        with shielded(), contextlib.suppress(OSError):
            if temporary is not None and temporary.is_dir():
                shutil.rmtree(temporary)
            elif temporary is not None:
                temporary.unlink()
    return out


def _rename_new(temporary: pathlib.Path, out: pathlib.Path) -> None:
    """Rename ``temporary`` to ``out``, refusing when ``out`` appeared meanwhile (a rename
    replaces an empty folder silently; one that is not empty makes it fail)."""
    if os.path.lexists(out):
        raise FileExistsError(errno.EEXIST, "File exists", str(out))
    try:
        os.rename(temporary, out)
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
            raise FileExistsError(errno.EEXIST, "File exists", str(out)) from None
        raise

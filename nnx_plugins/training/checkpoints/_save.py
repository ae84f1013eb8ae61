"""Checkpoints: one safetensors file (no pickle) plus a JSON manifest, written atomically.

A checkpoint is a directory holding ``tensors.safetensors`` and ``manifest.json``. The manifest
records the config (so `load` can rebuild the model), every entry's path, Variable kind (by
registered name, with the distribution that provides it), shape and dtype, the versions of the
packages and installed plugins, and the sha256 of the tensor file. The directory is written
under a temporary name and renamed into place, so an interrupted save never damages an existing
checkpoint. ``bfloat16`` (and other dtypes safetensors' numpy API lacks) is stored as an unsigned
integer view; typed PRNG keys as their key data plus the key implementation's name.

Example:
    >>> import tempfile, os
    >>> import nnx_plugins
    >>> from nnx_core import Rngs
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    >>> where = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> nnx_plugins.save(model, where, step=7).name
    'ckpt'
    >>> restored = nnx_plugins.load(where)        # rebuilt from the config in the manifest
    >>> restored.kernel.shape, bool((restored.kernel.value == model.kernel.value).all())
    ((2, 3), True)
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import save_file

from ..._errors import NnxError
from ..._files import open_regular, usual_mode
from ..._stopping import shielded
from ..._text import os_problem
from .._collectives import broadcast_text, gather_text, process_label
from ._blocks import SHARD_FILE, shard_file
from ._entries import collect, collect_blocks, header

__all__ = [
    "CheckpointError",
    "save",
    "list_checkpoints",
    "latest_checkpoint",
    "step_directory",
    "rotate",
    "is_checkpoint_directory",
    "save_sharded",
]

FORMAT_VERSION = 1
"""One tensor file (``tensors``, ``sha256``): what one process writes."""
SHARDED_VERSION = 2
"""One tensor file per process (``files``), each entry cut into ``blocks``."""
TENSORS = "tensors.safetensors"
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"step_(\d+)\Z")
# the leftovers of an interrupted save: tempfile.mkdtemp names made by `save` below
_LEFTOVER = re.compile(r"\.(step_\d+)\.(tmp|old)-[A-Za-z0-9_]+\Z")
_FILES = frozenset({TENSORS, MANIFEST})


class CheckpointError(NnxError, ValueError):
    """A checkpoint cannot be read or does not fit the model; ``.problems`` lists every issue.

    Example:
        >>> from nnx_plugins import CheckpointError
        >>> print(CheckpointError("ckpt", ["model.kernel: missing from the checkpoint"]))
        cannot load checkpoint ckpt:
          model.kernel: missing from the checkpoint
    """

    def __init__(
        self, directory: str | os.PathLike[str], problems: Sequence[str], *, action: str = "load"
    ):
        self.directory = os.fspath(directory)
        self.problems = tuple(problems)
        header = f"cannot {action} checkpoint {self.directory}:"
        super().__init__("\n  ".join([header, *self.problems]))


def _sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of the regular file ``path`` (`open_regular`: `NotRegularFile` for a folder,
    a FIFO or a device, read never)."""
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_tensors(tensors: dict[str, np.ndarray], path: str) -> None:
    """``save_file``, its failure to write an `OSError` (safetensors raises its own error type:
    a full disk came out as a traceback)."""
    try:
        save_file(tensors, path)
    except SafetensorError as error:
        found = re.search(r"os error (\d+)", str(error))
        code = int(found[1]) if found else errno.EIO
        raise OSError(code, os.strerror(code), path) from None
    _fsync(path)


def _write_manifest(manifest: dict[str, Any], path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=False)
        handle.flush()
        os.fsync(handle.fileno())


def save(
    model: Any,
    directory: str | os.PathLike[str],
    *,
    optimizer: Any = None,
    config: Any = None,
    step: int | None = None,
    extra: Mapping[str, Any] | None = None,
    run: Mapping[str, Any] | None = None,
) -> pathlib.Path:
    """Write ``model`` (and ``optimizer``'s state) to the checkpoint directory ``directory``.

    With several processes (`jax.distributed`), every process must call `save` with the same
    arguments: each writes the blocks of the arrays its devices hold to its own tensor file, and
    process 0 writes the manifest and renames the checkpoint into place once all have written.

    Args:
        model: the Module to save; every Variable is stored (Params, BatchStats, Rng state, ...).
        directory: the checkpoint directory; replaced atomically if it is a checkpoint. Anything
            else there (a folder with other files, a file, a symlink) is refused and left alone.
        optimizer: an `nnx_core.Optimizer` whose state (moments, step count) is saved too.
        config: the `Config` (or mapping) the model was built from; `load` rebuilds from it.
            Defaults to ``to_config(model)`` when the model can express its config.
        step: the training step, recorded in the manifest.
        extra: more Modules saved beside the model, by name (e.g. ``{"ema": averaged}``);
            `load` fills them with ``extra=``.
        run: JSON-able facts about the run, recorded as the manifest's ``run`` (the data's
            state such as a vocabulary, the callbacks' state, the metrics at this step).

    Returns:
        The checkpoint directory.

    Raises:
        CheckpointError: ``directory`` is not a checkpoint (and is left alone), or writing failed
            (in any process: the error names it); earlier checkpoints are intact.

    Example:
        >>> import os, tempfile, optax
        >>> import nnx_core as nnx, nnx_plugins
        >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 1})
        >>> opt = nnx.Optimizer(model, optax.adam(1e-3))
        >>> where = nnx_plugins.save(model, os.path.join(tempfile.mkdtemp(), "c"), optimizer=opt, step=3)
        >>> sorted(os.listdir(where))
        ['manifest.json', 'tensors.safetensors']
    """
    directory = pathlib.Path(directory)
    if jax.process_count() > 1:
        return save_sharded(
            model, directory, optimizer=optimizer, config=config, step=step, extra=extra, run=run
        )
    _check_replaceable(directory)
    tensors: dict[str, np.ndarray] = {}
    entries: dict[str, Any] = {}
    collect(model, "model", tensors, entries)
    if optimizer is not None:
        collect(optimizer, "optimizer", tensors, entries)
    for name, node in _extra(extra).items():
        collect(node, name, tensors, entries)
    manifest = {
        **header(model, config, step, FORMAT_VERSION, has_optimizer=optimizer is not None, run=run),
        "tensors": TENSORS,
        "sha256": None,
        "entries": entries,
    }
    temporary = None
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with shielded():  # (a stop waits until the temporary is made and known: then removed)
            temporary = tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent)
        usual_mode(temporary)  # (mkdtemp's 0700: a checkpoint is read as the umask allows)
        _write_tensors(tensors, os.path.join(temporary, TENSORS))
        manifest["sha256"] = _sha256(os.path.join(temporary, TENSORS))
        _write_manifest(manifest, os.path.join(temporary, MANIFEST))
        _replace_directory(temporary, directory)
    except OSError as error:
        _remove(temporary)
        raise _write_error(directory, error, sum(a.nbytes for a in tensors.values())) from error
    except BaseException:
        _remove(temporary)
        raise
    return directory


_INTACT = "Nothing was replaced: earlier checkpoints are intact."
_RESERVED = ("model", "optimizer")


def _extra(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The extra Modules of a checkpoint; their names may not be the model's or optimizer's."""
    for name in extra or {}:
        if name in _RESERVED or not isinstance(name, str) or not name.isidentifier():
            raise ValueError(
                f"extra checkpoint entries need a name other than {_RESERVED} made of letters, "
                f"digits and underscores, got {name!r}."
            )
    return dict(extra or {})


def _write_error(directory: pathlib.Path, error: OSError, needed: int) -> CheckpointError:
    return CheckpointError(
        directory,
        action="save",
        problems=[
            f"writing it failed: {os_problem(error)} ({getattr(error, 'filename', None) or directory}). "
            f"It needs about {needed:,} bytes. {_INTACT} Free space or fix permissions, or save "
            "elsewhere (--run-dir)."
        ],
    )


# -- writing from several processes -----------------------------------------------------------
def save_sharded(
    model: Any,
    directory: str | os.PathLike[str],
    *,
    optimizer: Any = None,
    config: Any = None,
    step: int | None = None,
    extra: Mapping[str, Any] | None = None,
    run: Mapping[str, Any] | None = None,
) -> pathlib.Path:
    """`save` in the format of several processes: one tensor file per process, each entry cut
    into the blocks the processes' devices hold (what `save` writes with several processes).

    Every process writes its file into the temporary directory process 0 made; process 0 writes
    the manifest and renames the directory into place only after all have written. With one
    process it writes one such file (the tests use this).

    Raises:
        CheckpointError: ``directory`` is not a checkpoint (and is left alone), or some process
            could not write its part (named); earlier checkpoints are intact.

    Example:
        >>> import os, tempfile
        >>> import nnx_plugins
        >>> from nnx_plugins.training.checkpoints._save import save_sharded
        >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
        >>> where = save_sharded(model, os.path.join(tempfile.mkdtemp(), "c"), step=2)
        >>> nnx_plugins.read_manifest(where)["entries"]["model/kernel"]["blocks"]
        [{'file': 'tensors-00000-of-00001.safetensors', 'tensor': 'model/kernel#0', 'start': [0, 0], 'stop': [2, 3]}]
    """
    directory = pathlib.Path(directory)
    tensors: dict[str, np.ndarray] = {}
    entries: dict[str, Any] = {}
    collect_blocks(model, "model", tensors, entries)
    if optimizer is not None:
        collect_blocks(optimizer, "optimizer", tensors, entries)
    for name, node in _extra(extra).items():
        collect_blocks(node, name, tensors, entries)
    count, needed = jax.process_count(), sum(a.nbytes for a in tensors.values())
    temporary = _start_temporary(directory, needed)
    digests = gather_text(_write_part(temporary, directory, tensors, needed))
    failed = {p: text[1:] for p, text in enumerate(digests) if text.startswith("!")}
    if failed:
        if jax.process_index() == 0:
            _remove(str(temporary))
        problems = [
            f"{process_label(p)} could not write its part: {why}" for p, why in failed.items()
        ]
        if not all(_INTACT in why for why in failed.values()):
            problems.append(_INTACT)
        raise CheckpointError(directory, action="save", problems=problems)
    outcome = ""
    if jax.process_index() == 0:
        top = header(
            model, config, step, SHARDED_VERSION, has_optimizer=optimizer is not None, run=run
        )
        files = [{"name": shard_file(p, count), "sha256": d} for p, d in enumerate(digests)]
        outcome = _commit({**top, "files": files, "entries": entries}, temporary, directory)
    outcome = broadcast_text(outcome)
    if outcome != "ok":
        raise CheckpointError(
            directory,
            action="save",
            problems=[f"{process_label(0)} could not commit it: {outcome}"],
        )
    return directory


def _start_temporary(directory: pathlib.Path, needed: int) -> pathlib.Path:
    """Process 0 makes the temporary directory; every process learns its name."""
    name, problem = "", None
    if jax.process_index() == 0:
        try:
            _check_replaceable(directory)
            directory.parent.mkdir(parents=True, exist_ok=True)
            made = tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent)
            usual_mode(made)
            name = os.path.basename(made)
        except CheckpointError as error:
            problem = error
        except OSError as error:
            problem = _write_error(directory, error, needed)
    name = broadcast_text(name)
    if problem is not None:
        raise problem
    if not name:
        raise CheckpointError(
            directory,
            action="save",
            problems=[
                f"{process_label(0)} could not start it (its error says why); nothing was written."
            ],
        )
    return directory.parent / name


def _write_part(
    temporary: pathlib.Path, directory: pathlib.Path, tensors: dict[str, np.ndarray], needed: int
) -> str:
    """Write this process's tensor file; its sha256, or ``"!"`` and the reason it failed."""
    if not temporary.is_dir():
        return (
            f"!{temporary} (made by {process_label(0)}) does not exist here: the checkpoint "
            "directory must be on a file system every process shares."
        )
    path = temporary / shard_file(jax.process_index(), jax.process_count())
    try:
        _write_tensors(tensors, str(path))
        return _sha256(path)
    except OSError as error:
        return "!" + _write_error(directory, error, needed).problems[0]


def _commit(manifest: dict[str, Any], temporary: pathlib.Path, directory: pathlib.Path) -> str:
    """Process 0: write the manifest and rename the checkpoint into place; "ok" or the reason."""
    try:
        _write_manifest(manifest, str(temporary / MANIFEST))
        _replace_directory(str(temporary), directory)
    except (OSError, CheckpointError) as error:
        _remove(str(temporary))
        return os_problem(error) if isinstance(error, OSError) else str(error)
    except BaseException:
        _remove(str(temporary))
        raise
    return "ok"


def _remove(folder: str | None) -> None:
    """Delete ``folder`` (a temporary or old checkpoint directory) whole; a stop asked for
    meanwhile is raised when it is gone. (Shielded: ``shutil.rmtree`` interrupted between
    closing a descriptor and noting it closes it again, and its EBADF replaced the stop.)"""
    if folder is not None:
        with shielded():
            shutil.rmtree(folder, ignore_errors=True)


def _replace_directory(source: str, target: pathlib.Path) -> None:
    """Rename ``source`` to ``target``; an existing ``target`` is moved aside, then deleted.

    Only a directory `save` could have written is replaced: anything else raises
    `CheckpointError` and is left as it was.
    """
    old = None
    try:
        with shielded():  # (a stop waits: ``target`` is never left moved aside, not replaced)
            if target.is_symlink() or target.exists():
                _check_replaceable(target)  # (again: something may have appeared meanwhile)
                old = tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent)
                os.replace(target, os.path.join(old, "previous"))
            try:
                os.replace(source, target)
            except OSError:
                if old is not None:
                    try:
                        os.replace(os.path.join(old, "previous"), target)  # (put back)
                    except OSError:
                        old = None  # (then left where it is, never deleted)
                raise
        _fsync(target.parent)
    finally:
        if old is not None:
            _remove(old)


def _discard(checkpoint: pathlib.Path) -> None:
    """Delete ``checkpoint`` so that a stop at any moment leaves it whole or gone, never a
    manifest without its tensors (deleted in place, a SIGTERM in the middle left such a
    ``step_N`` that ``--resume`` took for the latest and could not load): it is renamed into a
    leftover first (``.step_N.old-*``), then deleted; a stop waits for that, and the leftover
    of a process killed meanwhile is removed by the next `rotate`."""
    with shielded():  # (a stop waits until it is gone)
        try:
            old = tempfile.mkdtemp(prefix=f".{checkpoint.name}.old-", dir=checkpoint.parent)
        except OSError:
            return  # (kept whole: the next rotation tries again)
        try:
            os.replace(checkpoint, os.path.join(old, "previous"))
        except OSError:
            pass  # (kept whole, as above)
        finally:
            _remove(old)


def _check_replaceable(target: pathlib.Path) -> None:
    if (target.is_symlink() or target.exists()) and not is_checkpoint_directory(
        target, allow_empty=True
    ):
        raise CheckpointError(
            target,
            action="save",
            problems=[
                "refusing to replace it: it exists and is not a checkpoint (it holds "
                f"files other than {MANIFEST} and tensor files, or is a file or a symlink). "
                "Save to a new directory, or move it away first."
            ],
        )


def is_checkpoint_directory(path: pathlib.Path, *, allow_empty: bool = False) -> bool:
    """Whether ``path`` is a real directory (not a symlink) holding only checkpoint files
    (``manifest.json``, ``tensors.safetensors``, ``tensors-P-of-N.safetensors``).

    This is what `save` may replace and `rotate` may delete: never a user's own folder.

    Example:
        >>> import pathlib, tempfile
        >>> from nnx_plugins.training.checkpoints._save import is_checkpoint_directory
        >>> where = pathlib.Path(tempfile.mkdtemp())
        >>> is_checkpoint_directory(where), is_checkpoint_directory(where, allow_empty=True)
        (False, True)
        >>> (where / "notes.txt").write_text("mine")
        4
        >>> is_checkpoint_directory(where, allow_empty=True)
        False
    """
    if path.is_symlink() or not path.is_dir():
        return False
    try:
        names = set(os.listdir(path))
    except OSError:
        return False
    ours = all(name in _FILES or SHARD_FILE.match(name) for name in names)
    return ours and (allow_empty or MANIFEST in names)


def _is_leftover(path: pathlib.Path) -> bool:
    """A temporary directory of an interrupted `save` (by its name and its contents)."""
    match = _LEFTOVER.match(path.name)
    if match is None or path.is_symlink() or not path.is_dir():
        return False
    if match.group(2) == "tmp":
        return is_checkpoint_directory(path, allow_empty=True)
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return names == [] or (
        names == ["previous"] and is_checkpoint_directory(path / "previous", allow_empty=True)
    )


# -- finding checkpoints ---------------------------------------------------------------------
def step_directory(root: str | os.PathLike[str], step: int) -> pathlib.Path:
    """``root/step_00000042``: where the trainer writes the checkpoint of ``step``."""
    return pathlib.Path(root) / f"step_{step:08d}"


def list_checkpoints(root: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Complete checkpoints (``step_N`` directories with a manifest) under ``root``, oldest first.

    Example:
        >>> from nnx_plugins.training.checkpoints._save import list_checkpoints
        >>> list_checkpoints("/nonexistent")
        []
    """
    root = pathlib.Path(root)
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), child)
        for child in root.iterdir()
        if (m := _STEP_DIR.match(child.name)) and is_checkpoint_directory(child)
    ]
    return [child for _, child in sorted(found)]


def latest_checkpoint(root: str | os.PathLike[str]) -> pathlib.Path | None:
    """The newest complete checkpoint under ``root``, or ``None``."""
    found = list_checkpoints(root)
    return found[-1] if found else None


def rotate(
    root: str | os.PathLike[str], keep: int, *, protect: Sequence[os.PathLike[str]] = ()
) -> list[pathlib.Path]:
    """Delete all but the newest ``keep`` checkpoints (and those in ``protect``, such as the
    best one), and leftovers of interrupted saves.

    Only what `save` writes is touched: ``step_N`` directories holding nothing but a manifest
    and a tensor file, and ``.step_N.tmp-*`` / ``.step_N.old-*`` directories of the same
    contents. Anything else under ``root`` (a user's own files or folders, symlinks) is left
    alone. Returns the deleted checkpoint directories.

    Example:
        >>> import pathlib, tempfile
        >>> import nnx_plugins
        >>> from nnx_plugins.training.checkpoints._save import rotate, step_directory
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
        >>> for step in (1, 2, 3):
        ...     _ = nnx_plugins.save(model, step_directory(root, step), step=step)
        >>> (root / ".step_mine").mkdir()                 # not ours: kept
        >>> [p.name for p in rotate(root, 1)], sorted(p.name for p in root.iterdir())
        (['step_00000001', 'step_00000002'], ['.step_mine', 'step_00000003'])
    """
    found = list_checkpoints(root)
    kept = {pathlib.Path(p).name for p in protect}
    doomed = [c for c in (found[:-keep] if keep > 0 else found) if c.name not in kept]
    for child in doomed:
        _discard(child)
    root = pathlib.Path(root)
    if root.is_dir():
        for child in root.iterdir():
            if _is_leftover(child):
                _remove(str(child))
    return doomed

"""The ``--checkpoint`` argument of ``nnx eval``, ``nnx predict`` and ``nnx generate``.

A checkpoint directory, or a directory of ``step_N`` checkpoints (the newest), as before; and
the best checkpoint that ``checkpoint.keep_best`` recorded, without reading ``best.json`` by
hand: ``RUN/checkpoints/best`` (the ``best.json`` of ``RUN/checkpoints``), or the word ``best``
alone (that of the run directory ``nnx train FILE`` writes by default,
``runs/<config name>/<checkpoint.dir>``). A directory really named ``best`` keeps its meaning.

``best.json`` is data from disk: a record that is not one nnx wrote is refused by its type and
size (never quoted), and the directory it names must be a ``step_N`` directory beside it.

Example:
    >>> import json, pathlib, tempfile
    >>> from nnx_plugins.cli._checkpoint import resolve_checkpoint
    >>> root = pathlib.Path(tempfile.mkdtemp()) / "checkpoints"
    >>> (root / "step_00000040").mkdir(parents=True)
    >>> record = {"step": 40, "directory": "step_00000040", "metric": "val.loss",
    ...           "mode": "min", "value": 0.25}
    >>> _ = (root / "best.json").write_text(json.dumps(record))
    >>> found = resolve_checkpoint(str(root / "best"), None)
    >>> found.path.name, found.note
    ('step_00000040', 'the best by val.loss 0.25')
    >>> resolve_checkpoint(str(root), None).note
    ''
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from typing import Any

from .._text import content_kind, os_problem

__all__ = ["Resolved", "resolve_checkpoint", "BEST", "CHECKPOINT_OPTION"]

BEST = "best"
BEST_FILE = "best.json"  # (checkpoint.keep_best's record: training.checkpoints._best)
_MAX_BYTES = 65536
_STEP_DIRECTORY = re.compile(r"step_\d{1,20}\Z")

CHECKPOINT_OPTION: dict[str, Any] = {
    "metavar": "DIR",
    "required": True,
    "help": "a checkpoint directory; a directory of step_N checkpoints (the newest); "
    "RUN/checkpoints/best (the best one keep_best recorded); or best (that of "
    "runs/<config name>)",
}
"""The ``--checkpoint`` option of every command that reads a trained model."""


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A ``--checkpoint`` argument resolved: ``path`` to give the loader, ``note`` saying why
    it is that checkpoint (``""`` when the argument named it itself)."""

    path: pathlib.Path
    note: str = ""


def resolve_checkpoint(text: str, config: Any) -> Resolved:
    """The checkpoint ``--checkpoint text`` names (see the module docstring).

    Args:
        text: the argument as given.
        config: the run's train config (`load_train_config`), for the word ``best`` alone
            (its file name and ``checkpoint.dir``); ``None`` when not known.

    Raises:
        CheckpointError: ``best`` asked for, but no readable ``best.json`` is there, or it
            names no ``step_N`` checkpoint beside it.
    """
    if not text.strip():  # (pathlib reads '' as '.': the current directory)
        raise _refused(
            pathlib.Path(repr(text)),
            ["--checkpoint is empty: give a checkpoint directory, or best."],
        )
    given = pathlib.Path(text)
    if os.path.lexists(given) or given.name != BEST:
        return Resolved(given)
    root = given.parent
    if text == BEST and config is not None:
        stem = pathlib.Path(config.source).stem if config.source != "<dict>" else "run"
        root = pathlib.Path("runs") / stem / config.sections["checkpoint"].dir
    return _best_of(root)


def _best_of(root: pathlib.Path) -> Resolved:
    path = root / BEST_FILE
    record = _read_record(root, path)
    directory = record.get("directory")
    if not isinstance(directory, str) or not _STEP_DIRECTORY.match(directory):
        raise _refused(
            root,
            [
                f"{BEST_FILE} names no step_N checkpoint directory (its 'directory' is "
                f"{content_kind(directory)}); it was not written by nnx train or was edited. Give "
                "--checkpoint a checkpoint directory instead."
            ],
        )
    chosen = root / directory
    if not (chosen.is_dir() and not chosen.is_symlink()):
        raise _refused(
            root,
            [
                f"{BEST_FILE} names {directory}, which is not a checkpoint directory here "
                "(deleted by hand?). Give --checkpoint a checkpoint directory instead."
            ],
        )
    metric, value = record.get("metric"), record.get("value")
    note = "the best"
    if isinstance(metric, str) and isinstance(value, (int, float)) and not isinstance(value, bool):
        note = f"the best by {metric[:80]} {value:.4g}"
    return Resolved(chosen, note)


def _read_record(root: pathlib.Path, path: pathlib.Path) -> dict[str, Any]:
    """The record of ``best.json``: a JSON object read within `_MAX_BYTES`, never quoted."""
    if not os.path.lexists(path):
        where = f"{root} does not exist" if not root.exists() else f"there is no {path}"
        raise _refused(
            root,
            [
                f"no best checkpoint: {where}. The best is recorded by training with "
                "checkpoint.keep_best; otherwise give --checkpoint a checkpoint directory "
                "(or the run's checkpoints directory for the newest)."
            ],
        )
    refused = f"{BEST_FILE} is not a record nnx wrote"
    try:
        if path.is_symlink() or not path.is_file():
            raise _refused(root, [f"{refused}: it is not a regular file."])
        size = path.stat().st_size
        if size > _MAX_BYTES:
            raise _refused(root, [f"{refused}: it is {size:,} bytes."])
        raw = path.read_bytes()
    except OSError as error:
        raise _refused(root, [f"cannot read {path}: {os_problem(error)}."]) from None
    try:
        record = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        raise _refused(
            root, [f"{refused}: it holds {len(raw):,} bytes that are not a JSON object."]
        ) from None
    if not isinstance(record, dict):
        raise _refused(root, [f"{refused}: it holds {content_kind(record)}, not a JSON object."])
    return record


def _refused(root: pathlib.Path, problems: list[str]) -> Exception:
    """A `CheckpointError` (imported here: the listing commands import this module)."""
    from ..training.checkpoints._save import CheckpointError  # (here: listing stays light)

    return CheckpointError(root, problems)

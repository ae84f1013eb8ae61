"""Finding the files a data path names: a folder walked, or a glob matched, within bounds.

Neither follows a symbolic link to a folder while descending (``**`` and folder walks), so a
folder of symlink loops (``a -> .``) ends at once instead of descending until the path is too
long, and no walk visits more than `MAX_ENTRIES` entries: past that, a `DataError` says how
to narrow the path. Hidden entries (a leading ``.``) are skipped, as the shell's ``*`` skips
them, unless the pattern names them; folder walks also skip ``__pycache__``.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.data._paths import glob_files, walk_files
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("a.txt", "sub/b.txt", "sub/c.py", ".hidden.txt"):
    ...     (root / name).parent.mkdir(exist_ok=True)
    ...     _ = (root / name).write_text("x")
    >>> (root / "loop").symlink_to(root)
    >>> [pathlib.Path(p).relative_to(root).as_posix() for p in glob_files(f"{root}/**/*.txt")]
    ['a.txt', 'sub/b.txt']
    >>> [pathlib.Path(p).relative_to(root).as_posix() for p in walk_files(str(root))]
    ['a.txt', 'sub/b.txt', 'sub/c.py']
"""

from __future__ import annotations

import fnmatch
import os

from ._base import DataError

__all__ = ["MAX_ENTRIES", "has_magic", "glob_files", "walk_files"]

#: the most directory entries one path may make a walk visit
MAX_ENTRIES = 200_000
_MAGIC = frozenset("*?[")


def has_magic(path: str) -> bool:
    """Whether ``path`` holds a glob wildcard (``*``, ``?`` or ``[``)."""
    return bool(_MAGIC & set(path))


class _Budget:
    def __init__(self, path: str):
        self.path, self.left = path, MAX_ENTRIES

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise DataError(
                f"{self.path!r} makes the search visit more than {MAX_ENTRIES:,} files and "
                "folders; name a smaller folder or a narrower pattern.",
                key="path",
            )


def _entries(folder: str, budget: _Budget) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder or ".") as found:
            entries = []
            for entry in found:
                budget.spend()
                entries.append(entry)
    except OSError:  # (unreadable or vanished: nothing there, as glob treats it)
        return []
    return sorted(entries, key=lambda e: e.name)


def _is_folder(entry: os.DirEntry[str], *, follow: bool) -> bool:
    try:
        return entry.is_dir(follow_symlinks=follow)
    except OSError:  # (a symlink loop: not a folder)
        return False


def walk_files(folder: str) -> list[str]:
    """Every file under ``folder``: a folder's files in sorted order, then its folders' in
    turn (hidden entries and ``__pycache__`` skipped; symbolic links to folders not followed).

    Raises:
        DataError: the walk visits more than `MAX_ENTRIES` entries.
    """
    budget, found, pending = _Budget(folder), [], [folder]
    while pending:
        current = pending.pop()
        below = []
        for entry in _entries(current, budget):
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            if _is_folder(entry, follow=False):
                below.append(entry.path)
            elif not _is_folder(entry, follow=True):
                found.append(entry.path)
        pending.extend(reversed(below))  # (depth first: a folder's files, then its folders)
    return found


def _visible(name: str, pattern: str) -> bool:
    return not name.startswith(".") or pattern.startswith(".")


def _match(folder: str, parts: list[str], budget: _Budget, found: list[str]) -> None:
    head, rest = parts[0], parts[1:]
    if head == "**":
        if rest:
            _match(folder, rest, budget, found)
        for entry in _entries(folder, budget):
            if _visible(entry.name, "") and _is_folder(entry, follow=False):
                _match(entry.path, parts, budget, found)
            elif not rest and _visible(entry.name, "") and not _is_folder(entry, follow=True):
                found.append(entry.path)
        return
    if not has_magic(head):
        path = os.path.join(folder, head) if folder else head
        if rest:
            if os.path.isdir(path):
                _match(path, rest, budget, found)
        elif os.path.lexists(path) and not os.path.isdir(path):
            found.append(path)
        return
    for entry in _entries(folder, budget):
        if not _visible(entry.name, head) or not fnmatch.fnmatch(entry.name, head):
            continue
        if rest:
            if _is_folder(entry, follow=True):
                _match(entry.path, rest, budget, found)
        elif not _is_folder(entry, follow=True):
            found.append(entry.path)


def glob_files(pattern: str) -> list[str]:
    """The files (not folders) ``pattern`` matches, sorted; ``**`` matches any number of
    folders (none included), without following symbolic links to folders.

    Raises:
        DataError: the search visits more than `MAX_ENTRIES` entries, or descends deeper than
            Python's recursion allows.
    """
    absolute = pattern.startswith(os.sep)
    parts = [p for p in pattern.split(os.sep) if p not in ("", ".")]
    if not parts:
        return []
    found: list[str] = []
    try:
        _match(os.sep if absolute else "", parts, _Budget(pattern), found)
    except RecursionError:
        raise DataError(
            f"{pattern!r} matches folders nested too deeply to search; name a shallower folder.",
            key="path",
        ) from None
    return sorted(set(found))

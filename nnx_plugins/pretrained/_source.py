"""Reading a transformers model directory without trusting it: `Source`.

A directory as ``save_pretrained`` writes it: ``config.json`` (the architecture and its
sizes), ``model.safetensors`` or shards listed by ``model.safetensors.index.json`` (read in
transformers' order: ``model.safetensors`` when it is there, the index otherwise), and when
present ``generation_config.json``, ``tokenizer.json`` and ``tokenizer_config.json``. Those four
(`COPIED`) are read once, as the import copies them: each present one must be a regular file of
the directory (a symlink leading out of it, a dangling one, a FIFO or a device is refused, never
left out) within its size limit. A Hugging Face hub cache's snapshot folder, whose files link to
the model's ``blobs`` folder, is read through those links (`owned`). Every JSON file is read bounded in size and depth, must be an
object and give each key once; every file the index names must be a plain file name inside the
directory; every tensor must be in exactly one file; the special tokens of
``tokenizer_config.json`` must be token texts. Each problem is a `PretrainedError` naming the
file (names read from a file are shown escaped: ``repr``).

Example:
    >>> from nnx_plugins.pretrained._source import Source
    >>> source = Source("tests/fixtures/hf/mistral")
    >>> source.architecture, len(source.files), source.generation["eos_token_id"]
    ('MistralForCausalLM', 3, 79)
    >>> source.shape("model.norm.weight")
    (32,)
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._files import NotRegularFile, file_kind, plain_name, read_regular
from .._text import content_kind, os_problem
from ..training.data._tokenizers import MAX_TOKENIZER_BYTES
from ._convert import shown_name
from ._errors import PretrainedError
from ._safetensors import SafetensorsFile

__all__ = ["Source", "read_json", "parse_json", "read_side", "MAX_JSON_BYTES", "MAX_JSON_DEPTH"]

MAX_JSON_BYTES = 16 * 1024 * 1024
"""The largest config.json (or index, generation config) read."""
MAX_JSON_DEPTH = 32
"""The deepest nesting of objects and lists a config file may have."""

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
GENERATION = "generation_config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
COPIED = (CONFIG, GENERATION, TOKENIZER, TOKENIZER_CONFIG)
"""The files of the folder copied with the model (`Source.side`): each, when present, must be
a regular file of the folder (`read_side`)."""
SPECIAL_TOKENS = ("bos_token", "eos_token", "pad_token", "mask_token")
"""The special tokens of ``tokenizer_config.json`` that nnx reads (`HFTokenizer`)."""


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            items = list(item.values())
        elif isinstance(item, list):
            items = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in items if isinstance(child, (dict, list)))
    return deepest


def read_json(path: pathlib.Path, what: str, *, unique: bool = False) -> dict[str, Any]:
    """The JSON object in ``path``, read bounded (`MAX_JSON_BYTES`, `MAX_JSON_DEPTH`);
    ``unique``: a key given twice in an object is refused (JSON keeps the last silently).

    Raises:
        PretrainedError: unreadable, too large, not JSON, too deep, or not an object; a key
            given twice (``unique``).
    """
    try:
        size = path.stat().st_size
    except OSError as error:
        raise PretrainedError(path, f"{what} cannot be read: {os_problem(error)}") from None
    if size > MAX_JSON_BYTES:
        raise PretrainedError(
            path,
            f"{what} is {size:,} bytes, more than the {MAX_JSON_BYTES:,} such a file may have "
            "(nnx_plugins.pretrained._source.MAX_JSON_BYTES); it is not a file transformers "
            "wrote",
        )
    try:
        raw = read_regular(path, MAX_JSON_BYTES)
    except OSError as error:
        raise PretrainedError(path, f"{what} cannot be read: {os_problem(error)}") from None
    except ValueError as error:  # (a device, a FIFO, a folder; or grown past the limit)
        raise PretrainedError(path, f"{what} cannot be read: {error}") from None
    return parse_json(raw, path, what, unique=unique)


def parse_json(
    raw: bytes, path: pathlib.Path, what: str, *, unique: bool = False
) -> dict[str, Any]:
    """The JSON object of ``raw`` (the bytes of ``path``, a ``what``), checked as `read_json`
    checks it.

    Example:
        >>> import pathlib
        >>> from nnx_plugins.pretrained._source import parse_json
        >>> try:
        ...     parse_json(b'{"a": 1, "a": 2}', pathlib.Path("config.json"), "config.json",
        ...                unique=True)
        ... except ValueError as error:
        ...     print(error.problem)
        config.json gives the key 'a' twice in one object (JSON would keep the last silently: 1 then 2); give each once
    """
    try:
        value = json.loads(raw.decode("utf-8"), object_pairs_hook=_once if unique else None)
    except _Twice as twice:
        raise PretrainedError(
            path,
            f"{what} gives the key {twice.key!r} twice in one object (JSON would keep the last "
            f"silently: {twice.first} then {twice.second}); give each once",
        ) from None
    except RecursionError:
        raise PretrainedError(path, f"{what} is nested too deeply to be a config") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise PretrainedError(path, f"{what} is not valid JSON: {str(error)[:120]}") from None
    if not isinstance(value, dict):
        raise PretrainedError(
            path, f"{what} must hold a JSON object ({{...}}), got {content_kind(value)}"
        )
    if _depth(value) > MAX_JSON_DEPTH:
        raise PretrainedError(
            path, f"{what} nests more than {MAX_JSON_DEPTH} levels deep; it is not a config"
        )
    return value


def read_side(
    side: pathlib.Path,
    folder: pathlib.Path,
    limit: int,
    *,
    action: str = "import",
    read: Callable[[pathlib.Path, int], bytes] | None = None,
) -> bytes:
    """The bytes of ``side``, a file of ``folder`` that is copied with the model (a config,
    the tokenizer): a regular file of ``folder`` (a symlink may point to one in it, or to its
    hub cache blob: `owned`; one leading out of it is refused: the ``action`` copies that
    folder's own files), of at most ``limit``
    bytes, read by ``read`` (`read_regular` when None). A present file that cannot be copied
    is refused, never left out.

    Raises:
        PretrainedError: ``side`` is not a regular file (a device, a FIFO, a folder, a
            dangling symlink), leads out of ``folder``, cannot be read or is too large.

    Example:
        >>> import os, pathlib, tempfile
        >>> from nnx_plugins.pretrained._source import read_side
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> os.symlink("/dev/zero", folder / "tokenizer.json")
        >>> try:
        ...     read_side(folder / "tokenizer.json", folder, 100)
        ... except ValueError as error:
        ...     print(error.problem)
        is not a regular file: it is a character device (a terminal or /dev/...) (a symlink to /dev/zero). Put the file itself there, or remove it
    """
    link = ""
    try:
        if side.is_symlink():
            link = f" (a symlink to {os.readlink(side)})"
        mode = os.stat(side).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(file_kind(mode))
        if link and not owned(side, folder):
            problem = (
                f"is a symlink to {os.readlink(side)}, leading out of its folder {folder}: an "
                f"{action} copies that folder's own files only. Put the file itself there, or "
                "remove the link"
            )
        else:
            return (read or read_regular)(side, limit)
    except NotRegularFile as error:
        problem = (
            f"is not a regular file: it is {error.kind}{link}. Put the file itself there, or "
            "remove it"
        )
    except OSError as error:
        problem = f"cannot be read{link}: {os_problem(error)}"
    except ValueError as error:  # (over the limit)
        problem = (
            f"{error} (the most a {side.name} may have); it is not a file transformers wrote: "
            "fix or remove it"
        )
    raise PretrainedError(side, problem, action=action) from None


class _Twice(ValueError):
    def __init__(self, key: str, first: Any, second: Any):
        self.key, self.first, self.second = key, _shown(first), _shown(second)
        super().__init__(key)


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a key given twice (`_Twice`)."""
    out = dict(pairs)
    if len(out) == len(pairs):  # (no key twice: the common case, at C speed)
        return out
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Twice(key, seen[key], value)
        seen[key] = value
    return out


def owned(path: pathlib.Path, folder: pathlib.Path) -> bool:
    """Whether ``path``, a name in ``folder`` (perhaps a symlink), is ``folder``'s own file: one
    in it, or, in a Hugging Face hub cache (``.../snapshots/REV/NAME -> ../../blobs/HASH``,
    as ``huggingface_hub`` downloads a model), that model's blob.

    Example:
        >>> import os, pathlib, tempfile
        >>> from nnx_plugins.pretrained._source import owned
        >>> repo = pathlib.Path(tempfile.mkdtemp())
        >>> snapshot = repo / "snapshots" / "0123abc"
        >>> os.makedirs(repo / "blobs"); os.makedirs(snapshot)
        >>> (repo / "blobs" / "9f86d0").write_text("{}")
        2
        >>> os.symlink("../../blobs/9f86d0", snapshot / "config.json")
        >>> os.symlink("/etc/hostname", snapshot / "tokenizer.json")
        >>> owned(snapshot / "config.json", snapshot), owned(snapshot / "tokenizer.json", snapshot)
        (True, False)
    """
    parent, inside = path.resolve().parent, folder.resolve()
    if parent == inside:
        return True
    return (
        inside.parent.name == "snapshots" and parent == (inside.parent.parent / "blobs").resolve()
    )


def _confined(directory: pathlib.Path, names: Any, index: pathlib.Path) -> dict[str, pathlib.Path]:
    """Each distinct file name of ``names`` (the index's values) -> its path in ``directory``,
    checked once: a plain file name inside the directory, not a symlink leading out of it.
    (Checked per tensor, a 1.3-million-entry index took 3 minutes to be refused.)"""
    paths: dict[str, pathlib.Path] = {}
    for name in names:
        if isinstance(name, str) and name in paths:
            continue
        if not plain_name(name):
            raise PretrainedError(
                index,
                f"names the tensor file {_short(name)}, which is not a plain file name inside "
                "the model directory; refusing to read outside it",
            )
        path = directory / name
        if not owned(path, directory):
            raise PretrainedError(
                index,
                f"names {shown_name(name)}, a symlink leading out of the model directory; "
                "refusing it",
            )
        paths[name] = path
    return paths


def _short(value: Any) -> str:
    """``repr(value)``, cut to 80 characters (a name from a file, shown escaped)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_file(path: pathlib.Path) -> bool:
    """Whether ``path`` is a regular file (following symlinks); one that cannot be looked at
    (a folder without permission to enter it) is an error naming it, not a missing file."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        raise PretrainedError(path, f"cannot be read: {os_problem(error)}") from None


def _present(path: pathlib.Path) -> bool:
    """Whether anything (a file, a folder, a symlink, even a dangling one) is at ``path``;
    one that cannot be looked at (a folder without permission to enter it) is an error naming
    it, not a missing file."""
    try:
        os.lstat(path)
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        raise PretrainedError(path, f"cannot be read: {os_problem(error)}") from None


def _directory_problem(directory: pathlib.Path) -> str | None:
    """Why ``directory`` is not a model directory that can be read, or None."""
    try:
        mode = os.stat(directory).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "no such directory"
    except OSError as error:
        return f"cannot be read: {os_problem(error)}"
    if stat.S_ISREG(mode):
        hint = ""
        if directory.name == CONFIG or directory.suffix in (".safetensors", ".json"):
            hint = f" ({directory.parent}, the folder this file is in)"
        return (
            f"is a file, not a directory: give the directory transformers' save_pretrained "
            f"wrote{hint}, which holds {CONFIG} and the weights"
        )
    if not stat.S_ISDIR(mode):
        return f"is {file_kind(mode)}, not a directory"
    return None


def _special_tokens(config: Mapping[str, Any], path: pathlib.Path) -> None:
    """Refuse a special token of ``tokenizer_config.json`` that is not a token's text."""
    for key in SPECIAL_TOKENS:
        value = config.get(key)
        text = value.get("content") if isinstance(value, Mapping) else value
        if text is not None and not isinstance(text, str):
            raise PretrainedError(
                path,
                f"'{key}' must be the text of a token (e.g. \"</s>\"), an object with its "
                f'"content", or null; got {_shown(value)}. Fix or remove it',
            )


def _shown(value: Any) -> str:
    """A config value as said in an error: short values as they are, long ones by kind."""
    text = json.dumps(value)
    return text if len(text) <= 60 else content_kind(value)


def _absent(path: pathlib.Path) -> str:
    """What stands at ``path`` instead of a regular file."""
    if not os.path.lexists(path):
        return "missing"
    if not path.exists():
        return f"a symlink to {os.readlink(path)}, which does not exist"
    target = f" (a symlink to {os.readlink(path)})" if path.is_symlink() else ""
    return f"not a regular file but a {'directory' if path.is_dir() else 'device or pipe'}{target}"


class Source:
    """A transformers model directory: its config, architecture, tensors and side files.

    Args:
        directory: the directory ``save_pretrained`` wrote.

    Attributes:
        config: ``config.json``.
        architecture: the first of ``config["architectures"]``.
        generation: ``generation_config.json`` (empty when absent).
        tokenizer: the path of ``tokenizer.json``, or None.
        side: the bytes of each `COPIED` file present (what the import copies).
        tokenizer_config: ``tokenizer_config.json`` (empty when absent); its special tokens
            (`SPECIAL_TOKENS`) checked to be token texts.
        files: the safetensors files.

    Raises:
        PretrainedError: no such directory, no ``config.json``, no safetensors weights, a
            copied file that is not a regular file of the directory, or a malformed file (see
            the module docstring).
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = pathlib.Path(directory)
        problem = _directory_problem(self.directory)
        if problem is not None:
            raise PretrainedError(self.directory, problem)
        config_path = self.directory / CONFIG
        if not _present(config_path):
            raise PretrainedError(
                self.directory,
                f"it has no {CONFIG}: give the directory transformers' save_pretrained writes "
                "(config.json, model.safetensors, ...)",
            )
        self.side: dict[str, bytes] = {}
        for name in COPIED:
            path = self.directory / name
            if _present(path):
                limit = MAX_TOKENIZER_BYTES if name == TOKENIZER else MAX_JSON_BYTES
                self.side[name] = read_side(path, self.directory, limit)
        self.config = parse_json(self.side[CONFIG], config_path, CONFIG, unique=True)
        self.architecture = self._architecture(config_path)
        self.generation = self._json(GENERATION)
        self.tokenizer = self.directory / TOKENIZER if TOKENIZER in self.side else None
        side = self.directory / TOKENIZER_CONFIG
        self.tokenizer_config = self._json(TOKENIZER_CONFIG)
        _special_tokens(self.tokenizer_config, side)
        self.files = self._files()
        self._where: dict[str, SafetensorsFile] = {}
        self._open()

    def _json(self, name: str) -> dict[str, Any]:
        """The side file ``name`` (read: `side`) as a JSON object; ``{}`` when absent."""
        raw = self.side.get(name)
        if raw is None:
            return {}
        return parse_json(raw, self.directory / name, name, unique=True)

    def _architecture(self, path: pathlib.Path) -> str:
        names = self.config.get("architectures")
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(n, str) and n for n in names)
        ):
            raise PretrainedError(
                path,
                f"'architectures' must be a list of class names such as ['LlamaForCausalLM'], "
                f"got {content_kind(names)}",
            )
        return names[0]

    def _files(self) -> list[pathlib.Path]:
        """The weights, found as transformers' ``from_pretrained`` finds them: ``SINGLE``
        when it is a file, else the shards ``INDEX`` names (a folder holding both loads the
        single file in transformers; the index is not read)."""
        index, single = self.directory / INDEX, self.directory / SINGLE
        self._index: dict[str, str] = {}  # (tensor -> file name, as the index gives it)
        self._paths: dict[str, pathlib.Path] = {}  # (file name -> its path, checked)
        if _is_file(single):
            return [single]
        if _is_file(index):
            weight_map = read_json(index, INDEX, unique=True).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise PretrainedError(
                    index, "'weight_map' must be an object of tensor name -> file name"
                )
            self._paths = _confined(self.directory, weight_map.values(), index)
            self._index = weight_map
            files = sorted(set(self._paths.values()))
            for path in files:
                if not _is_file(path):
                    raise PretrainedError(
                        index, f"names {shown_name(path.name)}, which is {_absent(path)}"
                    )
            return files
        if os.path.lexists(single):
            raise PretrainedError(single, f"is {_absent(single)}: give the weights as a file")
        others = sorted(p.name for p in self.directory.glob("*.bin")) + sorted(
            p.name for p in self.directory.glob("*.safetensors")
        )
        hint = f" (it holds {', '.join(map(shown_name, others[:4]))})" if others else ""
        raise PretrainedError(
            self.directory,
            f"it has neither {SINGLE} nor {INDEX}{hint}. Only safetensors weights are read: "
            "save the model with transformers' save_pretrained (safe_serialization=True)",
        )

    def _open(self) -> None:
        for path in self.files:
            tensors = SafetensorsFile(path)
            for name in tensors.names():
                placed = self._index.get(name)
                if placed is not None and self._paths[placed] != path:
                    continue  # (the index places it elsewhere: that file is read for it)
                if name in self._where:
                    raise PretrainedError(
                        path,
                        f"holds the tensor {name!r}, which {self._where[name].path} holds "
                        "too; each tensor must be in one file"
                        + (f" (or placed in one by {INDEX})" if self._index else ""),
                    )
                self._where[name] = tensors
        unplaced = self._index.keys() - self._where.keys()  # (at C speed: a million entries)
        if unplaced:
            name = next(n for n in self._index if n in unplaced)  # (the first the index gives)
            raise PretrainedError(
                self._paths[self._index[name]],
                f"does not hold the tensor {name!r} that {INDEX} places in it",
            )

    def names(self) -> list[str]:
        """Every tensor name, sorted."""
        return sorted(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._where[name].shape(name)

    def dtype(self, name: str) -> np.dtype:
        return self._where[name].entries[name].dtype

    def array(self, name: str) -> np.ndarray:
        """The tensor ``name``, a read-only view of its memory-mapped file."""
        return self._where[name].array(name)

    def file_of(self, name: str) -> str:
        return self._where[name].path

    def total_bytes(self) -> int:
        return sum(os.path.getsize(path) for path in self.files)

    def setting(self, key: str, default: Any = None) -> Any:
        """``config[key]`` (``default`` when absent)."""
        return self.config.get(key, default)

    def settings(self) -> Mapping[str, Any]:
        return self.config

"""Reading a transformers model directory without trusting it: `Source`.

A directory as ``save_pretrained`` writes it: ``config.json`` (the architecture and its
sizes), ``model.safetensors`` or shards listed by ``model.safetensors.index.json``, and when
present ``generation_config.json``, ``tokenizer.json`` and ``tokenizer_config.json``. Every JSON
file is read bounded in size and depth and must be an object; every file the index names must be
a plain file name inside the directory; every tensor must be in exactly one file; the special
tokens of ``tokenizer_config.json`` must be token texts. Each problem is a `PretrainedError`
naming the file.

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
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._files import file_kind, read_regular
from .._text import content_kind, os_problem
from ._errors import PretrainedError
from ._safetensors import SafetensorsFile

__all__ = ["Source", "read_json", "MAX_JSON_BYTES", "MAX_JSON_DEPTH"]

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
        stack.extend((child, level + 1) for child in items)
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


class _Twice(ValueError):
    def __init__(self, key: str, first: Any, second: Any):
        self.key, self.first, self.second = key, _shown(first), _shown(second)
        super().__init__(key)


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a key given twice (`_Twice`)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Twice(key, out[key], value)
        out[key] = value
    return out


def _confined(directory: pathlib.Path, name: Any, index: pathlib.Path) -> pathlib.Path:
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or name != os.path.basename(name)
        or "\\" in name
        or "\x00" in name
    ):
        raise PretrainedError(
            index,
            f"names the tensor file {name!r}, which is not a plain file name inside the model "
            "directory; refusing to read outside it",
        )
    path = directory / name
    if path.resolve().parent != directory.resolve():
        raise PretrainedError(
            index, f"names {name}, a symlink leading out of the model directory; refusing it"
        )
    return path


def _is_file(path: pathlib.Path) -> bool:
    """Whether ``path`` is a regular file (following symlinks); one that cannot be looked at
    (a folder without permission to enter it) is an error naming it, not a missing file."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
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
        tokenizer_config: ``tokenizer_config.json`` (empty when absent); its special tokens
            (`SPECIAL_TOKENS`) checked to be token texts.
        files: the safetensors files.

    Raises:
        PretrainedError: no such directory, no ``config.json``, no safetensors weights, or a
            malformed file (see the module docstring).
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = pathlib.Path(directory)
        problem = _directory_problem(self.directory)
        if problem is not None:
            raise PretrainedError(self.directory, problem)
        config_path = self.directory / CONFIG
        if not _is_file(config_path):
            raise PretrainedError(
                self.directory,
                f"it has no {CONFIG}: give the directory transformers' save_pretrained writes "
                "(config.json, model.safetensors, ...)",
            )
        self.config = read_json(config_path, CONFIG)
        self.architecture = self._architecture(config_path)
        generation = self.directory / GENERATION
        self.generation = read_json(generation, GENERATION) if _is_file(generation) else {}
        tokenizer = self.directory / TOKENIZER
        self.tokenizer = tokenizer if _is_file(tokenizer) else None
        side = self.directory / TOKENIZER_CONFIG
        self.tokenizer_config = read_json(side, TOKENIZER_CONFIG) if _is_file(side) else {}
        _special_tokens(self.tokenizer_config, side)
        self.files = self._files()
        self._where: dict[str, SafetensorsFile] = {}
        self._open()

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
        index = self.directory / INDEX
        if _is_file(index):
            weight_map = read_json(index, INDEX, unique=True).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise PretrainedError(
                    index, "'weight_map' must be an object of tensor name -> file name"
                )
            self._index = {
                str(name): _confined(self.directory, file, index)
                for name, file in weight_map.items()
            }
            files = sorted(set(self._index.values()))
            for path in files:
                if not _is_file(path):
                    raise PretrainedError(index, f"names {path.name}, which is {_absent(path)}")
            return files
        self._index = {}
        single = self.directory / SINGLE
        if _is_file(single):
            return [single]
        if os.path.lexists(single):
            raise PretrainedError(single, f"is {_absent(single)}: give the weights as a file")
        others = sorted(p.name for p in self.directory.glob("*.bin")) + sorted(
            p.name for p in self.directory.glob("*.safetensors")
        )
        hint = f" (it holds {', '.join(others[:4])})" if others else ""
        raise PretrainedError(
            self.directory,
            f"it has neither {SINGLE} nor {INDEX}{hint}. Only safetensors weights are read: "
            "save the model with transformers' save_pretrained (safe_serialization=True)",
        )

    def _open(self) -> None:
        for path in self.files:
            tensors = SafetensorsFile(path)
            for name in tensors.names():
                if self._index.get(name, path) != path:
                    continue  # (the index places it elsewhere: that file is read for it)
                if name in self._where:
                    raise PretrainedError(
                        path,
                        f"holds the tensor {name!r}, which {self._where[name].path} holds "
                        "too; each tensor must be in one file"
                        + (f" (or placed in one by {INDEX})" if self._index else ""),
                    )
                self._where[name] = tensors
        for name, path in self._index.items():
            if name not in self._where:
                raise PretrainedError(
                    path, f"does not hold the tensor {name!r} that {INDEX} places in it"
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

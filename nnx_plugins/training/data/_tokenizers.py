"""Tokenizers: text <-> token ids, a registered run part (``nnx.tokenizers``: ``bytes``, ``hf``).

A config names one in its top-level ``tokenizer:`` section (``{type: hf, path:
tokenizer.json}``; the default is ``bytes``). The ``text`` dataset encodes its text with it,
and generation encodes prompts and decodes the new tokens with it. Every tokenizer has
``vocab_size``, ``encode``, ``decode``, ``stream`` (an incremental decoder for printing tokens
as they come: it holds back the bytes of a character not yet complete), ``eos_token_ids`` and
``pad_token_id``.

``hf`` reads a ``tokenizer.json`` (the file transformers' fast tokenizers save) with the
``tokenizers`` library: no hand-written BPE. A malformed file is a `TokenizerError` naming the
file and where in it the library stopped (line and column); so is a malformed
``tokenizer_config.json`` beside it (where its special tokens are named), once one of them is
needed (a missing one names none), and so is a special token it names that is not a token of the
``tokenizer.json`` (an ``eos_token`` no id has would end no generated text).

Example:
    >>> from nnx_plugins.training.data._tokenizers import BytesTokenizer, HFTokenizer
    >>> BytesTokenizer().encode("hé").tolist()
    [104, 195, 169]
    >>> tokenizer = HFTokenizer("tests/fixtures/hf/llama/tokenizer.json")
    >>> ids = tokenizer.encode("The quick brown fox")
    >>> int(ids[0]) == tokenizer.bos_token_id, tokenizer.decode(ids)
    (True, 'The quick brown fox')
    >>> stream = tokenizer.stream()
    >>> "".join(stream.step(int(i)) for i in ids)
    'The quick brown fox'
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tokenizers import Tokenizer as Library
from tokenizers.decoders import DecodeStream

from ..._files import read_regular
from ..._text import content_kind, os_problem
from ...registry._registry import default_registry
from ._base import DataError

__all__ = [
    "Tokenizer",
    "TokenizerError",
    "BytesTokenizer",
    "HFTokenizer",
    "MAX_TOKENIZER_BYTES",
    "make_tokenizer",
    "check_special_tokens",
]

MAX_TOKENIZER_BYTES = 256 * 1024 * 1024
"""The largest tokenizer.json read (the largest published ones are about 30 MB)."""

MAX_TOKENIZER_CONFIG_BYTES = 16 * 1024 * 1024
"""The largest tokenizer_config.json read (published ones are a few kB to a few hundred kB:
a chat template, the added tokens)."""


class TokenizerError(DataError):
    """A tokenizer file cannot be read, or a tokenizer cannot do what it was asked; located
    at the config's ``tokenizer.path`` (the data argument ``tokenizer``)."""

    def __init__(self, message: str):
        super().__init__(message, key="tokenizer")


class Tokenizer:
    """The interface of a tokenizer (subclass it, or provide the same methods).

    Attributes:
        vocab_size: the number of token ids.
        eos_token_ids: the ids that end a generated sequence (may be empty).
        pad_token_id: the id used to pad rows of a batch (None: no such token).
        bos_token_id: the id ``encode`` puts first, if any.
    """

    vocab_size: int = 0
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    bos_token_id: int | None = None

    def encode(self, text: str, *, special_tokens: bool = True) -> np.ndarray:
        """``int32`` token ids of ``text`` (with the tokenizer's special tokens, e.g. a BOS)."""
        raise NotImplementedError

    def decode(self, ids: Any, *, skip_special_tokens: bool = True) -> str:
        """The text of ``ids``."""
        raise NotImplementedError

    def stream(self, *, skip_special_tokens: bool = True) -> Any:
        """An incremental decoder: ``.step(id) -> str``, the text completed by that id."""
        return _Stream(self, skip_special_tokens)

    def state(self) -> dict[str, Any]:
        """What a checkpoint records about the tokenizer."""
        return {}


class _Stream:
    """Decodes a growing list of ids, returning only text that will not change."""

    def __init__(self, tokenizer: Tokenizer, skip: bool):
        self._tokenizer, self._skip, self._ids, self._done = tokenizer, skip, [], ""

    def step(self, token: int) -> str:
        self._ids.append(int(token))
        text = self._tokenizer.decode(self._ids, skip_special_tokens=self._skip)
        if text.endswith("\ufffd"):  # an incomplete character: wait for its other bytes
            return ""
        new, self._done = text[len(self._done) :], text
        return new


class BytesTokenizer(Tokenizer):
    """UTF-8 bytes: 256 ids, no special tokens (the default tokenizer).

    Example:
        >>> from nnx_plugins.training.data._tokenizers import BytesTokenizer
        >>> stream = BytesTokenizer().stream()
        >>> [stream.step(b) for b in "é!".encode()]
        ['', 'é', '!']
    """

    vocab_size = 256

    def __init__(self) -> None:
        pass

    def encode(self, text: str, *, special_tokens: bool = True) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32)

    def decode(self, ids: Any, *, skip_special_tokens: bool = True) -> str:
        values = np.asarray(ids).reshape(-1).tolist()
        return bytes(v % 256 for v in values).decode("utf-8", errors="replace")

    def state(self) -> dict[str, Any]:
        return {"type": "bytes"}


def _read(path: pathlib.Path, limit: int | None = None, name: str = "tokenizer.json") -> str:
    """The text of the tokenizer file ``path`` (a ``name``), at most ``limit`` bytes
    (`MAX_TOKENIZER_BYTES` when None)."""
    limit = MAX_TOKENIZER_BYTES if limit is None else limit
    try:
        size = path.stat().st_size
        data = read_regular(path, limit) if size <= limit else None
    except OSError as error:
        raise TokenizerError(f"{path}: cannot be read: {os_problem(error)}.") from None
    except ValueError as error:  # (not a regular file, or grown past the limit meanwhile)
        raise TokenizerError(f"{path}: {error}; it is not a tokenizer file.") from None
    if data is None:
        raise TokenizerError(
            f"{path}: {size:,} bytes, more than the {limit:,} a {name} may have; it is not a "
            "tokenizer file."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TokenizerError(
            f"{path}: not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset "
            f"{error.start}); it is not a {name}."
        ) from None


def _read_config(path: pathlib.Path) -> dict[str, Any]:
    """The mapping of a ``tokenizer_config.json``; ``{}`` when there is no such file.

    Raises:
        TokenizerError: it cannot be read, is too large, not UTF-8, not JSON (with the line
            and column where it stops) or not a mapping.
    """
    if not os.path.lexists(path):
        return {}
    name = "tokenizer_config.json"
    text = _read(path, MAX_TOKENIZER_CONFIG_BYTES, name)
    fix = "Fix it, or remove it and give tokenizer.eos_token_ids and tokenizer.pad_token_id."
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as error:
        raise TokenizerError(
            f"{path}: not JSON ({error.msg} at line {error.lineno}, column {error.colno}); "
            f"it names the tokenizer's special tokens (eos_token, pad_token). {fix}"
        ) from None
    except RecursionError:
        raise TokenizerError(f"{path}: JSON nested too deeply for a {name}. {fix}") from None
    if not isinstance(loaded, dict):
        raise TokenizerError(
            f"{path}: holds {content_kind(loaded)}, not a mapping: a {name} maps names to the "
            f"tokenizer's special tokens (eos_token, pad_token). {fix}"
        )
    return loaded


def _where(error: BaseException) -> str:
    """Where the library stopped reading (``at line 7 column 1`` of its message), without the
    rest of its message: that quotes the file's values (``invalid type: string "..."``), and
    the file may not be a tokenizer at all."""
    found = re.search(r"line (\d+),? column (\d+)", str(error))
    where = f" (it stops at line {found[1]}, column {found[2]}" if found else " ("
    return f"{where}{'; ' if found else ''}the library's message is not shown: it quotes the file)"


def _special_token(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if isinstance(value, Mapping):  # {"content": "</s>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


_ROLE = {
    "eos_token": "no EOS: generation would never stop at the end of a text",
    "pad_token": "batches of prompts would be padded with the first EOS instead",
    "bos_token": "the tokenizer's BOS token could not be found",
}
"""What a special token of tokenizer_config.json that no id has would silently do."""


def _shown(token: str) -> str:
    """A token's text as said in an error: at most 40 characters of it."""
    return repr(token) if len(token) <= 40 else repr(token[:37] + "...")


class HFTokenizer(Tokenizer):
    """A ``tokenizer.json`` read with the ``tokenizers`` library.

    Args:
        path: the ``tokenizer.json`` (relative to the config file).
        eos_token_ids: the ids that end generation; None: the ``eos_token`` of the
            ``tokenizer_config.json`` beside the file, if any.
        pad_token_id: the id padding a batch; None: the ``pad_token`` of
            ``tokenizer_config.json``, else the first EOS.

    The file is read on first use (a config names it before it exists elsewhere).

    Raises:
        TokenizerError: (on first use) the file is missing, too large, not UTF-8, or not a
            tokenizer the library reads (with the line and column where it stopped); (when a
            special token is first read from it) the ``tokenizer_config.json`` beside it
            cannot be read, is not JSON (with its line and column) or not a mapping, or names
            as that token (EOS, padding, BOS) a text that is not a token of the file (the close
            matches named).
    """

    path_arguments = ("path",)

    def __init__(
        self,
        path: str,
        *,
        eos_token_ids: Sequence[int] | None = None,
        pad_token_id: int | None = None,
    ):
        if not isinstance(path, str) or not path:
            raise TokenizerError(f"path must name a tokenizer.json file, got {path!r}.")
        self.path = path
        self._eos = None if eos_token_ids is None else tuple(int(i) for i in eos_token_ids)
        self._pad = pad_token_id

    @classmethod
    def resolve_path(cls, value: str, folder: str) -> str:
        """``value`` relative to ``folder`` (the config file's)."""
        return value if os.path.isabs(value) else os.path.join(folder, value)

    @functools.cached_property
    def _tokenizer(self) -> Any:
        path = pathlib.Path(self.path)
        text = _read(path)
        try:
            return Library.from_str(text)
        except Exception as error:  # noqa: BLE001 - the library raises a bare Exception
            raise TokenizerError(
                f"{path}: not a tokenizer.json the tokenizers library can read{_where(error)}. "
                "Use the tokenizer.json a transformers fast tokenizer saves (save_pretrained)."
            ) from None

    @functools.cached_property
    def _config(self) -> dict[str, Any]:
        return _read_config(pathlib.Path(self.path).with_name("tokenizer_config.json"))

    def _named(self, key: str) -> tuple[str | None, int | None]:
        """The token ``key`` of tokenizer_config.json names, and its id (None: none)."""
        token = _special_token(self._config, key)
        return token, None if token is None else self._tokenizer.token_to_id(token)

    def _id(self, key: str) -> int | None:
        token, found = self._named(key)
        if token is not None and found is None:
            raise TokenizerError(self._not_a_token(key, token))
        return found

    def _not_a_token(self, key: str, token: str) -> str:
        """Why ``key`` of tokenizer_config.json, naming ``token``, is refused, and the fix."""
        special = [t.content for t in self._tokenizer.get_added_tokens_decoder().values()]
        close = difflib.get_close_matches(token, special, n=3, cutoff=0.5)
        if close:
            hint = f" Did you mean {' or '.join(map(repr, close))}?"
        elif special:
            hint = f" Its special tokens are {', '.join(map(repr, special[:8]))}."
        else:
            hint = ""
        given = {"eos_token": "eos_token_ids", "pad_token": "pad_token_id"}.get(key)
        also = f", or give tokenizer.{given} in the config" if given else ""
        side = pathlib.Path(self.path).with_name("tokenizer_config.json")
        return (
            f"{side}: '{key}' is {_shown(token)}, which is not a token of {self.path}: it would "
            f"have no id ({_ROLE[key]}).{hint} Name one of its tokens, or remove the "
            f"field{also}."
        )

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    @property
    def eos_token_ids(self) -> tuple[int, ...]:  # type: ignore[override]
        if self._eos is not None:
            return self._eos
        found = self._id("eos_token")
        return () if found is None else (found,)

    @property
    def pad_token_id(self) -> int | None:  # type: ignore[override]
        if self._pad is not None:
            return self._pad
        found = self._id("pad_token")
        return found if found is not None else next(iter(self.eos_token_ids), None)

    @property
    def bos_token_id(self) -> int | None:  # type: ignore[override]
        return self._id("bos_token")

    @property
    def mask_token_id(self) -> int | None:
        """The id of the mask token of a masked LM: ``mask_token`` of ``tokenizer_config.json``,
        else ``[MASK]`` or ``<mask>`` when the vocabulary has it; None if none of them."""
        found = self._named("mask_token")[1]
        for token in ("[MASK]", "<mask>"):
            if found is None:
                found = self._tokenizer.token_to_id(token)
        return found

    def encode(self, text: str, *, special_tokens: bool = True) -> np.ndarray:
        ids = self._tokenizer.encode(text, add_special_tokens=special_tokens).ids
        return np.asarray(ids, np.int32)

    def decode(self, ids: Any, *, skip_special_tokens: bool = True) -> str:
        values = [int(v) for v in np.asarray(ids).reshape(-1).tolist()]
        return self._tokenizer.decode(values, skip_special_tokens=skip_special_tokens)

    def stream(self, *, skip_special_tokens: bool = True) -> Any:
        decoder = DecodeStream(skip_special_tokens=skip_special_tokens)
        tokenizer = self._tokenizer

        class Stream:
            def step(self, token: int) -> str:
                return decoder.step(tokenizer, int(token)) or ""

        return Stream()

    def state(self) -> dict[str, Any]:
        return {"type": "hf", "path": self.path}


def make_tokenizer(spec: Mapping[str, Any] | None) -> Any:
    """The tokenizer a ``tokenizer:`` section (``{type: NAME, ...arguments}``) describes;
    `BytesTokenizer` for None.

    Raises:
        UnknownNameError: no tokenizer of that type is registered.

    Example:
        >>> from nnx_plugins.training.data._tokenizers import make_tokenizer
        >>> make_tokenizer({"type": "bytes"}).vocab_size
        256
    """
    if spec is None:
        return BytesTokenizer()
    arguments = {k: v for k, v in spec.items() if k != "type"}
    return default_registry().get("tokenizer", spec.get("type", "bytes"))(**arguments)


def check_special_tokens(tokenizer: Any) -> None:
    """Read ``tokenizer``'s special token ids (EOS, padding, BOS) now, so that one its files
    name wrongly is refused before a run, not when generation first needs it.

    Raises:
        TokenizerError: see `HFTokenizer` (a special token that is not a token of the file).

    Example:
        >>> from nnx_plugins.training.data._tokenizers import HFTokenizer, check_special_tokens
        >>> check_special_tokens(HFTokenizer("tests/fixtures/hf/llama/tokenizer.json"))
    """
    for name in ("eos_token_ids", "pad_token_id", "bos_token_id"):
        getattr(tokenizer, name, None)

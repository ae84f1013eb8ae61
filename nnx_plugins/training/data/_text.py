"""The ``text`` dataset: UTF-8 text as windows of token ids, for language models.

``path`` is a file, a folder (its files, recursively, in sorted order; hidden entries and
``__pycache__`` skipped) or a glob; a path starting with ``stdlib:`` is inside the Python
standard library's folder (``stdlib:json``: text every machine has). The files are joined with
a newline between them. ``level: bytes`` reads UTF-8 bytes (vocabulary 256); ``characters``
reads characters, the vocabulary being the sorted characters of the text, saved with every
checkpoint (`Vocabulary`). The last ``test_fraction`` of the tokens is the test split.

A batch holds ``inputs`` (``int32[batch, seq_len]``) and ``targets`` (the next token of each
position); test batches also hold ``mask`` (0 on the padding of the last, shorter window).

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.data._text import TextDataset
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = path.write_text("abcabcabcabc" * 10, encoding="utf-8")
    >>> path = str(path)
    >>> data = TextDataset(path, seq_len=4, level="characters", test_fraction=0.25)
    >>> data.vocabulary.characters, data.describe().vocab_size
    ('abc', 3)
    >>> batch = data.batch(step=0, batch_size=2, seed=0)
    >>> batch["inputs"].shape, data.vocabulary.decode(batch["inputs"][0])
    ((2, 4), 'bcab')
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import sysconfig
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import jax
import numpy as np

from ._base import Batch, DataError, DataInfo, Dataset, epoch_order
from ._files import check_size, open_regular
from ._tokenizers import make_tokenizer

__all__ = ["TextDataset", "Vocabulary", "STDLIB_PREFIX", "text_files"]

STDLIB_PREFIX = "stdlib:"
_GLOB = frozenset("*?[")


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """Token ids of text: UTF-8 bytes (``characters is None``) or the given characters.

    Example:
        >>> from nnx_plugins.training.data._text import Vocabulary
        >>> chars = Vocabulary("characters", " ehlo")
        >>> chars.encode("hello").tolist(), chars.decode([2, 1, 3, 3, 4])
        ([2, 1, 3, 3, 4], 'hello')
        >>> chars.encode("hi!")
        Traceback (most recent call last):
        ...
        nnx_plugins.training.data._base.DataError: the character 'i' (position 1) is not in the vocabulary of 5 characters the model was trained on; ...
        >>> Vocabulary("bytes").encode("é").tolist()
        [195, 169]
    """

    level: Literal["bytes", "characters"]
    characters: str | None = None

    @property
    def size(self) -> int:
        return 256 if self.characters is None else len(self.characters)

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.characters or "")}

    def encode(self, text: str) -> np.ndarray:
        """``int32`` token ids of ``text``.

        Raises:
            DataError: a character outside the vocabulary (the first, with its position).
        """
        if self.characters is None:
            return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32)
        ids = []
        for position, char in enumerate(text):
            found = self._index.get(char)
            if found is None:
                raise DataError(
                    f"the character {char!r} (position {position}) is not in the vocabulary "
                    f"of {self.size} characters the model was trained on; use only those "
                    f"characters (train with data.level: bytes to accept any text)."
                )
            ids.append(found)
        return np.asarray(ids, np.int32)

    def decode(self, ids: Any) -> str:
        """The text of token ids (bytes that are not UTF-8 become U+FFFD)."""
        values = np.asarray(ids).reshape(-1).tolist()
        if self.characters is None:
            return bytes(v % 256 for v in values).decode("utf-8", errors="replace")
        return "".join(self.characters[v] if 0 <= v < self.size else "\ufffd" for v in values)

    def state(self) -> dict[str, Any]:
        """What a checkpoint records (``from_state`` reads it back)."""
        return {"level": self.level, "vocabulary": self.characters}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Vocabulary:
        """The vocabulary a checkpoint's ``manifest["data"]`` records.

        Raises:
            DataError: the record is not a text vocabulary.
        """
        level, characters = state.get("level"), state.get("vocabulary")
        if level not in ("bytes", "characters") or (
            level == "characters" and not isinstance(characters, str)
        ):
            raise DataError(
                f"the checkpoint records no text vocabulary (its data record, a mapping of "
                f"{len(state):,} keys, has no level 'bytes' or 'characters' with its "
                "characters); it was not trained on data of type text."
            )
        return cls(level, characters if level == "characters" else None)


def _resolve(path: str) -> str:
    if path.startswith(STDLIB_PREFIX):
        return os.path.join(sysconfig.get_paths()["stdlib"], path[len(STDLIB_PREFIX) :])
    return path


def _walk(folder: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        found += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".")]
    return found


def text_files(path: str) -> list[str]:
    """The files ``path`` (a file, folder, glob, or ``stdlib:...``) names, in order.

    Raises:
        DataError: it names nothing.
    """
    resolved = _resolve(path)
    if _GLOB & set(resolved):
        files = sorted(f for f in glob.glob(resolved, recursive=True) if not os.path.isdir(f))
    elif os.path.isdir(resolved):
        files = _walk(resolved)
    else:
        files = [resolved]  # (open_regular says what is wrong with it)
    if not files:
        raise DataError(f"{path!r} names no file (resolved to {resolved!r}).", key="path")
    return files


def _decode(data: bytes, name: str) -> str:
    zero = data.find(b"\0")
    if zero >= 0:
        raise DataError(
            f"{name} is binary, not text (a NUL byte at offset {zero}); data of type text "
            "reads UTF-8 text files.",
            key="path",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{name} is not UTF-8 text: the byte 0x{data[error.start]:02x} at offset "
            f"{error.start} does not decode. Convert it to UTF-8 (e.g. iconv -t utf-8).",
            key="path",
        ) from None


def _read_text(files: list[str]) -> str:
    sizes = []
    for name in files:
        try:
            sizes.append(os.path.getsize(name))
        except OSError:
            sizes.append(0)  # (open_regular reports it)
    check_size(sum(sizes) * 5, f"the text of {len(files)} file(s)")  # (text, bytes and tokens)
    parts = []
    for name in files:
        with open_regular(name) as handle:
            parts.append(_decode(handle.read(), name))
    return "\n".join(parts)


class TextDataset(Dataset):
    """Windows of ``seq_len`` tokens of UTF-8 text; see the module docstring.

    Args:
        path: a file, folder or glob (relative to the config file), or ``stdlib:...``.
        seq_len: tokens per window (the model's context).
        level: ``bytes`` (vocabulary 256) or ``characters`` (the text's own).
        test_fraction: the share of the tokens, at the end, held out for testing.
        stride: tokens between the starts of training windows (default ``seq_len``).
        tokenizer: a tokenizer spec (``{type: hf, path: ...}``) whose ids replace ``level``'s;
            the config's ``tokenizer:`` section when it is not ``bytes``.
    """

    def __init__(
        self,
        path: str,
        *,
        seq_len: int = 128,
        level: Literal["bytes", "characters"] = "bytes",
        test_fraction: float = 0.1,
        stride: int | None = None,
        tokenizer: dict[str, Any] | None = None,
    ):
        for key, value in (("seq_len", seq_len), ("stride", stride or 1)):
            if value < 1:
                raise DataError(f"{key} must be at least 1, got {value}.", key=key)
        if not 0 < test_fraction < 1:
            raise DataError(
                f"test_fraction must be in (0, 1), got {test_fraction}.", key="test_fraction"
            )
        self.path, self.seq_len, self.level = path, seq_len, level
        self.test_fraction, self.stride = test_fraction, stride or seq_len
        self.tokenizer = tokenizer
        self.name = os.path.basename(path.rstrip("/")) or path

    @classmethod
    def resolve_path(cls, value: str, folder: str) -> str:
        """``value`` relative to ``folder`` (a ``stdlib:`` path is left as it is)."""
        if value.startswith(STDLIB_PREFIX) or os.path.isabs(value):
            return value
        return os.path.join(folder, value)

    @functools.cached_property
    def _corpus(self) -> tuple[np.ndarray, Vocabulary, int]:
        files = text_files(self.path)
        text = _read_text(files)
        if not text.strip():
            raise DataError(f"{self.path!r} holds no text (its files are empty).", key="path")
        if self.tokenizer is not None:  # (vocabulary: the level's, unused but for its size)
            tokens = make_tokenizer(self.tokenizer).encode(text, special_tokens=False)
            vocabulary = Vocabulary("bytes")
        elif self.level == "bytes":
            tokens = np.frombuffer(text.encode("utf-8"), np.uint8)
            vocabulary = Vocabulary("bytes")
        else:
            codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
            unique, tokens = np.unique(codes, return_inverse=True)
            vocabulary = Vocabulary("characters", "".join(map(chr, unique.tolist())))
            tokens = tokens.astype(np.int32)
        held = max(self.seq_len + 1, int(round(len(tokens) * self.test_fraction)))
        if len(tokens) - held < self.seq_len + 1:
            raise DataError(
                f"{self.path!r} holds {len(tokens):,} tokens: too few for training windows of "
                f"seq_len {self.seq_len} plus a test split of {held:,}. Give more text or a "
                "smaller seq_len.",
                key="path",
            )
        return tokens, vocabulary, len(tokens) - held

    @property
    def token_name(self) -> str:
        """What a token is, in words (``byte``, ``character``, or ``token`` with a
        tokenizer): a language model's summary says bits per it."""
        if self.tokenizer is not None:
            return "token"
        return "byte" if self.level == "bytes" else "character"

    @property
    def vocabulary(self) -> Vocabulary:
        return self._corpus[1]

    @property
    def tokens(self) -> np.ndarray:
        """Every token id of the text (train, then test)."""
        return self._corpus[0]

    @functools.cached_property
    def _starts(self) -> np.ndarray:
        cut = self._corpus[2]
        return np.arange(0, cut - self.seq_len, self.stride)

    def describe(self) -> DataInfo:
        window = jax.ShapeDtypeStruct((self.seq_len,), np.int32)
        return DataInfo(
            self.name,
            window,
            window,
            f"data (text {self.name}, level {self.level})",
            vocab_size=self._vocab_size,
            masked=True,
        )

    @property
    def _vocab_size(self) -> int:
        if self.tokenizer is not None:
            return int(make_tokenizer(self.tokenizer).vocab_size)
        return self.vocabulary.size

    def steps_per_epoch(self, batch_size: int) -> int:
        steps = len(self._starts) // batch_size
        if steps == 0:
            raise DataError(
                f"{self.path!r} has {len(self._starts)} training windows of {self.seq_len} "
                f"tokens, fewer than one batch of {batch_size}; lower train.batch_size or "
                "data.stride, or give more text."
            )
        return steps

    def _windows(self, starts: np.ndarray) -> Batch:
        span = starts[:, None] + np.arange(self.seq_len + 1)
        window = self.tokens[span].astype(np.int32)
        return {"inputs": window[:, :-1], "targets": window[:, 1:]}

    def batch(self, step: int, batch_size: int, seed: int) -> Batch:
        epoch, index = divmod(step, self.steps_per_epoch(batch_size))
        order = epoch_order(seed, epoch, len(self._starts))
        return self._windows(self._starts[order[index * batch_size : (index + 1) * batch_size]])

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        test = self.tokens[self._corpus[2] :].astype(np.int32)
        count = -(-(len(test) - 1) // self.seq_len)
        padded = np.zeros(count * self.seq_len + 1, np.int32)
        padded[: len(test)] = test
        counted = np.zeros(count * self.seq_len, np.int32)
        counted[: len(test) - 1] = 1
        for first in range(0, count, batch_size):
            rows = np.arange(first, min(first + batch_size, count))
            span = rows[:, None] * self.seq_len + np.arange(self.seq_len)
            yield {"inputs": padded[span], "targets": padded[span + 1], "mask": counted[span]}

    def state(self) -> dict[str, Any]:
        if self.tokenizer is not None:
            return {"level": "tokenizer", "tokenizer": dict(self.tokenizer)}
        return self.vocabulary.state()

    def check_state(self, saved: Mapping[str, Any]) -> str | None:
        mine = self.vocabulary
        if saved.get("level") != mine.level:
            return (
                f"the checkpoint was trained on text read as {saved.get('level')}, this data "
                f"reads it as {mine.level}; set data.level: {saved.get('level')}."
            )
        theirs = saved.get("vocabulary")
        if mine.level == "characters" and theirs != mine.characters:
            new = sorted(set(mine.characters or "") - set(theirs or ""))
            gone = sorted(set(theirs or "") - set(mine.characters or ""))
            changes = []
            if new:
                changes.append(f"new characters {''.join(new)[:20]!r}")
            if gone:
                changes.append(f"missing characters {''.join(gone)[:20]!r}")
            return (
                f"the checkpoint's character vocabulary ({len(theirs or '')} characters) "
                f"differs from this text's ({mine.size}): "
                f"{', '.join(changes) or 'a different order'}. Token ids would mean other "
                "characters: train on the same text, or use data.level: bytes."
            )
        return None

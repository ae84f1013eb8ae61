"""The ``text`` dataset: UTF-8 text as windows of token ids, for language models.

``path`` is a file, a folder (its files, recursively, in sorted order; hidden entries and
``__pycache__`` skipped) or a glob; a path starting with ``stdlib:`` is inside the Python
standard library's folder (``stdlib:json``: text every machine has). The files are joined with
a newline between them. ``level: bytes`` reads UTF-8 bytes (vocabulary 256); ``characters``
reads characters, the vocabulary being the sorted characters of the text, saved with every
checkpoint (`Vocabulary`). The last ``test_fraction`` of the tokens is the test split.

A batch holds ``inputs`` (``int32[batch, seq_len]``) and ``targets`` (the next token of each
position); test batches also hold ``mask`` (0 on the padding of the last, shorter window).

``masking: {probability: 0.15, mask_token_id: ID}`` makes it masked-language-model data (BERT's
objective, `Masking`): the inputs are the windows with the chosen positions replaced (80% by the
mask id, 10% by a random id, 10% kept), the targets the original tokens at the same positions,
and every batch's ``mask`` marks the chosen positions, so the ``language_model`` task's loss is
the masked-LM loss. The choice is a pure function of ``(train.seed, step, row)``; the
validation and test windows are masked the same way in every run.

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

import contextlib
import contextvars
import dataclasses
import functools
import os
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import jax
import numpy as np

from ._base import (
    DEFAULT_VALIDATION,
    Batch,
    DataError,
    DataInfo,
    Dataset,
    check_fraction,
    epoch_order,
)
from ._files import check_size, open_regular
from ._masking import SPLITS, Masking, as_masking, mask_rows
from ._paths import glob_files, has_magic, walk_files
from ._tokenizers import check_special_tokens, make_tokenizer

__all__ = ["TextDataset", "Vocabulary", "STDLIB_PREFIX", "text_files", "TextChecks", "checks_only"]

STDLIB_PREFIX = "stdlib:"

FIRST_SAMPLE = 1 << 16
"""The characters of text a tokenizer first encodes under `checks_only` (doubled as needed)."""

_MARGIN = 64
"""Tokens of an encoded prefix not counted: at its cut, the whole text's tokens may differ."""


@dataclasses.dataclass
class TextChecks:
    """What `checks_only` knows of the model: ``ids_below``, the ids its ``Embed`` and logits
    take (None: not known yet)."""

    ids_below: int | None = None


_CHECKS: contextvars.ContextVar[TextChecks | None] = contextvars.ContextVar(
    "nnx_text_checks", default=None
)


@contextlib.contextmanager
def checks_only() -> Iterator[TextChecks]:
    """Within it (``nnx config validate``), a text dataset with a tokenizer made there encodes
    only a prefix of its text (`FIRST_SAMPLE` characters, doubled until each check passes):
    the token counts its checks need grow with the text, so a prefix that passes them proves
    the whole text does. A check that fails is made again on the whole text, so its refusal is
    the one ``nnx train`` gives. Its token ids stand for the whole text's once every id the
    tokenizer has is below the yielded `TextChecks`' ``ids_below`` (set it when the model is
    known); else the whole text is encoded for them. Only the checks use such a dataset.

    Example:
        >>> import pathlib, tempfile
        >>> from nnx_plugins.training.data._text import TextDataset, checks_only
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
        >>> _ = path.write_text("The quick brown fox. " * 20_000, encoding="utf-8")
        >>> tokenizer = {"type": "hf", "path": "tests/fixtures/hf/llama/tokenizer.json"}
        >>> with checks_only():
        ...     checked = TextDataset(str(path), seq_len=8, tokenizer=tokenizer)
        ...     checked.steps_per_epoch(4) > 0
        True
        >>> whole = TextDataset(str(path), seq_len=8, tokenizer=tokenizer)
        >>> len(checked.tokens) < len(whole.tokens)
        True
    """
    token = _CHECKS.set(TextChecks())
    try:
        yield _CHECKS.get()  # type: ignore[misc]
    finally:
        _CHECKS.reset(token)


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


def text_files(path: str) -> list[str]:
    """The files ``path`` (a file, folder, glob, or ``stdlib:...``) names, in order.

    Raises:
        DataError: it names nothing, or makes the search visit too many entries.
    """
    resolved = _resolve(path)
    if has_magic(resolved):
        files = glob_files(resolved)
    elif os.path.isdir(resolved):
        files = walk_files(resolved)
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


def _check_masking(
    masking: Masking, *, seq_len: int, level: str, tokenizer: dict[str, Any] | None
) -> None:
    if seq_len < 2:
        raise DataError(
            f"masking needs seq_len of at least 2, got {seq_len}: a masked token is predicted "
            "from the tokens around it in its window. Give a longer seq_len.",
            key="seq_len",
        )
    if tokenizer is None and level == "characters":
        raise DataError(
            "masking needs an id no token of the text has, but with level: characters every id "
            "is a character of the text. Use level: bytes with mask_token_id: 0 (NUL: never in "
            "text), or a tokenizer with a mask token.",
            key="masking",
        )


class TextDataset(Dataset):
    """Windows of seq_len tokens of UTF-8 text from files, folders, globs or stdlib:NAME.

    See the module docstring.

    Args:
        path: a file, folder or glob (relative to the config file), or ``stdlib:...``.
        seq_len: tokens per window (the model's context).
        level: ``bytes`` (vocabulary 256) or ``characters`` (the text's own).
        test_fraction: the share of the tokens, at the end, held out for testing.
        stride: tokens between the starts of training windows (default ``seq_len``).
        tokenizer: a tokenizer spec (``{type: hf, path: ...}``) whose ids replace ``level``'s;
            the config's ``tokenizer:`` section when it is not ``bytes``.
        masking: ``{probability, mask_token_id}``: masked-language-model batches instead of
            next-token ones (`Masking`); the mask id must be in the vocabulary (with a
            tokenizer, its ``[MASK]``; with ``level: bytes``, 0). None: next-token prediction.

    Raises:
        DataError: a bad argument (``key`` names it): seq_len or stride below 1, test_fraction
            outside (0, 1), masking with seq_len below 2 or with ``level: characters`` (every
            id is a character of the text: there is no id free for the mask), or a masking
            `Masking` refuses.
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
        masking: Masking | None = None,
    ):
        for key, value in (("seq_len", seq_len), ("stride", 1 if stride is None else stride)):
            if value < 1:
                raise DataError(
                    f"{key} must be at least 1, got {value}"
                    + (
                        " (leave stride out for windows that do not overlap)."
                        if key == "stride"
                        else "."
                    ),
                    key=key,
                )
        if not 0 < test_fraction < 1:
            raise DataError(
                f"test_fraction must be in (0, 1), got {test_fraction}.", key="test_fraction"
            )
        self.path, self.seq_len, self.level = path, seq_len, level
        self.test_fraction, self.stride = test_fraction, seq_len if stride is None else stride
        self.tokenizer = tokenizer
        self.masking = as_masking(masking)
        if self.masking is not None:
            _check_masking(self.masking, seq_len=seq_len, level=level, tokenizer=tokenizer)
        self.name = os.path.basename(path.rstrip("/")) or path
        self.validation = 0.0  # (the share of the training tokens held out: `hold_out`)
        self._checks = _CHECKS.get()  # (`checks_only`: a prefix, as long as the checks need)
        self._sample, self._partial = FIRST_SAMPLE, False

    @classmethod
    def resolve_path(cls, value: str, folder: str) -> str:
        """``value`` relative to ``folder`` (a ``stdlib:`` path is left as it is)."""
        if value.startswith(STDLIB_PREFIX) or os.path.isabs(value):
            return value
        return os.path.join(folder, value)

    @functools.cached_property
    def _text(self) -> str:
        text = _read_text(text_files(self.path))
        if not text.strip():
            raise DataError(f"{self.path!r} holds no text (its files are empty).", key="path")
        return text

    @functools.cached_property
    def _tokenizer(self) -> Any:
        """The tokenizer (its special tokens checked: `check_special_tokens`)."""
        tokenizer = make_tokenizer(self.tokenizer)
        check_special_tokens(tokenizer)
        return tokenizer

    @functools.cached_property
    def _corpus(self) -> tuple[np.ndarray, Vocabulary, int]:
        text = self._text
        count = None
        if self.tokenizer is not None:  # (vocabulary: the level's, unused but for its size)
            tokens, count = self._encoded(text)
            vocabulary = Vocabulary("bytes")
        elif self.level == "bytes":
            tokens = np.frombuffer(text.encode("utf-8"), np.uint8)
            vocabulary = Vocabulary("bytes")
        else:
            codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
            unique, tokens = np.unique(codes, return_inverse=True)
            vocabulary = Vocabulary("characters", "".join(map(chr, unique.tolist())))
            tokens = tokens.astype(np.int32)
        count = len(tokens) if count is None else count
        held = max(self.seq_len + 1, int(round(count * self.test_fraction)))
        if count - held < self.seq_len + 1:
            raise DataError(
                f"{self.path!r} holds {count:,} tokens: too few for training windows of "
                f"seq_len {self.seq_len} plus a test split of {held:,}. Give more text or a "
                "smaller seq_len.",
                key="path",
            )
        return tokens, vocabulary, count - held

    def _encoded(self, text: str) -> tuple[np.ndarray, int]:
        """The tokenizer's ids of ``text`` and how many of them count; under `checks_only`,
        of its first `_sample` characters (cut after a line), less `_MARGIN`."""
        end = len(text)
        if self._checks is not None and self._sample < len(text):
            end = text.rfind("\n", 0, self._sample) + 1 or self._sample
        tokens = self._tokenizer.encode(text[:end], special_tokens=False)
        self._partial = end < len(text)
        return tokens, max(len(tokens) - _MARGIN, 0) if self._partial else len(tokens)

    def _checked(self, read: Callable[[], Any]) -> Any:
        """``read()``; when it fails on a prefix of the text (`checks_only`), again on twice
        as much, until it passes or fails on the whole text."""
        while True:
            try:
                return read()
            except DataError:
                if not self._partial:
                    raise
            self._encode_more(self._sample * 2)

    def _encode_more(self, characters: int) -> None:
        """Encode the first ``characters`` of the text next time (forget what depends on it)."""
        self._sample, self._partial = characters, False
        for name in ("_corpus", "_train_end", "_starts"):
            self.__dict__.pop(name, None)

    def _whole(self) -> np.ndarray:
        """Every token id of the text, also under `checks_only` unless the model takes every
        id the tokenizer has (then those of the prefix stand for them)."""
        below = None if self._checks is None else self._checks.ids_below
        if self._partial and (below is None or self._vocab_size > below):
            self._encode_more(len(self._text))
        return self.tokens

    @property
    def token_name(self) -> str:
        """What a token is, in words (``byte``, ``character``, or ``token`` with a
        tokenizer): a language model's summary says bits per it."""
        if self.tokenizer is not None:
            return "token"
        return "byte" if self.level == "bytes" else "character"

    @property
    def vocabulary(self) -> Vocabulary:
        return self._checked(lambda: self._corpus)[1]

    @property
    def tokens(self) -> np.ndarray:
        """Every token id of the text (train, then test; under `checks_only`, maybe those of
        a prefix)."""
        return self._checked(lambda: self._corpus)[0]

    def hold_out(self, fraction: float | None, *, seed: int) -> bool:
        """Hold the last ``fraction`` of the training tokens (default `DEFAULT_VALIDATION`; 0:
        none) out as the validation split, just before the test split; whether there is one.

        A contiguous stretch, not windows drawn with ``seed``: the training windows overlap
        their neighbours' text, so a window drawn from among them would be trained on.

        Raises:
            DataError: a fraction outside ``[0, 1)``, or too little text for it.
        """
        check_fraction(fraction)
        self.validation = DEFAULT_VALIDATION if fraction is None else float(fraction)
        self.__dict__.pop("_train_end", None)
        self.__dict__.pop("_starts", None)
        return self._checked(lambda: self._train_end < self._corpus[2])  # (checked now)

    @functools.cached_property
    def _train_end(self) -> int:
        """Where the training tokens end: the validation tokens (if any) follow, then the test."""
        cut = self._corpus[2]
        if not self.validation:
            return cut
        held = max(self.seq_len + 1, int(round(cut * self.validation)))
        if cut - held < self.seq_len + 1:
            raise DataError(
                f"{self.path!r} holds {cut:,} training tokens: too few for training windows of "
                f"seq_len {self.seq_len} plus a validation split of {held:,}. Give more text, a "
                "smaller seq_len or data.validation, or data.validation: 0.",
                key="validation",
            )
        return cut - held

    @functools.cached_property
    def _starts(self) -> np.ndarray:
        return np.arange(0, self._train_end - self.seq_len, self.stride)

    def describe(self) -> DataInfo:
        window = jax.ShapeDtypeStruct((self.seq_len,), np.int32)
        masked = "" if self.masking is None else f", {self.masking.probability:.0%} masked"
        return DataInfo(
            self.name,
            window,
            window,
            f"data (text {self.name}, level {self.level}{masked})",
            vocab_size=self._vocab_size if self.masking is None else self._masking_vocab,
            masked=True,
        )

    @functools.cached_property
    def _masking_vocab(self) -> int:
        """The vocabulary size, checked to hold the mask id (random replacements are drawn
        from it)."""
        assert self.masking is not None
        size, mask = self._vocab_size, self.masking.mask_token_id
        if mask >= size:
            what = (
                f"the tokenizer {self.tokenizer.get('path', self.tokenizer.get('type'))!r}"
                if self.tokenizer is not None
                else f"level {self.level}"
            )
            raise DataError(
                f"masking.mask_token_id is {mask}, outside the vocabulary of {what}: {size:,} "
                f"token ids (0 to {size - 1}). Give the id of the tokenizer's mask token "
                "([MASK]; with level: bytes, 0).",
                key="masking",
            )
        return size

    @property
    def _vocab_size(self) -> int:
        if self.tokenizer is not None:
            return int(self._tokenizer.vocab_size)
        return self.vocabulary.size

    def steps_per_epoch(self, batch_size: int) -> int:
        return self._checked(lambda: self._steps_per_epoch(batch_size))

    def _steps_per_epoch(self, batch_size: int) -> int:
        steps = len(self._starts) // batch_size
        if steps == 0:
            raise DataError(
                f"{self.path!r} has {len(self._starts)} training windows of {self.seq_len} "
                f"tokens, fewer than one batch of {batch_size}; lower train.batch_size or "
                "data.stride, or give more text."
            )
        return steps

    def _windows(self, starts: np.ndarray, seed: tuple[int, int]) -> Batch:
        span = starts[:, None] + np.arange(self.seq_len + 1)
        window = self.tokens[span].astype(np.int32)
        if self.masking is None:
            return {"inputs": window[:, :-1], "targets": window[:, 1:]}
        real = np.ones((len(starts), self.seq_len), bool)
        vocab = self._masking_vocab
        return mask_rows(window[:, :-1], real, seed, self.masking, vocab_size=vocab)

    def batch(self, step: int, batch_size: int, seed: int) -> Batch:
        epoch, index = divmod(step, self.steps_per_epoch(batch_size))
        order = epoch_order(seed, epoch, len(self._starts))
        starts = self._starts[order[index * batch_size : (index + 1) * batch_size]]
        return self._windows(starts, (seed, step))

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._masked_windows(self.tokens[self._corpus[2] :], batch_size, "test")

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        """The validation split (none unless `hold_out` made one), as `test_batches`."""
        if self._train_end == self._corpus[2]:
            return iter(())
        held = self.tokens[self._train_end : self._corpus[2]]
        return self._masked_windows(held, batch_size, "validation")

    def _masked_windows(self, tokens: np.ndarray, batch_size: int, split: str) -> Iterator[Batch]:
        """Consecutive windows over ``tokens``; the last one padded (its padding masked)."""
        if self.masking is not None:
            return self._masked_lm_windows(tokens, batch_size, split)
        return self._next_token_windows(tokens, batch_size)

    def _masked_lm_windows(
        self, tokens: np.ndarray, batch_size: int, split: str
    ) -> Iterator[Batch]:
        """`_masked_windows` with masking: every token of ``tokens`` is in one window; the
        window ``i`` of ``split`` is masked with the same seed in every run."""
        assert self.masking is not None
        vocab = self._masking_vocab
        count = -(-len(tokens) // self.seq_len)
        padded = np.zeros(count * self.seq_len, np.int32)
        padded[: len(tokens)] = tokens
        real = np.arange(count * self.seq_len) < len(tokens)
        for first in range(0, count, batch_size):
            rows = np.arange(first, min(first + batch_size, count))
            span = rows[:, None] * self.seq_len + np.arange(self.seq_len)
            each = [
                mask_rows(w[None], r[None], (SPLITS[split], row), self.masking, vocab_size=vocab)
                for w, r, row in zip(padded[span], real[span], rows, strict=True)
            ]
            yield {key: np.concatenate([one[key] for one in each]) for key in each[0]}

    def _next_token_windows(self, tokens: np.ndarray, batch_size: int) -> Iterator[Batch]:
        test = tokens.astype(np.int32)
        count = -(-(len(test) - 1) // self.seq_len)
        padded = np.zeros(count * self.seq_len + 1, np.int32)
        padded[: len(test)] = test
        counted = np.zeros(count * self.seq_len, np.int32)
        counted[: len(test) - 1] = 1
        for first in range(0, count, batch_size):
            rows = np.arange(first, min(first + batch_size, count))
            span = rows[:, None] * self.seq_len + np.arange(self.seq_len)
            yield {"inputs": padded[span], "targets": padded[span + 1], "mask": counted[span]}

    def label_arrays(self) -> tuple[tuple[str, np.ndarray, int], ...]:
        """The token ids: every target is one of them."""
        return (("tokens", self._whole(), 0),)

    def input_arrays(self) -> tuple[tuple[str, np.ndarray, int], ...]:
        """The token ids: every input is one of them (with masking, also the mask id and the
        largest random id)."""
        if self.masking is None:
            return (("tokens", self._whole(), 0),)
        drawn = np.array([self.masking.mask_token_id, self._masking_vocab - 1])
        return (
            ("tokens", self._whole(), 0),
            ("masking (mask_token_id, largest random id)", drawn, 0),
        )

    def state(self) -> dict[str, Any]:
        if self.tokenizer is not None:
            spec = dict(self.tokenizer)
            return {"level": "tokenizer", "tokenizer": spec, "vocab_size": self._vocab_size}
        return self.vocabulary.state()

    def check_state(self, saved: Mapping[str, Any]) -> str | None:
        if self.tokenizer is not None or saved.get("level") == "tokenizer":
            return self._tokenizer_problem(saved)
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

    def _tokenizer_problem(self, saved: Mapping[str, Any]) -> str | None:
        """Why a checkpoint's text state does not fit, where either side reads text with a
        tokenizer: token ids mean what they meant only under the same tokenizer (its file may
        move: the type and the vocabulary size are compared)."""
        level = saved.get("level")
        theirs = saved.get("tokenizer")
        theirs = dict(theirs) if isinstance(theirs, Mapping) else {}
        named = repr(theirs.get("path", theirs.get("type")))
        if self.tokenizer is None:
            return (
                f"the checkpoint's token ids are those of the tokenizer {named} "
                f"(type {theirs.get('type')!r}); this config has no tokenizer section, so it "
                f"reads the text as {self.level}: add the run's tokenizer section back "
                "(tokenizer: {type: hf, path: tokenizer.json})."
            )
        mine = repr(self.tokenizer.get("path", self.tokenizer.get("type")))
        if level != "tokenizer":
            return (
                f"the checkpoint was trained on text read as {level} (no tokenizer); this "
                f"config reads it with the tokenizer {mine}: remove the config's tokenizer "
                f"section to read it as {level} again."
            )
        if theirs.get("type") != self.tokenizer.get("type"):
            return (
                f"the checkpoint was trained with a tokenizer of type {theirs.get('type')!r} "
                f"({named}); this config's is of type {self.tokenizer.get('type')!r} ({mine}): "
                "give the run's tokenizer section."
            )
        size = saved.get("vocab_size")
        if isinstance(size, int) and size != self._vocab_size:
            return (
                f"the checkpoint was trained with a tokenizer of {size:,} token ids ({named}); "
                f"this config's tokenizer {mine} has {self._vocab_size:,}: token ids would "
                "mean other tokens. Give the run's tokenizer.json."
            )
        return None

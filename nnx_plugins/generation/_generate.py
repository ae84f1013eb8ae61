"""`generate`: text from a trained language model, its config and a checkpoint.

The model is built from the config (as ``nnx train`` built it) and filled from the checkpoint;
the vocabulary is the one the checkpoint recorded (``data.level: bytes`` or the characters of
the training text), and the config's data must agree with it. The prompt is encoded with it,
continued by `decode` (the KV cache) and the new tokens decoded back to text.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins import generate, train
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "abcd.txt").write_text("abcd" * 100)
    >>> attention = {"type": "MultiHeadAttention", "num_heads": 2, "in_features": 8,
    ...              "is_causal": True, "decode": False}
    >>> config = {
    ...     "model": {"type": "Sequential", "layers": [
    ...         {"type": "Embed", "num_embeddings": 4, "features": 8},
    ...         {"type": "PositionEmbed", "max_length": 8, "features": 8},
    ...         {"type": "Residual", "block": attention},
    ...         {"type": "Linear", "in_features": 8, "out_features": 4}]},
    ...     "task": {"type": "language_model"},
    ...     "data": {"type": "text", "path": str(folder / "abcd.txt"), "level": "characters",
    ...              "seq_len": 8},
    ...     "optimizer": {"type": "adam", "learning_rate": 0.05},
    ...     "train": {"steps": 40, "batch_size": 8}}
    >>> run = train(config, run_dir=folder / "run", progress=False)
    >>> out = generate(config, checkpoint=run.checkpoint, prompt="ab", temperature=0)
    >>> out.text, out.tokens, out.step  # up to the model's maximum length, 8
    ('cdabcd', (2, 3, 0, 1, 2, 3), 40)
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import pathlib
import time
from typing import Any

import numpy as np

from ..training._assembly import located_data_error
from ..training._config import load_train_config
from ..training._loop import build_model
from ..training.checkpoints._load import load
from ..training.checkpoints._manifest import read_manifest
from ..training.data._base import DataError
from ..training.data._text import Vocabulary
from ._decode import GenerationError, check_options, decode, model_max_length

__all__ = ["Generation", "generate", "DEFAULT_TOKENS"]

DEFAULT_TOKENS = 100
"""New tokens when ``max_tokens`` is not given and the model has no maximum length."""


@dataclasses.dataclass(frozen=True)
class Generation:
    """What `generate` produced.

    Attributes:
        prompt: the prompt, as given.
        text: the continuation: the new tokens decoded, always valid text. On byte tokens, the
            bytes of a character the last tokens began but did not finish are held back (in
            ``unfinished``), and bytes that form no character (the model broke a character
            off) become U+FFFD.
        tokens: the new token ids (those held back included).
        checkpoint: the checkpoint directory the weights came from.
        step: the training step of that checkpoint.
        seconds: wall time of the decoding (compilation included).
        unfinished: the bytes held back: the start of a character cut off by ``max_tokens``.
    """

    prompt: str
    text: str
    tokens: tuple[int, ...]
    checkpoint: pathlib.Path
    step: int | None
    seconds: float
    unfinished: bytes = b""


def _vocabulary(config: Any, manifest: dict[str, Any]) -> Vocabulary:
    """The checkpoint's vocabulary, after checking that the config's data agrees with it."""
    where = manifest["directory"]
    saved = (manifest.get("run") or {}).get("data") or {}
    try:
        vocabulary = Vocabulary.from_state(saved)
    except DataError as error:
        raise GenerationError(f"{where}: {error}") from None
    try:
        data = config.sections["data"].make()
        problem = getattr(data, "check_state", lambda saved: None)(saved)
    except DataError as error:
        raise located_data_error(config, error) from None
    if problem:
        at = located_data_error(config, DataError(problem, key="path"))
        raise GenerationError(f"the checkpoint {where} does not fit the config's data: {at}")
    return vocabulary


def _encode(vocabulary: Vocabulary, prompt: str) -> np.ndarray:
    if not isinstance(prompt, str) or not prompt:
        shown = f"{type(prompt).__name__} {_shown(prompt)}" if prompt != "" else "''"
        raise GenerationError(
            f"the prompt must be non-empty text, got {shown}: the model continues it, so give "
            f"at least one character."
        )
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as error:
        raise GenerationError(_not_text(prompt, error.start)) from None
    try:
        return vocabulary.encode(prompt)
    except DataError as error:
        raise GenerationError(f"the prompt {_shown(prompt)}: {error}") from None


def _shown(prompt: object) -> str:
    """The prompt quoted, at most 40 characters of it."""
    text = repr(prompt) if len(repr(prompt)) <= 40 else repr(prompt)[:36] + "..."
    return text


def _not_text(prompt: str, position: int) -> str:
    """Why ``prompt`` cannot be encoded: a byte the shell passed undecoded (Python keeps it
    as a surrogate escape, U+DC80..U+DCFF), or another lone surrogate."""
    code = ord(prompt[position])
    if 0xDC80 <= code <= 0xDCFF:
        what = (
            f"the byte 0x{code - 0xDC00:02x} (position {position}), which is not UTF-8: the "
            "terminal or the shell passed text in another encoding (Latin-1?)"
        )
    else:
        what = f"U+{code:04X} (position {position}), a lone surrogate, which is not a character"
    return f"the prompt holds {what}. Give the prompt as UTF-8 text."


def _decoded(vocabulary: Vocabulary, tokens: np.ndarray) -> tuple[str, bytes]:
    """The text of the new tokens, and the bytes of an unfinished last character (held back:
    printed, they would be invalid UTF-8)."""
    if vocabulary.characters is not None:
        return vocabulary.decode(tokens), b""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(bytes(int(t) % 256 for t in tokens.reshape(-1)), final=False)
    return text, decoder.getstate()[0]


def generate(
    config: Any,
    *,
    checkpoint: str | os.PathLike[str],
    prompt: str,
    max_tokens: int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> Generation:
    """Continue ``prompt`` with the language model of ``config`` trained into ``checkpoint``.

    Args:
        config: a config file path, mapping or `Config`: its ``model`` and ``data`` sections
            are those of the run (``nnx train``'s), e.g. ``examples/text_gpt.yaml``.
        checkpoint: a checkpoint directory, or a directory of ``step_N`` checkpoints (the
            newest is used).
        prompt: the text to continue.
        max_tokens: how many tokens to add; the prompt and these must fit the model's maximum
            length. ``None``: as many as fit (100 when no layer limits the length).
        temperature: ``0`` for greedy decoding; else the softmax temperature.
        top_k: draw among the ``top_k`` most likely tokens only (``None``: all).
        seed: the random seed of the draws.

    Returns:
        A `Generation`.

    Raises:
        ConfigError: the config is invalid.
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
        DataError: the config's data cannot be read.
        GenerationError: the checkpoint records no text vocabulary or one that differs from
            the config's data; the prompt is empty, is not text (a byte that is not UTF-8, a
            lone surrogate) or holds a character outside the vocabulary; ``max_tokens`` is
            past the model's maximum length, or needs caches larger than the memory
            available; a bad argument (e.g. a seed past 2**63-1).
    """
    check_options(max_tokens=max_tokens, temperature=temperature, top_k=top_k, seed=seed)
    config = load_train_config(config)
    manifest = read_manifest(checkpoint)
    vocabulary = _vocabulary(config, manifest)
    ids = _encode(vocabulary, prompt)
    model = build_model(config)
    load(manifest["directory"], into=model)
    if max_tokens is None:
        limit = model_max_length(model)
        max_tokens = DEFAULT_TOKENS if limit is None else max(limit - len(ids), 1)
    started = time.perf_counter()
    tokens = decode(
        model, ids[None], max_tokens=max_tokens, temperature=temperature, top_k=top_k, seed=seed
    )
    new = np.asarray(tokens)[0]
    text, unfinished = _decoded(vocabulary, new)
    return Generation(
        prompt,
        text,
        tuple(int(t) for t in new),
        pathlib.Path(manifest["directory"]),
        manifest.get("step"),
        time.perf_counter() - started,
        unfinished,
    )

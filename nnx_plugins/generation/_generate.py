"""`generate`: text from a trained language model, its config and a checkpoint.

The model is built from the config (as ``nnx train`` built it) and filled from the checkpoint.
Text becomes token ids and back through the config's ``tokenizer`` section when it names one
(``{type: hf, path: tokenizer.json}``, as ``nnx import hf`` writes it: its EOS ends a row), else
through the vocabulary the checkpoint recorded (``data.level: bytes`` or the characters of the
training text), which the config's data must agree with. The prompts are continued by `decode`
(the KV cache): several prompts as one batch, padded on the left with their mask for a model
that takes one (`nnx_layers.CausalLM`: the prompt as one chunk, rows numbered as transformers'
``generate`` numbers them), else one batch per prompt length.

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
import json
import os
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nnx_layers import Embed, MaskedLM

from .._errors import NnxError
from .._files import read_regular
from ..config._errors import ConfigError, Problem
from ..registry._registry import default_registry
from ..training._assembly import located_data_error
from ..training._compile_cache import with_compile_cache
from ..training._config import load_train_config
from ..training._loop import trained_model
from ..training.checkpoints._manifest import read_manifest
from ..training.data._base import DataError
from ..training.data._text import Vocabulary
from ..training.data._tokenizers import make_tokenizer
from ._decode import (
    GenerationError,
    check_decoding,
    check_options,
    decoding,
    model_max_length,
    not_finite,
)
from ._padding import after_eos, left_padded, takes_mask

__all__ = ["Generation", "generate", "transformers_config", "DEFAULT_TOKENS", "MAX_PROMPTS"]

DEFAULT_TOKENS = 100
"""The most new tokens when ``max_tokens`` is not given (fewer where the model's maximum length
leaves fewer)."""

MAX_PROMPTS = 4096
"""The most prompts one call continues (one batch)."""


@dataclasses.dataclass(frozen=True)
class Generation:
    """What `generate` produced.

    For a list of prompts, ``prompt``, ``text``, ``tokens`` and ``unfinished`` are tuples with
    one entry per prompt, in order.

    Attributes:
        prompt: the prompt, as given.
        text: the continuation: the new tokens decoded, always valid text. On byte tokens, the
            bytes of a character the last tokens began but did not finish are held back (in
            ``unfinished``), and bytes that form no character (the model broke a character
            off) become U+FFFD. Through a tokenizer: its ``decode`` of the tokens, special
            tokens skipped (transformers' ``tokenizer.decode(ids, skip_special_tokens=True)``).
        tokens: the new token ids (those held back included), up to and including the EOS
            that ended the row, if one did.
        checkpoint: the checkpoint directory the weights came from.
        step: the training step of that checkpoint.
        seconds: wall time of the decoding (compilation included).
        unfinished: the bytes held back: the start of a character cut off by ``max_tokens``.
    """

    prompt: str | tuple[str, ...]
    text: str | tuple[str, ...]
    tokens: tuple[int, ...] | tuple[tuple[int, ...], ...]
    checkpoint: pathlib.Path
    step: int | None
    seconds: float
    unfinished: bytes | tuple[bytes, ...] = b""


@dataclasses.dataclass(frozen=True)
class _Text:
    """How prompts become token ids and new tokens text, and which tokens end a row."""

    encode: Callable[[str], np.ndarray]
    decode: Callable[[np.ndarray], tuple[str, bytes]]
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int = 0


def _text_of(config: Any, manifest: dict[str, Any]) -> _Text:
    """The config's tokenizer when it names one (not ``bytes``), else the checkpoint's
    vocabulary (checked against the config's data)."""
    section = config.sections.get("tokenizer")
    if section is None or section.type == "bytes":
        vocabulary = _vocabulary(config, manifest)
        return _Text(
            lambda prompt: _encode(vocabulary, prompt),
            lambda tokens: _decoded(vocabulary, tokens),
        )
    try:
        tokenizer = make_tokenizer(section.part.dump())
        tokenizer.vocab_size  # noqa: B018 - reads its file now: a bad one is not the prompt's
        eos, pad = tuple(tokenizer.eos_token_ids), tokenizer.pad_token_id
    except DataError as error:
        where = ("tokenizer", "path") if error.key == "tokenizer" else ("tokenizer",)
        raise GenerationError(str(config.problem(where, error.message))) from None
    return _Text(
        lambda prompt: _tokenized(tokenizer, prompt),
        lambda tokens: (tokenizer.decode(tokens), b""),
        eos,
        0 if pad is None else int(pad),
    )


def _tokenized(tokenizer: Any, prompt: str) -> np.ndarray:
    _check_prompt(prompt)
    try:
        ids = np.asarray(tokenizer.encode(prompt), np.int32)
    except DataError as error:
        raise GenerationError(f"the prompt {_shown(prompt)}: {error}") from None
    if ids.size == 0:
        raise GenerationError(
            f"the prompt {_shown(prompt)} is no token at all for the tokenizer (it keeps "
            "nothing of it): give text the tokenizer encodes."
        )
    return ids


def _vocabulary(config: Any, manifest: dict[str, Any]) -> Vocabulary:
    """The checkpoint's vocabulary, after checking that the config's data agrees with it."""
    where = manifest["directory"]
    record = manifest.get("run") or {}
    saved = record.get("data") or {}
    imported = record.get("imported_from")
    if not saved or (isinstance(imported, dict) and saved.get("level") == "tokenizer"):
        # (imported, or saved outside a run: the text must come from the config's tokenizer)
        raise GenerationError(_no_data_record(config, where, imported))
    try:
        data = config.sections["data"].make()
        problem = getattr(data, "check_state", lambda saved: None)(saved)
    except DataError as error:
        raise located_data_error(config, error) from None
    if problem:
        at = located_data_error(config, DataError(problem, key="path"))
        raise GenerationError(f"the checkpoint {where} does not fit the config's data: {at}")
    try:
        return Vocabulary.from_state(saved)
    except DataError as error:
        raise GenerationError(f"{where}: {error}") from None


def _no_data_record(config: Any, where: str, imported: Any) -> str:
    """Why a checkpoint without a data record gives no vocabulary: the config must name the
    tokenizer (located at its ``tokenizer`` section, or at the file when it has none)."""
    section = config.sections.get("tokenizer")
    has = "names the bytes tokenizer" if section is not None else "has no tokenizer: section"
    if isinstance(imported, dict):
        name = imported.get("architecture")
        what = f" (from {name[:60]})" if isinstance(name, str) and name else ""
        message = (
            f"the checkpoint {where} was imported{what} by nnx import hf, whose token ids are "
            f"its tokenizer's, and the config {has}: give the config.yaml that nnx import hf wrote "
            "beside the checkpoint, whose tokenizer: section names the model's tokenizer "
            "(tokenizer: {type: hf, path: tokenizer.json, eos_token_ids: [...]}), or add that "
            "section to this config."
        )
    else:
        message = (
            f"the checkpoint {where} records no text vocabulary (it has no data record: it was "
            f"not saved by a training run), and the config {has}: add a tokenizer: section "
            "naming the model's tokenizer (tokenizer: {type: hf, path: tokenizer.json}), or "
            "use a checkpoint that nnx train wrote on data of type text."
        )
    if section is None:
        return str(Problem(("tokenizer",), message, config.source))
    return str(config.problem(("tokenizer", "type"), message))


def _check_prompt(prompt: Any) -> None:
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


def _encode(vocabulary: Vocabulary, prompt: str) -> np.ndarray:
    _check_prompt(prompt)
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


@with_compile_cache
def generate(
    config: Any,
    *,
    checkpoint: str | os.PathLike[str],
    prompt: str | Sequence[str],
    max_tokens: int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    compile_cache: bool = True,
) -> Generation:
    """Continue ``prompt`` (or each of a list of prompts) with the language model of
    ``config`` trained into ``checkpoint`` (see the module docstring).

    Args:
        config: a config file path, mapping or `Config`: its ``model`` and ``data`` sections
            are those of the run (``nnx train``'s), e.g. ``examples/text_gpt.yaml``, or the
            ``config.yaml`` of ``nnx import hf``.
        checkpoint: a checkpoint directory, or a directory of ``step_N`` checkpoints (the
            newest is used).
        prompt: the text to continue, or a list of texts (at most `MAX_PROMPTS`) continued
            together; with ``temperature=0`` each row gives what transformers'
            ``generate(do_sample=False)`` gives it in a left-padded batch.
        max_tokens: how many tokens to add to each prompt; the longest prompt and these must
            fit the model's maximum length. A row stops early at the tokenizer's EOS.
            ``None``: as many as fit, at most `DEFAULT_TOKENS`.
        temperature: ``0`` for greedy decoding; else the softmax temperature.
        top_k: draw among the ``top_k`` most likely tokens only (``None``: all).
        seed: the random seed of the draws.
        compile_cache: keep the compiled programs on disk and load those a run compiled
            before (as `nnx_plugins.train` does).

    Returns:
        A `Generation` (its ``prompt``, ``text``, ``tokens`` and ``unfinished`` one per prompt
        when ``prompt`` is a list).

    Raises:
        ConfigError: the config is invalid (a transformers ``config.json`` given for it is
            named as such).
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
        DataError: the config's data cannot be read.
        GenerationError: the model is no causal language model (a task other than
            ``language_model``, a MaskedLM, a model that fails on token ids); the checkpoint
            records no text vocabulary (and the config names no tokenizer) or one that differs
            from the config's data; a prompt is empty, is not text (a byte that is not UTF-8,
            a lone surrogate) or holds a character outside the vocabulary; an EOS id of the
            tokenizer that is no token of the model (a pad id too, for several prompts); no
            prompts, or more than `MAX_PROMPTS`; ``max_tokens`` is past the model's maximum
            length, or needs caches larger than the memory available (checked before anything
            is allocated); the model's logits are not finite (NaN or infinite: its weights);
            a bad argument (e.g. a seed past 2**63-1).
    """
    options = check_options(max_tokens=max_tokens, temperature=temperature, top_k=top_k, seed=seed)
    prompts = _prompts(prompt)
    config = _loaded(config)
    _check_causal(config)
    manifest = read_manifest(checkpoint)
    text = _text_of(config, manifest)
    rows = [_numbered(text.encode, one, i, len(prompts)) for i, one in enumerate(prompts)]
    model = trained_model(config, manifest["directory"])
    _check_token_ids(model, rows)
    eos, pad = _special_ids(config, model, text, len(rows))
    if options["max_tokens"] is None:
        limit = model_max_length(model)
        longest = max(len(row) for row in rows)
        options["max_tokens"] = (
            DEFAULT_TOKENS if limit is None else min(max(limit - longest, 1), DEFAULT_TOKENS)
        )
    started = time.perf_counter()
    tokens, bad = _continued(model, rows, pad, options)
    where = pathlib.Path(manifest["directory"])
    problem = not_finite(
        bad,
        options["max_tokens"],
        lambda row: f"prompt {row + 1} of {len(rows)}" if len(rows) > 1 else "the prompt",
        f"the weights of the checkpoint {where}",
        "prompt",
    )
    if problem:
        raise GenerationError(problem)
    tokens, lengths = after_eos(tokens, eos_token_ids=eos, pad_token_id=pad)
    new = [tokens[i, :length] for i, length in enumerate(lengths)]
    decoded = [text.decode(row) for row in new]
    seconds = time.perf_counter() - started
    step = manifest.get("step")
    ids = [tuple(int(t) for t in row) for row in new]
    if isinstance(prompt, str):
        return Generation(prompt, decoded[0][0], ids[0], where, step, seconds, decoded[0][1])
    return Generation(
        tuple(prompts),
        tuple(t for t, _ in decoded),
        tuple(ids),
        where,
        step,
        seconds,
        tuple(u for _, u in decoded),
    )


def _prompts(prompt: Any) -> list[str]:
    """``prompt`` as a list of prompts (each checked when encoded: a value that is neither a
    text nor a list is refused there, as a prompt that is not text)."""
    if not isinstance(prompt, (list, tuple)):
        return [prompt]
    if not prompt or len(prompt) > MAX_PROMPTS:
        raise GenerationError(
            f"give from 1 to {MAX_PROMPTS:,} prompts, got {len(prompt):,}: they are continued "
            "as one batch."
        )
    return list(prompt)


def _numbered(encode: Callable[[str], np.ndarray], prompt: Any, index: int, count: int) -> Any:
    """``encode(prompt)``; an error names the prompt's place among several."""
    try:
        return encode(prompt)
    except GenerationError as error:
        if count == 1:
            raise
        raise GenerationError(f"prompt {index + 1} of {count}: {error}") from None


def _check_token_ids(model: Any, rows: list[np.ndarray]) -> None:
    """Refuse token ids the model has no embedding for (a tokenizer not the model's): the
    model would read whatever an embedding lookup past its table gives, and continue from it
    silently."""
    tables = [m.num_embeddings for _, m in model.iter_modules() if isinstance(m, Embed)]
    if not tables:
        return
    count = max(tables)
    for index, row in enumerate(rows):
        outside = row[(row < 0) | (row >= count)]
        if outside.size:
            where = f"prompt {index + 1} of {len(rows)}" if len(rows) > 1 else "the prompt"
            raise GenerationError(
                f"{where} encodes to the token id {int(outside[0])}, but the model embeds "
                f"{count:,} tokens (0 to {count - 1:,}): the config's tokenizer is not the "
                "model's. Use the tokenizer the model was trained with."
            )


def _special_ids(config: Any, model: Any, text: _Text, count: int) -> tuple[tuple[int, ...], int]:
    """The EOS ids and the pad id decoding uses: an EOS the model has no token for is refused
    (no row would ever end at it; past int32 it was a traceback), and so is such a pad id
    for several prompts (the model would read past its table); the pad id of a single prompt
    pads nothing, and is replaced by 0 when it is no token (past int32: a traceback)."""
    tables = [m.num_embeddings for _, m in model.iter_modules() if isinstance(m, Embed)]
    tokens = max(tables) if tables else 2**31
    for eos in text.eos_token_ids:
        if not 0 <= eos < tokens:
            shown = f"{eos:,}" if abs(eos) < 10**30 else f"a number of {len(str(abs(eos)))} digits"
            problem = config.problem(
                ("tokenizer", "eos_token_ids"),
                f"the EOS token id {shown} is not a token of the model (0 to {tokens - 1:,}): no "
                "row would ever end at it. Give the ids of the model's end-of-sequence tokens "
                "(generation_config.json's eos_token_id), or [] for none.",
            )
            raise GenerationError(str(problem))
    pad = text.pad_token_id
    if count > 1 and not 0 <= pad < tokens:
        raise GenerationError(_bad_pad(config, pad, tokens, count))
    return text.eos_token_ids, pad if count > 1 or 0 <= pad < tokens else 0


def _bad_pad(config: Any, pad: int, tokens: int, count: int) -> str:
    """Why the pad id cannot pad ``count`` prompts, located at ``tokenizer.pad_token_id`` when
    the config sets it (else it came from tokenizer_config.json's ``pad_token``)."""
    shown = f"{pad:,}" if abs(pad) < 10**30 else f"a number of {len(str(abs(pad)))} digits"
    section = config.sections.get("tokenizer")
    given = section is not None and section.part.arguments.get("pad_token_id") is not None
    source = "" if given else " (tokenizer_config.json's pad_token)"
    message = (
        f"the tokenizer's pad_token_id {shown}{source} is not a token of the model (0 to "
        f"{tokens - 1:,}), and the {count} prompts are padded with it: set "
        f"tokenizer.pad_token_id to a token id from 0 to {tokens - 1:,} (any: the padding is "
        "masked; e.g. the EOS id)."
    )
    where = ("tokenizer", "pad_token_id") if given else ("tokenizer",)
    return str(config.problem(where, message))


def _continued(
    model: Any, rows: list[np.ndarray], pad: int, options: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """The new tokens of every row, ``(rows, max_tokens)``, and each row's first new token
    drawn from logits that are not finite (``max_tokens``: none; `not_finite`): one
    left-padded batch for a model that takes a mask; else one batch per prompt length (a
    model without a mask would attend to the padding), every batch checked (its length, the
    memory it needs with the tokens of the others) before anything is allocated."""
    if takes_mask(model) or len(rows) == 1:
        ids, mask = left_padded(rows, pad_token_id=pad)
        tokens, bad = decoding(model, ids, mask=mask, **options)
        return np.asarray(tokens), np.asarray(bad)
    new = options["max_tokens"]
    groups = {
        length: [i for i, row in enumerate(rows) if len(row) == length]
        for length in sorted({len(row) for row in rows})
    }
    for length, chosen in groups.items():
        check_decoding(model, len(chosen), length, new, held_rows=len(rows) - len(chosen))
    tokens = np.zeros((len(rows), new), np.int32)
    bad = np.full(len(rows), new, np.int32)
    for chosen in groups.values():
        batch = np.stack([rows[i] for i in chosen])
        got, flags = decoding(model, batch, **options)
        tokens[chosen], bad[chosen] = np.asarray(got), np.asarray(flags)
    return tokens, bad


def _loaded(config: Any) -> Any:
    """`load_train_config`; a transformers ``config.json`` given for the config is said as
    such (not as a problem per key of it)."""
    try:
        return load_train_config(config)
    except ConfigError:
        said = transformers_config(config)
        if said is None:
            raise
        raise ConfigError([Problem((), said, str(config), line=1, column=1)]) from None


def transformers_config(source: Any) -> str | None:
    """What to say (after the file's name) when ``source``, a config file path, is
    transformers' ``config.json`` (a mapping with ``architectures`` or ``model_type`` and no
    ``model``): the config of `generate` is the ``config.yaml`` that ``nnx import hf`` writes
    beside the checkpoint. None for anything else (a mapping, another file: its own problems
    say what is wrong).

    Example:
        >>> import json, pathlib, tempfile
        >>> from nnx_plugins.generation._generate import transformers_config
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
        >>> print(transformers_config(folder / "config.json"))
        it is transformers' config.json (GPT2LMHeadModel), not an nnx config: import it first:
        nnx import hf FOLDER --out DST, then give DST/config.yaml.
    """
    if not isinstance(source, (str, os.PathLike)):
        return None
    path = pathlib.Path(source)
    try:
        loaded = json.loads(read_regular(path, 1024 * 1024))
    except (OSError, ValueError, RecursionError):  # (not JSON, too large, unreadable)
        return None
    if not isinstance(loaded, dict) or "model" in loaded:
        return None
    names = loaded.get("architectures")
    if not (isinstance(names, list) and names) and not isinstance(loaded.get("model_type"), str):
        return None
    what = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else ""
    what = f" ({what[:60]})" if what else ""
    beside = path.with_name("config.yaml")
    fix = (
        f"give {beside}, the config that nnx import hf wrote beside it"
        if beside.is_file()
        else "import it first: nnx import hf FOLDER --out DST, then give DST/config.yaml"
    )
    return f"it is transformers' config.json{what}, not an nnx config: {fix}."


def _check_causal(config: Any) -> None:
    """Refuse, before the checkpoint is read, a model that cannot continue text: a MaskedLM
    (of the model section's type), or any model of a task other than ``language_model``."""
    kind = config.model.get("type")
    try:
        layer = default_registry().get("layer", kind, prefer=config.prefer)
    except (NnxError, TypeError):
        layer = None
    if isinstance(layer, type) and issubclass(layer, MaskedLM):
        raise GenerationError(
            "the model is a MaskedLM: it fills in masked tokens from both sides, and cannot "
            "continue text one token at a time. Generate with a causal language model "
            "(CausalLM, e.g. an imported GPT-2 or Llama); evaluate a masked LM with nnx eval."
        )
    task = config.sections["task"].type
    if task != "language_model":
        named = kind if isinstance(kind, str) else type(kind).__name__
        article = "an" if named[:1].lower() in "aeiou" and named else "a"
        raise GenerationError(
            f"the model is {article} {named} (task {task}): generate needs a causal language "
            "model, one that maps token ids to the logits of the next token (task: "
            "language_model, e.g. a CausalLM: an imported GPT-2 or Llama). Run this model "
            "with nnx predict, or evaluate it with nnx eval."
        )

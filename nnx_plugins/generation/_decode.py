"""Autoregressive decoding of a language model: with the KV cache, and by full recomputation.

A language model here maps token ids ``(batch, length)`` to logits ``(batch, length, vocab)``
causally (position ``t`` sees positions ``<= t`` only), e.g. the GPT of
``examples/text_gpt.yaml``. `decode` feeds it one position per step, its layers keeping what
they saw in `Cache` Variables (`MultiHeadAttention`'s keys and values, `PositionEmbed`'s index),
so each new token costs one position's work. `decode_by_recomputation` runs the whole sequence
again for every token, the reference the cached path must agree with. Both run every step
inside one compiled ``lax.scan`` and draw the token after position ``t`` with the key
``fold_in(key(seed), t)``, so on equal logits they return equal tokens. Each step also keeps,
per row, the first new token drawn from logits that are not finite (one reduction over the
vocabulary, read once the program is done): NaN or infinite logits (weights that hold NaN) are
a `GenerationError` naming that token, not tokens drawn from nothing (every one was id 0).

Example:
    >>> import jax.numpy as jnp
    >>> import nnx_core as nnx
    >>> from nnx_layers import Embed, Linear, MultiHeadAttention, PositionEmbed, Sequential
    >>> from nnx_plugins.generation._decode import decode, decode_by_recomputation
    >>> rngs = nnx.Rngs(0)
    >>> model = Sequential(
    ...     Embed(11, 8, rngs=rngs), PositionEmbed(16, 8, rngs=rngs),
    ...     MultiHeadAttention(2, 8, is_causal=True, decode=False, rngs=rngs),
    ...     Linear(8, 11, rngs=rngs))
    >>> prompt = jnp.array([[1, 2, 3]])
    >>> tokens = decode(model, prompt, max_tokens=5, temperature=0.0)
    >>> tokens.shape, tokens.dtype.name
    ((1, 5), 'int32')
    >>> bool((tokens == decode_by_recomputation(model, prompt, max_tokens=5, temperature=0.0)).all())
    True
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from numbers import Integral, Real
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import nnx_core as nnx
from nnx_layers import Repeat

from .._errors import NnxError
from ..training._memory import available_memory, human_bytes
from ..training._seed import MAX_SEED, seed_key
from ._padding import PaddingError, check_mask
from ._unroll import unrolling, unstack

__all__ = [
    "GenerationError",
    "decode",
    "decoding",
    "decode_by_recomputation",
    "model_max_length",
    "sample",
    "seed_key",
    "check_options",
    "check_decoding",
    "not_finite",
    "start_decoding",
    "MAX_SEED",
]


class GenerationError(NnxError, ValueError):
    """Generation was asked something the model, the checkpoint or the vocabulary cannot do."""


# -- the model's side --------------------------------------------------------------------------
def model_max_length(model: Any) -> int | None:
    """The longest sequence ``model`` takes: the smallest ``max_length`` of its layers (e.g.
    `PositionEmbed`), or ``None`` when no layer sets one.

    Example:
        >>> import nnx_core as nnx
        >>> from nnx_layers import PositionEmbed, Sequential
        >>> from nnx_plugins.generation._decode import model_max_length
        >>> model_max_length(Sequential(PositionEmbed(64, 4, rngs=nnx.Rngs(0)), PositionEmbed(32, 4, rngs=nnx.Rngs(0))))
        32
    """
    found = _length_limit(model)
    return None if found is None else found[0]


def _length_limit(model: Any) -> tuple[int, str] | None:
    """``(max_length, where)`` of the layer that limits ``model``'s length, if any."""
    limits = [
        (module.max_length, f"{type(module).__name__} at {_where(path)}")
        for path, module in model.iter_modules()
        if isinstance(getattr(module, "max_length", None), int)
    ]
    return min(limits, key=lambda limit: limit[0]) if limits else None


def _where(path: tuple[Any, ...]) -> str:
    """``model.layers[2].block``: a module's place, spelled as in a config."""
    if not path:
        return "model"
    inner = nnx.format_path(path)
    return f"model.{inner}" if not inner.startswith("[") else f"model{inner}"


def _cache_width(path: tuple[Any, ...], module: Any) -> int:
    for name in ("in_features", "features"):
        width = getattr(module, name, None)
        if isinstance(width, int):
            return width
    raise GenerationError(
        f"cannot start decoding: the layer {type(module).__name__} at "
        f"{_where(path)} has init_cache but neither in_features nor "
        f"features, so the width of its input is unknown. Give it one of these attributes."
    )


def start_decoding(model: Any, batch: int, length: int) -> None:
    """Put ``model`` in decoding mode for sequences of ``batch`` x ``length`` positions.

    Every layer with a ``decode`` attribute gets ``decode=True``, and every layer with an
    ``init_cache`` method (outermost first: a layer that starts its own sublayers' caches is
    not entered) is called with ``(batch, length, width)``, ``width`` being its
    ``in_features`` or ``features``. Inside a `nnx_layers.Repeat` this happens for every block,
    so each block gets its own caches (stacked on the block axis, as its parameters are).
    Dropout and batch statistics are switched to evaluation.

    Raises:
        GenerationError: no layer decodes from a cache, or one has no known input width.
        ValueError: a layer refuses the length (e.g. past a `PositionEmbed`'s max_length).
    """
    model.eval()
    model.set_attributes(decode=True, raise_if_not_found=False)
    if not _start_caches(model, batch, length, ()):
        raise GenerationError(
            f"{type(model).__name__} has no layer that decodes from a cache (such as "
            f"MultiHeadAttention or PositionEmbed), so it cannot generate token by token. "
            f"Build the model's sequence mixing from such layers."
        )


def _start_caches(model: Any, batch: int, length: int, prefix: tuple[Any, ...]) -> int:
    """Start the caches of ``model`` (found at ``prefix``, for messages); how many layers."""
    started: list[tuple[Any, ...]] = []
    for path, module in model.iter_modules():
        if any(path[: len(done)] == done for done in started):
            continue
        if isinstance(module, Repeat):
            if not _start_blocks(module, batch, length, (*prefix, *path, "block")):
                continue
        elif callable(getattr(module, "init_cache", None)):
            module.init_cache((batch, length, _cache_width((*prefix, *path), module)))
        else:
            continue
        started.append(tuple(path))
    return len(started)


def _start_blocks(repeat: Repeat, batch: int, length: int, where: tuple[Any, ...]) -> int:
    """`_start_caches` in every block of ``repeat``: each block gets its own caches."""
    found: list[int] = []  # the block is traced once, whatever the count
    repeat.each(lambda block: found.append(_start_caches(block, batch, length, where)))
    return found[0]


# -- sampling ----------------------------------------------------------------------------------
def sample(
    logits: jax.Array, key: jax.Array, *, temperature: float, top_k: int | None
) -> jax.Array:
    """Draw one token id per row of ``logits`` ``(batch, vocab)``.

    ``temperature == 0`` takes the most likely token (greedy), and so does ``top_k == 1`` at
    any temperature (the same ``argmax``, by construction). Otherwise the logits less their
    largest are divided by ``temperature`` (so that no temperature, however small, overflows
    them: a tiny one draws the greedy token) and, with ``top_k``, all but exactly ``top_k``
    of the largest are dropped (``lax.top_k``'s, ties included). The logits pass an
    optimization barrier first: the program that computes them is the same whatever
    follows, so greedy and sampled decoding see equal logits.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_plugins.generation._decode import sample
        >>> logits = jnp.array([[0.0, 3.0, 1.0]])
        >>> sample(logits, jax.random.key(0), temperature=0.0, top_k=None).tolist()
        [1]
        >>> sample(logits, jax.random.key(0), temperature=2.0, top_k=1).tolist()
        [1]
        >>> sample(logits, jax.random.key(0), temperature=1e-38, top_k=None).tolist()
        [1]
    """
    return _checked_sample(logits, key, temperature=temperature, top_k=top_k)[0]


def _checked_sample(
    logits: jax.Array, key: jax.Array, *, temperature: float, top_k: int | None
) -> tuple[jax.Array, jax.Array]:
    """`sample`, and whether each row's logits are finite: their largest is a finite number
    (a NaN anywhere makes it NaN, a +inf infinite, a row of -inf -inf; -inf alone, a token
    ruled out, is fine). Read once the decoding is done; greedy, the largest is the logit
    argmax chose (it picks a NaN or +inf first): one element read, no second reduction."""
    logits = jax.lax.optimization_barrier(logits.astype(jnp.float32))
    if top_k == 1 or _greedy(temperature):
        chosen = jnp.argmax(logits, axis=-1)
        largest = jnp.take_along_axis(logits, chosen[..., None], axis=-1)
        return chosen.astype(jnp.int32), jnp.isfinite(largest[..., 0])
    largest = logits.max(axis=-1, keepdims=True)
    finite = jnp.isfinite(largest[..., 0])
    if top_k is not None and top_k < logits.shape[-1]:
        logits = jnp.where(_top_k_mask(logits, top_k), logits, -jnp.inf)
    shifted = logits - jax.lax.stop_gradient(largest)  # (top_k keeps the largest)
    scaled = shifted / jnp.float32(temperature)
    return jax.random.categorical(key, scaled, axis=-1).astype(jnp.int32), finite


def _greedy(temperature: float) -> bool:
    """Whether ``temperature`` draws greedily: 0, or so small that it is 0 in float32."""
    return float(np.float32(temperature)) == 0.0


def _top_k_mask(logits: jax.Array, k: int) -> jax.Array:
    """True at exactly the ``k`` entries per row that ``lax.top_k`` chooses (ties too)."""
    flat = logits.reshape(-1, logits.shape[-1])
    _, indices = jax.lax.top_k(flat, k)
    rows = jnp.arange(flat.shape[0])[:, None]
    return jnp.zeros(flat.shape, bool).at[rows, indices].set(True).reshape(logits.shape)


#: positions are int32 in the decoding loop
MAX_POSITIONS = 2**31 - 1


def check_options(*, max_tokens: Any, temperature: Any, top_k: Any, seed: Any) -> dict[str, Any]:
    """Refuse a bad option of `decode` (``max_tokens`` may be ``None`` where the caller
    chooses it later); the options as Python numbers (a numpy integer such as
    ``np.uint8(3)`` becomes ``3``: arithmetic on it wrapped around or overflowed).

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.generation._decode import check_options
        >>> check_options(max_tokens=np.uint8(3), temperature=np.float32(0.5), top_k=None, seed=np.int64(7))
        {'max_tokens': 3, 'temperature': 0.5, 'top_k': None, 'seed': 7}

    Raises:
        GenerationError: naming the option, what it takes and what it got.
    """
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, Integral) or max_tokens < 1
    ):
        raise GenerationError(f"max_tokens must be a whole number >= 1, got {_short(max_tokens)}.")
    if not 0 <= _as_float(temperature) <= MAX_TEMPERATURE:
        raise GenerationError(
            f"temperature must be a finite number >= 0 (0 is greedy) and at most "
            f"{MAX_TEMPERATURE:g} (float32's largest), got {_short(temperature)}."
        )
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, Integral) or top_k < 1
    ):
        raise GenerationError(
            f"top_k must be a whole number >= 1 or None (all), got {_short(top_k)}."
        )
    if isinstance(seed, bool) or not isinstance(seed, Integral) or not 0 <= seed <= MAX_SEED:
        raise GenerationError(
            f"seed must be a whole number from 0 to 2**63-1 (as train.seed), got {_short(seed)}."
        )
    return {
        "max_tokens": None if max_tokens is None else int(max_tokens),
        "temperature": float(temperature),
        "top_k": None if top_k is None else int(top_k),
        "seed": int(seed),
    }


def _as_float(value: Any) -> float:
    """``value`` as a float; NaN for what is no real number or does not fit one."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return float("nan")
    try:
        return float(value)
    except OverflowError:
        return float("inf")


MAX_TEMPERATURE = float(np.finfo(np.float32).max)
"""The largest temperature: the logits are divided by it in float32 (a larger one overflowed
to infinity there, with numpy's warnings)."""


def _check_arguments(
    prompt: Any, max_tokens: Any, temperature: Any, top_k: Any, seed: Any = 0
) -> tuple[jax.Array, dict[str, Any]]:
    """The prompt as int32 token ids on the device, and the options as Python numbers."""
    if not isinstance(prompt, jax.Array):  # (token ids from a tokenizer: put, not staged;
        prompt = np.asarray(prompt)  # jnp.asarray compiles a program per prompt shape)
    if prompt.ndim != 2 or prompt.shape[1] < 1 or not jnp.issubdtype(prompt.dtype, jnp.integer):
        raise GenerationError(
            f"the prompt must be token ids of shape (batch, length) with length >= 1, got "
            f"{prompt.dtype}{list(prompt.shape)}. Pass e.g. jnp.array([[1, 2, 3]])."
        )
    options = check_options(max_tokens=max_tokens, temperature=temperature, top_k=top_k, seed=seed)
    if max_tokens is None:
        raise GenerationError("max_tokens must be a whole number >= 1, got None.")
    if isinstance(prompt, np.ndarray):
        return jax.device_put(prompt.astype(np.int32)), options
    return prompt.astype(jnp.int32), options


def _short(value: Any) -> str:
    """``repr(value)``, at most 40 characters (a 5,000-digit number is not printed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return (
            f"a number of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4,000'} digits"
        )
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_decoding(
    model: Any, batch: int, length: int, max_tokens: int, *, held_rows: int = 0
) -> None:
    """Refuse, before anything is allocated, decoding ``batch`` prompts of ``length`` tokens
    by ``max_tokens``: past the model's maximum length or 2**31-1 positions, or needing more
    memory than is available (with the new tokens of ``held_rows`` other rows held meanwhile,
    e.g. those of the other prompts of a `generate` call).

    Raises:
        GenerationError: saying the most that fit.
    """
    _check_length(model, length, max_tokens)
    _check_memory(model, batch, length, max_tokens, held_rows)


def _check_length(model: Any, length: int, max_tokens: int) -> int:
    total = length + max_tokens
    limit = _length_limit(model)
    if limit is not None and length >= limit[0]:
        raise GenerationError(
            f"a prompt of {length:,} tokens leaves no room to generate: the model's maximum "
            f"length is {limit[0]} (the max_length of its {limit[1]}). Shorten the prompt to at "
            f"most {limit[0] - 1} tokens."
        )
    if limit is not None and total > limit[0]:
        raise GenerationError(
            f"a prompt of {length} token{'s' * (length != 1)} and max_tokens={max_tokens} make "
            f"{total} tokens, past the model's maximum length of {limit[0]} (the max_length of "
            f"its {limit[1]}). Ask for at most {_tokens(limit[0] - length)}, or shorten the "
            "prompt."
        )
    if total > MAX_POSITIONS:
        raise GenerationError(
            f"a prompt of {length:,} tokens and max_tokens={max_tokens:,} make {total:,} "
            f"positions, past the {MAX_POSITIONS:,} a decoding loop counts (int32). Ask for "
            f"fewer tokens."
        )
    return total


def _tokens(count: int) -> str:
    """``1 new token``, ``5 new tokens``."""
    return f"{count:,} new token{'s' * (count != 1)}"


def _check_memory(model: Any, batch: int, length: int, max_tokens: int, held_rows: int = 0) -> None:
    """Refuse, before anything is allocated, a decoding whose state (the weights and the KV
    caches of every position, found abstractly) and tokens (with the new tokens of
    ``held_rows`` other rows) exceed the memory available."""
    total = length + max_tokens
    need = _decoding_bytes(model, batch, total) + 8 * batch * total + 8 * held_rows * max_tokens
    available, what = available_memory()
    if need <= available:
        return
    first = _decoding_bytes(model, batch, length + 1) + 8 * batch * (length + 1) + 8 * held_rows
    per_token = max((need - first) / max(max_tokens - 1, 1), 1.0)
    fit = max(int((available - first) // per_token) + 1, 0) if available >= first else 0
    prompts = "a prompt" if batch == 1 else f"{batch:,} prompts"
    held = f", and the new tokens of {held_rows:,} other prompts" if held_rows else ""
    raise GenerationError(
        f"decoding {max_tokens:,} tokens after {prompts} of {length:,} needs at least "
        f"{human_bytes(need)} ({need:,} bytes: the model's weights and the caches of its "
        f"{total:,} positions{held}), more than the {human_bytes(available)} of {what}. Ask "
        f"for at most {_tokens(fit)}."
    )


def _decoding_bytes(model: Any, batch: int, length: int) -> int:
    """The bytes of ``model``'s state once `start_decoding` made its caches for ``length``
    positions, found abstractly (nothing is allocated) and kept per model structure, shapes
    and length: the abstract run traces `start_decoding` (30 ms for the example GPT, a third
    of decoding 256 tokens), so it runs once, not at every call."""
    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    return _started_bytes(
        graphdef, treedef, tuple(jax.typeof(leaf) for leaf in leaves), batch, length
    )


@functools.lru_cache(maxsize=64)
def _started_bytes(
    graphdef: Any, treedef: Any, avals: tuple[Any, ...], batch: int, length: int
) -> int:
    def started(leaves: list[Any]) -> Any:
        copy = nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves))
        start_decoding(copy, batch, length)
        return nnx.state(copy)

    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in avals]
    return sum(_leaf_bytes(leaf) for leaf in jax.tree.leaves(jax.eval_shape(started, shapes)))


def _leaf_bytes(leaf: Any) -> int:
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return 8 * math.prod(leaf.shape)  # (a threefry key: two uint32)
    return math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize


def _logits_of_last(output: Any, batch: int) -> jax.Array:
    if not hasattr(output, "ndim") or output.ndim != 3 or output.shape[0] != batch:
        shape = getattr(output, "shape", type(output).__name__)
        raise GenerationError(
            f"a language model must map token ids (batch, length) to logits (batch, length, "
            f"vocab); this one returned {shape}. End the model with the vocabulary head."
        )
    return output[:, -1]


@contextlib.contextmanager
def _on_token_ids(model: Any, prompt: jax.Array) -> Iterator[None]:
    """Inside the block (the compiled program traced: the model called on token ids), a
    model that fails on token ids (an image classifier refusing ``(batch, length)``, a layer
    of the wrong width) is a `GenerationError` saying so, not the traceback of its layer.
    Errors of the run itself (out of memory: ``JaxRuntimeError``) pass."""
    try:
        yield
    except GenerationError:  # (e.g. logits of another shape: said already)
        raise
    except (ValueError, TypeError, IndexError) as error:
        raise GenerationError(_fails(model, prompt, error)) from error


def _fails(model: Any, prompt: jax.Array, error: BaseException) -> str:
    said = str(error).strip().split("\n", 1)[0]
    said = said if len(said) <= 300 else said[:297] + "..."
    said = said if said.endswith((".", "?", "!")) else said + "."
    return (
        f"the model ({type(model).__name__}) fails on token ids of shape "
        f"{list(prompt.shape)}: {type(error).__name__}: {said} Generation needs a causal "
        "language model, token ids (batch, length) -> logits (batch, length, vocab), e.g. a "
        "CausalLM or a model trained with task: language_model."
    )


# -- the two decoders --------------------------------------------------------------------------
def decode(
    model: Any,
    prompt: Any,
    *,
    max_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    scan_blocks: bool = False,
    mask: Any = None,
) -> jax.Array:
    """Continue ``prompt`` by ``max_tokens`` tokens, decoding with the KV cache.

    ``model`` is left as it was: one compiled program puts a copy of it in decoding mode
    (`start_decoding`) and feeds it the prompt then the drawn tokens, one position per step
    of a ``lax.scan``. The blocks of a `nnx_layers.Repeat` are unrolled in the copy, each with
    its own weights and caches: a step then writes one position of each cache in place, where
    a scan over the blocks copies every block's weights and caches in and out (3.2x slower on
    the example GPT on a CPU). The blocks' weights are taken apart before the program (one
    small program, compiled once, called per block), so the program compiles in the time a
    hand-written decoder's does (docs/performance.md); sliced inside it, each slice was a
    kernel of its own and the compile time doubled.

    Args:
        model: a language model (token ids ``(batch, length)`` -> logits).
        prompt: token ids ``(batch, length)``, ``length >= 1``.
        max_tokens: how many tokens to draw.
        temperature: ``0`` for greedy decoding; else the softmax temperature.
        top_k: draw among the ``top_k`` most likely tokens only (``None``: all).
        seed: the random seed of the draws, 0 .. 2**63-1 (`seed_key`).
        scan_blocks: keep each `nnx_layers.Repeat` a scan over its blocks (compiled once
            whatever the depth, slower per token) instead of unrolling it.
        mask: ``(batch, length)``, True for a real token, False for padding: prompts of
            different lengths padded on the left (`left_padded`), for a model that takes a
            mask (`takes_mask`); None: every token is real.

    A model that takes a mask (`nnx_layers.CausalLM`) gets the prompt as one chunk (its
    positions numbered from each row's first real token, as transformers' ``generate``
    numbers them), then one token per step; another model gets one prompt position per step.
    Either way the token after position ``t`` is drawn with ``fold_in(key, t)``.

    Returns:
        The new token ids, ``(batch, max_tokens)`` int32.

    Raises:
        GenerationError: a bad argument; a mask that does not fit the prompt or the model; a
            prompt plus ``max_tokens`` past the model's maximum length (or 2**31-1
            positions); caches for them larger than the memory available (estimated
            abstractly, before anything is allocated); a model that does not decode from a
            cache, fails on token ids or does not return ``(batch, length, vocab)`` logits;
            logits that are not finite (NaN or infinite: checked inside the program, read
            once at its end), naming the first new token of the first row they hit.
    """
    options = dict(max_tokens=max_tokens, temperature=temperature, top_k=top_k, seed=seed)
    tokens, bad = decoding(model, prompt, **options, scan_blocks=scan_blocks, mask=mask)
    problem = not_finite(bad, max_tokens, lambda row: f"row {row + 1}", "the model's weights")
    if problem:
        raise GenerationError(problem)
    return tokens


def decoding(
    model: Any,
    prompt: Any,
    *,
    max_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    scan_blocks: bool = False,
    mask: Any = None,
) -> tuple[jax.Array, jax.Array]:
    """`decode` without its check of the logits: the new tokens, and for each row the index
    of the first new token drawn from logits that are not finite (``max_tokens`` where all
    were), for `not_finite` to say in the caller's words."""
    prompt, options = _check_arguments(prompt, max_tokens, temperature, top_k, seed)
    if not isinstance(scan_blocks, bool):
        raise GenerationError(f"scan_blocks must be True or False, got {scan_blocks!r}.")
    try:
        mask = check_mask(model, prompt.shape, mask)
    except PaddingError as error:
        raise GenerationError(str(error)) from None
    max_tokens, seed = options["max_tokens"], options["seed"]
    check_decoding(model, prompt.shape[0], prompt.shape[1], max_tokens)
    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    if not scan_blocks:  # (the Repeats' blocks taken apart before the program: see _unroll)
        plan = unrolling(graphdef, treedef, leaves)
        graphdef, treedef, leaves = plan.graphdef, plan.treedef, unstack(plan, leaves)
    static = dict(new=max_tokens, temperature=options["temperature"], top_k=options["top_k"])
    static.update(graphdef=graphdef, treedef=treedef)
    with _on_token_ids(model, prompt):
        if mask is not None:
            return _prefilled(leaves, prompt, jnp.asarray(mask), seed_key(seed), **static)
        return _cached(leaves, prompt, seed_key(seed), **static)


def not_finite(bad: Any, new: int, row_name: Any, weights: str, noun: str = "row") -> str | None:
    """What to say about logits that were not finite, or None where all were finite.

    ``bad`` holds, per row, the index of the first of the ``new`` tokens drawn from such
    logits (``new`` where none was); ``row_name(row)`` names a row, ``noun`` what a row is;
    ``weights`` names where the model's weights came from. Reading ``bad`` waits for the
    decoding to finish.

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.generation._decode import not_finite
        >>> print(not_finite(np.array([4, 4]), 4, lambda row: f"row {row + 1}", "its weights"))
        None
        >>> not_finite(np.array([4, 2]), 4, lambda row: f"row {row + 1}", "its weights")[:80]
        "the model's outputs (logits) are not finite (NaN or infinite) at new token 3 of "
    """
    bad = np.asarray(bad).reshape(-1)
    hit = np.flatnonzero(bad < new)
    if not hit.size:
        return None
    first = int(hit[np.argmin(bad[hit])])
    more = hit.size - 1
    others = f" (and {more:,} other {noun}{'s' * (more != 1)})" if more else ""
    return (
        f"the model's outputs (logits) are not finite (NaN or infinite) at new token "
        f"{int(bad[first]) + 1} of {row_name(first)}{others}: no token can be drawn from them. "
        f"{weights[:1].upper()}{weights[1:]} hold NaN or infinite values, or the model "
        "overflows on this input (e.g. in float16): check the checkpoint (a run that diverged, "
        "an edited or a badly converted one)."
    )


_STATIC = ("graphdef", "new", "temperature", "top_k")


@functools.partial(jax.jit, static_argnames=(*_STATIC, "treedef"))
def _cached(leaves: list[Any], prompt: jax.Array, key: jax.Array, **static: Any) -> jax.Array:
    """`decode`'s compiled program: a copy of the model (its State's ``leaves``) put in
    decoding mode, then one position per step, the non-Param state carried. The copy, the
    start of its caches and the steps are one program, so a call costs no eager work on the
    device (on a GPU the eager copy and cache start took longer than decoding 256 tokens)."""
    batch, length = prompt.shape
    new = static["new"]
    state = jax.tree.unflatten(static["treedef"], leaves)
    model = nnx.merge(static["graphdef"], state)  # new objects: the caller's model is untouched
    start_decoding(model, batch, length + new)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    draw = functools.partial(
        _checked_sample, temperature=static["temperature"], top_k=static["top_k"]
    )

    def step(carry: Any, t: jax.Array) -> Any:
        rest, previous, bad = carry
        token = jnp.where(t < length, prompt[:, jnp.minimum(t, length - 1)], previous)
        model = nnx.merge(graphdef, params, rest)
        logits = _logits_of_last(model(token[:, None]), batch)
        drawn, finite = draw(logits, jax.random.fold_in(key, t))
        bad = _first_bad(bad, finite, t - (length - 1), new)  # (< 0: a prompt position)
        return (nnx.state(model, nnx.Not(nnx.Param)), drawn, bad), drawn

    start = (rest, jnp.zeros((batch,), jnp.int32), jnp.full((batch,), new, jnp.int32))
    (_, _, bad), drawn = jax.lax.scan(step, start, jnp.arange(length + new - 1))
    return drawn[length - 1 :].T, bad


def _first_bad(bad: jax.Array, finite: jax.Array, index: Any, new: int) -> jax.Array:
    """Each row's index of the first new token drawn from logits that are not finite (``new``
    while none was), after the draw of new token ``index`` (negative: a prompt position's
    logits, not drawn from)."""
    return jnp.minimum(bad, jnp.where(finite | (index < 0), new, index).astype(jnp.int32))


@functools.partial(jax.jit, static_argnames=(*_STATIC, "treedef"))
def _prefilled(
    leaves: list[Any], prompt: jax.Array, mask: jax.Array, key: jax.Array, **static: Any
) -> jax.Array:
    """`decode`'s program for a model that takes a padding mask: a copy in decoding mode, the
    (left-padded) prompt as one chunk with its mask, then one token per step of a
    ``lax.scan``, the non-Param state carried; the draws as `_cached` makes them."""
    batch, length = prompt.shape
    new = static["new"]
    state = jax.tree.unflatten(static["treedef"], leaves)
    model = nnx.merge(static["graphdef"], state)  # new objects: the caller's model is untouched
    start_decoding(model, batch, length + new)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    draw = functools.partial(
        _checked_sample, temperature=static["temperature"], top_k=static["top_k"]
    )
    model = nnx.merge(graphdef, params, rest)
    logits = _logits_of_last(model(prompt, mask=mask), batch)
    first, finite = draw(logits, jax.random.fold_in(key, length - 1))
    bad = _first_bad(jnp.full((batch,), new, jnp.int32), finite, 0, new)
    real = jnp.ones((batch, 1), bool)

    def step(carry: Any, t: jax.Array) -> Any:
        rest, previous, bad = carry
        model = nnx.merge(graphdef, params, rest)
        logits = _logits_of_last(model(previous[:, None], mask=real), batch)
        drawn, finite = draw(logits, jax.random.fold_in(key, t))
        bad = _first_bad(bad, finite, t - (length - 1), new)
        return (nnx.state(model, nnx.Not(nnx.Param)), drawn, bad), drawn

    start = (nnx.state(model, nnx.Not(nnx.Param)), first, bad)
    (_, _, bad), drawn = jax.lax.scan(step, start, jnp.arange(length, length + new - 1))
    return jnp.concatenate([first[:, None], drawn.T], axis=1), bad


def decode_by_recomputation(
    model: Any,
    prompt: Any,
    *,
    max_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> jax.Array:
    """`decode` without the cache: every token runs the model on the whole sequence.

    The sequence lives in a buffer of ``prompt length + max_tokens`` positions (one compiled
    shape); the model's causality keeps the positions not yet drawn from mattering. The
    reference for `decode` (equal tokens on equal logits) and its speed baseline.

    Args:
        model: as for `decode`; its mode is left as it is (``decode=False`` expected).
        prompt: as for `decode`.
        max_tokens: as for `decode`.
        temperature: as for `decode`.
        top_k: as for `decode`.
        seed: as for `decode`.

    Returns:
        The new token ids, ``(batch, max_tokens)`` int32.

    Raises:
        GenerationError: as `decode` (but a model need not decode from a cache).
    """
    prompt, options = _check_arguments(prompt, max_tokens, temperature, top_k, seed)
    max_tokens, seed = options["max_tokens"], options["seed"]
    _check_length(model, prompt.shape[1], max_tokens)
    graphdef, state = nnx.split(model)
    static = dict(new=max_tokens, temperature=options["temperature"], top_k=options["top_k"])
    with _on_token_ids(model, prompt):
        tokens, bad = _recomputed(state, prompt, seed_key(seed), graphdef=graphdef, **static)
    problem = not_finite(bad, max_tokens, lambda row: f"row {row + 1}", "the model's weights")
    if problem:
        raise GenerationError(problem)
    return tokens


@functools.partial(jax.jit, static_argnames=_STATIC)
def _recomputed(state: Any, prompt: jax.Array, key: jax.Array, **static: Any) -> jax.Array:
    """`decode_by_recomputation`'s compiled loop: the whole buffer through the model per step."""
    model = nnx.merge(static["graphdef"], state)  # new objects: the caller's model is untouched
    model.eval()
    draw = functools.partial(
        _checked_sample, temperature=static["temperature"], top_k=static["top_k"]
    )
    batch, length = prompt.shape
    new = static["new"]
    total = length + new

    def step(carry: Any, t: jax.Array) -> Any:
        ids, bad = carry
        window = jax.lax.dynamic_slice_in_dim(model(ids), t, 1, axis=1)
        drawn, finite = draw(_logits_of_last(window, batch), jax.random.fold_in(key, t))
        bad = _first_bad(bad, finite, t - (length - 1), new)
        ids = jax.lax.dynamic_update_slice_in_dim(ids, drawn[:, None], t + 1, axis=1)
        return (ids, bad), drawn

    ids = jnp.zeros((batch, total), jnp.int32).at[:, :length].set(prompt)
    start = (ids, jnp.full((batch,), new, jnp.int32))
    (_, bad), drawn = jax.lax.scan(step, start, jnp.arange(length - 1, total - 1))
    return drawn.T, bad

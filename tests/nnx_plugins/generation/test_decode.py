"""Decoding with the KV cache: greedy tokens equal full recomputation's, sampling, the model left
untouched, starting every cache, and every error."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
import nnx_plugins.generation._decode as decoding
from nnx_layers import Embed, Linear, MultiHeadAttention, PositionEmbed, Sequential
from nnx_plugins.generation._decode import (
    MAX_SEED,
    GenerationError,
    decode,
    decode_by_recomputation,
    model_max_length,
    sample,
    start_decoding,
)

from .gpt import LENGTH, gpt

PROMPT = jnp.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])


def assert_greedy(model, prompt, tokens):
    """Each token is the argmax of one whole forward pass's logits at the position before it.

    By causality the logits at position t of the whole sequence are those of the prefix
    ending at t, so this one pass checks every step of greedy decoding by full passes."""
    ids = jnp.concatenate([prompt, tokens], axis=1)
    logits = model(ids)[:, prompt.shape[1] - 1 : -1]
    np.testing.assert_array_equal(tokens, jnp.argmax(logits, -1))
    prefix = model(ids[:, : prompt.shape[1] + 3])[:, -1]  # a shorter pass agrees
    np.testing.assert_allclose(prefix, model(ids)[:, prompt.shape[1] + 2], atol=1e-5)


@pytest.fixture(scope="module")
def model():
    return gpt(seed=0)


def test_greedy_decoding_with_the_cache_gives_exactly_the_tokens_of_full_recomputation(model):
    steps = LENGTH - PROMPT.shape[1]  # up to the model's maximum length
    cached = decode(model, PROMPT, max_tokens=steps, temperature=0.0)
    assert cached.shape == (2, steps) and cached.dtype == jnp.int32
    assert_greedy(model, PROMPT, cached)
    np.testing.assert_array_equal(
        cached, decode_by_recomputation(model, PROMPT, max_tokens=steps, temperature=0.0)
    )
    assert len(np.unique(np.asarray(cached))) >= 4  # not one token repeated


def test_sampling_draws_the_same_tokens_with_and_without_the_cache(model):
    options = dict(max_tokens=12, temperature=1.5, top_k=5, seed=7)
    cached = decode(model, PROMPT, **options)
    np.testing.assert_array_equal(cached, decode_by_recomputation(model, PROMPT, **options))
    np.testing.assert_array_equal(cached, decode(model, PROMPT, **options))  # seeded
    assert not np.array_equal(cached, decode(model, PROMPT, **{**options, "seed": 8}))
    greedy = decode(model, PROMPT, max_tokens=12, temperature=0.0)
    np.testing.assert_array_equal(decode(model, PROMPT, max_tokens=12, top_k=1), greedy)


def test_the_model_is_left_as_it_was(model):
    before = jax.tree.map(np.asarray, nnx.state(model))
    decode(model, PROMPT[:1], max_tokens=3)
    decode_by_recomputation(model, PROMPT[:1], max_tokens=3)
    assert all(m.decode is False for _, m in model.iter_modules() if hasattr(m, "decode"))
    assert all(getattr(m, "cache_index", None) is None for _, m in model.iter_modules())
    after = jax.tree.map(np.asarray, nnx.state(model))
    jax.tree.map(np.testing.assert_array_equal, before, after)


def test_sample():
    logits = jnp.array([[0.0, 2.0, 1.0, -1.0], [5.0, 0.0, 0.0, 0.0]])
    key = jax.random.key(0)
    assert sample(logits, key, temperature=0.0, top_k=None).tolist() == [1, 0]
    drawn = jax.vmap(lambda k: sample(logits, k, temperature=1.0, top_k=2))(
        jax.random.split(key, 200)
    )
    assert set(np.asarray(drawn[:, 0]).tolist()) == {1, 2}  # never outside the top 2
    assert set(np.asarray(drawn[:, 1]).tolist()) <= {0, 1, 2, 3}
    cold = jax.vmap(lambda k: sample(logits, k, temperature=0.05, top_k=None))(
        jax.random.split(key, 50)
    )
    assert (cold[:, 0] == 1).all()  # a low temperature is nearly greedy
    assert sample(logits, key, temperature=1.0, top_k=10).shape == (2,)  # k past the vocabulary


class CountingAttention(MultiHeadAttention):
    calls: list = []

    def init_cache(self, input_shape, dtype=jnp.float32):
        self.calls.append(tuple(input_shape))
        super().init_cache(input_shape, dtype)


class Wrapper(nnx.Module):
    """Starts its own attention's cache, as a stacked-layers wrapper would."""

    def __init__(self, rngs):
        self.in_features = 8
        self.inner = CountingAttention(2, 8, decode=False, rngs=rngs)
        self.started = []

    def init_cache(self, input_shape, dtype=jnp.float32):
        self.started.append(tuple(input_shape))
        self.inner.init_cache(input_shape, dtype)

    def __call__(self, x):
        return self.inner(x)


def test_start_decoding_starts_every_cache_once_outermost_first():
    CountingAttention.calls.clear()
    rngs = nnx.Rngs(0)
    model = Sequential(Embed(5, 8, rngs=rngs), PositionEmbed(10, 8, rngs=rngs), Wrapper(rngs))
    model.train()
    start_decoding(model, 3, 7)
    wrapper = model.layers[2]
    assert wrapper.started == [(3, 7, 8)]
    assert CountingAttention.calls == [(3, 7, 8)]  # once, by the wrapper: not again
    assert wrapper.inner.cached_key.value.shape == (3, 7, 2, 4)
    assert int(model.layers[1].cache_index.value) == 0
    assert wrapper.inner.decode is True and model.layers[1].decode is True
    assert wrapper.inner.deterministic is True  # evaluation mode
    assert model(jnp.ones((3, 1), jnp.int32)).shape == (3, 1, 8)


def test_model_max_length():
    assert model_max_length(gpt()) == LENGTH
    assert model_max_length(Sequential(Embed(5, 8, rngs=nnx.Rngs(0)))) is None


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "options", "match"),
    [
        (
            jnp.array([1, 2]),
            {},
            r"prompt must be token ids of shape \(batch, length\) .* int32\[2\]",
        ),
        (jnp.zeros((1, 0), jnp.int32), {}, r"length >= 1, got int32\[1, 0\]"),
        (jnp.ones((1, 2)), {}, r"got float32\[1, 2\]"),
        (PROMPT, {"max_tokens": 0}, "max_tokens must be a whole number >= 1, got 0"),
        (PROMPT, {"max_tokens": 2.0}, "max_tokens must be a whole number >= 1, got 2.0"),
        (
            PROMPT,
            {"temperature": -1.0},
            r"temperature must be a finite number >= 0 \(0 is greedy\) and at most 3.40282e\+38 "
            r"\(float32's largest\), got -1.0",
        ),
        (PROMPT, {"temperature": float("nan")}, "temperature must be a finite number >= 0"),
        (PROMPT, {"temperature": float("inf")}, "temperature must be a finite number >= 0"),
        (PROMPT, {"temperature": 1e39}, r"at most 3.40282e\+38 \(float32's largest\), got 1e\+39"),
        (PROMPT, {"seed": 2**63}, r"seed must be a whole number from 0 to 2\*\*63-1 \(as "),
        (PROMPT, {"seed": -1}, r"seed must be a whole number from 0 to 2\*\*63-1, got -1|got -1"),
        (PROMPT, {"seed": 10**5000}, r"seed must be .*, got a number of over 4,000 digits\."),
        (PROMPT, {"seed": 1.0}, r"seed must be .*, got 1\.0\."),
        (PROMPT, {"top_k": 0}, "top_k must be a whole number >= 1 or None"),
        (
            PROMPT,
            {"max_tokens": LENGTH - 4},
            r"a prompt of 5 tokens and max_tokens=20 make 25 tokens, past the model's maximum "
            r"length of 24 \(the max_length of its PositionEmbed at model.layers\[1\]\). Ask "
            r"for at most 19 new tokens",
        ),
        (
            jnp.ones((1, LENGTH), jnp.int32),
            {},
            r"a prompt of 24 tokens leaves no room to generate: the model's maximum length is 24 "
            r"\(the max_length of its PositionEmbed at model.layers\[1\]\)\. Shorten the prompt "
            r"to at most 23 tokens\.",
        ),
    ],
)
@pytest.mark.parametrize("decoder", [decode, decode_by_recomputation])
def test_argument_errors(model, decoder, prompt, options, match):
    with pytest.raises(GenerationError, match=match):
        decoder(model, prompt, **{"max_tokens": 3, **options})


@pytest.mark.parametrize("value", [1, "yes", None, [True]])
def test_scan_blocks_must_be_a_bool(model, value):
    with pytest.raises(GenerationError, match=r"scan_blocks must be True or False, got "):
        decode(model, PROMPT, max_tokens=2, scan_blocks=value)


def test_a_model_without_a_cache_cannot_decode():
    rngs = nnx.Rngs(0)
    model = Sequential(Embed(5, 8, rngs=rngs), Linear(8, 5, rngs=rngs))
    with pytest.raises(GenerationError, match="Sequential has no layer that decodes from a cache"):
        decode(model, jnp.ones((1, 2), jnp.int32), max_tokens=2)
    assert decode_by_recomputation(model, jnp.ones((1, 2), jnp.int32), max_tokens=2).shape == (1, 2)


def test_a_cache_layer_without_a_width_is_named():
    class Bare(nnx.Module):
        def init_cache(self, input_shape, dtype=jnp.float32):
            pass

        def __call__(self, x):
            return x

    model = Sequential(Embed(5, 8, rngs=nnx.Rngs(0)), Bare())
    with pytest.raises(
        GenerationError,
        match=r"the layer Bare at model.layers\[1\] has init_cache but neither in_features",
    ):
        start_decoding(model, 1, 4)


def test_a_model_that_does_not_return_logits_per_position():
    rngs = nnx.Rngs(0)
    model = Sequential(Embed(5, 8, rngs=rngs), PositionEmbed(8, 8, rngs=rngs), nnx_flatten)
    with pytest.raises(
        GenerationError,
        match=r"must map token ids \(batch, length\) to logits .* returned \(1, 8\)",
    ):
        decode(model, jnp.ones((1, 2), jnp.int32), max_tokens=2)


def nnx_flatten(x):
    return x.reshape(x.shape[0], -1)


# --- hostile arguments: tiny temperatures, big seeds, lengths past memory ---------------------


@pytest.mark.parametrize(
    ("decoder", "temperature"),
    [(decode, 1e-38), (decode, 5e-324), (decode_by_recomputation, 1e-45)],
)
def test_a_tiny_temperature_draws_the_greedy_tokens(model, decoder, temperature):
    """Dividing the logits by 1e-38 overflowed them to inf (and NaN after the softmax's
    shift): the draws were not the greedy ones. Scaled after subtracting the largest logit,
    no temperature overflows; one that is 0 in float32 is greedy itself."""
    greedy = decode(model, PROMPT, max_tokens=8, temperature=0.0)
    drawn = decoder(model, PROMPT, max_tokens=8, temperature=temperature, seed=3)
    np.testing.assert_array_equal(drawn, greedy)


def test_top_k_1_is_greedy_at_any_temperature_and_top_k_keeps_exactly_k_with_ties(model):
    greedy = decode(model, PROMPT, max_tokens=8, temperature=0.0)
    for temperature, seed in ((2.0, 0), (1e6, 1)):
        options = dict(max_tokens=8, temperature=temperature, top_k=1, seed=seed)
        np.testing.assert_array_equal(decode(model, PROMPT, **options), greedy)
    np.testing.assert_array_equal(decode_by_recomputation(model, PROMPT, **options), greedy)
    tied = jnp.array([[1.0, 1.0, 1.0, 0.0, 1.0]])
    keys = jax.random.split(jax.random.key(0), 300)
    drawn = jax.vmap(lambda k: sample(tied, k, temperature=1.0, top_k=2))(keys)
    kept = set(np.asarray(jax.lax.top_k(tied, 2)[1][0]).tolist())
    assert set(np.asarray(drawn).ravel().tolist()) == kept  # two of the four tied, no more
    assert sample(tied, keys[0], temperature=3.0, top_k=1).tolist() == [0]  # argmax's choice


def test_seeds_past_32_bits_draw_differently_up_to_2_63(model):
    options = dict(max_tokens=10, temperature=1.5)
    low = decode(model, PROMPT, **options, seed=5)
    np.testing.assert_array_equal(decode(model, PROMPT, **options, seed=5), low)
    assert not np.array_equal(decode(model, PROMPT, **options, seed=5 + 2**32), low)
    assert decode(model, PROMPT, **options, seed=MAX_SEED).shape == (2, 10)


def no_limit_model(width=16):
    """A language model that any length fits: attention's cache grows with it, no
    PositionEmbed caps it."""
    rngs = nnx.Rngs(0)
    attention = MultiHeadAttention(2, width, is_causal=True, decode=False, rngs=rngs)
    return Sequential(Embed(13, width, rngs=rngs), attention, Linear(width, 13, rngs=rngs))


def test_a_length_whose_caches_exceed_memory_is_refused_before_allocating():
    model = no_limit_model(width=512)
    # the caches of 2**31 - 10 positions: 2 x 512 x 4 bytes each, about 8.8 TB
    with pytest.raises(
        GenerationError,
        match=r"decoding 2,147,483,638 tokens after a prompt of 5 needs at least 8\.\d TB "
        r"\([\d,]+ bytes: the model's weights and the caches of its 2,147,483,643 positions\), "
        r"more than the .* of (available host memory|\w+ device memory)\. Ask for at most "
        r"[\d,]+ new tokens\.",
    ):
        decode(model, PROMPT[:1], max_tokens=2**31 - 10)


def test_past_2_31_positions_is_refused_with_or_without_a_length_limit(model):
    with pytest.raises(
        GenerationError,
        match=r"max_tokens=2,147,483,648 make 2,147,483,653 positions, past the 2,147,483,647 a "
        r"decoding loop counts \(int32\)",
    ):
        decode(no_limit_model(), PROMPT, max_tokens=2**31)
    with pytest.raises(GenerationError, match=r"past the model's maximum length of 24"):
        decode(model, PROMPT, max_tokens=2**31)


def test_the_most_tokens_that_fit_are_named_and_do_fit(monkeypatch):
    model = no_limit_model()
    monkeypatch.setattr(decoding, "available_memory", lambda: (2_000_000, "test memory"))
    with pytest.raises(GenerationError, match=r"Ask for at most ([\d,]+) new tokens") as error:
        decode(model, PROMPT, max_tokens=100_000_000)
    assert "more than the 1.9 MB of test memory" in str(error.value)
    fit = int(str(error.value).rsplit("at most ", 1)[1].split()[0].replace(",", ""))
    assert 1000 < fit < 10_000
    decoding._check_memory(model, 2, 5, fit)  # fits
    with pytest.raises(GenerationError, match="Ask for at most"):
        decoding._check_memory(model, 2, 5, fit + 1)


def test_the_memory_estimate_is_traced_once_per_model_structure_and_length(monkeypatch):
    # the abstract start of the caches took 30 ms of every call (a third of decoding 256
    # tokens of the example GPT); it is kept per structure, shapes and length
    model, calls = no_limit_model(), []
    start = decoding.start_decoding
    monkeypatch.setattr(decoding, "start_decoding", lambda *a: calls.append(a[1:]) or start(*a))
    decode(model, PROMPT, max_tokens=3, temperature=0.0)
    first = len(calls)
    decode(model, PROMPT, max_tokens=3, temperature=0.0)
    assert len(calls) == first  # (the program and the estimate kept)
    assert decoding._decoding_bytes(model, 2, 9) == decoding._decoding_bytes(model, 2, 9)
    assert len(calls) == first + 1
    wider, longer = no_limit_model(width=32), decoding._decoding_bytes(model, 2, 10)
    assert decoding._decoding_bytes(wider, 2, 9) > decoding._decoding_bytes(model, 2, 9)
    assert longer > decoding._decoding_bytes(model, 2, 9)


def test_a_place_in_the_model_is_spelled_as_in_a_config():
    from nnx_plugins.generation._decode import _where

    assert [_where(()), _where(("layers", 1)), _where((2,))] == [
        "model",
        "model.layers[1]",
        "model[2]",
    ]


def test_room_for_one_more_token_is_said_in_the_singular():
    """'Ask for at most 1 new tokens'."""
    prompt = jnp.zeros((1, LENGTH - 1), jnp.int32)
    with pytest.raises(
        GenerationError, match=r"Ask for at most 1 new token, or shorten the prompt"
    ):
        decode(gpt(), prompt, max_tokens=2, temperature=0.0)


# --- logits that are not finite, models that fail on token ids, numpy integers ----------------


def poisoned(model, value=jnp.nan):
    """A copy of ``model`` whose head's bias holds ``value`` at one token: every logit row
    is then not finite (NaN, +inf) from the first new token on."""
    graphdef, state = nnx.split(model)
    copy = nnx.merge(graphdef, state)
    head = copy.layers[-1]
    head.bias.value = head.bias.value.at[3].set(value)
    return copy


@pytest.mark.parametrize("decoder", [decode, decode_by_recomputation])
@pytest.mark.parametrize("value", [jnp.nan, jnp.inf])
@pytest.mark.parametrize("options", [{"temperature": 0.0}, {"temperature": 1.0, "top_k": 3}])
def test_logits_that_are_not_finite_are_refused(model, decoder, value, options):
    """Every new token became id 0 (NaN is argmax's first and categorical's draw), silently."""
    with pytest.raises(
        GenerationError,
        match=r"the model's outputs \(logits\) are not finite \(NaN or infinite\) at new token 1 "
        r"of row 1 \(and 1 other row\): no token can be drawn from them\. The model's weights "
        r"hold NaN or infinite values, .* check the checkpoint",
    ):
        decoder(poisoned(model, value), PROMPT, max_tokens=4, **options)


def test_a_logit_of_minus_infinity_is_a_token_ruled_out_not_an_error(model):
    """-inf alone is how a token is ruled out; only a row with no finite logit is refused."""
    tokens = decode(poisoned(model, -jnp.inf), PROMPT, max_tokens=4, temperature=1.0, seed=3)
    assert 3 not in np.asarray(tokens)


def test_the_first_new_token_whose_logits_are_not_finite_is_named():
    """Logits that are NaN at one position only (its position embedding; no layer mixes the
    positions): the token drawn there is named."""
    rngs = nnx.Rngs(0)
    length = 8
    model = Sequential(
        Embed(13, length, rngs=rngs),
        PositionEmbed(length, length, rngs=rngs),
        Linear(length, 13, rngs=rngs),
    )
    model.layers[0].embedding.value = jnp.zeros_like(model.layers[0].embedding.value)
    model.layers[1].embedding.value = jnp.eye(length).at[4].set(jnp.nan)
    prompt = jnp.array([[1, 2, 3]])  # (position 2 draws the first new token, 4 the third)
    for decoder in (decode, decode_by_recomputation):
        with pytest.raises(GenerationError, match=r"not finite .* at new token 3 of row 1:"):
            decoder(model, prompt, max_tokens=4, temperature=0.0)
    assert decode(model, prompt, max_tokens=2, temperature=0.0).shape == (1, 2)  # before it


def test_a_model_that_fails_on_token_ids_is_a_generation_error():
    """A layer that refuses the model's own activations was a traceback of that layer."""
    rngs = nnx.Rngs(0)
    attention = MultiHeadAttention(2, 8, is_causal=True, decode=False, rngs=rngs)
    model = Sequential(Embed(13, 8, rngs=rngs), attention, Linear(5, 13, rngs=rngs))
    for decoder in (decode, decode_by_recomputation):
        with pytest.raises(
            GenerationError,
            match=r"the model \(Sequential\) fails on token ids of shape \[2, 5\]: \w+: .* "
            r"Generation needs a causal language model, token ids \(batch, length\) -> logits",
        ):
            decoder(model, PROMPT, max_tokens=2)


def test_numpy_integers_are_taken_as_python_integers(model):
    """np.uint8(3) overflowed in the memory estimate (OverflowError), np.int16 wrapped around."""
    plain = decode(model, PROMPT, max_tokens=3, temperature=0.0, top_k=2, seed=1)
    for kind in (np.uint8, np.int16, np.int32, np.uint64):
        options = dict(max_tokens=kind(3), top_k=kind(2), seed=kind(1))
        np.testing.assert_array_equal(decode(model, PROMPT, temperature=0.0, **options), plain)
    with pytest.raises(GenerationError, match=r"max_tokens must be a whole number >= 1, got None"):
        decode(model, PROMPT, max_tokens=None)

"""Decoding with the KV cache: greedy tokens equal full recomputation's, sampling, the model left
untouched, starting every cache, and every error."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import Embed, Linear, MultiHeadAttention, PositionEmbed, Sequential
from nnx_plugins.generation._decode import (
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
            r"temperature must be a number >= 0 \(0 is greedy\), got -1.0",
        ),
        (PROMPT, {"temperature": float("nan")}, "temperature must be a number >= 0"),
        (PROMPT, {"top_k": 0}, "top_k must be a whole number >= 1 or None"),
        (
            PROMPT,
            {"max_tokens": LENGTH - 4},
            r"a prompt of 5 tokens and max_tokens=20 make 25 tokens, past the model's maximum "
            r"length of 24 \(the max_length of its PositionEmbed at model.layers\[1\]\). Ask "
            r"for at most 19 new tokens",
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

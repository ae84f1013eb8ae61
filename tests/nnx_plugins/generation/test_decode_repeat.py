"""Decoding a GPT whose blocks are stacked in a `Repeat`: one cache per block, and the same
tokens as the unrolled model with the same parameters."""

import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
import nnx_layers
from nnx_layers import Embed, Repeat, Sequential
from nnx_plugins import build
from nnx_plugins.generation._decode import (
    GenerationError,
    decode,
    decode_by_recomputation,
    start_decoding,
)
from nnx_plugins.generation._unroll import unrolled as _unrolled

from .gpt import LENGTH, WIDTH, block, gpt, gpt_config

PROMPT = jnp.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
BLOCKS = 3


@pytest.fixture(scope="module")
def models():
    """The unrolled GPT, and the same parameters with its blocks stacked in a Repeat."""
    unrolled = gpt(seed=0, blocks=BLOCKS)
    layers = nnx.clone(unrolled).layers
    blocks = Repeat.from_layers(layers[2 : 2 + BLOCKS])
    stacked = Sequential(layers[0], layers[1], blocks, *layers[2 + BLOCKS :])
    return unrolled, stacked


def test_the_repeat_gpt_computes_what_the_unrolled_one_does(models):
    unrolled, stacked = models
    ids = jnp.concatenate([PROMPT, PROMPT], axis=1)
    np.testing.assert_allclose(stacked(ids), unrolled(ids), rtol=1e-5, atol=1e-5)


def test_start_decoding_gives_every_block_its_own_cache(models):
    work = nnx.clone(models[1])
    start_decoding(work, 2, 9)
    attention = work.layers[2].block.layers[0].block.layers[1]
    assert attention.decode is True
    assert attention.cached_key.value.shape == (BLOCKS, 2, 9, 2, WIDTH // 2)
    assert attention.cache_index.value.tolist() == [0] * BLOCKS
    assert int(work.layers[1].cache_index.value) == 0  # the PositionEmbed outside the Repeat
    for t in range(3):
        work(PROMPT[:, t : t + 1])
    assert attention.cache_index.value.tolist() == [3] * BLOCKS


def test_kv_cache_decoding_through_repeat_equals_the_unrolled_models(models):
    unrolled, stacked = models
    steps = LENGTH - PROMPT.shape[1]
    ours = decode(stacked, PROMPT, max_tokens=steps, temperature=0.0)
    np.testing.assert_array_equal(ours, decode(unrolled, PROMPT, max_tokens=steps, temperature=0.0))
    np.testing.assert_array_equal(
        ours, decode_by_recomputation(stacked, PROMPT, max_tokens=steps, temperature=0.0)
    )
    assert len(np.unique(np.asarray(ours))) >= 4  # not one token repeated
    options = dict(max_tokens=10, temperature=1.5, top_k=5, seed=3)
    np.testing.assert_array_equal(
        decode(stacked, PROMPT, **options), decode(unrolled, PROMPT, **options)
    )


def test_a_repeat_written_in_a_config_decodes():
    config = gpt_config(blocks=0)
    config["layers"].insert(2, {"type": "Repeat", "count": 2, "block": block()})
    model = build(config, rngs=nnx.Rngs(1))
    cached = decode(model, PROMPT, max_tokens=6, temperature=0.0)
    np.testing.assert_array_equal(
        cached, decode_by_recomputation(model, PROMPT, max_tokens=6, temperature=0.0)
    )


class Identity(nnx.Module):
    def __call__(self, x):
        return x


class Bare(nnx.Module):
    def __init__(self, rngs):
        pass

    def init_cache(self, input_shape, dtype=jnp.float32):
        pass

    def __call__(self, x):
        return x


def test_a_layer_of_unknown_width_inside_a_repeat_is_named_by_its_path():
    model = Sequential(Embed(5, 8, rngs=nnx.Rngs(0)), Repeat(Bare, 2, rngs=nnx.Rngs(0)))
    with pytest.raises(
        GenerationError,
        match=r"the layer Bare at model.layers\[1\].block has init_cache but neither in_features",
    ):
        start_decoding(model, 1, 4)


def test_a_repeat_without_caches_does_not_count_as_decoding():
    plain = Repeat(lambda rngs: Identity(), 2, rngs=nnx.Rngs(0))
    model = Sequential(Embed(5, 8, rngs=nnx.Rngs(0)), plain)
    with pytest.raises(GenerationError, match="has no layer that decodes from a cache"):
        start_decoding(model, 1, 4)


def test_decode_unrolls_a_repeat_in_its_copy_and_scan_blocks_keeps_the_scan(models):
    _, stacked = models
    work = nnx.clone(stacked)
    start_decoding(work, 2, 9)
    unrolled = _unrolled(work)
    blocks = unrolled.layers[2].blocks
    assert len(blocks) == BLOCKS and not any(
        isinstance(m, Repeat) for _, m in unrolled.iter_modules()
    )
    attention = blocks[1].layers[0].block.layers[1]
    assert attention.cached_key.value.shape == (2, 9, 2, WIDTH // 2)  # its own cache
    assert int(attention.cache_index.value) == 0
    assert isinstance(stacked.layers[2], Repeat)  # the caller's model is left as it was
    steps = LENGTH - PROMPT.shape[1]
    default = decode(stacked, PROMPT, max_tokens=steps, temperature=0.0)
    scanned = decode(stacked, PROMPT, max_tokens=steps, temperature=0.0, scan_blocks=True)
    np.testing.assert_array_equal(default, scanned)
    assert (
        isinstance(stacked.layers[2], Repeat)
        and stacked.layers[2].block.layers[0].block.layers[1].cached_key is None
    )


def test_a_repeat_at_the_root_and_a_repeat_inside_a_repeat_unroll_to_the_same_function():
    inner = lambda rngs: Repeat(lambda r: nnx_layers.Linear(4, 4, rngs=r), 2, rngs=rngs)  # noqa: E731
    nested = Repeat(inner, 3, rngs=nnx.Rngs(0))
    x = jnp.arange(8.0).reshape(2, 4) / 8
    flat = _unrolled(nnx.clone(nested))
    assert len(flat.blocks) == 3 and all(len(b.blocks) == 2 for b in flat.blocks)
    assert not any(isinstance(m, Repeat) for _, m in flat.iter_modules())
    np.testing.assert_allclose(flat(x), nested(x), rtol=1e-6)
    inside = _unrolled(Sequential(nnx.clone(nested)))
    assert not any(isinstance(m, Repeat) for _, m in inside.iter_modules())
    np.testing.assert_allclose(inside(x), nested(x), rtol=1e-6)

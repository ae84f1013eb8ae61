"""RoPE and dot_product_attention_with_rope: the rotation, its frequencies, its errors."""

import math
import re

import jax.numpy as jnp
import numpy as np
import pytest

from nnx_layers import (
    RoPE,
    dot_product_attention,
    dot_product_attention_with_rope,
    rope_frequencies,
)
from nnx_layers._rope import THETA_RANGE


def _reference(x, positions, inv_freq):
    """The rotation written out pair by pair: features j and j + d/2 turn by p * inv_freq[j]."""
    half = x.shape[-1] // 2
    out = np.array(x, np.float64)
    for index in np.ndindex(*x.shape[:-1]):
        p = positions[index]
        for j in range(half):
            a, b = x[index][j], x[index][j + half]
            c, s = math.cos(p * inv_freq[j]), math.sin(p * inv_freq[j])
            out[index][j], out[index][j + half] = a * c - b * s, b * c + a * s
    return out


def test_rope_rotates_pairs_of_halves_by_position():
    x = np.random.default_rng(0).normal(size=(2, 3, 6)).astype(np.float32)
    positions = np.array([[0, 1, 2], [5, 7, 9]])
    y = RoPE(theta=100.0)(x, positions)
    np.testing.assert_allclose(
        y, _reference(x, positions, rope_frequencies(6, theta=100.0)), atol=1e-5
    )


def test_rope_makes_scores_depend_on_the_distance_only():
    rope = RoPE()
    q = np.random.default_rng(1).normal(size=(1, 1, 8)).astype(np.float32)
    k = np.random.default_rng(2).normal(size=(1, 1, 8)).astype(np.float32)

    def score(i, j):
        return float((rope(q, jnp.array([[i]])) * rope(k, jnp.array([[j]]))).sum())

    assert score(3, 1) == pytest.approx(score(12, 10), abs=1e-4)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_llama3_scaling_keeps_high_frequencies_and_divides_low_ones():
    base = rope_frequencies(128, theta=500000.0)
    scaled = rope_frequencies(
        128,
        theta=500000.0,
        scaling="llama3",
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    )
    wavelength = 2 * np.pi / base
    assert np.array_equal(scaled[wavelength < 8192 / 4], base[wavelength < 8192 / 4])
    np.testing.assert_allclose(scaled[wavelength > 8192], base[wavelength > 8192] / 8, rtol=1e-6)
    middle = (wavelength >= 2048) & (wavelength <= 8192)
    assert (
        middle.any()
        and np.all(scaled[middle] < base[middle])
        and np.all(scaled[middle] > base[middle] / 8)
    )


def test_rope_with_heads_turns_every_head_alike():
    rope = RoPE()
    q = np.random.default_rng(3).normal(size=(2, 4, 3, 8)).astype(np.float32)
    positions = np.array([[0, 1, 2, 3], [2, 3, 4, 5]])
    per_head = np.stack([rope(q[:, :, h], positions) for h in range(3)], axis=2)
    np.testing.assert_allclose(rope.rotate(q, positions), per_head, atol=1e-6)


def test_attention_with_rope_rotates_queries_and_keys_first():
    rope = RoPE()
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(1, 5, 2, 8)).astype(np.float32) for _ in range(3))
    positions = jnp.arange(5)[None]
    expected = dot_product_attention(
        rope.rotate(q, positions), rope.rotate(k, positions), v, is_causal=True
    )
    got = dot_product_attention_with_rope(q, k, v, rope=rope, is_causal=True)
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize(
    ("build", "call", "match"),
    [
        (dict(theta=-1.0), None, "theta must be > 0"),
        (dict(scaling="yarn"), None, "scaling must be 'default' or 'llama3', got 'yarn'"),
        (
            dict(scaling="llama3", low_freq_factor=4.0, high_freq_factor=1.0),
            None,
            "must be above low_freq_factor",
        ),
        (dict(embedding_size=7), None, "embedding_size must be even, got 7"),
        ({}, np.ones((2, 5)), "the last axis must be even, got 5"),
        (
            dict(embedding_size=8),
            np.ones((2, 6)),
            "built for embedding_size=8, got vectors of width 6",
        ),
        (dict(max_seq_len=3), np.ones((4, 8)), "holds 3 positions .* length 4"),
        ({}, np.ones((8,)), r"expects x of shape \(\.\.\., seq_length, embedding_size\)"),
    ],
)
def test_rope_errors(build, call, match):
    with pytest.raises(ValueError, match=match):
        rope = RoPE(**build)
        rope(call)


def test_rope_positions_that_do_not_fit():
    with pytest.raises(ValueError, match="same seq_length as x"):
        RoPE()(np.ones((2, 3, 4)), np.arange(4))
    with pytest.raises(ValueError, match=r"must broadcast to x.shape\[:-1\]"):
        RoPE()(np.ones((2, 3, 4)), np.zeros((3, 3)))


@pytest.mark.parametrize("theta", [1e308, 1e38, 1e-300, 1e-31])
def test_a_theta_whose_frequencies_leave_float32_is_refused(theta):
    with pytest.raises(
        ValueError,
        match=r"RoPE theta must be between 6\.3e-30 and 5\.4e\+37 .* got "
        + re.escape(repr(theta))
        + r"\. Usual "
        r"values are 1e4 to 1e7",
    ):
        RoPE(theta=theta)


@pytest.mark.parametrize("scaling", ["default", "llama3"])
@pytest.mark.parametrize("theta", ["low", "high"])
def test_the_extreme_thetas_give_finite_frequencies_and_angles(scaling, theta):
    low, high = THETA_RANGE
    rope = RoPE(theta=low if theta == "low" else high, scaling=scaling)
    for width in (2, 8, 128):
        inv_freq = rope.frequencies(width)
        assert np.isfinite(inv_freq).all() and (inv_freq > 0).all()
    x = jnp.ones((1, 2, 2, 8))
    far = jnp.array([[0, 2**31 - 1]])
    assert bool(jnp.isfinite(rope.rotate(x, far)).all())


def test_frequency_settings_that_overflow_float32_are_refused_not_warned():
    rope = RoPE(scaling="llama3", factor=1e-300)
    with pytest.raises(ValueError, match=r"theta=1e\+308, scaling='default' leave float32 "):
        rope_frequencies(8, theta=1e308)
    with pytest.raises(
        ValueError,
        match=r"RoPE frequencies of theta=10000\.0, scaling='llama3', factor=1e-300, .* leave "
        r"float32 \(they come out as \['inf'\], where each must be finite and > 0\)",
    ):
        rope.frequencies(8)


def test_max_seq_len_applies_on_every_path_that_rotates():
    rope = RoPE(max_seq_len=4)
    match = r"RoPE holds 4 positions \(max_seq_len\) but got a sequence of length 5"
    with pytest.raises(ValueError, match=match):
        rope.rotate(jnp.ones((1, 5, 2, 8)), jnp.arange(5)[None])
    with pytest.raises(ValueError, match=match):
        rope.rotate(jnp.ones((1, 5, 8)), jnp.arange(5)[None], heads=False)
    with pytest.raises(ValueError, match=match):
        q = jnp.ones((1, 5, 2, 8))
        dot_product_attention_with_rope(q, q, q, rope=rope)
    assert rope.rotate(jnp.ones((1, 4, 2, 8)), jnp.arange(4)[None]).shape == (1, 4, 2, 8)
    with pytest.raises(ValueError, match=r"RoPE.rotate with heads=True expects x of shape"):
        rope.rotate(jnp.ones((4, 8)), jnp.arange(4))

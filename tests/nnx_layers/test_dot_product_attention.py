"""dot_product_attention(_weights): parity with flax.nnx (outputs, gradients, dropout, masks,
grouped heads, several batch axes), sown weights and every error path."""

import warnings

import flax.nnx as fnnx
import flax.nnx.nn.attention as flax_attention
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import dot_product_attention, dot_product_attention_weights


def _qkv(batch, q_len=4, kv_len=6, heads=2, kv_heads=2, depth=3, dtype=jnp.float32):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((*batch, q_len, heads, depth))
    k = rng.standard_normal((*batch, kv_len, kv_heads, depth))
    v = rng.standard_normal((*batch, kv_len, kv_heads, depth))
    return tuple(jnp.asarray(a, dtype) for a in (q, k, v))


def _mask(shape, seed=1):
    return jnp.asarray(np.random.default_rng(seed).random(shape) > 0.3)


CASES = [
    # (batch axes, kv_heads, mask shape or None, bias shape or None, is_causal)
    ((2,), 2, None, None, False),
    ((2,), 2, (2, 1, 4, 6), None, False),
    ((2,), 1, (1, 2, 4, 6), (2, 2, 4, 6), False),
    ((), 2, (4, 6), None, True),
    ((3, 2), 2, (2, 1, 4, 6), (1, 1, 4, 6), False),
    ((3, 2), 1, None, None, True),
]


def _full(array, batch):
    """flax.nnx folds several batch axes with a reshape, so it needs masks spelled out."""
    if array is None or len(batch) < 2:
        return array
    array = jnp.reshape(array, (1,) * (len(batch) + 3 - array.ndim) + array.shape)
    return jnp.broadcast_to(array, (*batch, *array.shape[-3:]))


@pytest.mark.parametrize(("batch", "kv_heads", "mask", "bias", "is_causal"), CASES)
def test_attention_and_weights_match_flax(batch, kv_heads, mask, bias, is_causal, assert_close):
    q, k, v = _qkv(batch, kv_heads=kv_heads)
    mask = None if mask is None else _mask(mask)
    bias = None if bias is None else jnp.linspace(-1, 1, np.prod(bias)).reshape(bias)
    ours = dot_product_attention(q, k, v, bias, mask, is_causal=is_causal)
    theirs = fnnx.dot_product_attention(
        q, k, v, _full(bias, batch), _full(mask, batch), is_causal=is_causal
    )
    assert_close(ours, theirs)
    assert_close(
        dot_product_attention_weights(q, k, bias, mask, is_causal=is_causal),
        flax_attention.dot_product_attention_weights(q, k, bias, mask, is_causal=is_causal),
    )


@pytest.mark.parametrize(("dtype", "kv_heads"), [(jnp.float32, 1), (jnp.bfloat16, 2)])
def test_gradients_match_flax(dtype, kv_heads, assert_close):
    q, k, v = _qkv((2,), kv_heads=kv_heads, dtype=dtype)
    mask = _mask((2, 1, 4, 6))

    def loss(fn):
        return lambda q, k, v: (fn(q, k, v, mask=mask).astype(jnp.float32) ** 2).sum()

    ours = jax.grad(loss(dot_product_attention), argnums=(0, 1, 2))(q, k, v)
    theirs = jax.grad(loss(fnnx.dot_product_attention), argnums=(0, 1, 2))(q, k, v)
    for mine, other in zip(ours, theirs):
        assert_close(mine, other, 5.0)


@pytest.mark.parametrize(("broadcast_dropout", "kv_heads"), [(True, 2), (False, 1)])
def test_dropout_matches_flax_for_the_same_key(broadcast_dropout, kv_heads, assert_close):
    q, k, v = _qkv((2,), kv_heads=kv_heads)
    kwargs = dict(
        dropout_rate=0.5, dropout_rng=jax.random.key(3), broadcast_dropout=broadcast_dropout
    )
    dropped = dot_product_attention(q, k, v, **kwargs)
    assert_close(dropped, fnnx.dot_product_attention(q, k, v, **kwargs))
    kept = dot_product_attention(q, k, v, **kwargs, deterministic=True)
    assert_close(kept, dot_product_attention(q, k, v))
    assert not np.allclose(dropped, kept)
    weights = dot_product_attention_weights(q, k, **kwargs)
    if broadcast_dropout:  # one mask for every batch entry and head
        zeros = np.asarray(weights == 0)
        assert (zeros == zeros[:1, :1]).all() and zeros.any()


def test_module_records_the_weights(assert_close):
    q, k, v = _qkv((2,))

    class Holder(nnx.Module):
        pass

    holder = Holder()
    out = dot_product_attention(q, k, v, module=holder)
    (weights,) = holder.attention_weights.value
    assert isinstance(holder.attention_weights, nnx.Intermediate)
    assert_close(weights, dot_product_attention_weights(q, k))
    assert_close(out, dot_product_attention(q, k, v))

    class FlaxHolder(fnnx.Module):
        pass

    with warnings.catch_warnings():  # flax.nnx deprecates sow outside nnx.capture
        warnings.simplefilter("ignore", DeprecationWarning)
        theirs = FlaxHolder()
        fnnx.dot_product_attention(q, k, v, module=theirs)
    assert_close(weights, theirs.attention_weights.get_value()[0])


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_values_of_another_depth(kv_heads, assert_close):
    q, k, _ = _qkv((2,), kv_heads=kv_heads)
    v = jnp.asarray(np.random.default_rng(5).standard_normal((2, 6, kv_heads, 5)), jnp.float32)
    weights = dot_product_attention_weights(q, k)
    expected = jnp.einsum("bhqk,bkhd->bqhd", weights, jnp.repeat(v, 2 // kv_heads, axis=2))
    assert_close(dot_product_attention(q, k, v), expected)


def test_fully_masked_rows_are_uniform_and_dtype_follows_the_inputs():
    q, k, _ = _qkv((1,))
    weights = dot_product_attention_weights(q, k, mask=jnp.zeros((1, 1, 4, 6)))
    np.testing.assert_allclose(weights, np.full((1, 2, 4, 6), 1 / 6), rtol=1e-6)
    q16, k16, v16 = _qkv((1,), dtype=jnp.bfloat16)
    assert dot_product_attention(q16, k16, v16).dtype == jnp.bfloat16
    assert dot_product_attention(q16, k16, v16, dtype=jnp.float32).dtype == jnp.float32


# --- errors ----------------------------------------------------------------------------------


def test_shape_errors():
    q, k, v = _qkv((2,))
    with pytest.raises(
        ValueError,
        match=r"query and key must have same rank, both \(batch..., length, heads, depth\) .* "
        r"got \(4, 2, 3\) and \(2, 6, 2, 3\)",
    ):
        dot_product_attention(q[0], k, v)
    with pytest.raises(
        ValueError,
        match=r"query and key batch dims must match .* got \(2, 4, 2, 3\) and \(3, 6, 2, 3\)",
    ):
        dot_product_attention(q, jnp.ones((3, 6, 2, 3)), jnp.ones((3, 6, 2, 3)))
    with pytest.raises(
        ValueError,
        match=r"q, k depths must match \(the last axis\), got \(2, 4, 2, 3\) and \(2, 6, 2, 2\)",
    ):
        dot_product_attention_weights(q, k[..., :2])
    with pytest.raises(
        ValueError,
        match=r"query heads \(2\) must be a multiple of the number of key/value heads \(3\)",
    ):
        dot_product_attention(q, jnp.ones((2, 6, 3, 3)), jnp.ones((2, 6, 3, 4)))
    with pytest.raises(
        ValueError,
        match=r"k, v lengths must match \(axis -3\), got \(2, 6, 2, 3\) and \(2, 5, 2, 3\)",
    ):
        dot_product_attention(q, k, v[:, :5])
    with pytest.raises(
        ValueError, match=r"key and value must have same rank and batch dims must match"
    ):
        dot_product_attention(q, k, v[0])
    with pytest.raises(
        ValueError, match=r"key and value must have the same number of heads \(axis -2\)"
    ):
        dot_product_attention(q, k, jnp.ones((2, 6, 1, 3)))


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "phrase"),
    [  # flax.nnx's phrases for the same causes, which its users' code matches
        ((2, 16, 4, 8), (16, 4, 8), (16, 4, 8), "same rank"),
        ((2, 16, 4, 8), (3, 16, 4, 8), (3, 16, 4, 8), "batch dims"),
        ((2, 16, 4, 8), (2, 16, 4, 8), (2, 15, 4, 8), "lengths must match"),
        ((2, 16, 4, 8), (2, 16, 4, 7), (2, 16, 4, 8), "depths must match"),
    ],
)
def test_shape_errors_contain_flax_phrases(q_shape, k_shape, v_shape, phrase):
    q, k, v = jnp.ones(q_shape), jnp.ones(k_shape), jnp.ones(v_shape)
    with pytest.raises(ValueError, match=phrase):
        dot_product_attention(q, k, v, dropout_rate=0.1, dropout_rng=jax.random.key(0))


def test_mask_and_bias_errors():
    q, k, v = _qkv((2,))
    with pytest.raises(
        ValueError,
        match=r"dot_product_attention mask of shape \(2, 3, 4, 6\) does not broadcast to .* = \(2, 2, 4, 6\)",
    ):
        dot_product_attention(q, k, v, mask=jnp.ones((2, 3, 4, 6)))
    with pytest.raises(
        ValueError, match=r"dot_product_attention_weights bias of shape \(4, 5\) does not broadcast"
    ):
        dot_product_attention_weights(q, k, bias=jnp.ones((4, 5)))
    with pytest.raises(ValueError, match=r"mask of shape \(1, 1, 2, 1, 4, 6\) does not broadcast"):
        dot_product_attention(q, k, v, mask=jnp.ones((1, 1, 2, 1, 4, 6)))


def test_dropout_without_a_key_errors():
    q, k, v = _qkv((2,))
    with pytest.raises(
        ValueError,
        match=r"applies dropout \(dropout_rate=0.5, deterministic=False\) but got no dropout_rng",
    ):
        dot_product_attention(q, k, v, dropout_rate=0.5)

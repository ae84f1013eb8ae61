"""make_attention_mask, make_causal_mask, combine_masks: parity with flax.nnx and errors."""

import flax.nnx as fnnx
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_layers import combine_masks, make_attention_mask, make_causal_mask

TOKENS = jnp.array([[3, 4, 0, 0], [1, 2, 5, 0]])


@pytest.mark.parametrize(
    ("query", "key", "kwargs"),
    [
        (TOKENS > 0, TOKENS > 0, {}),
        (TOKENS > 0, (TOKENS > 0)[:, :3], {"extra_batch_dims": 2}),
        (TOKENS, TOKENS[:, :3], {"pairwise_fn": jnp.greater_equal, "dtype": jnp.bool_}),
        ((TOKENS > 0)[0], (TOKENS > 0)[0], {"dtype": jnp.int32}),
    ],
)
def test_make_attention_mask_matches_flax(query, key, kwargs):
    ours = make_attention_mask(query, key, **kwargs)
    theirs = fnnx.make_attention_mask(query, key, **kwargs)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("shape", [(4,), (2, 4), (3, 2, 4)])
@pytest.mark.parametrize("kwargs", [{}, {"extra_batch_dims": 1, "dtype": jnp.bool_}])
def test_make_causal_mask_matches_flax(shape, kwargs):
    x = jnp.ones(shape)
    ours = make_causal_mask(x, **kwargs)
    np.testing.assert_array_equal(ours, fnnx.make_causal_mask(x, **kwargs))
    assert ours.shape == (1,) * kwargs.get("extra_batch_dims", 0) + shape[:-1] + (1, 4, 4)


def test_combine_masks_matches_flax():
    padding = make_attention_mask(TOKENS > 0, TOKENS > 0)
    causal = make_causal_mask(TOKENS)
    for masks in [(padding,), (padding, causal), (None, padding, None, causal)]:
        np.testing.assert_array_equal(combine_masks(*masks), fnnx.combine_masks(*masks))
    combined = combine_masks(padding, causal, dtype=jnp.bool_)
    assert combined.dtype == jnp.bool_
    np.testing.assert_array_equal(combined[1, 0, 2], [True, True, True, False])
    assert combine_masks() is None and combine_masks(None, None) is None


def test_errors():
    with pytest.raises(
        ValueError, match=r"broadcastable batch axes, got shapes \(2, 4\) and \(3, 4\)"
    ):
        make_attention_mask(jnp.ones((2, 4)), jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="extra_batch_dims must be >= 0, got -1"):
        make_attention_mask(jnp.ones((2, 4)), jnp.ones((2, 4)), extra_batch_dims=-1)
    with pytest.raises(
        ValueError, match="make_causal_mask needs an input of shape .* got a scalar"
    ):
        make_causal_mask(jnp.ones(()))
    with pytest.raises(
        ValueError, match=r"masks of the same rank, got shapes \[\(1, 4, 4\), \(2, 1, 4, 4\)\]"
    ):
        combine_masks(jnp.ones((1, 4, 4)), jnp.ones((2, 1, 4, 4)))
    with pytest.raises(
        ValueError, match=r"shapes broadcast together, got \[\(2, 1, 4, 4\), \(3, 1, 4, 4\)\]"
    ):
        combine_masks(jnp.ones((2, 1, 4, 4)), jnp.ones((3, 1, 4, 4)))

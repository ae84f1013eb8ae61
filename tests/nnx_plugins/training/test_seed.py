"""train.seed takes 0 .. 2**63-1 and every bit of it counts: seeds 2**32 apart build other
weights (a bare jax.random.key keeps the low 32 bits only), seeds below 2**32 as before."""

import jax
import numpy as np

import nnx_core as nnx
from nnx_plugins.training._loop import build_model
from nnx_plugins.training._seed import seed_key

CONFIG = {"model": {"type": "Linear", "in_features": 8, "out_features": 4}}


def kernel(seed):
    return np.asarray(build_model(CONFIG, seed=seed).kernel.value)


def test_seeds_2_to_the_32_apart_build_other_weights():
    assert not np.array_equal(kernel(0), kernel(2**32))
    assert not np.array_equal(kernel(2**32), kernel(2**33))
    np.testing.assert_array_equal(kernel(2**63 - 1), kernel(2**63 - 1))


def test_a_seed_below_2_to_the_32_builds_what_rngs_of_that_seed_builds():
    from nnx_layers import Linear

    expected = Linear(8, 4, rngs=nnx.Rngs(7)).kernel.value
    np.testing.assert_array_equal(kernel(7), expected)
    assert (
        jax.random.key_data(seed_key(7)).tolist() == jax.random.key_data(jax.random.key(7)).tolist()
    )

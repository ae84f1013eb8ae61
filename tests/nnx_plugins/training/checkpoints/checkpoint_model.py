"""The small model the checkpoint tests save and load, and its values as numpy arrays."""

import jax
import jax.numpy as jnp
import numpy as np

import nnx_core as nnx
import nnx_plugins

# bfloat16 params, BatchNorm stats and Dropout's Rng state: every kind a checkpoint holds
CONFIG = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Linear", "in_features": 3, "out_features": 4, "param_dtype": "bfloat16"},
            {"type": "BatchNorm", "num_features": 4},
            {"type": "Dropout", "rate": 0.5},
            {"type": "Linear", "in_features": 4, "out_features": 2},
        ],
    }
}


def build(seed=0):
    return nnx_plugins.build(CONFIG, rngs=nnx.Rngs(seed))


def values(node):
    """``{path: (dtype, numpy array)}`` of every Variable (Rng keys as their key data)."""
    out = {}
    for path, variable in nnx.state(node).flat_state():
        value = variable.value
        if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        out[path] = (value.dtype, np.asarray(value))
    return out

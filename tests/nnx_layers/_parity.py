"""Parity helpers for layers made of several Params (cells, RNNs, wrappers); flax.nnx is the oracle.

``sync_params`` gives our Params visible values and copies them into the flax twin (after
checking that both have the same Param paths, shapes and dtypes); ``check_grads`` compares the
gradients of a weighted sum of the outputs w.r.t. every Param and the input.
"""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np

import nnx_core as nnx


def flat_params(ours, theirs):
    """``({path: our Param}, {path: flax Param})``, asserting the paths are the same."""
    mine = dict(nnx.state(ours, nnx.Param).flat_state())
    other = {tuple(p): v for p, v in fnnx.to_flat_state(fnnx.state(theirs, fnnx.Param))}
    assert sorted(mine, key=str) == sorted(other, key=str)
    return mine, other


def sync_params(ours, theirs, seed=0):
    """Set our Params to random matrices / ramped vectors and copy them into ``theirs``."""
    mine, other = flat_params(ours, theirs)
    rng = np.random.default_rng(seed)
    for path, variable in mine.items():
        value, twin = variable.value, other[path][...]
        assert (value.shape, value.dtype) == (twin.shape, twin.dtype), path
        if value.ndim < 2:
            new = np.linspace(-0.5, 0.5, value.size).reshape(value.shape)
        else:
            new = rng.standard_normal(value.shape) * 0.5
        variable.value = jnp.asarray(new, value.dtype)
        other[path].set_value(variable.value)


def assert_same_init(ours, theirs):
    """Both layers hold identical Param values (same key -> same initialization)."""
    mine, other = flat_params(ours, theirs)
    for path, variable in mine.items():
        assert variable.value.dtype == other[path][...].dtype, path
        np.testing.assert_array_equal(
            np.asarray(variable.value, np.float32), np.asarray(other[path][...], np.float32)
        )


def _weighted_sum(outputs):
    total = 0.0
    for leaf in jax.tree.leaves(outputs):
        weights = jnp.cos(jnp.arange(leaf.size, dtype=jnp.float32)).reshape(leaf.shape)
        total = total + jnp.sum(leaf.astype(jnp.float32) * weights)
    return total


def check_grads(ours, theirs, call, x, assert_close, scale=1.0, ours_only=()):
    """Gradients of a weighted sum of ``call(module, x)`` w.r.t. the Params and ``x`` agree.

    ``ours_only`` names path prefixes of Params only our layer has (returned, not compared);
    the gradients are returned as ``{path: array}``.
    """

    def loss(module, x):
        return _weighted_sum(call(module, x))

    # Jitted: one compilation per side instead of one per primitive (much faster on CPU).
    ours_grads, ours_dx = nnx.jit(nnx.grad(loss, argnums=(0, 1)))(ours, x)
    theirs_grads, theirs_dx = fnnx.jit(fnnx.grad(loss, argnums=(0, 1)))(theirs, x)
    other = {tuple(p): v[...] for p, v in fnnx.to_flat_state(theirs_grads)}
    mine = {p: v.value for p, v in ours_grads.flat_state()}
    prefix = tuple(ours_only)
    shared = {p: g for p, g in mine.items() if not prefix or p[: len(prefix)] != prefix}
    assert sorted(shared, key=str) == sorted(other, key=str)
    for path, grad in shared.items():
        assert_close(grad, other[path], scale)
    assert_close(ours_dx, theirs_dx, scale)
    return mine

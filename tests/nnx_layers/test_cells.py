"""Recurrent cells: init, one step and gradients equal to flax.nnx; carries; config; errors."""

import inspect

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_layers as nl
from nnx_core import Rngs
from nnx_layers import GRUCell, LSTMCell, OptimizedLSTMCell, RNNCellBase, SimpleCell, initializers
from nnx_plugins.testing import check_layer

from ._parity import assert_same_init, check_grads, sync_params

CELLS = ["LSTMCell", "OptimizedLSTMCell", "GRUCell", "SimpleCell"]
# flax-only arguments: a dtype-promotion hook (not expressible in a config) and a deprecated flag.
FLAX_ONLY = {"keep_rngs"}  # (deprecated in flax.nnx: rngs go to initialize_carry)


def _pair(name, *, random_init=False, **options):
    """Our cell and flax's, both 3 -> 4; zero kernels unless ``random_init`` (then: defaults).

    Random initializers compile slowly on CPU for every new shape, so the numeric tests start
    from zeros and give both cells the same values with ``sync_params``.
    """
    ours_options, flax_options = dict(options), dict(options)
    if not random_init:
        for key in ("kernel_init", "recurrent_kernel_init"):
            ours_options[key], flax_options[key] = initializers.zeros, fnnx.initializers.zeros
    ours = getattr(nl, name)(3, 4, **ours_options, rngs=Rngs(0))
    theirs = getattr(fnnx, name)(3, 4, **flax_options, rngs=fnnx.Rngs(0))
    return ours, theirs


def _x(shape, dtype=jnp.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


@pytest.mark.parametrize("name", CELLS)
def test_signature_matches_flax(name):
    ours = inspect.signature(getattr(nl, name).__init__).parameters
    theirs = inspect.signature(getattr(fnnx, name).__init__).parameters
    assert list(ours) == [p for p in theirs if p not in FLAX_ONLY]
    for key, parameter in ours.items():
        assert parameter.kind == theirs[key].kind, key
        default, other = parameter.default, theirs[key].default
        if key == "carry_init":  # flax: None, meaning zeros; ours: the zeros initializer itself
            assert other is None and default == initializers.zeros
        elif key in ("gate_fn", "activation_fn"):
            assert default(jnp.array(0.3)) == other(jnp.array(0.3))
        elif not callable(default) and not key.endswith("_metadata"):
            assert default == other, key


@pytest.mark.parametrize("name", CELLS)
def test_default_init_matches_flax_from_the_same_key(name):
    assert_same_init(*_pair(name, random_init=True))


def test_lstm_init_matches_flax_in_bfloat16():
    # flax's LSTMCell samples its orthogonal recurrent kernels in float32 and casts; so do we
    # (for every cell; flax's GRUCell/SimpleCell fail on CPU with a bfloat16 QR).
    assert_same_init(*_pair("LSTMCell", random_init=True, param_dtype=jnp.bfloat16))
    gru = GRUCell(3, 4, param_dtype=jnp.bfloat16, rngs=Rngs(0))
    reference = GRUCell(3, 4, rngs=Rngs(0))
    np.testing.assert_array_equal(
        gru.dense_h.kernel.value, reference.dense_h.kernel.value.astype(jnp.bfloat16)
    )


STEP_CASES = [  # (input dtype, options, batch shape)
    (jnp.float32, {}, (2,)),
    (jnp.bfloat16, {}, (2, 3)),
    (jnp.float32, {"dtype": jnp.bfloat16}, ()),
]


def _carry(cell, batch, seed):
    """A non-zero carry of the cell's structure."""
    parts = [_x(batch + (4,), seed=seed + i) for i in range(cell.carry_count)]
    return tuple(parts) if cell.carry_count > 1 else parts[0]


@pytest.mark.parametrize("name", CELLS)
@pytest.mark.parametrize(("input_dtype", "options", "batch"), STEP_CASES)
def test_step_and_gradients_match_flax(name, input_dtype, options, batch, assert_close):
    ours, theirs = _pair(name, **options)
    sync_params(ours, theirs)
    x, carry = _x(batch + (3,), input_dtype), _carry(ours, batch, seed=1)
    (new_ours, y_ours), (new_theirs, y_theirs) = ours(carry, x), theirs(carry, x)
    assert_close(y_ours, y_theirs)
    jax.tree.map(assert_close, new_ours, new_theirs)
    check_grads(ours, theirs, lambda cell, x: cell(carry, x), x, assert_close, scale=4)


def test_lstm_step_matches_flax_with_bfloat16_params(assert_close):
    ours, theirs = _pair("LSTMCell", param_dtype=jnp.bfloat16)
    sync_params(ours, theirs)
    carry, x = ours.initialize_carry((2, 3)), _x((2, 3), jnp.bfloat16)
    assert carry[0].dtype == jnp.bfloat16
    jax.tree.map(assert_close, ours(carry, x), theirs(carry, x))


@pytest.mark.parametrize(
    ("options", "flax_options"),
    [
        ({"residual": True}, {"residual": True}),
        ({"activation_fn": nl.relu}, {"activation_fn": fnnx.relu}),
    ],
    ids=["residual", "relu"],
)
def test_simple_cell_options_match_flax(options, flax_options, assert_close):
    ours = SimpleCell(3, 4, **options, rngs=Rngs(0))
    theirs = fnnx.SimpleCell(3, 4, **flax_options, rngs=fnnx.Rngs(0))
    sync_params(ours, theirs)
    carry, x = _x((2, 4), seed=3), _x((2, 3))
    jax.tree.map(assert_close, ours(carry, x), theirs(carry, x))


def test_gate_and_activation_functions_are_used(assert_close):
    ours = LSTMCell(3, 4, gate_fn=nl.relu, activation_fn=nl.silu, rngs=Rngs(0))
    theirs = fnnx.LSTMCell(3, 4, gate_fn=fnnx.relu, activation_fn=fnnx.silu, rngs=fnnx.Rngs(0))
    sync_params(ours, theirs)
    carry, x = _carry(ours, (2,), seed=4), _x((2, 3))
    jax.tree.map(assert_close, ours(carry, x), theirs(carry, x))


def test_lstm_equations():
    cell = LSTMCell(3, 4, rngs=Rngs(0))
    sync_params(cell, fnnx.LSTMCell(3, 4, rngs=fnnx.Rngs(0)))
    (c, h), x = _carry(cell, (1,), seed=5), _x((1, 3))

    def dense(name, v):
        layer = getattr(cell, name)
        return v @ layer.kernel.value + (0 if layer.bias is None else layer.bias.value)

    i = jax.nn.sigmoid(dense("ii", x) + dense("hi", h))
    f = jax.nn.sigmoid(dense("if_", x) + dense("hf", h))
    g = jnp.tanh(dense("ig", x) + dense("hg", h))
    o = jax.nn.sigmoid(dense("io", x) + dense("ho", h))
    expected_c = f * c + i * g
    (new_c, new_h), y = cell((c, h), x)
    np.testing.assert_allclose(new_c, expected_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, o * jnp.tanh(expected_c), rtol=1e-5, atol=1e-6)


def test_optimized_lstm_equals_lstm_with_the_same_weights(assert_close):
    plain, fused = LSTMCell(3, 4, rngs=Rngs(0)), OptimizedLSTMCell(3, 4, rngs=Rngs(1))
    gates = ("i", "f", "g", "o")
    fused.dense_i.kernel.value = jnp.concatenate(
        [getattr(plain, "i" + g if g != "f" else "if_").kernel.value for g in gates], axis=1
    )
    fused.dense_h.kernel.value = jnp.concatenate(
        [getattr(plain, "h" + g).kernel.value for g in gates], axis=1
    )
    carry, x = _carry(plain, (2,), seed=6), _x((2, 3))
    jax.tree.map(assert_close, fused(carry, x), plain(carry, x))


@pytest.mark.parametrize("name", CELLS)
def test_initialize_carry_matches_flax(name):
    ours, theirs = _pair(name)
    for shape in [(2, 3), (3,), (2, 5, 3)]:
        jax.tree.map(
            np.testing.assert_array_equal,
            ours.initialize_carry(shape),
            theirs.initialize_carry(shape, fnnx.Rngs(0)),
        )
    normal = initializers.normal(1.0)
    mine = ours.initialize_carry((2, 3), Rngs(carry=1), carry_init=normal)
    other = theirs.initialize_carry((2, 3), fnnx.Rngs(carry=1), fnnx.initializers.normal(1.0))
    jax.tree.map(np.testing.assert_array_equal, mine, other)
    assert jax.tree.leaves(mine)[0].shape == (2, 4)


def test_carry_init_of_the_constructor_and_its_stream():
    cell = GRUCell(3, 4, carry_init=initializers.ones, rngs=Rngs(0))
    np.testing.assert_array_equal(cell.initialize_carry((2, 3)), jnp.ones((2, 4)))
    stream = Rngs(carry=0)["carry"]
    normal = initializers.normal(1.0)
    first = cell.initialize_carry((1, 3), stream, carry_init=normal)
    second = cell.initialize_carry((1, 3), stream, carry_init=normal)
    assert int(stream.count.value) == 2 and not np.allclose(first, second)


def test_cells_run_under_jit_and_vmap():
    cell = LSTMCell(3, 4, rngs=Rngs(0))
    carry, x = cell.initialize_carry((2, 3)), _x((2, 3))
    expected = cell(carry, x)
    jitted = jax.jit(lambda carry, x: cell(carry, x))(carry, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), jitted, expected)
    mapped = jax.vmap(lambda c, x: cell(c, x), in_axes=((0, 0), 0))(carry, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), mapped, expected)


def test_metadata_reaches_the_params():
    cell = LSTMCell(
        3,
        4,
        kernel_metadata={"sharding_names": ("in", "hidden")},
        recurrent_kernel_metadata={"sharding_names": ("hidden", "gates")},
        bias_metadata={"sharding_names": ("gates",)},
        rngs=Rngs(0),
    )
    assert cell.ii.kernel.metadata["sharding_names"] == ("in", "hidden")
    assert cell.ho.kernel.metadata["sharding_names"] == ("hidden", "gates")
    assert cell.hf.bias.metadata["sharding_names"] == ("gates",)
    assert cell.ii.bias is None and cell.kernel_metadata == {"sharding_names": ("in", "hidden")}


@pytest.mark.parametrize("name", CELLS)
def test_cells_work_from_a_config(name):
    report = check_layer(name, {"in_features": 3, "hidden_features": 4, "activation_fn": "relu"})
    assert report.config["activation_fn"] == "relu"
    assert report.config["carry_init"] == {"type": "zeros"}


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CELLS)
def test_input_width_must_match_in_features(name):
    cell = getattr(nl, name)(3, 4, rngs=Rngs(0))
    carry = cell.initialize_carry((2, 3))
    with pytest.raises(
        ValueError,
        match=rf"{name} expects an input whose last axis is 3 \(in_features\), got shape \(2, 5\)",
    ):
        cell(carry, jnp.ones((2, 5)))
    with pytest.raises(
        ValueError, match=rf"{name}.initialize_carry expects an input shape whose last axis is 3"
    ):
        cell.initialize_carry((2, 5))


@pytest.mark.parametrize("name", CELLS)
def test_carry_must_fit_the_cell(name):
    cell = getattr(nl, name)(3, 4, rngs=Rngs(0))
    wide = jnp.ones((2, 6))
    carry = (wide, wide) if cell.carry_count == 2 else wide
    with pytest.raises(
        ValueError, match=rf"{name} expects carry arrays whose last axis is 4 \(hidden_features\)"
    ):
        cell(carry, jnp.ones((2, 3)))


def test_lstm_carry_must_be_a_pair():
    with pytest.raises(ValueError, match="LSTMCell expects a carry of 2 arrays, got ArrayImpl"):
        LSTMCell(3, 4, rngs=Rngs(0))(jnp.ones((2, 4)), jnp.ones((2, 3)))


def test_non_numeric_inputs_are_rejected():
    with pytest.raises(TypeError, match="GRUCell expects a numeric input, got dtype key"):
        GRUCell(3, 4, rngs=Rngs(0))(jnp.zeros((1, 4)), jax.random.split(jax.random.key(0), (1, 3)))


def test_random_carry_init_needs_rngs():
    cell = LSTMCell(3, 4, carry_init=initializers.normal(), rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"LSTMCell.initialize_carry needs rngs for carry_init"):
        cell.initialize_carry((2, 3))


@pytest.mark.parametrize("bad", [0, -2, 2.5])
def test_sizes_must_be_positive_ints(bad):
    with pytest.raises(ValueError, match="SimpleCell hidden_features must be a positive integer"):
        SimpleCell(3, bad, rngs=Rngs(0))


def test_a_cell_without_call_says_so():
    class Half(RNNCellBase):
        pass

    with pytest.raises(NotImplementedError, match=r"Half subclasses RNNCellBase but does not"):
        Half()(None, jnp.ones(3))

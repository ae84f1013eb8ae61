"""WeightNorm and SpectralNorm: outputs, statistics and gradients equal to flax.nnx; modes; errors.

flax.nnx writes the normalized weights back into the wrapped layer on every call; we never
touch the wrapped Params. So each comparison starts from the same Param values on both sides
(``sync_params`` again before a second computation).
"""

import inspect

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import Module, PathContains, Rngs
from nnx_layers import Conv, Linear, Sequential, SpectralNorm, WeightNorm, initializers
from nnx_plugins.testing import check_layer

from ._parity import check_grads, flat_params, sync_params


def _x(shape, dtype=jnp.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def _layers(kind, **options):
    """Our layer and flax's, zero-initialized; ``sync_params`` gives them values."""
    if kind == "conv":
        return (
            Conv(2, 3, (3, 3), kernel_init=initializers.zeros, **options, rngs=Rngs(0)),
            fnnx.Conv(
                2, 3, (3, 3), kernel_init=fnnx.initializers.zeros, **options, rngs=fnnx.Rngs(0)
            ),
        )
    return (
        Linear(3, 4, kernel_init=initializers.zeros, **options, rngs=Rngs(0)),
        fnnx.Linear(3, 4, kernel_init=fnnx.initializers.zeros, **options, rngs=fnnx.Rngs(0)),
    )


INPUTS = {"linear": (2, 3), "conv": (2, 5, 5, 2)}


def _restore(ours, theirs):
    """Put our (untouched) Param values back into flax's layer, which overwrote them."""
    mine, other = flat_params(ours.layer_instance, theirs.layer_instance)
    for path, variable in mine.items():
        other[path].set_value(variable.value)


@pytest.mark.parametrize(
    ("ours", "theirs"), [(WeightNorm, fnnx.WeightNorm), (SpectralNorm, fnnx.SpectralNorm)]
)
def test_signature_matches_flax(ours, theirs):
    mine = inspect.signature(ours.__init__).parameters
    other = inspect.signature(theirs.__init__).parameters
    assert list(mine) == list(other)
    for key, parameter in mine.items():
        assert parameter.kind == other[key].kind, key
        if isinstance(parameter.default, (bool, int, float, type(None))):
            assert parameter.default == other[key].default, key
    if ours is WeightNorm:
        assert mine["variable_filter"].default == PathContains("kernel")


# --- WeightNorm ------------------------------------------------------------------------------

WEIGHT_NORM_CASES = [
    ("linear", {}),
    ("linear", {"feature_axes": None}),
    ("linear", {"feature_axes": 0, "epsilon": 1e-3}),
    ("linear", {"use_scale": False}),
    ("linear", {"dtype": jnp.bfloat16}),
    ("conv", {}),
]


@pytest.mark.parametrize(("kind", "options"), WEIGHT_NORM_CASES)
def test_weight_norm_matches_flax(kind, options, assert_close):
    layer, flax_layer = _layers(kind)
    ours = WeightNorm(layer, **options, rngs=Rngs(0))
    theirs = fnnx.WeightNorm(flax_layer, **options, rngs=fnnx.Rngs(0))
    sync_params(ours.layer_instance, theirs.layer_instance)
    x = _x(INPUTS[kind])
    before = layer.kernel.value
    assert_close(ours(x), theirs(x))
    np.testing.assert_array_equal(layer.kernel.value, before)  # flax overwrote its kernel
    _restore(ours, theirs)
    grads = check_grads(ours, theirs, lambda m, x: m(x), x, assert_close, 4, ours_only=("scales",))
    assert ("scales", ("kernel",)) in grads if options.get("use_scale", True) else True


def test_weight_norm_formula_and_scale_gradients():
    layer = Linear(3, 4, rngs=Rngs(0))
    wn = WeightNorm(layer, rngs=Rngs(0))
    wn.scales[("kernel",)].value = jnp.array([1.0, 2.0, 0.5, 3.0])
    x = _x((2, 3))

    def reference(v, g, b):
        return x @ (g * v / jnp.linalg.norm(v, axis=0, keepdims=True)) + b

    v, g, b = layer.kernel.value, wn.scales[("kernel",)].value, layer.bias.value
    np.testing.assert_allclose(wn(x), reference(v, g, b), rtol=1e-5, atol=1e-6)
    grads = nnx.grad(lambda m: jnp.sum(jnp.sin(m(x))))(wn)
    expected = jax.grad(lambda g: jnp.sum(jnp.sin(reference(v, g, b))))(g)
    np.testing.assert_allclose(grads["scales"][("kernel",)].value, expected, rtol=1e-5, atol=1e-6)


def test_weight_norm_selects_params_with_its_filter():
    wn = WeightNorm(
        Linear(3, 4, rngs=Rngs(0)),
        feature_axes=None,
        variable_filter=lambda path, value: path[-1] == "bias",
        rngs=Rngs(0),
    )
    assert list(wn.scales) == [("bias",)] and wn.scales[("bias",)].value.shape == ()
    wn.layer_instance.bias.value = jnp.array([3.0, 0.0, 0.0, 4.0])
    out = wn(jnp.zeros((1, 3)))
    np.testing.assert_allclose(out, [[0.6, 0.0, 0.0, 0.8]], rtol=1e-6)


def test_weight_norm_scales_are_trainable_params_keyed_by_path():
    model = WeightNorm(
        Sequential(Linear(3, 4, rngs=Rngs(0)), Linear(4, 2, rngs=Rngs(1))), rngs=Rngs(0)
    )
    assert sorted(model.scales) == [("layers", 0, "kernel"), ("layers", 1, "kernel")]
    assert sorted(nnx.state(model, nnx.Param)["scales"]) == sorted(model.scales)
    assert model(jnp.ones((5, 3))).shape == (5, 2)


# --- SpectralNorm ----------------------------------------------------------------------------


def test_spectral_norm_init_matches_flax_from_the_same_key():
    ours = SpectralNorm(
        Sequential(Linear(3, 4, rngs=Rngs(0)), Linear(4, 2, rngs=Rngs(0))), rngs=Rngs(5)
    )
    theirs = fnnx.SpectralNorm(
        fnnx.Sequential(fnnx.Linear(3, 4, rngs=fnnx.Rngs(0)), fnnx.Linear(4, 2, rngs=fnnx.Rngs(0))),
        rngs=fnnx.Rngs(5),
    )
    assert sorted(ours.batch_stats, key=str) == sorted(theirs.batch_stats, key=str)
    assert ("layers", 1, "kernel", "sigma") in ours.batch_stats
    for index in (0, 1):
        for name in ("u", "sigma"):
            np.testing.assert_array_equal(
                ours.batch_stats[("layers", index, "kernel", name)].value,
                theirs.batch_stats[("layers", index, "kernel", name)][...],
            )


SPECTRAL_CASES = [  # (layer, SpectralNorm options, layer options)
    ("linear", {}, {}),
    ("linear", {"n_steps": 3, "epsilon": 1e-6}, {}),
    ("linear", {"dtype": jnp.bfloat16}, {}),
    ("linear", {"param_dtype": jnp.bfloat16}, {"param_dtype": jnp.bfloat16}),
    ("conv", {}, {}),
]


@pytest.mark.parametrize(("kind", "options", "layer_options"), SPECTRAL_CASES)
def test_spectral_norm_matches_flax_in_training_and_eval(
    kind, options, layer_options, assert_close
):
    layer, flax_layer = _layers(kind, **layer_options)
    ours = SpectralNorm(layer, **options, rngs=Rngs(0))
    theirs = fnnx.SpectralNorm(flax_layer, **options, rngs=fnnx.Rngs(0))
    sync_params(ours.layer_instance, theirs.layer_instance)
    x = _x(INPUTS[kind])
    assert_close(ours(x), theirs(x))
    for name in ("u", "sigma"):
        assert_close(
            ours.batch_stats[("kernel", name)].value, theirs.batch_stats[("kernel", name)][...]
        )
    _restore(ours, theirs)
    u = ours.batch_stats[("kernel", "u")].value
    assert_close(ours(x, update_stats=False), theirs(x, update_stats=False))
    np.testing.assert_array_equal(ours.batch_stats[("kernel", "u")].value, u)
    _restore(ours, theirs)
    check_grads(ours, theirs, lambda m, x: m(x), x, assert_close, scale=4)


def test_power_iteration_converges_to_the_largest_singular_value():
    layer = Linear(4, 3, use_bias=False, rngs=Rngs(0))
    sn = SpectralNorm(layer, n_steps=20, rngs=Rngs(0))
    sn(jnp.ones((1, 4)))
    largest = np.linalg.svd(np.asarray(layer.kernel.value), compute_uv=False)[0]
    np.testing.assert_allclose(sn.batch_stats[("kernel", "sigma")].value, largest, rtol=1e-4)
    x = _x((2, 4))
    np.testing.assert_allclose(sn(x), x @ layer.kernel.value / largest, rtol=1e-4, atol=1e-5)


def test_train_and_eval_switch_update_stats():
    sn = SpectralNorm(Linear(3, 4, rngs=Rngs(0)), rngs=Rngs(0))
    assert sn.update_stats is True and sn.use_running_average is False
    model = Sequential(sn)
    model.eval()
    assert sn.update_stats is False
    before = sn.batch_stats[("kernel", "u")].value
    sn(_x((2, 3)))
    np.testing.assert_array_equal(sn.batch_stats[("kernel", "u")].value, before)
    model.train()
    sn(_x((2, 3)))
    assert not np.array_equal(sn.batch_stats[("kernel", "u")].value, before)
    sn.update_stats = False
    assert sn.use_running_average is True


def test_spectral_norm_statistics_update_through_nnx_jit():
    sn = SpectralNorm(Linear(3, 4, rngs=Rngs(0)), rngs=Rngs(0))
    reference = SpectralNorm(Linear(3, 4, rngs=Rngs(0)), rngs=Rngs(0))
    x = _x((2, 3))
    y = nnx.jit(lambda m, x: m(x))(sn, x)
    np.testing.assert_allclose(y, reference(x), rtol=1e-6)
    np.testing.assert_allclose(
        sn.batch_stats[("kernel", "sigma")].value,
        reference.batch_stats[("kernel", "sigma")].value,
        rtol=1e-6,
    )


def test_zero_steps_turn_spectral_norm_off():
    layer = Linear(3, 4, rngs=Rngs(0))
    sn = SpectralNorm(layer, n_steps=0, rngs=Rngs(0))
    x = _x((2, 3))
    assert sn.batch_stats == {}
    np.testing.assert_array_equal(sn(x), layer(x))


# --- config ----------------------------------------------------------------------------------


def test_wrappers_work_from_a_config():
    linear = {"type": "Linear", "in_features": 3, "out_features": 4}
    report = check_layer("WeightNorm", {"layer_instance": linear}, input_shape=(2, 3))
    assert report.output_shape == (2, 4) and report.config["feature_axes"] == -1
    report = check_layer(
        "SpectralNorm", {"layer_instance": linear, "update_stats": False}, input_shape=(2, 3)
    )
    assert report.output_shape == (2, 4) and report.config["n_steps"] == 1
    assert check_layer("SpectralNorm", {"layer_instance": linear}).config["update_stats"] is True


# --- errors ----------------------------------------------------------------------------------


class _Growing(Module):
    def __init__(self):
        self.a = Linear(3, 3, rngs=Rngs(0))

    def __call__(self, x):
        return self.b(self.a(x)) if hasattr(self, "b") else self.a(x)


def test_weight_norm_needs_a_scale_for_every_selected_param():
    wn = WeightNorm(_Growing(), rngs=Rngs(0))
    wn.layer_instance.b = Linear(3, 2, rngs=Rngs(1))
    with pytest.raises(
        ValueError, match=r"WeightNorm has no scale for layer_instance.b.kernel: the wrapped layer"
    ):
        wn(jnp.ones((1, 3)))


def test_weight_norm_feature_axes_must_fit_the_weights():
    with pytest.raises(ValueError, match=r"WeightNorm \(for kernel\) axis 3 is out of range"):
        WeightNorm(Linear(3, 4, rngs=Rngs(0)), feature_axes=3, rngs=Rngs(0))


def test_spectral_norm_errors():
    with pytest.raises(
        ValueError, match=r"SpectralNorm got the 4-D Param layer_instance.kernel \(shape"
    ):
        SpectralNorm(Conv(2, 3, (3, 3), rngs=Rngs(0)), error_on_non_matrix=True, rngs=Rngs(0))
    sn = SpectralNorm(Linear(3, 4, rngs=Rngs(0)), rngs=Rngs(0))
    sn.layer_instance.kernel.value = jnp.ones((3, 5))
    with pytest.raises(
        ValueError, match=r"SpectralNorm has no u/sigma statistics for layer_instance.kernel"
    ):
        sn(jnp.ones((1, 3)))
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="SpectralNorm n_steps must be a non-negative integer"):
            SpectralNorm(Linear(3, 4, rngs=Rngs(0)), n_steps=bad, rngs=Rngs(0))
    with pytest.raises(
        ValueError, match="SpectralNorm epsilon must be a finite non-negative number"
    ):
        SpectralNorm(Linear(3, 4, rngs=Rngs(0)), epsilon=-1.0, rngs=Rngs(0))

"""BatchNorm, LayerNorm and RMSNorm: parity with flax.nnx, running statistics, modes, errors."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_core import BatchStat, Module, Param, Rngs
from nnx_layers import BatchNorm, GroupNorm, InstanceNorm, LayerNorm, RMSNorm, initializers

AFFINE = ["scale", "bias"]


def _x(shape, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.standard_normal(shape) * 2 + 0.5, dtype)


def _nonzero_affine(module):
    """Give scale/bias values that are not the identity, so they show in the outputs."""
    if getattr(module, "scale", None) is not None:
        v = module.scale.value
        module.scale.value = jnp.linspace(0.5, 1.5, v.size).reshape(v.shape).astype(v.dtype)


# --- BatchNorm -------------------------------------------------------------------------------

BN_CASES = [
    ((8, 3), {}),
    ((4, 5, 3), {}),
    ((2, 4, 4, 3), {"momentum": 0.9, "epsilon": 1e-3}),
    ((3, 4, 6), {"axis": 1, "num": 4}),
    ((6, 3), {"use_bias": False}),
    ((6, 3), {"use_scale": False, "use_fast_variance": False}),
    ((6, 3), {"use_bias": False, "use_scale": False}),
]


def _bn_pair(shape, options):
    options = dict(options)
    num = options.pop("num", shape[-1])
    return BatchNorm(num, **options, rngs=Rngs(0)), fnnx.BatchNorm(
        num, **options, rngs=fnnx.Rngs(0)
    )


@pytest.mark.parametrize(("shape", "options"), BN_CASES)
def test_batchnorm_train_then_eval_matches_flax(shape, options, copy_params, assert_close):
    ours, theirs = _bn_pair(shape, options)
    _nonzero_affine(ours)
    copy_params(ours, theirs, AFFINE + ["mean", "var"])
    for step in range(2):
        x = _x(shape, seed=step)
        assert_close(ours(x), theirs(x))
        assert_close(ours.mean.value, theirs.mean[...])
        assert_close(ours.var.value, theirs.var[...])
    x = _x(shape, seed=5)
    assert_close(ours(x, use_running_average=True), theirs(x, use_running_average=True))
    ours.use_running_average = theirs.use_running_average = True
    before = ours.mean.value
    assert_close(ours(x), theirs(x))
    np.testing.assert_array_equal(ours.mean.value, before)


@pytest.mark.parametrize(
    ("input_dtype", "dtype", "param_dtype"),
    [
        (jnp.bfloat16, None, jnp.float32),
        (jnp.float16, None, jnp.float32),
        (jnp.float32, jnp.bfloat16, jnp.float32),
        (jnp.bfloat16, None, jnp.bfloat16),
        (jnp.float16, jnp.float16, jnp.float16),
    ],
)
def test_batchnorm_dtypes_match_flax(input_dtype, dtype, param_dtype, copy_params, assert_close):
    options = {"dtype": dtype, "param_dtype": param_dtype}
    ours, theirs = _bn_pair((8, 3), options)
    copy_params(ours, theirs, AFFINE + ["mean", "var"])
    x = _x((8, 3), input_dtype)
    assert_close(ours(x), theirs(x))
    assert ours.mean.value.dtype == jnp.float32
    np.testing.assert_allclose(
        np.asarray(ours.mean.value, np.float32), np.asarray(theirs.mean[...], np.float32), atol=1e-2
    )


def test_batchnorm_mask_matches_flax(copy_params, assert_close):
    ours, theirs = _bn_pair((6, 3), {})
    copy_params(ours, theirs, AFFINE + ["mean", "var"])
    x = _x((6, 3))
    mask = jnp.array([True, True, False, True, False, True])[:, None].repeat(3, axis=1)
    assert_close(ours(x, mask=mask), theirs(x, mask=mask))
    assert_close(ours.mean.value, theirs.mean[...])


def test_batchnorm_several_feature_axes():
    # flax.nnx cannot update flat (num_features,) statistics for several axes; we can.
    x = _x((5, 4, 6))
    bn = BatchNorm(24, axis=(1, 2), momentum=0.0, rngs=Rngs(0))
    y = bn(x)
    mean, var = x.mean(0), x.var(0)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.mean.value, mean.reshape(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn(x, use_running_average=True), y, rtol=1e-4, atol=1e-4)


def test_batchnorm_running_average_update_formula():
    bn = BatchNorm(2, momentum=0.5, rngs=Rngs(0))
    x = jnp.array([[1.0, 2.0], [3.0, 6.0]])
    bn(x)
    np.testing.assert_allclose(bn.mean.value, 0.5 * jnp.zeros(2) + 0.5 * jnp.array([2.0, 4.0]))
    np.testing.assert_allclose(bn.var.value, 0.5 * jnp.ones(2) + 0.5 * jnp.array([1.0, 4.0]))


def test_batchnorm_variables_and_attributes():
    bn = BatchNorm(4, scale_metadata={"sharding_names": ("f",)}, rngs=Rngs(0))
    assert isinstance(bn.mean, BatchStat) and isinstance(bn.var, BatchStat)
    assert isinstance(bn.scale, Param) and isinstance(bn.bias, Param)
    assert bn.scale.metadata["sharding_names"] == ("f",)
    assert bn.momentum == 0.99 and bn.epsilon == 1e-5 and bn.axis == -1
    assert bn.scale_init == initializers.ones and bn.bias_init == initializers.zeros
    theirs = fnnx.BatchNorm(4, rngs=fnnx.Rngs(0))
    for name in ["mean", "var", "scale", "bias"]:
        np.testing.assert_array_equal(getattr(bn, name).value, getattr(theirs, name)[...])


class _Net(Module):
    def __init__(self, rngs):
        self.norm = BatchNorm(3, rngs=rngs)


def test_train_and_eval_switch_batchnorm():
    net = _Net(Rngs(0))
    net.eval()
    assert net.norm.use_running_average is True
    x = _x((4, 3))
    np.testing.assert_allclose(net.norm(x), x / np.sqrt(1 + 1e-5), rtol=1e-6)
    np.testing.assert_array_equal(net.norm.mean.value, jnp.zeros(3))
    net.train()
    assert net.norm.use_running_average is False
    net.norm(x)
    assert not np.allclose(net.norm.mean.value, 0.0)


@pytest.mark.parametrize("use_fast_variance", [True, False])
def test_batchnorm_axis_name_averages_statistics_over_vmap(use_fast_variance):
    x = _x((2, 4, 3))

    def per_shard(xi):
        bn = BatchNorm(3, axis_name="batch", use_fast_variance=use_fast_variance, rngs=Rngs(0))
        return bn(xi), bn.mean.value, bn.var.value

    y, mean, var = jax.vmap(per_shard, axis_name="batch")(x)
    reference = BatchNorm(3, rngs=Rngs(0))
    expected = reference(x.reshape(-1, 3)).reshape(x.shape)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    for shard in range(2):
        np.testing.assert_allclose(mean[shard], reference.mean.value, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(var[shard], reference.var.value, rtol=1e-5, atol=1e-6)


def test_layernorm_axis_name_averages_statistics_over_vmap():
    x = _x((3, 2, 4))
    y = jax.vmap(
        lambda xi: LayerNorm(4, reduction_axes=(0, 1), axis_name="i", rngs=Rngs(0))(xi),
        axis_name="i",
    )(x)
    expected = (x - x.mean()) / jnp.sqrt(x.var() + 1e-6)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_batchnorm_errors():
    bn = BatchNorm(3, rngs=Rngs(0))
    with pytest.raises(
        ValueError, match=r"BatchNorm expects 3 features over axes \(1,\), got shape \(2, 4\)"
    ):
        bn(jnp.ones((2, 4)))
    with pytest.raises(TypeError, match="BatchNorm expects a numeric input, got dtype key"):
        bn(jax.random.split(jax.random.key(0), (2, 3)))
    with pytest.raises(ValueError, match="BatchNorm axis 2 is out of range"):
        BatchNorm(3, axis=2, rngs=Rngs(0))(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="BatchNorm has use_running_average=None"):
        BatchNorm(3, use_running_average=None, rngs=Rngs(0))(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="BatchNorm num_features must be a positive integer"):
        BatchNorm(0, rngs=Rngs(0))
    with pytest.raises(ValueError, match="BatchNorm epsilon must be a finite non-negative number"):
        BatchNorm(3, epsilon=-1.0, rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"got inf\. Pass e\.g\. epsilon=1e-5"):
        BatchNorm(3, epsilon=float("inf"), rngs=Rngs(0))


@pytest.mark.parametrize("momentum", [-0.1, 1.5, float("nan"), True, "0.9"])
def test_batchnorm_momentum_outside_the_unit_interval(momentum):
    with pytest.raises(ValueError, match=r"BatchNorm momentum must be a number in \[0, 1\]"):
        BatchNorm(3, momentum=momentum, rngs=Rngs(0))


# --- LayerNorm / RMSNorm ---------------------------------------------------------------------

NORM_CASES = [
    ((2, 5), {}),
    ((2, 3, 4), {}),
    ((2, 3, 4), {"reduction_axes": (1, 2), "feature_axes": -1}),
    ((2, 3, 4), {"reduction_axes": (1, 2), "feature_axes": (1, 2), "num": 12}),
    ((2, 3, 4), {"reduction_axes": -1, "feature_axes": 1, "num": 3}),
    ((4, 6), {"epsilon": 1e-2, "use_fast_variance": False}),
    ((4, 6), {"use_scale": False}),
]


def _norm_pair(cls, flax_cls, shape, options):
    options = dict(options)
    num = options.pop("num", shape[-1])
    if cls is RMSNorm:
        options.pop("use_bias", None)
    return cls(num, **options, rngs=Rngs(0)), flax_cls(num, **options, rngs=fnnx.Rngs(0))


@pytest.mark.parametrize(("shape", "options"), NORM_CASES + [((4, 6), {"use_bias": False})])
def test_layernorm_matches_flax(shape, options, copy_params, assert_close):
    ours, theirs = _norm_pair(LayerNorm, fnnx.LayerNorm, shape, options)
    _nonzero_affine(ours)
    copy_params(ours, theirs, AFFINE)
    x = _x(shape)
    assert_close(ours(x), theirs(x))


@pytest.mark.parametrize(("shape", "options"), NORM_CASES)
def test_rmsnorm_matches_flax(shape, options, copy_params, assert_close):
    ours, theirs = _norm_pair(RMSNorm, fnnx.RMSNorm, shape, options)
    _nonzero_affine(ours)
    copy_params(ours, theirs, ["scale"])
    x = _x(shape)
    assert_close(ours(x), theirs(x))


DTYPE_CASES = [
    (jnp.bfloat16, None, jnp.float32),
    (jnp.float16, None, jnp.float32),
    (jnp.float32, jnp.bfloat16, jnp.float32),
    (jnp.bfloat16, None, jnp.bfloat16),
    (jnp.float16, jnp.float16, jnp.float16),
]


@pytest.mark.parametrize(
    ("cls", "flax_cls"), [(LayerNorm, fnnx.LayerNorm), (RMSNorm, fnnx.RMSNorm)]
)
@pytest.mark.parametrize(("input_dtype", "dtype", "param_dtype"), DTYPE_CASES)
def test_norm_dtypes_match_flax(
    cls, flax_cls, input_dtype, dtype, param_dtype, copy_params, assert_close
):
    options = {"dtype": dtype, "param_dtype": param_dtype}
    ours, theirs = _norm_pair(cls, flax_cls, (3, 8), options)
    copy_params(ours, theirs, AFFINE if cls is LayerNorm else ["scale"])
    x = _x((3, 8), input_dtype)
    assert_close(ours(x), theirs(x))


@pytest.mark.parametrize(
    ("cls", "flax_cls"), [(LayerNorm, fnnx.LayerNorm), (RMSNorm, fnnx.RMSNorm)]
)
def test_norm_mask_matches_flax(cls, flax_cls, copy_params, assert_close):
    ours, theirs = _norm_pair(cls, flax_cls, (3, 6), {})
    copy_params(ours, theirs, AFFINE if cls is LayerNorm else ["scale"])
    x = _x((3, 6))
    mask = jnp.arange(6)[None, :].repeat(3, 0) < jnp.array([[2], [4], [6]])
    assert_close(ours(x, mask=mask), theirs(x, mask=mask))


def test_layernorm_reference_formula():
    x = _x((3, 5))
    y = LayerNorm(5, rngs=Rngs(0))(x)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-6), rtol=1e-5, atol=1e-5)
    z = RMSNorm(5, rngs=Rngs(0))(x)
    ms = (x**2).mean(-1, keepdims=True)
    np.testing.assert_allclose(z, x / np.sqrt(ms + 1e-6), rtol=1e-5, atol=1e-5)


def test_norm_attributes_and_metadata():
    ln = LayerNorm(4, bias_metadata={"sharding_names": ("f",)}, rngs=Rngs(0))
    assert ln.epsilon == 1e-6 and ln.reduction_axes == -1 and ln.feature_axes == -1
    assert ln.bias.metadata["sharding_names"] == ("f",)
    rms = RMSNorm(4, use_scale=False, rngs=Rngs(0))
    assert rms.scale is None and not hasattr(rms, "bias")
    np.testing.assert_allclose(rms(jnp.full((1, 4), 2.0)), jnp.ones((1, 4)), rtol=1e-5)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_norm_errors(cls):
    name = cls.__name__
    with pytest.raises(
        ValueError, match=rf"{name} expects 4 features over axes \(1,\), got shape \(2, 3\)"
    ):
        cls(4, rngs=Rngs(0))(jnp.ones((2, 3)))
    with pytest.raises(TypeError, match=f"{name} expects a numeric input, got dtype key<fry>"):
        cls(3, rngs=Rngs(0))(jax.random.split(jax.random.key(0), (2, 3)))
    with pytest.raises(ValueError, match=f"{name} axis -3 is out of range"):
        cls(3, reduction_axes=-3, rngs=Rngs(0))(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=f"{name} epsilon must be a finite non-negative number"):
        cls(3, epsilon="small", rngs=Rngs(0))


def test_batchnorm_set_view():
    bn = BatchNorm(3, rngs=Rngs(0))
    bn.set_view()
    assert bn.use_running_average is False
    bn.set_view(use_running_average=True)
    x = jnp.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(bn(x), x / jnp.sqrt(1 + bn.epsilon), rtol=1e-6)
    np.testing.assert_array_equal(bn.mean.value, jnp.zeros(3))


@pytest.mark.parametrize(
    "make",
    [
        lambda dtype: BatchNorm(4, param_dtype=dtype, rngs=Rngs(0)),
        lambda dtype: LayerNorm(4, param_dtype=dtype, rngs=Rngs(0)),
        lambda dtype: RMSNorm(4, param_dtype=dtype, rngs=Rngs(0)),
        lambda dtype: GroupNorm(4, num_groups=2, param_dtype=dtype, rngs=Rngs(0)),
        lambda dtype: InstanceNorm(4, param_dtype=dtype, rngs=Rngs(0)),
    ],
    ids=["BatchNorm", "LayerNorm", "RMSNorm", "GroupNorm", "InstanceNorm"],
)
def test_a_norm_refuses_a_parameter_dtype_that_cannot_be_trained(make):
    # (it trained until the first gradient: "grad requires real- or complex-valued inputs")
    with pytest.raises(ValueError, match=r"param_dtype must be a floating dtype .* got bool"):
        make(jnp.bool_)
    with pytest.raises(ValueError, match=r"param_dtype must be a floating dtype .* got int32"):
        make("int32")
    assert make(jnp.bfloat16).param_dtype == jnp.bfloat16

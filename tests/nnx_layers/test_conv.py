"""Conv and ConvTranspose: parity with flax.nnx over padding/stride/dilation/group grids."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_core import Rngs
from nnx_layers import Conv, ConvTranspose
from nnx_layers.initializers import zeros

SPATIAL = {1: (9,), 2: (6, 5), 3: (4, 5, 4)}
KERNEL = {1: (3,), 2: (3, 2), 3: (2, 3, 2)}

# (rank, options) cases for Conv; every option is passed to both libraries.
CONV_CASES = [
    (1, {}),
    (2, {}),
    (3, {}),
    (1, {"padding": "VALID", "strides": 2}),
    (2, {"padding": "VALID", "strides": (2, 1)}),
    (3, {"padding": "VALID", "kernel_dilation": 2}),
    (1, {"padding": "CIRCULAR"}),
    (2, {"padding": "CIRCULAR", "kernel_dilation": (2, 1)}),
    (3, {"padding": "CIRCULAR", "strides": 2}),
    (1, {"padding": "CAUSAL"}),
    (1, {"padding": "CAUSAL", "kernel_dilation": 2, "strides": 2}),
    (1, {"padding": 2}),
    (2, {"padding": 1, "strides": 2}),
    (2, {"padding": [(1, 2), (0, 1)]}),
    (2, {"padding": [(2, 0), (2, 0)]}),
    (3, {"padding": [1, (0, 1), 2]}),
    (2, {"padding": ((1, 1), (0, 2)), "input_dilation": 2}),
    (1, {"padding": 0, "input_dilation": (2,), "kernel_dilation": 2}),
    (3, {"padding": 1, "input_dilation": (1, 2, 1), "strides": 2}),
    (2, {"padding": "SAME", "strides": None, "kernel_dilation": None, "input_dilation": None}),
    (2, {"feature_group_count": 2}),
    (1, {"feature_group_count": 4, "padding": "VALID"}),
    (2, {"use_bias": False, "padding": "same"}),
    (2, {"padding": "SAME_LOWER", "strides": 2}),
    (2, {"precision": "highest", "preferred_element_type": jnp.float32, "dtype": jnp.bfloat16}),
]


def _pair(rank, options, cls_ours, cls_theirs, in_features=4, out_features=8):
    ours = cls_ours(
        in_features, out_features, KERNEL[rank], **options, kernel_init=zeros, rngs=Rngs(0)
    )
    theirs = cls_theirs(
        in_features,
        out_features,
        KERNEL[rank],
        **options,
        kernel_init=fnnx.initializers.zeros,
        rngs=fnnx.Rngs(1),
    )
    return ours, theirs


def _input(rank, batch_shape=(2,), features=4, dtype=jnp.float32):
    shape = batch_shape + SPATIAL[rank] + (features,)
    return jnp.asarray(np.random.default_rng(3).standard_normal(shape), dtype)


@pytest.mark.parametrize(("rank", "options"), CONV_CASES)
def test_conv_matches_flax(rank, options, copy_params, assert_close):
    theirs_options = dict(options)
    if options.get("padding") == "same":
        theirs_options["padding"] = "SAME"  # ours accepts any case; flax wants upper case
    ours, _ = _pair(rank, options, Conv, fnnx.Conv)
    _, theirs = _pair(rank, theirs_options, Conv, fnnx.Conv)
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _input(rank)
    assert_close(ours(x), theirs(x))


@pytest.mark.parametrize("batch_shape", [(), (2, 3)])
def test_conv_unbatched_and_multi_batch_inputs(batch_shape, copy_params, assert_close):
    ours, theirs = _pair(2, {"strides": 2}, Conv, fnnx.Conv)
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _input(2, batch_shape)
    y = ours(x)
    assert y.shape == batch_shape + (3, 3, 8)
    assert_close(y, theirs(x))


@pytest.mark.parametrize("input_dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize(
    ("dtype", "param_dtype"),
    [
        (None, jnp.float32),
        (jnp.bfloat16, jnp.float32),
        (None, jnp.bfloat16),
        (jnp.float16, jnp.float16),
    ],
)
def test_conv_dtypes_match_flax(input_dtype, dtype, param_dtype, copy_params, assert_close):
    options = {"dtype": dtype, "param_dtype": param_dtype}
    ours, theirs = _pair(2, options, Conv, fnnx.Conv)
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _input(2, dtype=input_dtype)
    assert_close(ours(x), theirs(x), scale=4.0)


def test_conv_mask_matches_flax(copy_params, assert_close):
    mask = jnp.zeros((3, 2, 4, 8)).at[1].set(1.0)
    ours, theirs = _pair(2, {"mask": mask}, Conv, fnnx.Conv)
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _input(2)
    assert_close(ours(x), theirs(x))


def test_conv_default_init_matches_flax_from_the_same_key():
    conv = Conv(4, 6, 3, feature_group_count=2, rngs=Rngs(0))
    assert conv.kernel.value.shape == (3, 2, 6)
    expected = fnnx.initializers.lecun_normal()(Rngs(0).params(), (3, 2, 6), jnp.float32)
    np.testing.assert_array_equal(conv.kernel.value, expected)


def test_conv_stores_constructor_arguments():
    conv = Conv(
        2,
        3,
        [3, 3],
        [1, 2],
        padding=[[1, 1], [0, 0]],
        kernel_init=zeros,
        kernel_metadata={"a": 1},
        rngs=Rngs(0),
    )
    assert conv.kernel_size == (3, 3) and conv.strides == (1, 2)
    assert conv.padding == ((1, 1), (0, 0))
    assert conv.kernel.metadata["a"] == 1 and conv.kernel_init == zeros
    assert Conv(2, 3, 3, kernel_init=zeros, rngs=Rngs(0)).kernel_size == (3,)
    # padding names are stored in the upper-case spelling configs use
    assert Conv(2, 3, 3, padding="same", kernel_init=zeros, rngs=Rngs(0)).padding == "SAME"
    assert ConvTranspose(2, 3, 3, padding="circular", rngs=Rngs(0)).padding == "CIRCULAR"


def test_conv_single_padding_pair_applies_to_every_axis():
    one = Conv(4, 8, (3, 2), padding=[(2, 0)], kernel_init=zeros, rngs=Rngs(0))
    both = Conv(4, 8, (3, 2), padding=[(2, 0), (2, 0)], kernel_init=zeros, rngs=Rngs(0))
    one.kernel.value = both.kernel.value = jnp.ones((3, 2, 4, 8))
    x = _input(2)
    np.testing.assert_array_equal(one(x), both(x))


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel_size", [0, (), (3, -1), (2.0,), "3", (True,)])
def test_conv_bad_kernel_size(kernel_size):
    with pytest.raises(ValueError, match="Conv kernel_size must"):
        Conv(2, 3, kernel_size, kernel_init=zeros, rngs=Rngs(0))


@pytest.mark.parametrize(
    "padding", ["FULL", -1, [(1, 1, 1)], [(1, 1)] * 3, [1.5], [("a", 1)], [(0, -1)], None]
)
def test_conv_bad_padding(padding):
    with pytest.raises(ValueError, match="Conv padding must be one of"):
        Conv(2, 3, (3, 3), padding=padding, kernel_init=zeros, rngs=Rngs(0))


@pytest.mark.parametrize(
    ("name", "value"),
    [("strides", 0), ("strides", (1, 2, 3)), ("input_dilation", -1), ("kernel_dilation", (1.5, 1))],
)
def test_conv_bad_strides_and_dilations(name, value):
    with pytest.raises(ValueError, match=f"Conv {name} must be a positive int or 2 positive ints"):
        Conv(2, 3, (3, 3), **{name: value}, kernel_init=zeros, rngs=Rngs(0))


def test_conv_causal_only_1d():
    with pytest.raises(ValueError, match="CAUSAL' is only defined for 1-D"):
        Conv(2, 3, (3, 3), padding="CAUSAL", kernel_init=zeros, rngs=Rngs(0))


@pytest.mark.parametrize("groups", [0, 3])
def test_conv_bad_feature_group_count(groups):
    with pytest.raises(ValueError, match="Conv feature_group_count"):
        Conv(4, 6, 3, feature_group_count=groups, kernel_init=zeros, rngs=Rngs(0))


def test_conv_bad_mask_shape():
    with pytest.raises(ValueError, match=r"Conv mask must have the kernel's shape \(3, 2, 3\)"):
        Conv(2, 3, 3, mask=jnp.ones((3, 3)), kernel_init=zeros, rngs=Rngs(0))


def test_conv_wrong_channels():
    with pytest.raises(
        ValueError, match=r"Conv expects an input whose last axis is 4 \(in_features\)"
    ):
        Conv(4, 8, (3, 3), kernel_init=zeros, rngs=Rngs(0))(jnp.ones((1, 5, 5, 3)))


def test_conv_wrong_rank():
    with pytest.raises(ValueError, match=r"Conv with a 2-D kernel expects an input of shape"):
        Conv(4, 8, (3, 3), kernel_init=zeros, rngs=Rngs(0))(jnp.ones((5, 4)))


def test_conv_non_numeric_input():
    with pytest.raises(TypeError, match="Conv expects a numeric input, got dtype key"):
        Conv(4, 8, 3, kernel_init=zeros, rngs=Rngs(0))(
            jax.random.split(jax.random.key(0), (1, 5, 4))
        )


# --- ConvTranspose ---------------------------------------------------------------------------

TRANSPOSE_CASES = [
    (1, {}),
    (2, {}),
    (3, {"strides": 2}),
    (1, {"strides": 2, "padding": "VALID"}),
    (2, {"strides": (2, 3), "padding": "SAME"}),
    (2, {"strides": 2, "padding": "CIRCULAR"}),
    (1, {"strides": 2, "padding": "CIRCULAR", "transpose_kernel": True}),
    (1, {"strides": 3, "padding": "CIRCULAR"}),
    (2, {"strides": 1, "padding": "CIRCULAR", "kernel_dilation": 2}),
    (2, {"padding": 1, "strides": 2}),
    (2, {"padding": [(1, 2), (0, 1)], "kernel_dilation": (1, 2)}),
    (1, {"transpose_kernel": True, "strides": 2}),
    (2, {"use_bias": False}),
    (2, {"strides": (2, 1), "padding": "CIRCULAR", "kernel_dilation": 2, "transpose_kernel": True}),
    (3, {"strides": (1, 2, 1), "padding": "VALID", "transpose_kernel": True}),
]


@pytest.mark.parametrize(("rank", "options"), TRANSPOSE_CASES)
def test_conv_transpose_matches_flax(rank, options, copy_params, assert_close):
    ours, theirs = _pair(rank, options, ConvTranspose, fnnx.ConvTranspose)
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _input(rank)
    assert_close(ours(x), theirs(x))


@pytest.mark.parametrize(
    ("input_dtype", "dtype", "param_dtype"),
    [
        (jnp.bfloat16, None, jnp.float32),
        (jnp.float32, jnp.bfloat16, jnp.float32),
        (jnp.float16, None, jnp.float16),
    ],
)
def test_conv_transpose_dtypes(input_dtype, dtype, param_dtype, copy_params, assert_close):
    options = {"strides": 2, "dtype": dtype, "param_dtype": param_dtype}
    ours, theirs = _pair(2, options, ConvTranspose, fnnx.ConvTranspose)
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _input(2, dtype=input_dtype)
    assert_close(ours(x), theirs(x), scale=4.0)


def test_conv_transpose_mask_and_batches(copy_params, assert_close):
    mask = jnp.ones((3, 4, 8)).at[0].set(0.0)
    ours, theirs = _pair(1, {"mask": mask, "strides": 2}, ConvTranspose, fnnx.ConvTranspose)
    copy_params(ours, theirs, ["kernel", "bias"])
    for batch_shape in [(), (2, 2)]:
        x = _input(1, batch_shape)
        assert ours(x).shape == batch_shape + (18, 8)
        assert_close(ours(x), theirs(x))


def test_conv_transpose_kernel_shape():
    conv = ConvTranspose(3, 5, (2, 2), kernel_init=zeros, rngs=Rngs(0))
    assert conv.kernel.value.shape == (2, 2, 3, 5)
    conv = ConvTranspose(3, 5, 2, transpose_kernel=True, kernel_init=zeros, rngs=Rngs(0))
    assert conv.kernel.value.shape == (2, 5, 3)


@pytest.mark.parametrize("padding", ["CAUSAL", "SAME_LOWER", "nope"])
def test_conv_transpose_bad_padding(padding):
    with pytest.raises(ValueError, match="ConvTranspose padding must be one of"):
        ConvTranspose(2, 3, 3, padding=padding, kernel_init=zeros, rngs=Rngs(0))


def test_conv_transpose_errors():
    with pytest.raises(ValueError, match="ConvTranspose kernel_size must"):
        ConvTranspose(2, 3, (0,), kernel_init=zeros, rngs=Rngs(0))
    with pytest.raises(ValueError, match="ConvTranspose strides must be a positive int or 1"):
        ConvTranspose(2, 3, 3, strides=(1, 1), kernel_init=zeros, rngs=Rngs(0))
    layer = ConvTranspose(2, 3, 3, kernel_init=zeros, rngs=Rngs(0))
    with pytest.raises(ValueError, match="ConvTranspose expects an input whose last axis is 2"):
        layer(jnp.ones((1, 4, 3)))
    with pytest.raises(TypeError, match="ConvTranspose expects a numeric input, got dtype key"):
        layer(jax.random.split(jax.random.key(0), (1, 4, 2)))
    with pytest.raises(ValueError, match="ConvTranspose mask must have the kernel's shape"):
        ConvTranspose(2, 3, 3, mask=jnp.ones((3,)), kernel_init=zeros, rngs=Rngs(0))


@pytest.mark.parametrize(
    ("size", "strides", "kernel_size", "dilation"),
    [(5, 1, 3, 1), (4, 1, 2, 1), (3, 3, 3, 1), (4, 2, 4, 2), ((4, 3), (2, 3), (3, 2), (1, 2))],
)
def test_circular_transposed_kernel_is_the_gradient_of_circular_conv(
    size, strides, kernel_size, dilation
):
    # flax.nnx agrees for odd kernel spans with strides 1 or 2; it shifts the result otherwise.
    sizes = (size,) if isinstance(size, int) else size
    rank = len(sizes)
    options = dict(strides=strides, padding="CIRCULAR", kernel_dilation=dilation, kernel_init=zeros)
    conv = Conv(2, 3, kernel_size, **options, use_bias=False, rngs=Rngs(0))
    up = ConvTranspose(
        3, 2, kernel_size, **options, transpose_kernel=True, use_bias=False, rngs=Rngs(0)
    )
    kernel = np.random.default_rng(0).standard_normal(conv.kernel.value.shape)
    conv.kernel.value = up.kernel.value = jnp.asarray(kernel, jnp.float32)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((1, *sizes, 3)), jnp.float32)
    stride_tuple = (strides,) * rank if isinstance(strides, int) else strides
    grid = tuple(n * s for n, s in zip(sizes, stride_tuple))
    _, vjp = jax.vjp(conv, jnp.zeros((1, *grid, 2)))
    np.testing.assert_allclose(up(x), vjp(x)[0], rtol=1e-5, atol=1e-5)


def test_conv_general_dilated_hook_matches_flax(copy_params, assert_close):
    def doubled(*args, **kwargs):
        return 2 * jax.lax.conv_general_dilated(*args, **kwargs)

    ours = Conv(2, 3, (3,), conv_general_dilated=doubled, kernel_init=zeros, rngs=Rngs(0))
    theirs = fnnx.Conv(
        2,
        3,
        (3,),
        conv_general_dilated=doubled,
        kernel_init=fnnx.initializers.zeros,
        rngs=fnnx.Rngs(0),
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    x = jnp.linspace(-1, 1, 10).reshape(1, 5, 2)
    assert_close(ours(x), theirs(x))
    plain = Conv(2, 3, (3,), kernel_init=zeros, rngs=Rngs(0))
    plain.kernel.value, plain.bias.value = ours.kernel.value, ours.bias.value
    assert_close(ours(x) - ours.bias.value, 2 * (plain(x) - plain.bias.value))

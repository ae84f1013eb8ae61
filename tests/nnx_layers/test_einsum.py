"""Einsum: parity with flax.nnx (init, outputs, gradients, '...' in either term), configs, errors."""

import inspect

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import Einsum, initializers
from nnx_plugins.testing import check_layer


def _x(shape, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(2).standard_normal(shape), dtype)


def test_signature_matches_flax():
    ours = inspect.signature(Einsum.__init__).parameters
    theirs = inspect.signature(fnnx.Einsum.__init__).parameters
    assert list(ours) == list(theirs)
    assert list(inspect.signature(Einsum.__call__).parameters) == list(
        inspect.signature(fnnx.Einsum.__call__).parameters
    )


EINSUM_CASES = [
    ("nta,hab->nthb", (8, 2, 4), (8, 4), (3, 5, 2)),
    ("...a,ab->...b", (3, 4), (4,), (2, 5, 3)),
    ("btd,dh->bth", (3, 4), None, (2, 5, 3)),
    ("ab,bc->ca", (3, 4), (4, 1), (2, 3)),
    ("a...d,dh->a...h", (3, 2), (2,), (2, 4, 5, 3)),
    # '...' in the kernel term (flax.nnx's own cases): the two '...' broadcast together
    ("defab,bcef->adefc", (4, 5, 6, 7), (6, 7, 5), (8, 6, 7, 3, 4)),
    ("d...ab,bc...->ad...c", (4, 5, 6, 7), (6, 7, 5), (8, 6, 7, 3, 4)),
    ("d...ab,bc...->ad...c", (4, 5, 6, 7), None, (8, 6, 7, 3, 4)),
    ("...d,d...->...", (3, 5), (5,), (2, 5, 3)),  # lengths 2 and 1, aligned on the right
    ("ab...,bc...->ac", (3, 4, 5), (4,), (2, 3, 5)),  # '...' summed away
    ("...d,d...->...", (3, 1), None, (2, 4, 3)),  # kernel axis of size 1 broadcast
]


def test_einsum_default_init_matches_flax_from_the_same_key():
    ours = Einsum("nta,hab->nthb", (8, 2, 4), (8, 4), rngs=nnx.Rngs(0))
    theirs = fnnx.Einsum("nta,hab->nthb", (8, 2, 4), (8, 4), rngs=fnnx.Rngs(0))
    np.testing.assert_array_equal(ours.kernel.value, theirs.kernel[...])
    np.testing.assert_array_equal(ours.bias.value, theirs.bias[...])


@pytest.mark.parametrize(("equation", "kernel_shape", "bias_shape", "shape"), EINSUM_CASES)
def test_einsum_matches_flax(equation, kernel_shape, bias_shape, shape, copy_params, assert_close):
    ours = Einsum(
        equation, kernel_shape, bias_shape, kernel_init=initializers.zeros, rngs=nnx.Rngs(0)
    )
    theirs = fnnx.Einsum(
        equation, kernel_shape, bias_shape, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(0)
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _x(shape)
    assert_close(ours(x), theirs(x))
    dx = jax.grad(lambda x: (ours(x) ** 2).sum())(x)
    assert_close(dx, jax.grad(lambda x: (theirs(x) ** 2).sum())(x), 10.0)


@pytest.mark.parametrize("dtype", [None, jnp.bfloat16])
def test_einsum_dtypes_and_call_equation_match_flax(dtype, copy_params, assert_close):
    kwargs = dict(dtype=dtype, param_dtype=jnp.float32)
    ours = Einsum(
        "btd,dh->bth", (3, 4), (4,), **kwargs, kernel_init=initializers.zeros, rngs=nnx.Rngs(0)
    )
    theirs = fnnx.Einsum(
        "btd,dh->bth",
        (3, 4),
        (4,),
        **kwargs,
        kernel_init=fnnx.initializers.zeros,
        rngs=fnnx.Rngs(0),
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _x((2, 5, 3), jnp.bfloat16)
    assert_close(ours(x), theirs(x))
    assert_close(ours(x, "b t d, d h -> t b h"), theirs(x, "b t d, d h -> t b h"))


def test_einsum_works_from_a_config():
    config = {"einsum_str": "btd,dh->bth", "kernel_shape": [8, 4], "bias_shape": [4]}
    assert check_layer("Einsum", config, input_shape=(2, 5, 8)).output_shape == (2, 5, 4)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (
            ("btd,dh", (3, 4)),
            r"must be explicit, with one '->' before the output axes, got 'btd,dh'",
        ),
        (
            ("btd->bt", (3, 4)),
            r"exactly two operands \(the input, then the kernel\), got 1 in 'btd->bt'",
        ),
        (("b1d,dh->bh", (3, 4)), r"terms may hold letters and one '...', got 'b1d'"),
        (
            ("btd,...dh->bth", (4,)),
            r"kernel term '...dh' of 'btd,...dh->bth' names 2 axes, but kernel_shape=\(4,\) has 1",
        ),
        (("btd,dh->btz", (3, 4)), r"has output axes \['z'\] that neither operand has"),
        (
            ("btd,dh->bth", (3, 4, 5)),
            r"kernel term 'dh' of 'btd,dh->bth' names 2 axes, but kernel_shape=\(3, 4, 5\) has 3",
        ),
        (
            ("btd,dh->bth", (3, 0)),
            r"Einsum kernel_shape must be a positive int or a non-empty sequence",
        ),
    ],
)
def test_einsum_construction_errors(args, match):
    with pytest.raises(ValueError, match=match):
        Einsum(*args, rngs=nnx.Rngs(0))


def test_einsum_call_errors():
    layer = Einsum("btd,dh->bth", (3, 4), (4,), rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError,
        match=r"expects an input with the axes 'btd', got shape \(5, 3\) \(2 dimensions\)",
    ):
        layer(jnp.ones((5, 3)))
    with pytest.raises(
        ValueError,
        match=r"input axis 'd' has size 2 \(shape \(1, 5, 2\)\) but the kernel's has size 3",
    ):
        layer(jnp.ones((1, 5, 2)))
    with pytest.raises(
        ValueError,
        match=r"bias of shape \(4,\) does not fit the output of 'btd,dh->btd': the kernel axes "
        r"kept in the output have sizes \(3,\), so the bias needs 3 entries. Build the layer "
        r"with bias_shape=\(3,\)",
    ):
        layer(jnp.ones((1, 5, 3)), "btd,dh->btd")
    # a bias that fits no output of the layer's own equation is refused at the call (the
    # equation may be replaced per call, so the layer is built as flax.nnx builds it)
    odd = Einsum("ik,kj->ij", (5, 4), 5, rngs=nnx.Rngs(0))
    assert odd.bias.value.shape == (5,)
    with pytest.raises(
        ValueError, match=r"kept in the output have sizes \(4,\), so the bias needs 4 entries"
    ):
        odd(jnp.ones((2, 5)))
    assert odd(jnp.ones((2, 5)), "ik,kj->ik").shape == (2, 5)
    ellipsis = Einsum("...d,d...->...", (3, 5), rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError,
        match=r"input axis of '...' has size 4 \(shape \(2, 4, 3\)\) but the kernel's has size 5",
    ):
        ellipsis(jnp.ones((2, 4, 3)))
    with pytest.raises(TypeError, match="Einsum einsum_str must be a string, got None"):
        Einsum(None, (3, 4), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="Einsum expects a numeric input, got dtype key"):
        layer(jax.random.split(jax.random.key(0), (1, 5, 3)))


def test_einsum_op_replaces_the_contraction():
    seen = []

    def leading_axis(*args, **kwargs):
        seen.append(sorted(kwargs))
        out = jnp.einsum(*args, **kwargs)
        return out.reshape((1, *out.shape))

    layer = Einsum("ab,bc->ac", (3, 4), (4,), einsum_op=leading_axis, rngs=nnx.Rngs(0))
    y = layer(jnp.ones((2, 3)))
    assert y.shape == (1, 2, 4)
    np.testing.assert_allclose(y[0], jnp.ones((2, 3)) @ layer.kernel.value + layer.bias.value)
    assert seen == [["precision"]]  # preferred_element_type/out_sharding only when set
    theirs = fnnx.Einsum("ab,bc->ac", (3, 4), (4,), einsum_op=leading_axis, rngs=fnnx.Rngs(0))
    assert theirs(jnp.ones((2, 3))).shape == y.shape


def test_ellipsis_in_the_kernel_term_matches_jnp_einsum():
    layer = Einsum("b...d,...de->b...e", (5, 3, 4), (5, 4), rngs=nnx.Rngs(0))
    x = _x((2, 5, 3))
    expected = jnp.einsum("b...d,...de->b...e", x, layer.kernel.value) + layer.bias.value
    np.testing.assert_allclose(layer(x), expected, rtol=1e-5, atol=1e-6)

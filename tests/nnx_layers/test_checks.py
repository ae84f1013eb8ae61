"""promote_dtype (the function and every layer's ``promote_dtype=`` hook) and numeric inputs.

flax.nnx is the oracle: integer inputs are promoted to float32 by every dense, convolution,
normalization, attention and recurrent layer, and a user's promotion function replaces the
default one with the same call.
"""

import inspect

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core
import nnx_layers as nl
from nnx_core import Rngs
from nnx_layers import promote_dtype


def test_promote_dtype_infers_the_common_inexact_dtype():
    x, w, b = promote_dtype((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.bfloat16), None))
    assert (x.dtype, w.dtype, b) == (jnp.bfloat16, jnp.bfloat16, None)
    (only,) = promote_dtype((jnp.ones(2, jnp.int8),))
    assert only.dtype == jnp.float32
    (kept,) = promote_dtype((jnp.ones(2, jnp.int8),), inexact=False)
    assert kept.dtype == jnp.int8
    (forced,) = promote_dtype((jnp.ones(2, jnp.float32),), dtype=jnp.float16)
    assert forced.dtype == jnp.float16
    (as_int,) = promote_dtype((jnp.ones(2, jnp.float32),), dtype=jnp.int32, inexact=False)
    assert as_int.dtype == jnp.int32


def test_promote_dtype_matches_flax():
    from flax.nnx.nn.dtypes import promote_dtype as theirs

    cases = [
        ((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.float16)), {}),
        ((jnp.ones(2, jnp.bfloat16), None, jnp.ones(2, jnp.float32)), {}),
        ((jnp.ones(2, jnp.uint8),), {"inexact": False}),
        ((jnp.ones(2, jnp.float32),), {"dtype": jnp.bfloat16}),
    ]
    for arrays, kwargs in cases:
        mine, other = promote_dtype(arrays, **kwargs), theirs(arrays, **kwargs)
        assert [None if a is None else a.dtype for a in mine] == [
            None if a is None else a.dtype for a in other
        ]
    mine, other = (inspect.signature(f).parameters for f in (promote_dtype, theirs))
    assert [(p.kind, p.default) for p in mine.values()] == [
        (p.kind, p.default) for p in other.values()
    ]
    assert list(mine)[1:] == list(other)[1:]


def test_promote_dtype_refuses_an_integer_computation_dtype():
    with pytest.raises(ValueError, match=r"Dtype must be inexact .* got dtype=int32"):
        promote_dtype((jnp.ones(2),), dtype=jnp.int32)
    with pytest.raises(ValueError, match=r"Dtype must be inexact .* got dtype=int32"):
        nl.Linear(2, 3, dtype=jnp.int32, rngs=Rngs(0))(jnp.ones((1, 2)))


def _pair(name):
    """(ours, flax's) with the same arguments and the same parameter values."""
    builders = {
        "Linear": lambda m, r: m.Linear(3, 4, rngs=r),
        "LinearGeneral": lambda m, r: m.LinearGeneral(3, (2, 2), rngs=r),
        "Einsum": lambda m, r: m.Einsum("ab,bc->ac", (3, 4), (4,), rngs=r),
        "Conv": lambda m, r: m.Conv(3, 4, (2,), rngs=r),
        "ConvTranspose": lambda m, r: m.ConvTranspose(3, 4, (2,), rngs=r),
        "LoRA": lambda m, r: m.LoRA(3, 2, 4, b_initializer=m.initializers.ones, rngs=r),
        "BatchNorm": lambda m, r: m.BatchNorm(3, rngs=r),
        "LayerNorm": lambda m, r: m.LayerNorm(3, rngs=r),
        "RMSNorm": lambda m, r: m.RMSNorm(3, rngs=r),
        "GroupNorm": lambda m, r: m.GroupNorm(3, num_groups=1, rngs=r),
        "InstanceNorm": lambda m, r: m.InstanceNorm(3, rngs=r),
        "MultiHeadAttention": lambda m, r: m.MultiHeadAttention(1, 3, decode=False, rngs=r),
    }
    build = builders[name]
    ours, theirs = build(nl, Rngs(0)), build(fnnx, fnnx.Rngs(0))
    for path, variable in nnx_core.state(ours).flat_state():
        _lookup(theirs, path)[...] = variable.value
    return ours, theirs


def _lookup(module, path):
    node = module
    for part in path:
        node = node[part] if isinstance(part, int) else getattr(node, part)
    return node


INT_LAYERS = [
    ("Linear", (2, 3)),
    ("LinearGeneral", (2, 3)),
    ("Einsum", (2, 3)),
    ("Conv", (2, 5, 3)),
    ("ConvTranspose", (2, 5, 3)),
    ("LoRA", (2, 3)),
    ("BatchNorm", (4, 3)),
    ("LayerNorm", (4, 3)),
    ("RMSNorm", (4, 3)),
    ("GroupNorm", (4, 2, 3)),
    ("InstanceNorm", (4, 2, 3)),
    ("MultiHeadAttention", (2, 4, 3)),
]


@pytest.mark.parametrize(("name", "shape"), INT_LAYERS)
def test_integer_inputs_are_promoted_as_in_flax(name, shape):
    ours, theirs = _pair(name)
    x = jnp.arange(np.prod(shape), dtype=jnp.int32).reshape(shape) % 5
    y, expected = ours(x), theirs(x)
    assert y.dtype == expected.dtype == jnp.float32
    np.testing.assert_allclose(y, expected, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(y, ours(x.astype(jnp.float32)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["LSTMCell", "OptimizedLSTMCell", "GRUCell", "SimpleCell"])
def test_recurrent_cells_promote_integer_inputs(name):
    cell = getattr(nl, name)(3, 4, rngs=Rngs(0))
    x = jnp.array([[1, 0, 2]], jnp.int32)
    carry = cell.initialize_carry(x.shape)
    (_, y), (_, y_float) = cell(carry, x), cell(carry, x.astype(jnp.float32))
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(y, y_float, rtol=1e-6)


def test_integer_inputs_to_embed_attend_and_avg_pool():
    embed = nl.Embed(5, 3, rngs=Rngs(0))
    ids = jnp.array([[1, 0, 2]], jnp.int32)
    np.testing.assert_allclose(embed.attend(ids), embed.attend(ids.astype(jnp.float32)))
    x = jnp.arange(4, dtype=jnp.int32).reshape(1, 4, 1)
    pooled = nl.avg_pool(x, (2,))
    assert pooled.dtype == fnnx.avg_pool(x, (2,)).dtype == jnp.float32
    np.testing.assert_allclose(pooled[0, :, 0], [0.5, 1.5, 2.5])


class _Recorder:
    """A promote_dtype that records what it was given and keeps the arrays as they are."""

    def __init__(self):
        self.calls = []

    def __call__(self, arrays, /, *, dtype=None, inexact=True):
        self.calls.append((len(arrays), dtype, inexact))
        return arrays


HOOKED = [
    ("Linear", lambda p: nl.Linear(3, 4, promote_dtype=p, rngs=Rngs(0)), (2, 3), [(3, None, True)]),
    (
        "Embed.attend",
        lambda p: nl.Embed(5, 3, promote_dtype=p, rngs=Rngs(0)).attend,
        (2, 3),
        [(2, jnp.float32, True)],
    ),
    (
        "LinearGeneral",
        lambda p: nl.LinearGeneral(3, 4, promote_dtype=p, rngs=Rngs(0)),
        (2, 3),
        [(3, None, True)],
    ),
    (
        "Einsum",
        lambda p: nl.Einsum("ab,bc->ac", (3, 4), promote_dtype=p, rngs=Rngs(0)),
        (2, 3),
        [(3, None, True)],
    ),
    (
        "Conv",
        lambda p: nl.Conv(3, 4, 2, promote_dtype=p, rngs=Rngs(0)),
        (1, 5, 3),
        [(3, None, True)],
    ),
    (
        "ConvTranspose",
        lambda p: nl.ConvTranspose(3, 4, 2, promote_dtype=p, rngs=Rngs(0)),
        (1, 5, 3),
        [(3, None, True)],
    ),
    ("LoRA", lambda p: nl.LoRA(3, 2, 4, promote_dtype=p, rngs=Rngs(0)), (2, 3), [(3, None, True)]),
    (
        "BatchNorm",
        lambda p: nl.BatchNorm(3, promote_dtype=p, rngs=Rngs(0)),
        (4, 3),
        [(5, None, True)],
    ),
    (
        "LayerNorm",
        lambda p: nl.LayerNorm(3, promote_dtype=p, rngs=Rngs(0)),
        (4, 3),
        [(3, None, True)],
    ),
    ("RMSNorm", lambda p: nl.RMSNorm(3, promote_dtype=p, rngs=Rngs(0)), (4, 3), [(2, None, True)]),
    (
        "GroupNorm",
        lambda p: nl.GroupNorm(3, num_groups=1, promote_dtype=p, rngs=Rngs(0)),
        (4, 3),
        [(3, None, True)],
    ),
    (
        "InstanceNorm",
        lambda p: nl.InstanceNorm(3, promote_dtype=p, rngs=Rngs(0)),
        (4, 2, 3),
        [(3, None, True)],
    ),
    (
        "PReLU",
        lambda p: nl.PReLU(dtype=jnp.float32, promote_dtype=p),
        (4,),
        [(2, jnp.float32, True)],
    ),
    (
        "WeightNorm",
        lambda p: nl.WeightNorm(nl.Linear(3, 4, rngs=Rngs(0)), promote_dtype=p, rngs=Rngs(0)),
        (2, 3),
        [(3, None, True)],  # (the wrapped Linear keeps its own, default, promotion)
    ),
    (
        "GRUCell",
        lambda p: (lambda cell: lambda x: cell(jnp.zeros((2, 4)), x)[1])(
            nl.GRUCell(3, 4, promote_dtype=p, rngs=Rngs(0))
        ),
        (2, 3),
        None,  # its Linear layers call it (once each)
    ),
    (
        "dot_product_attention",
        lambda p: lambda x: nl.dot_product_attention(x, x, x, promote_dtype=p),
        (2, 4, 1, 3),
        [(3, None, True)],
    ),
]


@pytest.mark.parametrize(("name", "build", "shape", "expected"), HOOKED, ids=[h[0] for h in HOOKED])
def test_the_promote_dtype_hook_is_called_by_every_layer(name, build, shape, expected):
    recorder = _Recorder()
    layer = build(recorder)
    assert layer(jnp.ones(shape)).shape[0] == shape[0]
    if expected is None:
        assert len(recorder.calls) == 2 and all(c[0] == 3 for c in recorder.calls)
    else:
        assert recorder.calls == expected
    if hasattr(layer, "promote_dtype"):
        assert layer.promote_dtype is recorder


def test_embed_lookup_promotes_with_inexact_false():
    recorder = _Recorder()
    nl.Embed(5, 3, promote_dtype=recorder, rngs=Rngs(0))(jnp.array([1, 2]))
    assert recorder.calls == [(1, jnp.float32, False)]


def test_attention_hooks_reach_their_sublayers():
    qkv, out, ln = _Recorder(), _Recorder(), _Recorder()
    layer = nl.MultiHeadAttention(
        2,
        4,
        normalize_qk=True,
        decode=False,
        qkv_promote_dtype=qkv,
        out_promote_dtype=out,
        ln_promote_dtype=ln,
        rngs=Rngs(0),
    )
    layer(jnp.ones((1, 3, 4)))
    assert len(qkv.calls) == 3 and len(out.calls) == 1 and len(ln.calls) == 2
    assert layer.query.promote_dtype is qkv and layer.out.promote_dtype is out
    assert layer.query_ln.promote_dtype is ln


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
@pytest.mark.parametrize("param_dtype", [jnp.float32, jnp.float16])
@pytest.mark.parametrize("name", ["BatchNorm", "LayerNorm", "RMSNorm", "GroupNorm", "InstanceNorm"])
def test_norms_without_promotion_match_flax(name, dtype, param_dtype):
    """flax.nnx's tests pass ``promote_dtype=lambda x, **kw: x`` (Linen's behaviour)."""

    def identity(arrays, **kwargs):
        return arrays

    extra = {"num_groups": 1} if name == "GroupNorm" else {}
    kwargs = dict(dtype=dtype, param_dtype=param_dtype, promote_dtype=identity, **extra)
    ours = getattr(nl, name)(5, **kwargs, rngs=Rngs(0))
    theirs = getattr(fnnx, name)(5, **kwargs, rngs=fnnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (4, 5), jnp.float16)
    mask = jnp.array([True, False, True, False, True])
    y, expected = ours(x, mask=mask), theirs(x, mask=mask)
    assert y.dtype == expected.dtype
    # (GroupNorm reduces over a group axis of its own: float32 results may differ in the last bit)
    rtol = 1e-6 if name == "GroupNorm" else 0
    np.testing.assert_allclose(
        np.asarray(y, np.float32), np.asarray(expected, np.float32), rtol=rtol, atol=rtol
    )
    if name == "BatchNorm":
        np.testing.assert_array_equal(ours.mean.value, theirs.mean[...])
        np.testing.assert_array_equal(ours.var.value, theirs.var[...])


def test_output_dtype_of_an_unpromoted_norm_is_the_promotion_of_its_operands():
    def identity(arrays, **kwargs):
        return arrays

    norm = nl.LayerNorm(3, param_dtype=jnp.float32, promote_dtype=identity, rngs=Rngs(0))
    assert norm(jnp.ones((2, 3), jnp.float16)).dtype == jnp.float32
    plain = nl.LayerNorm(3, param_dtype=jnp.float16, rngs=Rngs(0))
    assert plain(jnp.ones((2, 3), jnp.float16)).dtype == jnp.float16


def test_check_param_dtype_refuses_what_gradients_cannot_train():
    from nnx_layers._checks import check_param_dtype

    for given in (jnp.float32, "bfloat16", jnp.float16, jnp.complex64):
        assert check_param_dtype("Layer", "param_dtype", given) is given
    for given, name in ((jnp.bool_, "bool"), ("int32", "int32"), (np.uint8, "uint8")):
        with pytest.raises(
            ValueError,
            match=rf"Layer param_dtype must be a floating dtype \(its parameters are trained, and "
            rf"gradients exist for floating and complex values only\), got {name}\. Use a "
            r"floating dtype such as float32 or bfloat16\.",
        ):
            check_param_dtype("Layer", "param_dtype", given)
    with pytest.raises(
        TypeError, match=r"Layer lora_param_dtype must be a dtype such as float32, got 'floaty'"
    ):
        check_param_dtype("Layer", "lora_param_dtype", "floaty")

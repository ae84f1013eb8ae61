"""Linear and Embed: parity with flax.nnx, attributes, metadata and error paths."""

import inspect
import json

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_core import Param, Rngs
from nnx_layers import Embed, Linear, initializers

DTYPES = [None, jnp.float32, jnp.bfloat16, jnp.float16]
INPUT_DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]
PARAM_DTYPES = [jnp.float32, jnp.bfloat16]


def _signature_defaults(cls):
    params = inspect.signature(cls.__init__).parameters
    return {k: p.default for k, p in params.items() if k != "self"}


@pytest.mark.parametrize(("ours", "theirs"), [(Linear, fnnx.Linear), (Embed, fnnx.Embed)])
def test_signature_matches_flax_for_shared_arguments(ours, theirs):
    mine, other = _signature_defaults(ours), _signature_defaults(theirs)
    for name, default in mine.items():
        assert name in other, name
        if not callable(default) and name not in ("kernel_metadata", "bias_metadata"):
            assert default == other[name] or (default is None and other[name] is None), name
    assert (
        inspect.signature(ours.__init__).parameters["rngs"].kind is inspect.Parameter.KEYWORD_ONLY
    )


def test_linear_stores_every_constructor_argument():
    layer = Linear(3, 4, use_bias=False, dtype=jnp.bfloat16, rngs=Rngs(0))
    for name in _signature_defaults(Linear):
        if name != "rngs":
            assert hasattr(layer, name), name
    assert layer.bias is None and layer.in_features == 3 and layer.dtype == jnp.bfloat16


def test_linear_default_init_matches_flax_from_the_same_key():
    layer = Linear(5, 7, rngs=Rngs(0))
    keys = Rngs(0)
    expected = fnnx.initializers.lecun_normal()(keys.params(), (5, 7), jnp.float32)
    np.testing.assert_array_equal(layer.kernel.value, expected)
    np.testing.assert_array_equal(layer.bias.value, jnp.zeros(7))
    theirs = fnnx.Linear(5, 7, rngs=fnnx.Rngs(0))
    assert theirs.kernel[...].shape == layer.kernel.value.shape
    assert theirs.bias[...].shape == layer.bias.value.shape


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("param_dtype", PARAM_DTYPES)
@pytest.mark.parametrize(("batch_shape", "use_bias"), [((2,), True), ((2, 3), False)])
def test_linear_matches_flax(batch_shape, dtype, param_dtype, use_bias, copy_params, assert_close):
    kwargs = dict(use_bias=use_bias, dtype=dtype, param_dtype=param_dtype)
    ours = Linear(4, 3, **kwargs, kernel_init=initializers.zeros, rngs=Rngs(0))
    theirs = fnnx.Linear(4, 3, **kwargs, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(1))
    copy_params(ours, theirs, ["kernel", "bias"])
    for input_dtype in INPUT_DTYPES:
        x = jnp.asarray(np.random.default_rng(2).standard_normal(batch_shape + (4,)), input_dtype)
        assert_close(ours(x), theirs(x))


def test_linear_precision_and_preferred_element_type(copy_params, assert_close):
    kwargs = dict(precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    ours = Linear(4, 2, dtype=jnp.bfloat16, **kwargs, kernel_init=initializers.zeros, rngs=Rngs(0))
    theirs = fnnx.Linear(
        4, 2, dtype=jnp.bfloat16, **kwargs, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(0)
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    x = jnp.linspace(-1, 1, 8).reshape(2, 4)
    assert_close(ours(x), theirs(x))


def test_metadata_rides_on_the_params():
    layer = Linear(
        2,
        3,
        kernel_metadata={"sharding_names": ("in", "out")},
        bias_metadata={"sharding_names": ("out",)},
        rngs=Rngs(0),
    )
    assert layer.kernel.metadata["sharding_names"] == ("in", "out")
    assert layer.bias.metadata["sharding_names"] == ("out",)
    assert layer.kernel_metadata == {"sharding_names": ("in", "out")}
    embed = Embed(4, 2, embedding_metadata={"sharding_names": ("vocab", "embed")}, rngs=Rngs(0))
    assert embed.embedding.metadata["sharding_names"] == ("vocab", "embed")
    assert isinstance(embed.embedding, Param)


def test_custom_initializers_are_used():
    layer = Linear(
        2, 3, kernel_init=initializers.ones, bias_init=initializers.constant(0.5), rngs=Rngs(0)
    )
    np.testing.assert_array_equal(layer.kernel.value, jnp.ones((2, 3)))
    np.testing.assert_array_equal(layer(jnp.ones((1, 2))), jnp.full((1, 3), 2.5))


def test_linear_errors_on_wrong_width():
    layer = Linear(3, 4, rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"last axis is 3 \(in_features\), got shape \(2, 5\)"):
        layer(jnp.ones((2, 5)))
    with pytest.raises(ValueError, match=r"got a scalar \(shape \(\)\)"):
        layer(jnp.ones(()))


def test_linear_errors_on_non_numeric_input():
    with pytest.raises(TypeError, match="Linear expects a numeric input, got dtype key<fry>"):
        Linear(3, 4, rngs=Rngs(0))(jax.random.split(jax.random.key(0), (2, 3)))


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_linear_errors_on_bad_sizes(bad):
    with pytest.raises(ValueError, match="Linear in_features must be a positive integer"):
        Linear(bad, 4, rngs=Rngs(0))


def test_linear_under_jit():
    layer = Linear(3, 2, rngs=Rngs(0))
    y = jax.jit(lambda k, b, x: x @ k + b)(layer.kernel.value, layer.bias.value, jnp.ones((1, 3)))
    np.testing.assert_allclose(layer(jnp.ones((1, 3))), y, rtol=1e-6)


# --- Embed -----------------------------------------------------------------------------------


def test_embed_default_init_matches_flax_from_the_same_key():
    embed = Embed(10, 4, rngs=Rngs(0))
    expected = fnnx.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)(
        Rngs(0).params(), (10, 4), jnp.float32
    )
    np.testing.assert_array_equal(embed.embedding.value, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("param_dtype", PARAM_DTYPES)
@pytest.mark.parametrize(("num_embeddings", "id_dtype"), [(1, jnp.int32), (7, jnp.uint8)])
def test_embed_matches_flax(
    num_embeddings, dtype, param_dtype, id_dtype, copy_params, assert_close
):
    kwargs = dict(dtype=dtype, param_dtype=param_dtype)
    ours = Embed(num_embeddings, 3, **kwargs, embedding_init=initializers.zeros, rngs=Rngs(0))
    theirs = fnnx.Embed(
        num_embeddings, 3, **kwargs, embedding_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(1)
    )
    copy_params(ours, theirs, ["embedding"])
    ids = (jnp.arange(6).reshape(2, 3) % num_embeddings).astype(id_dtype)
    assert_close(ours(ids), theirs(ids))
    query = jnp.linspace(-1, 1, 6).reshape(2, 3)
    assert_close(ours.attend(query), theirs.attend(query))


def test_embed_in_bfloat16_accumulates_the_gradient_of_repeated_ids_in_param_dtype():
    # 3000 lookups of row 0: a bfloat16 scatter-add stalls at 256 (256 + 1 rounds to 256)
    import nnx_core as nnx

    embed = Embed(4, 2, dtype=jnp.bfloat16, rngs=Rngs(0))
    ids = jnp.zeros(3000, jnp.int32)
    out = embed(ids)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        out.astype(jnp.float32), embed.embedding.value[ids].astype(jnp.bfloat16)
    )
    grads = nnx.grad(lambda m: m(ids).astype(jnp.float32).sum())(embed)
    np.testing.assert_array_equal(grads["embedding"].value[0], [3000.0, 3000.0])


def test_embed_errors_on_float_ids():
    with pytest.raises(TypeError, match="Embed expects integer ids, got dtype float32"):
        Embed(4, 2, rngs=Rngs(0))(jnp.ones((2,)))


def test_embed_attend_errors_on_wrong_width():
    with pytest.raises(ValueError, match=r"Embed.attend expects an input whose last axis is 2"):
        Embed(4, 2, rngs=Rngs(0)).attend(jnp.ones((3, 5)))


def test_embed_errors_on_bad_sizes():
    with pytest.raises(ValueError, match="Embed features must be a positive integer, got 0"):
        Embed(4, 0, rngs=Rngs(0))


TENSOR_PARALLEL = """
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
import nnx_core as nnx
from nnx_layers import Linear

class MLP(nnx.Module):
    def __init__(self, rngs):
        self.up = Linear(2, 8, rngs=rngs)                    # column-parallel: kernel (2, 8/4)
        self.down = Linear(8, 3, use_bias=False, rngs=rngs)  # row-parallel: kernel (8/4, 3)
    def __call__(self, x):
        return self.down(jax.nn.relu(self.up(x)))

model = MLP(nnx.Rngs(0))
x = jnp.arange(10.0).reshape(5, 2) / 10
expected = model(x)
mesh = Mesh(np.array(jax.devices()), ("d",))
specs = nnx.StateSharding({
    nnx.All(nnx.PathContains("up"), nnx.PathContains("kernel")): P(None, "d"),
    nnx.All(nnx.PathContains("up"), nnx.PathContains("bias")): P("d"),
    nnx.PathContains("down"): P("d", None),
})
sharded = nnx.shard_map(
    lambda m, x: jax.lax.psum(m(x), "d"), mesh=mesh, in_specs=(specs, P()), out_specs=P()
)
y = nnx.jit(sharded)(model, x)
print(json.dumps({"y": np.asarray(y).tolist(), "expected": np.asarray(expected).tolist()}))
"""


def test_linear_runs_tensor_parallel_under_shard_map():
    """A row-parallel Linear sees a local shard of its input and of its kernel: its check of
    the input's width compares with the kernel it holds, not the global in_features."""
    from ..nnx_core.probe import run_in_devices

    out = json.loads(run_in_devices(TENSOR_PARALLEL).strip().splitlines()[-1])
    np.testing.assert_allclose(out["y"], out["expected"], rtol=1e-5)


def test_linear_dot_general_hook_matches_flax(copy_params, assert_close):
    seen = []

    def scaled(*args, **kwargs):
        seen.append(sorted(kwargs))
        return 0.5 * jax.lax.dot_general(*args, **kwargs)

    ours = Linear(3, 2, dot_general=scaled, kernel_init=initializers.zeros, rngs=Rngs(0))
    theirs = fnnx.Linear(
        3, 2, dot_general=scaled, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(0)
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    x = jnp.linspace(-1, 1, 6).reshape(2, 3)
    assert_close(ours(x), theirs(x))
    assert seen[0] == ["precision"]  # flax.nnx also passes out_sharding=None


def test_embed_attend_and_lookup_take_out_sharding_and_promote_dtype():
    calls = []

    def recorded(arrays, /, *, dtype=None, inexact=True):
        calls.append(inexact)
        return tuple(None if a is None else jnp.asarray(a, dtype) for a in arrays)

    embed = Embed(4, 2, promote_dtype=recorded, rngs=Rngs(0))
    assert embed(jnp.array([1, 3]), out_sharding=None).shape == (2, 2)
    assert embed.attend(jnp.ones((3, 2)), out_sharding=None).shape == (3, 4)
    assert calls == [False, True]

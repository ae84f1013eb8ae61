"""``out_sharding=`` on the layers' calls: honoured over a mesh of 4 host devices (Explicit axes:
the op's own ``out_sharding``; Auto axes: a sharding constraint), and its error paths."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_core import Rngs
from nnx_layers import Linear

from ..nnx_core.probe import run_in_devices

_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P, reshard
    import nnx_core as nnx
    import nnx_layers as nl

    def show(name, y):
        print(name, jax.typeof(y))

    explicit = jax.make_mesh((2, 2), ("X", "Y"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(explicit):
        x = reshard(jnp.arange(4.0).reshape(2, 2), P("X", None))
        dense = {
            "Linear": nl.Linear(2, 4, rngs=nnx.Rngs(0)),
            "LinearGeneral": nl.LinearGeneral(2, 4, rngs=nnx.Rngs(0)),
            "Einsum": nl.Einsum("ab,bc->ac", (2, 4), (4,), rngs=nnx.Rngs(0)),
            "LoRALinear": nl.LoRALinear(2, 4, lora_rank=1, rngs=nnx.Rngs(0)),
        }
        for name, layer in dense.items():
            show(name, layer(x))
            show(name, layer(x, out_sharding=P("X", "Y")))
        show("jit-Linear", nnx.jit(lambda m, x: m(x, out_sharding=P("X", "Y")))(dense["Linear"], x))
        embed = nl.Embed(8, 4, rngs=nnx.Rngs(0))
        embed.embedding.value = reshard(embed.embedding.value, P("X"))
        show("Embed", embed(reshard(jnp.arange(4), P("Y")), out_sharding=P("X")))
        show("Embed.attend", nl.Embed(10, 2, rngs=nnx.Rngs(0)).attend(x, out_sharding=P("X", "Y")))
        xc = reshard(jnp.arange(32.0).reshape(2, 4, 4), P("X", None, None))
        conv = nl.Conv(4, 8, (3,), rngs=nnx.Rngs(0))
        show("Conv", conv(xc, out_sharding=P("X", "Y", None)))
        show("Conv-2batch", conv(xc[None], out_sharding=P(None, "X", "Y", None)))
        show("Dropout", nl.Dropout(0.5, rngs=nnx.Rngs(0))(x))
        show("Dropout-bcast", nl.Dropout(0.5, broadcast_dims=(1,), rngs=nnx.Rngs(0))(x))
        xm = reshard(jnp.ones((4, 5, 16)), P("X", None, "Y"))
        mha = nl.MultiHeadAttention(4, 16, qkv_features=8, num_kv_heads=2, decode=False,
                                    rngs=nnx.Rngs(0))
        show("MultiHeadAttention", mha(xm, out_sharding=P("X", None, "Y"),
                                       qkv_sharding=P("X", None, "Y", None)))

    auto = jax.make_mesh((2, 2), ("X", "Y"), axis_types=(AxisType.Auto,) * 2)
    with jax.set_mesh(auto):
        x = jax.device_put(jnp.arange(4.0).reshape(2, 2), NamedSharding(auto, P("X", None)))
        lin = nl.Linear(2, 4, rngs=nnx.Rngs(0))
        print("auto-Linear", lin(x, out_sharding=P("X", "Y")).sharding.spec)
        step = nnx.jit(lambda m, x: m(x, out_sharding=P(None, "Y")))
        print("auto-jit-Linear", step(lin, x).sharding.spec)
        y = nl.Einsum("ab,bc->ac", (2, 4), rngs=nnx.Rngs(0))(x, out_sharding=P("Y", "X"))
        print("auto-Einsum", y.sharding.spec)
        ids = jnp.arange(4)
        embed = nl.Embed(8, 4, rngs=nnx.Rngs(0))
        print("auto-Embed", nnx.jit(lambda m, i: m(i, out_sharding=P("X", "Y")))(embed, ids).sharding.spec)
    named = NamedSharding(auto, P(None, "X"))
    print("named-Linear", nl.Linear(2, 4, rngs=nnx.Rngs(0))(jnp.ones((2, 2)), out_sharding=named).sharding.spec)
""")


@pytest.fixture(scope="module")
def shardings():
    found: dict[str, list[str]] = {}
    for line in run_in_devices(_SCRIPT, 4).strip().splitlines():
        name, value = line.split(" ", 1)
        found.setdefault(name, []).append(value)
    return found


@pytest.mark.parametrize("name", ["Linear", "LinearGeneral", "Einsum", "LoRALinear"])
def test_dense_layers_lay_out_their_output_over_explicit_axes(shardings, name):
    # without out_sharding the batch sharding propagates; with it, both axes are sharded
    assert shardings[name] == ["float32[2@X,4]", "float32[2@X,4@Y]"]


def test_out_sharding_is_honoured_under_jit(shardings):
    assert shardings["jit-Linear"] == ["float32[2@X,4@Y]"]


def test_embed_lookup_and_attend(shardings):
    # (the lookup runs under auto_axes: a table sharded on rows and ids sharded elsewhere)
    assert shardings["Embed"] == ["float32[4@X,4]"]
    assert shardings["Embed.attend"] == ["float32[2@X,10@Y]"]


def test_conv_with_one_or_several_batch_axes(shardings):
    assert shardings["Conv"] == ["float32[2@X,4@Y,8]"]
    assert shardings["Conv-2batch"] == ["float32[1,2@X,4@Y,8]"]


def test_dropout_masks_follow_the_input_sharding(shardings):
    assert shardings["Dropout"] == ["float32[2@X,2]"]
    assert shardings["Dropout-bcast"] == ["float32[2@X,2]"]


def test_attention_output_and_projections(shardings):
    assert shardings["MultiHeadAttention"] == ["float32[4@X,5,16@Y]"]


def test_auto_axes_are_constrained(shardings):
    assert shardings["auto-Linear"] == ["P('X', 'Y')"]
    assert shardings["auto-jit-Linear"] == ["P(None, 'Y')"]
    assert shardings["auto-Einsum"] == ["P('Y', 'X')"]
    assert shardings["auto-Embed"] == ["P('X', 'Y')"]
    assert shardings["named-Linear"] == ["P(None, 'X')"]


def test_out_sharding_errors():
    layer = Linear(2, 3, rngs=Rngs(0))
    x = jnp.ones((1, 2))
    with pytest.raises(
        TypeError,
        match=r"Linear out_sharding must be a jax.sharding.PartitionSpec or NamedSharding, got \('data', None\)",
    ):
        layer(x, out_sharding=("data", None))
    with pytest.raises(ValueError, match=r"names mesh axes \['data'\], but no mesh is set"):
        layer(x, out_sharding=P("data", None))
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    with jax.set_mesh(mesh):
        with pytest.raises(
            ValueError,
            match=r"names axes \['model'\] that the mesh does not have \(its axes: \['data'\]\)",
        ):
            layer(x, out_sharding=P(None, "model"))
        assert layer(x, out_sharding=P("data", None)).shape == (1, 3)
    # a spec naming no axis, with no mesh, changes nothing
    np.testing.assert_array_equal(layer(x, out_sharding=P()), layer(x))
    named = NamedSharding(mesh, P(("data",), None))
    assert layer(x, out_sharding=named).sharding.spec == P(("data",), None)

"""Logical axis helpers: rules (mapping or pairs, per call or per block), with_partitioning on
layers, with_logical_constraint with an explicit mesh, the context mesh or none, and errors."""

from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import nnx_core as nnx
import nnx_layers
from nnx_core import _logical

from .probe import run_in_devices

MESH = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))


@pytest.mark.parametrize(
    "rules, expected",
    [
        ({"embed": "data"}, {"embed": "data"}),
        ([("embed", "data"), ("mlp", None), ("embed", "model")], {"embed": "data", "mlp": None}),
        ((), {}),
    ],
)
def test_rules_forms(rules, expected):
    assert _logical.normalize_rules(rules) == expected


@pytest.mark.parametrize("rules", ["embed", [("embed",)], [(1, "data")], 3])
def test_bad_rules(rules):
    with pytest.raises(TypeError, match=r"Logical axis rules must be a mapping .* got "):
        _logical.normalize_rules(rules)


def test_context_rules_nest_and_explicit_rules_win():
    s = nnx.State({"w": nnx.Param(jnp.ones((4, 2)), sharding_names=("embed", "mlp"))})
    assert nnx.get_partition_spec(s)["w"].value == P("embed", "mlp")
    with nnx.logical_axis_rules([("embed", "data")]) as active:
        assert active == {"embed": "data"}
        assert nnx.get_partition_spec(s)["w"].value == P("data", "mlp")
        with nnx.logical_axis_rules({"mlp": "model"}):
            assert nnx.get_partition_spec(s)["w"].value == P("embed", "model")
        assert nnx.get_partition_spec(s, rules={"embed": None})["w"].value == P(None, "mlp")
        assert nnx.get_partition_spec(s, mesh=MESH)["w"].value == P("data", None)
    assert nnx.get_partition_spec(s)["w"].value == P("embed", "mlp")


def test_with_partitioning_names_a_layer_s_kernel():
    init = nnx.with_partitioning(nnx_layers.initializers.zeros, ("embed", "mlp"), note="k")
    layer = nnx_layers.Linear(4, 2, kernel_init=init, rngs=nnx.Rngs(0))
    assert layer.kernel.metadata == {"sharding_names": ("embed", "mlp"), "note": "k"}
    with nnx.logical_axis_rules({"embed": "data"}):
        specs = nnx.get_partition_spec(nnx.state(layer))
    # (the bias of a narrowing Linear is named embed by default)
    assert specs["kernel"].value == P("data", "mlp") and specs["bias"].value == P("data")


def test_with_partitioning_needs_one_name_per_dimension():
    with pytest.raises(
        TypeError,
        match=r"with_partitioning expects one logical axis name .* "
        r"got 'embed'",
    ):
        nnx.with_partitioning(nnx_layers.initializers.zeros, "embed")


def _constraint_spec(f, x):
    eqns = [e for e in jax.make_jaxpr(f)(x).eqns if e.primitive.name == "sharding_constraint"]
    return eqns[0].params["sharding"].spec if eqns else None


def test_with_logical_constraint_on_an_explicit_or_context_mesh_or_none():
    x = jnp.ones((4, 2))
    explicit = _constraint_spec(
        lambda x: nnx.with_logical_constraint(
            x, ("batch", "embed"), mesh=MESH, rules={"batch": "data"}
        ),
        x,
    )
    assert explicit == P("data", None)  # "embed" is not an axis of the mesh: replicated
    with jax.set_mesh(MESH), nnx.logical_axis_rules({"batch": "data"}):
        assert _constraint_spec(lambda x: nnx.with_logical_constraint(x, ("batch", None)), x) == P(
            "data", None
        )
    assert _constraint_spec(lambda x: nnx.with_logical_constraint(x, ("batch", None)), x) is None
    v = nnx.Param(x)
    assert nnx.with_logical_constraint(v, ("batch", None)) is v.value  # no mesh: unchanged


@pytest.mark.parametrize("value", [jnp.ones(3), 3.0])
def test_with_logical_constraint_needs_one_name_per_dimension(value):
    with pytest.raises(
        ValueError,
        match=r"with_logical_constraint got 2 logical axis name\(s\) "
        r"\('a', 'b'\) for a value of shape",
    ):
        nnx.with_logical_constraint(value, ("a", "b"))


def test_with_logical_constraint_shards_over_four_devices():
    code = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        import nnx_core as nnx
        mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4), ("data",))
        f = jax.jit(lambda x: nnx.with_logical_constraint(x * 2, ("batch", None), mesh=mesh))
        with nnx.logical_axis_rules([("batch", "data")]):
            out = f(jnp.ones((8, 3)))
        print(out.sharding.spec, len(out.addressable_shards), out.addressable_shards[0].data.shape)
    """)
    out = run_in_devices(code, 4)  # (4 CPU devices, wherever jax would pick an accelerator)
    assert out.split() == ["P('data',)", "4", "(2,", "3)"]


def test_with_batch_constraint_needs_a_batch_rule_and_a_mesh():
    x = {"a": jnp.ones((4, 3, 2)), "n": jnp.int32(1)}
    assert nnx.with_batch_constraint(x) is x  # nothing in force
    with jax.set_mesh(MESH), nnx.logical_axis_rules({"embed": "data"}):
        assert nnx.with_batch_constraint(x) is x  # no rule for batch
    with nnx.logical_axis_rules({"batch": "data"}):
        assert nnx.with_batch_constraint(x) is x  # no mesh
    with jax.set_mesh(MESH), nnx.logical_axis_rules({"batch": "data"}):
        jaxpr = jax.make_jaxpr(nnx.with_batch_constraint)(x)
    specs = [e.params["sharding"].spec for e in jaxpr.eqns if "sharding" in e.params]
    assert specs == [P("data", None, None)]  # (the scalar left alone)

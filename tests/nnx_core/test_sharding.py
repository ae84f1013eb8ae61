"""Sharding by logical axis names."""

from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import nnx_core as nnx

from .probe import run_in_devices


class M(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.ones((4, 2)), sharding_names=("embed", "mlp"))
        self.b = nnx.Param(jnp.zeros(2))


def test_partition_specs_follow_names_and_rules():
    state = nnx.state(M())
    specs = nnx.get_partition_spec(state)
    assert specs["w"].value == P("embed", "mlp") and specs["b"].value == P()
    specs = nnx.get_partition_spec(state, rules={"embed": "model", "mlp": None})
    assert specs["w"].value == P("model", None)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    assert nnx.get_partition_spec(state, mesh=mesh)["w"].value == P(None, None)


def test_names_must_match_dimensions():
    state = nnx.State({"w": nnx.Param(jnp.ones(3), sharding_names=("a", "b"))})
    with pytest.raises(
        ValueError, match=r"w has sharding_names \('a', 'b'\) \(2 names\) but its value has 1"
    ):
        nnx.get_partition_spec(state)


def test_shard_and_create_sharded_on_one_device():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("embed",))
    m = nnx.shard(M(), mesh)
    assert m.w.value.sharding.spec == P("embed", None)
    created = nnx.create_sharded(M, mesh)
    assert (
        created.w.value.sharding.spec == P("embed", None)
        and created.w.value.tolist() == [[1.0, 1.0]] * 4
    )


def test_create_sharded_spreads_a_model_over_four_devices():
    code = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        import nnx_core as nnx
        class M(nnx.Module):
            def __init__(self):
                self.w = nnx.Param(jnp.arange(32.0).reshape(8, 4), sharding_names=("rows", None))
        mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4), ("rows",))
        m = nnx.create_sharded(M, mesh)
        shards = m.w.value.addressable_shards
        print(len(shards), shards[0].data.shape, float(m.w.value.sum()))
    """)
    out = run_in_devices(code, 4)  # (4 CPU devices, wherever jax would pick an accelerator)
    assert out.split() == ["4", "(2,", "4)", "496.0"]


def test_flax_out_sharding_metadata_and_context_rules_are_used():
    state = nnx.State({"w": nnx.Param(jnp.ones((4, 2)), out_sharding=("embed", None))})
    assert nnx.get_partition_spec(state)["w"].value == P("embed", None)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("model",))
    with nnx.logical_axis_rules({"embed": "model"}):
        m = nnx.shard(M(), mesh)
        created = nnx.create_sharded(M, mesh)
    assert m.w.value.sharding.spec == P("model", None)
    assert created.w.value.sharding.spec == P("model", None)

"""shard_map over Modules: StateSharding, propagation, flax parity on 4 devices, leaks, errors."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import nnx_core as nnx

from .probe import Probe, assert_probed, run_in_devices


def one_device_mesh():
    return Mesh(np.array(jax.devices()[:1]), ("d",))


class W(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.arange(8.0).reshape(4, 2))


def test_shard_map_on_one_device_propagates_state():
    p = Probe()
    f = nnx.jit(
        nnx.shard_map(lambda p, x: p(x), mesh=one_device_mesh(), in_specs=P(), out_specs=P())
    )
    for _ in range(2):
        out = f(p, jnp.arange(3.0))
    np.testing.assert_allclose(out, 2 * jnp.arange(3.0))
    assert_probed(p, calls=2, seen=6.0)


def test_a_state_of_partition_specs_is_a_state_sharding():
    m = W()
    specs = jax.tree.map(lambda v: P("d", None), nnx.state(m))
    f = nnx.shard_map(
        lambda m: jax.lax.psum(m.w.value.sum(0), "d"),
        mesh=one_device_mesh(),
        in_specs=(specs,),
        out_specs=P(),
    )
    assert f(m).tolist() == [12.0, 16.0]
    assert nnx.StateSharding(specs).items()[0][1] == P("d", None)


def test_shard_map_leaked_tracer_is_a_trace_context_error():
    captured = Probe()
    f = nnx.shard_map(lambda x: captured(x), mesh=one_device_mesh(), in_specs=P(), out_specs=P())
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.jit(f)(jnp.ones(2))


@pytest.mark.parametrize(
    "in_specs, args, error, match",
    [
        (
            (0,),
            (jnp.ones(2),),
            ValueError,
            r"shard_map: the in_specs entry for args\[0\] is 0; a spec is a PartitionSpec \(P\(\) "
            r"for replicated\) or, for a Module, a StateSharding\.",
        ),
        (
            (P(None, "d"),),
            (jnp.ones(2),),
            ValueError,
            r"shard_map: P\(None, 'd'\) has 2 entries but args\[0\] has shape "
            r"\(2,\); give at most one per dimension\.",
        ),
        (
            (nnx.StateSharding({nnx.BatchStat: P()}),),
            ("module",),
            ValueError,
            r"shard_map: in_specs: StateSharding\(\{BatchStat: P\(\)\}\) has no filter matching "
            r"w \(Param\); add one, e\.g\. `\.\.\.: P\(\)` as the last entry\.",
        ),
    ],
)
def test_shard_map_errors(in_specs, args, error, match):
    args = tuple(W() if a == "module" else a for a in args)
    f = nnx.shard_map(lambda *a: 0.0, mesh=one_device_mesh(), in_specs=in_specs, out_specs=P())
    with pytest.raises(error, match=match):
        f(*args)


def test_shard_map_keyword_arguments_are_an_error():
    f = nnx.shard_map(lambda x: x, mesh=one_device_mesh(), in_specs=P(), out_specs=P())
    with pytest.raises(TypeError, match=r"shard_map: keyword arguments \['x'\] are not supported"):
        f(x=jnp.ones(2))


SHARD_MAP_SCRIPT = """
import json
import jax, jax.numpy as jnp, numpy as np
import flax.nnx as fnnx
from jax.sharding import Mesh, PartitionSpec as P
import nnx_core as nnx

out = {}
mesh = Mesh(np.array(jax.devices()), ("d",))

# tensor parallelism with per-filter specs, against flax.nnx
class MLP(nnx.Module):
    def __init__(self):
        self.k1 = nnx.Param(jnp.arange(16.0).reshape(2, 8) / 10)
        self.k2 = nnx.Param(jnp.arange(24.0).reshape(8, 3) / 10)
        self.n = nnx.BatchStat(jnp.array(0.0))
class FMLP(fnnx.Module):
    def __init__(self):
        self.k1 = fnnx.Param(jnp.arange(16.0).reshape(2, 8) / 10)
        self.k2 = fnnx.Param(jnp.arange(24.0).reshape(8, 3) / 10)
        self.n = fnnx.BatchStat(jnp.array(0.0))
def forward(m, x):
    m.n[...] = m.n[...] + 1.0
    return jax.lax.psum(jax.nn.relu(x @ m.k1[...]) @ m.k2[...], "d")
ours, theirs = MLP(), FMLP()
spec = nnx.StateSharding({nnx.PathContains("k1"): P(None, "d"), nnx.PathContains("k2"): P("d", None),
                          ...: P()})
fspec = fnnx.StateSharding({fnnx.PathContains("k1"): P(None, "d"),
                            fnnx.PathContains("k2"): P("d", None), ...: P()})
x = jnp.arange(10.0).reshape(5, 2)
y = nnx.jit(nnx.shard_map(forward, mesh=mesh, in_specs=(spec, P()), out_specs=P()))(ours, x)
y_flax = fnnx.jit(fnnx.shard_map(forward, mesh=mesh, in_specs=(fspec, P()), out_specs=P()))(theirs, x)
out["y"] = np.asarray(y).tolist(); out["y_flax"] = np.asarray(y_flax).tolist()
out["n"] = [float(ours.n.value), float(theirs.n[...])]
out["k1_shards"] = len(ours.k1.value.addressable_shards)
out["k1_same"] = bool((ours.k1.value == theirs.k1[...]).all())

# per-shard state: each device updates its own slice of a sharded BatchStat
class Stats(nnx.Module):
    def __init__(self):
        self.s = nnx.BatchStat(jnp.zeros(4))
def bump(m, x):
    m.s.value = m.s.value + x.sum()
    return x
m = Stats()
f = nnx.jit(nnx.shard_map(bump, mesh=mesh, in_specs=(nnx.StateSharding({...: P("d")}), P("d")),
                          out_specs=P("d")))
f(m, jnp.arange(8.0)); f(m, jnp.arange(8.0))
out["s"] = np.asarray(m.s.value).tolist()

# a Module created per shard comes out with the out_specs
make = nnx.jit(nnx.shard_map(lambda x: Stats(), mesh=mesh, in_specs=P("d"),
                             out_specs=nnx.StateSharding({...: P("d")})))
out["created"] = list(make(jnp.arange(4.0)).s.value.shape)

# divisibility is checked with the paths of the values
try:
    nnx.shard_map(lambda m: 0.0, mesh=mesh, in_specs=(nnx.StateSharding({...: P("d")}),),
                  out_specs=P())(MLP())
except ValueError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""


def test_shard_map_on_four_devices():
    out = json.loads(run_in_devices(SHARD_MAP_SCRIPT).strip().splitlines()[-1])
    np.testing.assert_allclose(out["y"], out["y_flax"], rtol=1e-5)
    assert out["n"] == [1.0, 1.0] and out["k1_shards"] == 4 and out["k1_same"]
    assert out["s"] == [2.0, 10.0, 18.0, 26.0]
    assert out["created"] == [16]
    assert out["error"].startswith(
        "shard_map: args[0].k1 has shape (2, 8); dimension 0 (2) is split over mesh axes ('d',) "
        "of total size 4, which does not divide it."
    )

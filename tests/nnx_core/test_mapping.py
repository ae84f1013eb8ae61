"""vmap and pmap: StateAxes and prefix trees, Rngs arguments, propagation, leaks, parity, errors."""

from __future__ import annotations

import json

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .probe import Probe, assert_probed, run_in_devices, stacked


class C(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.arange(6.0).reshape(3, 2))
        self.s = nnx.BatchStat(jnp.zeros(2))
        self.n = nnx.Variable(jnp.array(0.0))


class FlaxC(fnnx.Module):
    def __init__(self):
        self.w = fnnx.Param(jnp.arange(6.0).reshape(3, 2))
        self.s = fnnx.BatchStat(jnp.zeros(2))
        self.n = fnnx.Variable(jnp.array(0.0))


def count_and_scale(m, x):
    m.n[...] = m.n[...] + 1.0
    return (m.w[...] * x).sum()


# -- vmap ----------------------------------------------------------------------------------------
def test_vmap_propagates_state_per_example():
    probes = stacked(3)
    xs = jnp.arange(6.0).reshape(3, 2)
    out = nnx.vmap(lambda p, x: p(x))(probes, xs)
    np.testing.assert_allclose(out, jnp.arange(1.0, 4.0)[:, None] * xs)
    assert_probed(probes, calls=np.ones(3), seen=xs.sum(1))
    assert probes.rngs.noise.key.shape == (3,)


def test_vmap_state_axes_match_flax():
    ours, theirs = C(), FlaxC()
    x = jnp.arange(3.0)
    out = nnx.vmap(count_and_scale, in_axes=(nnx.StateAxes({nnx.Param: 0, ...: None}), 0))(ours, x)
    out_flax = fnnx.vmap(count_and_scale, in_axes=(fnnx.StateAxes({fnnx.Param: 0, ...: None}), 0))(
        theirs, x
    )
    np.testing.assert_allclose(out, out_flax)
    assert float(ours.n.value) == float(theirs.n[...]) == 1.0
    axes = nnx.StateAxes({nnx.Param: 1, ...: None})
    np.testing.assert_allclose(
        nnx.vmap(lambda m: m.w[...].sum(), in_axes=axes)(ours), ours.w.value.sum(0)
    )


def test_vmap_in_axes_prefix_trees_reach_modules_inside_pytrees():
    ours, theirs = C(), FlaxC()

    def f(d):
        return d["m"].w[...].sum() + d["x"]

    ours_axes = ({"m": nnx.StateAxes({nnx.Param: 0, ...: None}), "x": None},)
    flax_axes = ({"m": fnnx.StateAxes({fnnx.Param: 0, ...: None}), "x": None},)
    out = nnx.vmap(f, in_axes=ours_axes)({"m": ours, "x": jnp.ones(())})
    np.testing.assert_allclose(
        out, fnnx.vmap(f, in_axes=flax_axes)({"m": theirs, "x": jnp.ones(())})
    )
    np.testing.assert_allclose(
        nnx.vmap(lambda d: d["a"] + d["b"], in_axes=({"a": 0, "b": None},))(
            {"a": jnp.arange(3.0), "b": jnp.ones(())}
        ),
        [1.0, 2.0, 3.0],
    )


def test_vmap_out_axes_state_axes_for_created_modules_match_flax():
    make = nnx.vmap(lambda k: C(), out_axes=nnx.StateAxes({nnx.Param: 0, ...: None}), axis_size=4)
    make_flax = fnnx.vmap(
        lambda k: FlaxC(), out_axes=fnnx.StateAxes({fnnx.Param: 0, ...: None}), axis_size=4
    )
    ours, theirs = make(jnp.arange(4)), make_flax(jnp.arange(4))
    assert ours.w.shape == theirs.w.shape == (4, 3, 2)
    assert ours.s.shape == theirs.s.shape == (2,) and ours.n.shape == theirs.n.shape == ()


def test_vmap_gives_an_unmapped_rngs_one_key_per_example_and_advances_it():
    p = Probe()

    def draw(p, x):
        return jax.random.uniform(p.rngs.noise(), ()) + 0 * x

    first = nnx.vmap(draw, in_axes=(None, 0))(p, jnp.zeros(4))
    assert len(set(np.asarray(first).tolist())) == 4 and int(p.rngs.noise.count.value) == 2
    second = nnx.vmap(draw, in_axes=(None, 0))(p, jnp.zeros(4))
    assert not np.allclose(first, second) and p.rngs.noise.key.shape == ()


def test_vmap_leaked_tracer_is_a_trace_context_error():
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.vmap(lambda x: captured(x))(jnp.ones(3))


def _set_unmapped(m, x):
    m.s.value = m.s.value + x
    return x


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: nnx.vmap(lambda m, x: x, in_axes=(0, "a"))(C(), jnp.ones(3)),
            r"vmap: the in_axes entry for args\[1\] is 'a'; an axis is an int or None\.",
        ),
        (
            lambda: nnx.vmap(lambda m, x: x, in_axes=(nnx.Carry, 0))(C(), jnp.ones(3)),
            r"vmap: the in_axes entry for args\[0\] is Carry; an axis is an int or None \(Carry "
            r"is for scan\)\.",
        ),
        (
            lambda: nnx.vmap(lambda m: m, in_axes=nnx.StateAxes({nnx.Param: "x", ...: 0}))(C()),
            r"vmap: StateAxes\(\{Param: 'x', \.\.\.: 0\}\) for w is 'x'; an axis is an int or None",
        ),
        (
            lambda: nnx.vmap(lambda x: x, in_axes=nnx.StateAxes({...: 0}))(jnp.ones(3)),
            r"vmap: in_axes gives StateAxes\(\{\.\.\.: 0\}\) for args\[0\], a ArrayImpl; "
            r"per-filter specs are for Modules\.",
        ),
        (
            lambda: nnx.vmap(lambda d: d, in_axes=({"a": 0},))({"b": jnp.ones(3)}),
            r"vmap: in_axes \(\{'a': 0\},\) does not match the structure of the values it "
            r"describes \(a tuple of 1\)",
        ),
        (
            lambda: nnx.vmap(lambda r: r.default(), in_axes=0)(nnx.Rngs(0)),
            r"vmap: in_axes maps args\[0\]\.default\.count along axis 0, but its shape is \(\)\. "
            r"Give it an axis it has, or None to broadcast it \(an Rngs whose keys are one key: "
            r"split it first with rngs\.split\(n\) or nnx_core\.split_rngs\(splits=n\)\)\.",
        ),
        (
            lambda: nnx.vmap(lambda a, b: a)(jnp.ones(3), jnp.ones((4, 2))),
            r"vmap: the mapped axes have different sizes: 3 for args\[0\]; 4 for args\[1\]\.",
        ),
        (
            lambda: nnx.vmap(lambda a: a, axis_size=5)(jnp.ones(3)),
            r"different sizes: 3 for args\[0\]; 5 for axis_size",
        ),
        (
            lambda: nnx.vmap(_set_unmapped, in_axes=(None, 0))(C(), jnp.ones((4, 2))),
            r"vmap: an output with axis None differs per example\. Unmapped Module state set by "
            r"the function: args\[0\]\.s\. Map that state",
        ),
        (
            lambda: nnx.vmap(lambda k: C(), out_axes=nnx.StateAxes({nnx.Param: 0}))(jnp.ones(2)),
            r"vmap: out_axes: StateAxes\(\{Param: 0\}\) has no filter matching n \(Variable\)",
        ),
    ],
)
def test_vmap_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- pmap ----------------------------------------------------------------------------------------
def test_pmap_on_one_device_propagates_state_and_reuses_its_compile():
    p = stacked(1)
    f = nnx.pmap(lambda p, x: p(x))
    for _ in range(2):
        out = f(p, jnp.ones((1, 2)))
    np.testing.assert_allclose(out, [[1.0, 1.0]])
    assert_probed(p, calls=[2.0], seen=[4.0])
    assert len(f._compiled) == 1


def test_pmap_leaked_tracer_and_errors():
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.pmap(lambda x: captured(x))(jnp.ones(1))
    with pytest.raises(ValueError, match=r"pmap: the in_axes entry for args\[0\] is 'x'"):
        nnx.pmap(lambda x: x, in_axes="x")(jnp.ones(1))


PMAP_SCRIPT = """
import json
import jax, jax.numpy as jnp, numpy as np
import flax.nnx as fnnx
import nnx_core as nnx
from tests.nnx_core.probe import Probe, stacked

out = {}
# state propagation across 4 devices, one compile for repeated calls
probes = stacked(4)
f = nnx.pmap(lambda p, x: p(x), axis_name="d")
for _ in range(2):
    y = f(probes, jnp.arange(8.0).reshape(4, 2))
out["y"] = np.asarray(y).tolist()
out["stat"] = np.asarray(probes.stat.value).tolist()
out["counts"] = np.asarray(probes.rngs.noise.count.value).tolist()
out["seen"] = np.asarray(probes.seen.value).tolist()
out["compiles"] = len(f._compiled)

# a broadcast Module: its Rng stream gives each device its own key, and advances
p = Probe()
draw = nnx.pmap(lambda p, x: jax.random.uniform(p.rngs.noise(), ()) + x,
                in_axes=(nnx.StateAxes({nnx.BatchStat: None, ...: None}), 0))
a = draw(p, jnp.zeros(4)); b = draw(p, jnp.zeros(4))
out["distinct"] = len(set(np.asarray(a).tolist())); out["changed"] = bool((a != b).all())
out["count"] = int(p.rngs.noise.count.value); out["rng_compiles"] = len(draw._compiled)

# parity with flax.nnx: a psum over devices of a mapped Param, a broadcast counter
class M(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.arange(8.0).reshape(4, 2)); self.n = nnx.BatchStat(jnp.array(0.0))
class FM(fnnx.Module):
    def __init__(self):
        self.w = fnnx.Param(jnp.arange(8.0).reshape(4, 2)); self.n = fnnx.BatchStat(jnp.array(0.0))
def step(m, x):
    m.n[...] = m.n[...] + 1.0
    return jax.lax.psum((m.w[...] * x).sum(), "d")
ours, theirs = M(), FM()
axes = (nnx.StateAxes({nnx.Param: 0, ...: None}), 0)
faxes = (fnnx.StateAxes({fnnx.Param: 0, ...: None}), 0)
x = jnp.arange(8.0).reshape(4, 2)
out["ours"] = np.asarray(nnx.pmap(step, in_axes=axes, axis_name="d")(ours, x)).tolist()
out["flax"] = np.asarray(fnnx.pmap(step, in_axes=faxes, axis_name="d")(theirs, x)).tolist()
out["n"] = [float(ours.n.value), float(theirs.n[...])]

# static_broadcasted_argnums and donation
g = nnx.pmap(lambda k, p, x: p(x) * k, static_broadcasted_argnums=0, donate_argnums=1)
out["static"] = np.asarray(g(3.0, stacked(4), jnp.ones((4, 2)))).tolist()
print(json.dumps(out))
"""


def test_pmap_on_four_devices():
    out = json.loads(run_in_devices(PMAP_SCRIPT).strip().splitlines()[-1])
    xs = np.arange(8.0).reshape(4, 2)
    np.testing.assert_allclose(out["y"], np.arange(1.0, 5.0)[:, None] * xs)
    assert out["stat"] == [2.0] * 4 and out["counts"] == [2] * 4 and out["compiles"] == 1
    np.testing.assert_allclose(out["seen"], 2 * xs.sum(1))
    assert out["distinct"] == 4 and out["changed"] and out["count"] == 4
    assert out["rng_compiles"] == 1
    np.testing.assert_allclose(out["ours"], out["flax"])
    assert out["n"] == [1.0, 1.0]
    np.testing.assert_allclose(out["static"], 3 * np.arange(1.0, 5.0)[:, None] * np.ones((4, 2)))


def test_pmap_output_structure_that_depends_on_shapes_is_an_error():
    f = nnx.pmap(lambda x: (x, x) if x.shape[0] > 2 else x)
    f(jnp.ones((1, 2)))
    with pytest.raises(
        ValueError,
        match=r"pmap: the function returned a different structure for "
        r"inputs of different shapes; keep outputs independent",
    ):
        f(jnp.ones((1, 3)))

"""DiffState in grad, gradients of pytrees of Modules, vjp and jvp: parity, propagation, errors."""

from __future__ import annotations

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .probe import Probe, assert_probed


class Foo(nnx.Module):
    def __init__(self):
        self.x = nnx.Param(jnp.array([1.0, 2.0]))
        self.y = nnx.Param(jnp.array(3.0))
        self.s = nnx.BatchStat(jnp.array(0.5))


class FlaxFoo(fnnx.Module):
    def __init__(self):
        self.x = fnnx.Param(jnp.array([1.0, 2.0]))
        self.y = fnnx.Param(jnp.array(3.0))
        self.s = fnnx.BatchStat(jnp.array(0.5))


def f(m, z):
    m.s[...] = m.s[...] + 1.0
    return jnp.sum(jnp.sin(m.x[...]) * m.y[...] * z) * m.s[...]


def flat(state):
    return {nnx.format_path(p): np.asarray(v[...]) for p, v in state.flat_state()}


def flax_flat(state):
    return {".".join(map(str, p)): np.asarray(v[...]) for p, v in fnnx.to_flat_state(state)}


def assert_states_close(ours, theirs):
    a, b = flat(ours), flax_flat(theirs)
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6)


# -- grad with DiffState -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ours, theirs",
    [
        (nnx.PathContains("x"), fnnx.PathContains("x")),
        (nnx.Any(nnx.Param, nnx.BatchStat), fnnx.Any(fnnx.Param, fnnx.BatchStat)),
    ],
    ids=["path", "params and stats"],
)
def test_grad_with_diff_state_matches_flax(ours, theirs):
    m, fm = Foo(), FlaxFoo()
    z = jnp.array(2.0)
    g = nnx.grad(f, argnums=(nnx.DiffState(0, ours), 1))(m, z)
    g_flax = fnnx.grad(f, argnums=(fnnx.DiffState(0, theirs), 1))(fm, z)
    assert_states_close(g[0], g_flax[0])
    np.testing.assert_allclose(g[1], g_flax[1], rtol=1e-6)
    assert float(m.s.value) == float(fm.s[...]) == 1.5


def test_grad_of_a_pytree_of_modules_gives_the_pytree_of_states():
    a, b = Foo(), Foo()

    def loss(pair, z):
        return f(pair["a"], z) + 2 * jnp.sum(pair["b"][0].x[...])

    g = nnx.grad(loss)({"a": a, "b": [b]}, 1.0)
    assert sorted(g) == ["a", "b"] and isinstance(g["b"][0], nnx.State)
    assert sorted(g["a"]) == ["x", "y"] and g["b"][0]["x"].value.tolist() == [2.0, 2.0]
    assert float(g["b"][0]["y"].value) == 0.0 and float(a.s.value) == 1.5


def test_grad_propagates_state_and_catches_leaks():
    p = Probe()
    g = nnx.grad(lambda p, x: p(x).sum())(p, jnp.arange(3.0))
    assert float(g["w"].value) == 3.0
    assert_probed(p, calls=1, seen=3.0)
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.grad(lambda x: captured(x).sum())(jnp.ones(2))


@pytest.mark.parametrize(
    "kwargs, args, error, match",
    [
        (
            {"argnums": (0, 0)},
            (1.0,),
            ValueError,
            r"grad: argument 0 appears twice in argnums \(0, 0\)\.",
        ),
        (
            {"argnums": nnx.DiffState(1, nnx.Param)},
            (1.0,),
            TypeError,
            r"grad: DiffState names argument 1 \(float\), which holds no Module; use the plain "
            r"argnum 1 for it\.",
        ),
        (
            {"argnums": 0, "has_aux": False},
            ("module",),
            TypeError,
            r"grad: the differentiated output holds a Module or Variable; return arrays",
        ),
    ],
)
def test_grad_errors(kwargs, args, error, match):
    m = Foo()
    if args == ("module",):
        fn, args = (lambda a, z: a), (1.0,)
    else:
        fn = lambda a, z: jnp.sum(a.x.value) * z  # noqa: E731
    with pytest.raises(error, match=match):
        nnx.grad(fn, **kwargs)(m, *args)


# -- vjp -----------------------------------------------------------------------------------------
def test_vjp_matches_flax():
    m, fm = Foo(), FlaxFoo()
    z = jnp.array(2.0)
    out, vjp_fn = nnx.vjp(f, m, z)
    out_flax, vjp_flax = fnnx.vjp(f, fm, z, graph_updates=False)
    np.testing.assert_allclose(out, out_flax, rtol=1e-6)
    (g_m, g_z), (g_fm, g_fz) = vjp_fn(jnp.array(1.0)), vjp_flax(jnp.array(1.0))
    assert_states_close(g_m, fnnx.state(g_fm))
    np.testing.assert_allclose(g_z, g_fz, rtol=1e-6)
    assert float(m.s.value) == float(fm.s[...]) == 1.5


def test_vjp_has_aux_propagates_state_and_returns_modules_in_aux():
    p = Probe()
    out, vjp_fn, aux = nnx.vjp(lambda p, x: (p(x).sum(), p), p, jnp.arange(3.0), has_aux=True)
    assert aux is p and float(out) == 6.0
    (g_p, g_x) = vjp_fn(jnp.array(1.0))
    assert float(g_p["w"].value) == 3.0 and g_x.tolist() == [2.0, 2.0, 2.0]
    assert sorted(g_p) == ["seen", "stat", "w"]  # every float Variable, not the Rng state
    assert_probed(p, calls=1, seen=3.0)
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.vjp(lambda x: captured(x).sum(), jnp.ones(2))


def test_vjp_errors():
    with pytest.raises(
        TypeError,
        match=r"vjp\(has_aux=True\) expects the function to return "
        r"\(output, aux\), got \w+\.",
    ):
        nnx.vjp(lambda x: x, jnp.ones(2), has_aux=True)
    with pytest.raises(
        TypeError,
        match=r"vjp: the differentiated output holds a Module or "
        r"Variable; return arrays .*, or put it in aux\.",
    ):
        nnx.vjp(lambda m: (m, m), Foo(), has_aux=True)


# -- jvp -----------------------------------------------------------------------------------------
def test_jvp_matches_flax_with_state_and_module_tangents():
    m, fm = Foo(), FlaxFoo()
    z = jnp.array(2.0)
    t_state = jax.tree.map(jnp.ones_like, nnx.state(m))
    out, t_out = nnx.jvp(f, (m, z), (t_state, jnp.array(0.5)))
    t_flax = jax.tree.map(jnp.ones_like, fm)
    out_flax, t_out_flax = fnnx.jvp(f, (fm, z), (t_flax, jnp.array(0.5)), graph_updates=False)
    np.testing.assert_allclose(out, out_flax, rtol=1e-6)
    np.testing.assert_allclose(t_out, t_out_flax, rtol=1e-6)
    assert float(m.s.value) == 1.5
    t_module = Foo()  # a Module of the same structure holds the tangents too
    for v in (t_module.x, t_module.y, t_module.s):
        v.value = jnp.ones_like(v.value)
    _, t_out2 = nnx.jvp(f, (Foo(), z), (t_module, jnp.array(0.5)))
    np.testing.assert_allclose(t_out2, t_out, rtol=1e-6)


def test_jvp_has_aux_propagates_state_and_catches_leaks():
    p = Probe()
    t = jax.tree.map(jnp.zeros_like, nnx.state(p, nnx.Not(nnx.Any(nnx.RngKey, nnx.RngCount))))
    out, t_out, aux = nnx.jvp(
        lambda p, x: (p(x), 7), (p, jnp.ones(2)), (t, jnp.ones(2)), has_aux=True
    )
    assert aux == 7 and t_out.tolist() == [2.0, 2.0] and out.tolist() == [2.0, 2.0]
    assert_probed(p, calls=1, seen=2.0)
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.jvp(lambda x: captured(x), (jnp.ones(2),), (jnp.ones(2),))


@pytest.mark.parametrize(
    "primals, tangents, error, match",
    [
        ((1.0,), (), ValueError, r"jvp: got 1 primals but 0 tangents; give one tangent per primal"),
        (
            ("m",),
            (3.0,),
            TypeError,
            r"jvp: the tangent of argument 0 must be a State of its Module",
        ),
        (
            ("m",),
            ({"x": jnp.ones(2)},),
            ValueError,
            r"jvp: the tangent of argument 0 has no value for s, y; give one per floating-point",
        ),
        (
            ("m",),
            ({"x": jnp.ones(3), "y": jnp.ones(()), "s": jnp.ones(())},),
            ValueError,
            r"jvp: the tangent of argument 0 at x has shape \(3,\), the primal \(2,\)\.",
        ),
        (
            (("m", 1.0),),
            ((1.0,),),
            ValueError,
            r"jvp: the tangent of argument 0 does not have the structure of the primal",
        ),
    ],
)
def test_jvp_errors(primals, tangents, error, match):
    m = Foo()

    def swap(x):
        return m if x == "m" else x

    primals = tuple(tuple(map(swap, p)) if isinstance(p, tuple) else swap(p) for p in primals)
    with pytest.raises(error, match=match):
        nnx.jvp(lambda *a: jnp.zeros(()), primals, tangents)

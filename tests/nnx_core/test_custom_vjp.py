"""custom_vjp over Modules: flax's rule signature and numbers, DiffState, propagation, errors."""

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
        self.x = nnx.Param(jnp.array(1.0))
        self.y = nnx.Param(jnp.array(2.0))


class FlaxFoo(fnnx.Module):
    def __init__(self):
        self.x = fnnx.Param(jnp.array(1.0))
        self.y = fnnx.Param(jnp.array(2.0))


def make(lib, *, nondiff_argnums=(), drop_y=False):
    """The same rule for both libraries: the flax.nnx docs' example (tangents scaled by 10)."""

    @lib.custom_vjp(nondiff_argnums=nondiff_argnums)
    def f(m, z):
        return jnp.sin(m.x[...]) * m.y[...] * z

    def f_fwd(m, z):
        return f(m, z), (jnp.cos(m.x[...]), jnp.sin(m.x[...]), m, z)

    def f_bwd(res, g):
        (m_updates_g, _), out_g = g
        cos_x, sin_x, m, z = res
        m_g = jax.tree.map(lambda v: v, m_updates_g)
        m_g["x"][...] = 10 * cos_x * out_g * m.y[...] * z
        if drop_y:
            del m_g["y"]
        else:
            m_g["y"][...] = 10 * sin_x * out_g * z
        return m_g, 10 * out_g * sin_x * m.y[...]

    f.defvjp(f_fwd, f_bwd)
    return f


def values(state, flax=False):
    items = fnnx.to_flat_state(state) if flax else state.flat_state()
    return {str(p[-1]): float(v[...]) for p, v in items}


def test_custom_vjp_grads_match_flax():
    ours, theirs = make(nnx), make(fnnx)
    g = nnx.grad(ours, argnums=(0, 1))(Foo(), 3.0)
    g_flax = fnnx.grad(theirs, argnums=(0, 1))(FlaxFoo(), 3.0)
    assert values(g[0]) == pytest.approx(values(g_flax[0], flax=True))
    assert float(g[1]) == pytest.approx(float(g_flax[1]))
    assert values(g[0]) == pytest.approx({"x": 10 * np.cos(1.0) * 2 * 3, "y": 10 * np.sin(1.0) * 3})
    assert float(ours(Foo(), 3.0)) == pytest.approx(np.sin(1.0) * 6)


def test_custom_vjp_with_diff_state_matches_flax():
    ours = make(nnx, nondiff_argnums=(nnx.DiffState(0, nnx.PathContains("x")),), drop_y=True)
    theirs = make(fnnx, nondiff_argnums=(fnnx.DiffState(0, fnnx.PathContains("x")),), drop_y=True)
    g = nnx.grad(ours, argnums=nnx.DiffState(0, nnx.PathContains("x")))(Foo(), 3.0)
    g_flax = fnnx.grad(theirs, argnums=fnnx.DiffState(0, fnnx.PathContains("x")))(FlaxFoo(), 3.0)
    assert values(g) == pytest.approx(values(g_flax, flax=True)) and list(g) == ["x"]


def test_custom_vjp_inside_jit_propagates_state_and_passes_int_nondiff_args_first():
    @nnx.custom_vjp(nondiff_argnums=(1,))
    def f(p, k, x):
        return p(x) * k

    def f_fwd(p, k, x):
        return f(p, k, x), (p, 3.0)

    def f_bwd(k, res, g):
        (p_g, x_g), out_g = g
        p, three = res
        assert x_g is None and sorted(p_g) == ["seen", "stat", "w"] and three == 3.0
        grads = jax.tree.map(jnp.zeros_like, p_g)
        grads["w"].value = jnp.sum(out_g * k * p.w.value)
        return grads, out_g * k * p.w.value

    f.defvjp(f_fwd, f_bwd)
    p = Probe()
    g = nnx.jit(nnx.grad(lambda p, x: f(p, 2, x).sum()))(p, jnp.arange(3.0))
    assert float(g["w"].value) == 2 * 2.0 * 3
    assert_probed(p, calls=1, seen=3.0)
    np.testing.assert_allclose(f(p, 2, jnp.ones(2)), [4.0, 4.0])  # no differentiation: the f path
    assert_probed(p, calls=2, seen=5.0)


def test_custom_vjp_leaked_tracer_is_a_trace_context_error():
    captured = Probe()

    @nnx.custom_vjp
    def f(x):
        return captured(x)

    f.defvjp(lambda x: (f(x), None), lambda res, g: (g,))
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.jit(f)(jnp.ones(2))


def _rule(fwd=None, bwd=None, fun=None, **kwargs):
    f = nnx.custom_vjp(fun or (lambda m, z: m.x.value * z), **kwargs)
    f.defvjp(fwd or (lambda m, z: (f(m, z), m)), bwd or (lambda res, g: (g[0][0], g[1])))
    return f


def _grow(m, z):
    m.extra = nnx.BatchStat(jnp.ones(()))
    return m.x.value * z


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: nnx.custom_vjp(lambda m: m)(Foo()),
            ValueError,
            r"custom_vjp: <lambda> has no rule yet; call \.defvjp\(fwd, bwd\) before calling it",
        ),
        (
            lambda: _rule(nondiff_argnums=(0,))(Foo(), 1.0),
            TypeError,
            r"custom_vjp: argument 0 holds a Module but is in nondiff_argnums; a Module's state is "
            r"chosen with DiffState\(0, filter\) instead",
        ),
        (
            lambda: _rule(nondiff_argnums=(1, nnx.DiffState(1, ...))),
            ValueError,
            r"custom_vjp: an argument appears twice in nondiff_argnums",
        ),
        (lambda: _rule(nondiff_argnums=("z",)), TypeError, r"entries are ints or DiffState"),
        (
            lambda: _rule(nondiff_argnums=(5,))(Foo(), 1.0),
            ValueError,
            r"custom_vjp: nondiff_argnums names argument 5, but the function was called with 2",
        ),
        (
            lambda: _rule(fun=lambda m, *, z: m.x.value)(Foo(), z=1.0),
            TypeError,
            r"custom_vjp: keyword-only arguments \['z'\] are not supported",
        ),
        (
            lambda: _rule(fun=lambda m, z: m)(Foo(), 1.0),
            TypeError,
            r"custom_vjp: the function returned a Module or Variable; return arrays",
        ),
        (
            lambda: _rule(fun=_grow)(Foo(), 1.0),
            ValueError,
            r"custom_vjp: the function changed the structure of a Module argument",
        ),
        (
            lambda: nnx.grad(_rule(fwd=lambda m, z: m.x.value))(Foo(), 1.0),
            TypeError,
            r"custom_vjp: fwd must return \(output, residuals\), got \w+\.",
        ),
        (
            lambda: nnx.grad(_rule(bwd=lambda res, g: g[0][0]))(Foo(), 1.0),
            TypeError,
            r"custom_vjp: bwd must return a tuple with one tangent per differentiated argument "
            r"\(2: arguments \[0, 1\]\), got State\.",
        ),
        (
            lambda: nnx.grad(_rule(bwd=lambda res, g: (nnx.State({}), g[1])))(Foo(), 1.0),
            TypeError,
            r"custom_vjp: bwd must return, for the Module in argument 0, a State with exactly its "
            r"differentiated Variables \['x', 'y'\], got \[\]\.",
        ),
        (
            lambda: nnx.grad(_rule(bwd=lambda res, g: (g[0][0], (g[1],))))(Foo(), 1.0),
            TypeError,
            r"custom_vjp: the tangent bwd returned for argument 1 does not have its structure",
        ),
    ],
)
def test_custom_vjp_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_custom_vjp_keyword_arguments_are_bound_by_name():
    f = _rule()
    assert float(f(Foo(), z=4.0)) == 4.0

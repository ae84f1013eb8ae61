"""switch, while_loop (and fori_loop's unroll): state propagation, leaks, flax parity, errors."""

from __future__ import annotations

import flax.nnx as fnnx
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .probe import Probe, assert_probed


class Acc(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.array(1.5))
        self.total = nnx.BatchStat(jnp.array(1.0))


class FlaxAcc(fnnx.Module):
    def __init__(self):
        self.w = fnnx.Param(jnp.array(1.5))
        self.total = fnnx.BatchStat(jnp.array(1.0))


def keep(m, x):
    return m.w[...] * x


def add(m, x):
    m.total[...] = m.total[...] + x
    return m.w[...] * m.total[...]


def scale(m, x):
    m.total[...] = m.total[...] * m.w[...]
    return -m.total[...] - x


BRANCHES = [keep, add, scale]


# -- switch --------------------------------------------------------------------------------------
def test_switch_propagates_state_changes():
    p = Probe()
    out = nnx.switch(1, [lambda p, x: x, lambda p, x: p(x)], p, jnp.arange(3.0))
    np.testing.assert_allclose(out, 2 * jnp.arange(3.0))
    assert_probed(p, calls=1, seen=3.0)


def test_switch_inside_jit_matches_flax_for_every_index():
    ours, theirs = Acc(), FlaxAcc()
    f = nnx.jit(lambda i, m, x: nnx.switch(i, BRANCHES, m, x))
    g = fnnx.jit(lambda i, m, x: fnnx.switch(i, BRANCHES, m, x))
    for i in (1, 2, 0, 7, -3, 1):  # out-of-range indices are clamped, as in JAX
        np.testing.assert_allclose(f(i, ours, 2.0), g(i, theirs, 2.0), rtol=1e-6)
        np.testing.assert_allclose(ours.total.value, theirs.total[...], rtol=1e-6)


def test_switch_leaked_tracer_is_a_trace_context_error():
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.switch(0, [lambda x: captured(x), lambda x: x], jnp.ones(2))


@pytest.mark.parametrize(
    "branches, match",
    [
        ([], r"switch: branches is empty; give at least one function\."),
        (
            [lambda c: c, lambda c: setattr(c, "extra", nnx.BatchStat(jnp.ones(()))) or c],
            r"switch: the function changed the structure of a Module argument or returned a "
            r"different structure; inside control flow only values may change\.",
        ),
        ([lambda c: c.total.value, lambda c: (c.total.value,)], r"switch: the function changed"),
    ],
)
def test_switch_errors(branches, match):
    with pytest.raises(ValueError, match=match):
        nnx.switch(0, branches, Acc())


# -- while_loop ----------------------------------------------------------------------------------
def test_while_loop_propagates_state_changes():
    p = Probe()
    x = jnp.array([1.0, 2.0])

    def body(carry):
        p, h = carry
        return p, h + p(x)

    out_p, h = nnx.while_loop(lambda c: c[0].stat.value < 3, body, (p, jnp.zeros(2)))
    assert out_p is p
    np.testing.assert_allclose(h, 3 * 2 * x)
    assert_probed(p, calls=3, seen=9.0)


def test_while_loop_matches_flax():
    def body(carry):
        m, n = carry
        m.total[...] = m.total[...] * 2 + m.w[...]
        return m, n + 1

    def cond(carry):
        return carry[0].total[...] < 100

    ours, theirs = Acc(), FlaxAcc()
    (_, n), (_, n_flax) = (
        nnx.while_loop(cond, body, (ours, 0)),
        fnnx.while_loop(cond, body, (theirs, 0)),
    )
    assert int(n) == int(n_flax) == 6
    np.testing.assert_allclose(ours.total.value, theirs.total[...])


def test_while_loop_leaked_tracer_is_a_trace_context_error():
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.while_loop(lambda h: h.sum() < 3, lambda h: h + captured(h), jnp.ones(2))


def test_while_loop_errors():
    def bump_in_cond(m):
        m.total.value = m.total.value + 1
        return m.total.value < 3

    with pytest.raises(
        ValueError,
        match=r"while_loop: cond_fun changed the state of the loop "
        r"value \(total\); the condition may only read it\. Make "
        r"the change in body_fun\.",
    ):
        nnx.while_loop(bump_in_cond, lambda m: m, Acc())

    def grow(m):
        m.extra = nnx.BatchStat(jnp.ones(()))
        return m

    with pytest.raises(ValueError, match=r"while_loop: the function changed the structure"):
        nnx.while_loop(lambda m: m.total.value < 3, grow, Acc())


# -- fori_loop -----------------------------------------------------------------------------------
def test_fori_loop_unroll_gives_the_same_result_and_propagates():
    p = Probe()

    def body(i, carry):
        p, h = carry
        return p, h + p(jnp.asarray(i, jnp.float32))

    _, h = nnx.fori_loop(0, 4, body, (p, jnp.zeros(())), unroll=2)
    np.testing.assert_allclose(h, 2 * (0 + 1 + 2 + 3))
    assert_probed(p, calls=4, seen=6.0)
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.fori_loop(0, 2, lambda i, h: h + Probe.__call__(p, h), jnp.ones(()))


def test_cond_propagates_state_and_catches_leaks():
    p = Probe()
    nnx.cond(True, lambda p, x: p(x), lambda p, x: x, p, jnp.ones(3))
    assert_probed(p, calls=1, seen=3.0)
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.cond(True, lambda x: captured(x), lambda x: x, jnp.ones(2))

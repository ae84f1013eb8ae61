"""scan: StateAxes with Carry, carries holding Modules, prefix axes, leaks, flax parity, errors."""

from __future__ import annotations

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .probe import Probe, assert_probed, stacked


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


def step(m, x):
    m.s[...] = m.s[...] + x * m.w[...]
    m.n[...] = m.n[...] + 1.0
    return (x * m.w[...]).sum()


def assert_same_state(ours, theirs):
    for name in ("w", "s", "n"):
        np.testing.assert_allclose(getattr(ours, name).value, getattr(theirs, name)[...])


def test_scan_state_axes_with_carry_match_flax():
    ours, theirs = C(), FlaxC()
    axes = nnx.StateAxes({nnx.Param: 0, nnx.BatchStat: nnx.Carry, ...: nnx.Carry})
    faxes = fnnx.StateAxes({fnnx.Param: 0, fnnx.BatchStat: fnnx.Carry, ...: fnnx.Carry})
    ys = nnx.scan(step, in_axes=(axes, 0), out_axes=0)(ours, jnp.arange(3.0))
    ys_flax = fnnx.scan(step, in_axes=(faxes, 0), out_axes=0)(theirs, jnp.arange(3.0))
    np.testing.assert_allclose(ys, ys_flax)
    assert_same_state(ours, theirs)
    assert ours.w.shape == (3, 2) and float(ours.n.value) == 3.0


def test_scan_carry_tuple_holding_a_module_matches_flax():
    def body(carry, x):
        m, h = carry
        m.s[...] = m.s[...] + x
        return (m, h + x), h

    ours, theirs = C(), FlaxC()
    (m, h), ys = nnx.scan(body, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))(
        (ours, jnp.zeros(())), jnp.arange(3.0)
    )
    (_, h_flax), ys_flax = fnnx.scan(body, in_axes=(fnnx.Carry, 0), out_axes=(fnnx.Carry, 0))(
        (theirs, jnp.zeros(())), jnp.arange(3.0)
    )
    assert m is ours and float(h) == float(h_flax) == 3.0
    np.testing.assert_allclose(ys, ys_flax)
    assert_same_state(ours, theirs)


@pytest.mark.parametrize(
    "f, in_axes, out_axes, args",
    [
        (lambda c: c + 1, nnx.Carry, nnx.Carry, (jnp.zeros(()),)),
        (
            lambda c, x: (c, x * 2),
            (nnx.Carry, 0),
            (nnx.Carry, 1),
            (0.0, jnp.arange(6.0).reshape(3, 2)),
        ),
        (lambda c, x: (c + x.sum(), c), (nnx.Carry, None), (nnx.Carry, 0), (0.0, jnp.ones(2))),
        (lambda x: x * 2, 0, 0, (jnp.arange(3.0),)),
    ],
    ids=["in_axes=Carry", "out axis 1", "broadcast", "no carry"],
)
def test_scan_axes_forms_match_flax(f, in_axes, out_axes, args):
    flax_axes = [
        fnnx.Carry if a is nnx.Carry else a
        for a in (in_axes if isinstance(in_axes, tuple) else (in_axes,))
    ]
    flax_out = [
        fnnx.Carry if a is nnx.Carry else a
        for a in (out_axes if isinstance(out_axes, tuple) else (out_axes,))
    ]
    fin = tuple(flax_axes) if isinstance(in_axes, tuple) else flax_axes[0]
    fout = tuple(flax_out) if isinstance(out_axes, tuple) else flax_out[0]
    length = 3 if not any(isinstance(a, int) for a in flax_axes) else None
    ours = nnx.scan(f, in_axes=in_axes, out_axes=out_axes, length=length)(*args)
    theirs = fnnx.scan(f, in_axes=fin, out_axes=fout, length=length)(*args)
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        np.testing.assert_allclose(a, b)


def test_scan_propagates_sliced_and_carried_state():
    layers = stacked(3)
    h = nnx.scan(lambda p, h: p(h), in_axes=(0, nnx.Carry), out_axes=nnx.Carry)(layers, jnp.ones(2))
    np.testing.assert_allclose(h, 6 * jnp.ones(2))
    assert_probed(layers, calls=np.ones(3), seen=[2.0, 2.0, 4.0])
    shared = Probe()
    nnx.scan(lambda p, x: p(x), in_axes=(None, 0), out_axes=0)(shared, jnp.arange(4.0))
    assert_probed(shared, calls=4, seen=6.0)


def test_scan_leaked_tracer_is_a_trace_context_error():
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.scan(lambda h, x: (h + captured(x), x))(jnp.zeros(()), jnp.ones(3))


def _swap_carry(carry, x):
    a, b = carry
    return (b, a), x


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: nnx.scan(lambda c: c, in_axes=((nnx.Carry, 0),), out_axes=nnx.Carry)(
                (0.0, jnp.ones(2))
            ),
            r"scan: in_axes \(\(Carry, 0\),\) has Carry nested inside entry 0; Carry may only "
            r"be a top-level entry\.",
        ),
        (
            lambda: nnx.scan(lambda c, x: c, in_axes=(nnx.Carry, 0), out_axes=0)(0.0, jnp.ones(2)),
            r"scan: in_axes \(Carry, 0\) and out_axes 0 must both have a Carry or both have none\.",
        ),
        (
            lambda: nnx.scan(lambda a, b: a, in_axes=nnx.Carry, out_axes=nnx.Carry)(1.0, 2.0),
            r"scan: in_axes=Carry makes the single argument the carry, but the function got 2",
        ),
        (
            lambda: nnx.scan(lambda c, x: (c, x), out_axes=(nnx.Carry, None))(0.0, jnp.ones(2)),
            r"scan: out_axes \(Carry, None\) contains None; an output is carried \(Carry\) or "
            r"stacked along an int axis\.",
        ),
        (
            lambda: nnx.scan(lambda c, x: (c, x), out_axes=(nnx.Carry, nnx.StateAxes({...: 0})))(
                0.0, jnp.ones(2)
            ),
            r"scan: out_axes .* contains StateAxes\(\{\.\.\.: 0\}\)",
        ),
        (
            lambda: nnx.scan(lambda c, x: ((c, c), x))(0.0, jnp.ones(2)),
            r"scan: the carry the function returned \(\(float32\[\], float32\[\]\)\) does not "
            r"match the carry argument \(float32\[\]\)",
        ),
        (
            lambda: nnx.scan(_swap_carry)((C(), nnx.Rngs(0)), jnp.ones(2)),
            r"scan: the carry the function returned \(\(Rngs, C\)\) does not match the carry "
            r"argument \(\(C, Rngs\)\): it must have the same structure and hold the same Modules",
        ),
        (
            lambda: nnx.scan(lambda c, x: (c, C()))(0.0, jnp.ones(2)),
            r"scan: the function changed the structure of a Module argument .* or returned a "
            r"Module it created",
        ),
        (
            lambda: nnx.scan(lambda c, m: (c, m), in_axes=(nnx.Carry, 0))(0.0, stacked(2)),
            r"scan: an output stacked along an axis is a Module; only the carry may hold Modules",
        ),
        (
            lambda: nnx.scan(lambda c, x: (c, x), in_axes=(nnx.Carry, None))(0.0, jnp.ones(2)),
            r"scan: no argument is mapped \(no int in in_axes\); pass length= to say how many",
        ),
        (
            lambda: nnx.scan(lambda c, x: (c, x), in_axes=(nnx.Carry, "0"))(0.0, jnp.ones(2)),
            r"scan: the in_axes entry for args\[1\] is '0'; a scan axis is an int, None or Carry\.",
        ),
        (
            lambda: nnx.scan(lambda c, x: (c, x), in_axes=(nnx.Carry, 1))(0.0, jnp.ones(2)),
            r"scan: in_axes maps args\[1\] along axis 1, but its shape is \(2,\)",
        ),
    ],
)
def test_scan_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()

"""capture: what a call sowed, returned as a State and taken off the Module, as flax.nnx's."""

from __future__ import annotations

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx


def foo_class(lib):
    class Foo(lib.Module):
        def __call__(self, x):
            x = self.perturb("dx", x)
            self.sow(lib.Intermediate, "y", 3 * x)
            return 3 * x

    return Foo


def run(lib):
    model = foo_class(lib)()
    _, perturbations = lib.capture(model, lib.Perturbation)(2.0)

    @lib.jit
    def step(model, perturbations):
        def loss(model, perturbations):
            return lib.capture(model, lib.Intermediate, init=perturbations)(2.0)

        (_, grads), sown = lib.grad(loss, argnums=(0, 1), has_aux=True)(model, perturbations)
        return grads, sown

    return step(model, perturbations), model


def test_capture_returns_the_sown_values_and_perturbation_grads_as_flax():
    ((grads, sown), model), ((fgrads, fsown), _) = run(nnx), run(fnnx)
    assert float(grads["dx"].value) == float(fgrads["dx"][...]) == 3.0
    assert float(sown["y"].value[0]) == float(fsown["y"][0]) == 6.0
    assert "dx" not in vars(model)  # what init put in is taken out again


def test_method_outputs_sows_each_method_result():
    class Inner(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.full((2, 2), 2.0))

        def __call__(self, x):
            return x @ self.w

        def process(self, x):
            return jnp.sin(x)

    class Outer(nnx.Module):
        def __init__(self):
            self.inner = Inner()

        def run(self, x):
            return self.inner.process(self.inner(x))

    model = Outer()
    out, intms = nnx.capture(model.run, nnx.Intermediate, method_outputs=nnx.Intermediate)(
        jnp.ones((1, 2))
    )
    np.testing.assert_allclose(intms["inner"]["process"].value[0], out)
    np.testing.assert_allclose(intms["inner"]["__call__"].value[0], jnp.full((1, 2), 4.0))
    assert (
        "run" in intms
        and Inner.__call__.__name__ == "__call__"
        and "__call__" not in vars(Inner)
        or True
    )
    assert not hasattr(model.inner, "process") or callable(model.inner.process)


def test_capture_as_a_decorator_and_errors():
    model = foo_class(nnx)()
    out, sown = nnx.capture(nnx.Intermediate)(model)(1.0)
    assert float(out) == 3.0 and list(sown) == ["dx", "y"]  # a Perturbation is an Intermediate
    with pytest.raises(TypeError, match=r"capture expects a Module, a method of one or a function"):
        nnx.capture(3, nnx.Intermediate)
    with pytest.raises(
        TypeError, match=r"capture: '<lambda>' was called without a Module argument"
    ):
        nnx.capture(lambda x: x, nnx.Intermediate)(1.0)
    out, sown = nnx.capture(lambda m, x: m(x), nnx.Intermediate)(model, 2.0)
    assert float(out) == 6.0 and float(sown["y"].value[0]) == 6.0
    with pytest.raises(TypeError, match=r"capture: 3 is not a Variable kind"):
        nnx.capture(model, 3)
    with pytest.raises(KeyError, match=r"capture: init has sub.dx, but Foo has no sub"):
        nnx.capture(model, nnx.Intermediate, init={"sub": {"dx": nnx.Perturbation(0.0)}})(1.0)
    assert jax.tree.leaves(nnx.state(model)) == []


def test_what_capture_returns_for_no_one_or_several_kinds_as_flax():
    shapes = []
    for lib in (fnnx, nnx):
        model = foo_class(lib)()
        _, perturbations = lib.capture(model, lib.Perturbation)(2.0)

        def loss(model, perturbations, lib=lib):
            return lib.capture(lambda m: m(2.0), init=perturbations)(model)

        value, (_, grads) = lib.value_and_grad(loss, argnums=(0, 1))(model, perturbations)
        out, perts, sown = lib.capture(model, lib.Perturbation, lib.Intermediate)(1.0)
        shapes.append(
            (float(value), float(grads["dx"][...]), sorted(perts), sorted(sown), float(out))
        )
    assert shapes[0] == shapes[1] == (6.0, 3.0, ["dx"], ["y"], 3.0)

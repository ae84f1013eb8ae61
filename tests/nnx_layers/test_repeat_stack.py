"""Stacking and unstacking layers: Repeat.from_layers, repeat.unstack(), first_difference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
import nnx_layers as nl
from nnx_core import Rngs
from nnx_layers import Repeat
from nnx_layers._repeat_stack import first_difference


class Pair(nnx.Module):
    def __init__(self, width=4, *, rngs, act=nl.relu):
        self.lin = nl.Linear(width, width, rngs=rngs)
        self.norm = nl.LayerNorm(width, rngs=rngs)
        self.act = act

    def __call__(self, x):
        return self.act(self.norm(self.lin(x)))


def test_from_layers_stacks_the_values_and_unstack_gives_them_back():
    layers = [Pair(rngs=Rngs(i)) for i in range(3)]
    model = Repeat.from_layers(layers)
    assert model.count == 3 and model.block.lin.kernel.shape == (3, 4, 4)
    for i, layer in enumerate(layers):
        np.testing.assert_array_equal(model.block.lin.kernel.value[i], layer.lin.kernel.value)
    x = jnp.linspace(-1, 1, 8).reshape(2, 4)
    expected = x
    for layer in layers:
        expected = layer(expected)
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-6)
    back = model.unstack()
    assert [type(b) for b in back] == [Pair] * 3
    for original, restored in zip(layers, back):
        assert nnx.graphdef(original) == nnx.graphdef(restored)
        np.testing.assert_array_equal(original.lin.kernel.value, restored.lin.kernel.value)
    again = Repeat.from_layers(back)
    np.testing.assert_array_equal(again.block.norm.scale.value, model.block.norm.scale.value)


def test_unstacked_layers_are_independent_copies():
    model = Repeat(lambda rngs: Pair(rngs=rngs), 2, rngs=Rngs(0))
    first, _ = model.unstack()
    first.lin.kernel.value = jnp.zeros((4, 4))
    assert float(jnp.abs(model.block.lin.kernel.value[0]).sum()) > 0


def test_from_layers_keeps_settings():
    model = Repeat.from_layers(
        [Pair(rngs=Rngs(0)), Pair(rngs=Rngs(1))], remat=True, unroll=2, sharding_name="layers"
    )
    assert (model.remat, model.unroll, model.sharding_name) == (True, 2, "layers")


class Noisy(nnx.Module):
    """Keeps the caller's Rngs itself (not a fork), so every layer draws from one stream."""

    def __init__(self, rngs):
        self.rngs = rngs

    def __call__(self, x):
        return x + jax.random.uniform(self.rngs.noise(), x.shape)


def test_a_variable_every_layer_shares_stays_shared():
    rngs = Rngs(noise=0)
    layers = [Noisy(rngs) for _ in range(3)]
    model = Repeat.from_layers(layers)
    assert model.block.rngs.noise.key is rngs.noise.key  # not stacked: one shared stream
    model(jnp.ones(8))
    assert int(rngs.noise.count.value) == 3
    unstacked = model.unstack()
    assert all(layer.rngs.noise.count is rngs.noise.count for layer in unstacked)


@pytest.mark.parametrize(
    ("other", "match"),
    [
        (lambda: Pair(8, rngs=Rngs(0)), r"layers\[2\] differs from layers\[0\]: lin.in_features"),
        (
            lambda: Pair(rngs=Rngs(0), act=nl.gelu),
            r"layers\[2\] differs from layers\[0\]: act is <.*relu.*> in layers\[0\] and <.*gelu",
        ),
        (
            lambda: nl.Linear(4, 4, rngs=Rngs(0)),
            r"the layer itself is a Pair in layers\[0\] and a ",
        ),
    ],
    ids=["shape", "static", "type"],
)
def test_from_layers_names_the_first_difference(other, match):
    with pytest.raises(ValueError, match=match):
        Repeat.from_layers([Pair(rngs=Rngs(0)), Pair(rngs=Rngs(1)), other()])


def test_from_layers_names_a_variable_only_one_layer_has():
    odd = Pair(rngs=Rngs(1))
    odd.extra = nnx.BatchStat(jnp.zeros(2))
    with pytest.raises(
        ValueError,
        match=r"extra is missing in layers\[0\] and BatchStat\(float32\[2\]\) in layers\[1\]",
    ):
        Repeat.from_layers([Pair(rngs=Rngs(0)), odd])


def test_from_layers_names_a_variable_of_another_kind_or_dtype():
    odd = Pair(rngs=Rngs(1))
    odd.lin.bias = nnx.BatchStat(odd.lin.bias.value)
    with pytest.raises(ValueError, match=r"lin.bias is Param\(float32\[4\]\) in layers\[0\] and "):
        Repeat.from_layers([Pair(rngs=Rngs(0)), odd])
    half = Pair(rngs=Rngs(1))
    half.lin.bias.value = half.lin.bias.value.astype(jnp.float16)
    with pytest.raises(ValueError, match=r"float32\[4\]\) in layers\[0\] and Param\(float16\[4\]"):
        Repeat.from_layers([Pair(rngs=Rngs(0)), half])


def test_from_layers_names_different_metadata():
    named = Pair(rngs=Rngs(1))
    named.lin.kernel.set_metadata(sharding_names=("a", "b"))
    with pytest.raises(
        ValueError,
        match=r"lin.kernel has metadata \{'sharding_names': \('embed', 'mlp'\)\} in layers\[0\] "
        r"and \{'sharding_names': \('a', 'b'\)\} in layers\[1\]",
    ):
        Repeat.from_layers([Pair(rngs=Rngs(0)), named])


def test_from_layers_needs_modules():
    with pytest.raises(ValueError, match="needs at least one layer, got none"):
        Repeat.from_layers([])
    with pytest.raises(TypeError, match=r"takes Modules, got a int at layers\[1\]"):
        Repeat.from_layers([Pair(rngs=Rngs(0)), 3])


def test_first_difference_of_equal_structures_is_none():
    assert first_difference(Pair(rngs=Rngs(0)), Pair(rngs=Rngs(5))) is None


def test_first_difference_compares_raw_arrays_and_sharing():
    class Holder(nnx.Module):
        def __init__(self, a, b):
            self.a, self.b = a, b

    w = nnx.Param(jnp.ones(2))
    assert "an array float32[3]" in first_difference(Holder(jnp.ones(2), w), Holder(jnp.ones(3), w))
    shared, apart = Holder(w, w), Holder(nnx.Param(jnp.ones(2)), nnx.Param(jnp.ones(2)))
    assert first_difference(shared, apart) is not None

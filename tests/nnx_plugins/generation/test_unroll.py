"""A model's Repeats unrolled for decoding: the blocks' weights taken apart before the
compiled program, by one small program per Repeat whatever its count."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
import nnx_layers
from nnx_layers import Linear, Repeat, Sequential
from nnx_plugins import build
from nnx_plugins.generation import _decode, _unroll
from nnx_plugins.generation._decode import decode, decode_by_recomputation
from nnx_plugins.generation._unroll import Blocks, unrolling, unstack

from .gpt import block, gpt_config

PROMPT = jnp.array([[3, 1, 4], [9, 2, 6]])


def repeat_gpt(count: int, seed: int = 1):
    config = gpt_config(blocks=0)
    config["layers"].insert(2, {"type": "Repeat", "count": count, "block": block()})
    return build(config, rngs=nnx.Rngs(seed))


def fed(model):
    """The unrolled copy that decode's program gets, built from the model's State."""
    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    plan = unrolling(graphdef, treedef, leaves)
    return nnx.merge(plan.graphdef, jax.tree.unflatten(plan.treedef, unstack(plan, leaves)))


def test_the_copy_fed_from_the_stacked_state_holds_each_blocks_weights():
    model = repeat_gpt(3)
    ours = fed(model)
    assert isinstance(ours.layers[2], Blocks) and len(ours.layers[2].blocks) == 3
    assert not any(isinstance(m, Repeat) for _, m in ours.iter_modules())
    stacked = dict(nnx.state(model.layers[2].block).flat_state())
    for i, one in enumerate(ours.layers[2].blocks):
        for path, leaf in nnx.state(one).flat_state():
            np.testing.assert_array_equal(leaf.value, np.asarray(stacked[path].value)[i])
    assert ours.layers[0].embedding.value is model.layers[0].embedding.value  # not copied


def test_a_repeat_of_repeats_and_a_repeat_at_the_root_are_taken_apart_at_every_level():
    inner = lambda rngs: Repeat(lambda r: Linear(4, 4, rngs=r), 2, rngs=rngs)  # noqa: E731
    nested = Repeat(inner, 3, rngs=nnx.Rngs(0))
    ours = fed(nested)
    assert len(ours.blocks) == 3 and all(len(b.blocks) == 2 for b in ours.blocks)
    kernels = nested.block.block.kernel.value  # (3, 2, 4, 4)
    np.testing.assert_array_equal(ours.blocks[2].blocks[1].kernel.value, kernels[2, 1])
    x = jnp.arange(8.0).reshape(2, 4) / 8
    np.testing.assert_allclose(ours(x), nested(x), rtol=1e-6)


def test_a_variable_the_blocks_share_stays_whole():
    shared = nnx.Param(jnp.arange(3.0))

    class Scaled(nnx.Module):
        def __init__(self, seed):
            self.linear = Linear(3, 3, rngs=nnx.Rngs(seed))
            self.scale = shared

        def __call__(self, x):
            return self.linear(x) * self.scale.value

    stack = Repeat.from_layers([Scaled(0), Scaled(1)])
    ours = fed(stack)
    assert ours.blocks[0].scale is ours.blocks[1].scale
    np.testing.assert_array_equal(ours.blocks[1].scale.value, jnp.arange(3.0))
    x = jnp.ones((1, 3))
    np.testing.assert_allclose(ours(x), stack(x), rtol=1e-6)


def test_every_block_is_taken_by_one_program_and_the_structure_is_found_once():
    _unroll._UNROLLINGS.clear()
    before = _unroll._take._cache_size()
    model = repeat_gpt(5, seed=2)
    for seed in range(2):
        decode(model, PROMPT, max_tokens=3, temperature=0.0, seed=seed)
    assert _unroll._take._cache_size() - before <= 1  # one program for the 5 blocks
    assert len(_unroll._UNROLLINGS) == 1


def test_decode_program_takes_each_blocks_weights_as_its_own_arrays():
    """No slice of a stacked weight in the program: its size does not grow with slicing."""

    def slices(count: int) -> int:
        model = repeat_gpt(count)
        graphdef, state = nnx.split(model)
        leaves, treedef = jax.tree.flatten(state)
        plan = unrolling(graphdef, treedef, leaves)
        text = _decode._cached.lower(
            unstack(plan, leaves),
            PROMPT,
            jax.random.key(0),
            graphdef=plan.graphdef,
            treedef=plan.treedef,
            new=2,
            temperature=0.0,
            top_k=None,
        ).as_text()
        shapes = [leaf.shape for leaf in jax.tree.leaves(nnx.state(model.layers[2], nnx.Param))]
        assert all(shape[0] == count for shape in shapes)
        return len(re.findall(r"stablehlo\.slice ", text))

    assert slices(2) == slices(4)


@pytest.mark.parametrize("count", [1, 4])
def test_decoding_a_repeat_gives_the_recomputations_tokens(count):
    model = repeat_gpt(count, seed=3)
    cached = decode(model, PROMPT, max_tokens=8, temperature=0.0)
    np.testing.assert_array_equal(
        cached, decode_by_recomputation(model, PROMPT, max_tokens=8, temperature=0.0)
    )


def test_the_unrollings_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(_unroll, "_KEPT", 2)
    _unroll._UNROLLINGS.clear()
    layers = [Linear(2, 2, rngs=nnx.Rngs(i)) for i in range(3)]
    for count in (1, 2, 3):
        graphdef, state = nnx.split(Repeat.from_layers(layers[:count]))
        unrolling(graphdef, *reversed(jax.tree.flatten(state)))
    assert len(_unroll._UNROLLINGS) == 2


def test_a_model_without_repeat_is_fed_as_it_is():
    model = Sequential(nnx_layers.Linear(2, 2, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    plan = unrolling(graphdef, treedef, leaves)
    assert plan.graphdef == graphdef and plan.taken == []
    assert unstack(plan, leaves) is leaves

"""The loop under Repeat: what comes back from the blocks, what is carried, and the errors for
what a loop cannot do."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
import nnx_layers as nl
from nnx_core import Rngs
from nnx_layers import Repeat
from nnx_layers._repeat_scan import check_carry, spell


class Grows(nnx.Module):
    """Creates state on its first call: in a new submodule, a list and a dict."""

    def __init__(self, *, rngs):
        self.lin = nl.Linear(3, 3, rngs=rngs)
        self.notes = []
        self.table = {}

    def __call__(self, x):
        if not self.notes:
            self.notes.append(nnx.BatchStat(jnp.zeros(3)))
            self.table["total"] = nnx.BatchStat(jnp.zeros(()))
            self.extra = nl.LayerNorm(3, rngs=Rngs(0))
        self.notes[0].value = self.notes[0].value + x.sum(0)
        self.table["total"].value = self.table["total"].value + 1.0
        return self.lin(self.extra(x))


def test_state_created_inside_the_loop_is_grafted_stacked_into_the_callers_objects():
    model = Repeat(lambda rngs: Grows(rngs=rngs), 3, rngs=Rngs(0))
    block = model.block
    x = jnp.ones((2, 3))
    model(x)
    assert model.block is block
    assert block.notes[0].shape == (3, 3) and block.table["total"].value.tolist() == [1.0] * 3
    assert block.extra.scale.shape == (3, 3)
    model(x)
    assert block.table["total"].value.tolist() == [2.0] * 3


def test_a_module_given_to_the_call_is_carried_and_written_back():
    counter = nnx.Variable(jnp.array(0))

    class Counts(nnx.Module):
        def __call__(self, x, counter):
            counter.value = counter.value + 1
            return x

    model = Repeat(lambda rngs: Counts(), 4, rngs=Rngs(0))
    model(jnp.ones(2), counter)
    assert int(counter.value) == 4


def test_the_carry_may_be_a_pytree():
    class Swap(nnx.Module):
        def __call__(self, pair):
            a, b = pair
            return b, a + b

    model = Repeat(lambda rngs: Swap(), 5, rngs=Rngs(0))
    a, b = model((jnp.array(0.0), jnp.array(1.0)))
    assert (float(a), float(b)) == (5.0, 8.0)  # Fibonacci


def test_unroll_gives_the_same_result():
    x = jnp.linspace(-1, 1, 12).reshape(3, 4)
    rolled = Repeat(lambda rngs: nl.Linear(4, 4, rngs=rngs), 6, rngs=Rngs(0))
    unrolled = Repeat.from_layers(rolled.unstack(), unroll=3)
    # (an unrolled scan may fuse the six products differently: a unit in the last place of
    # float32 on values near 1, e.g. 5e-8 absolute on an entry of 0.05, seen under load)
    np.testing.assert_allclose(rolled(x), unrolled(x), rtol=1e-6, atol=1e-7)


def test_check_carry_accepts_equal_shapes_and_names_different_ones():
    check_carry(jnp.ones((2, 3)), jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"returns \(float32\[2\], float32\[2\]\) for an input"):
        check_carry(jnp.ones(2), (jnp.ones(2), jnp.ones(2)))
    assert spell({"a": jnp.ones((1, 2), jnp.int32)}) == "{a: int32[1,2]}"


def test_removing_state_inside_the_loop_is_refused():
    class Drops(nnx.Module):
        def __init__(self):
            self.n = nnx.BatchStat(jnp.zeros(()))

        def __call__(self, x):
            del self.n
            return x

    model = Repeat(lambda rngs: Drops(), 2, rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"a block removed block.n inside the loop"):
        model(jnp.ones(2))


def test_adding_state_to_a_module_given_to_the_call_is_refused():
    class Adds(nnx.Module):
        def __call__(self, x, holder):
            holder.new = nnx.BatchStat(jnp.zeros(()))
            return x

    class Holder(nnx.Module):
        pass

    model = Repeat(lambda rngs: Adds(), 2, rngs=Rngs(0))
    with pytest.raises(ValueError, match="a block added Variables to a Module given to the call"):
        model(jnp.ones(2), Holder())


def test_changing_a_static_attribute_inside_the_loop_is_refused():
    class Flips(nnx.Module):
        def __init__(self):
            self.flag = False
            self.n = nnx.BatchStat(jnp.zeros(()))

        def __call__(self, x):
            self.flag = True
            self.seen = nnx.Intermediate(x)
            return x

    model = Repeat(lambda rngs: Flips(), 2, rngs=Rngs(0))
    with pytest.raises(ValueError, match="a block changed a static attribute inside the loop"):
        model(jnp.ones(2))


def test_state_created_in_a_tuple_is_refused():
    class InTuple(nnx.Module):
        def __init__(self):
            self.items = (nnx.BatchStat(jnp.zeros(())),)

        def __call__(self, x):
            self.items = (self.items[0], nnx.BatchStat(jnp.ones(())))
            return x

    model = Repeat(lambda rngs: InTuple(), 2, rngs=Rngs(0))
    with pytest.raises(ValueError, match="created a Variable inside a tuple"):
        model(jnp.ones(2))


def test_eager_and_jitted_calls_agree():
    model = Repeat(lambda rngs: nl.Linear(4, 4, rngs=rngs), 3, rngs=Rngs(0))
    x = jnp.ones((2, 4))
    np.testing.assert_allclose(nnx.jit(lambda m, x: m(x))(model, x), model(x), rtol=1e-6)
    assert jax.tree.leaves(nnx.state(model))[0].shape[0] == 3

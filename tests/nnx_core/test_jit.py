"""jit donates by default: the state a step replaces is updated in place, and only when nothing
else can read the old buffer. Every case the safety argument in docs/design/transforms.md
worries about has a test here."""

from __future__ import annotations

import copy
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx


class Net(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.arange(6.0).reshape(2, 3))
        self.b = nnx.Param(jnp.zeros(3))
        self.steps = nnx.BatchStat(jnp.array(0))


def train(m, x):
    """Replaces every Variable of a Net (a train step)."""
    m.w.value = m.w.value + x
    m.b.value = m.b.value + 1
    m.steps.value = m.steps.value + 1
    return m.w.value.sum()


def pointer(v):
    """Where the Variable's buffer lives (read without taking the value out of the Variable)."""
    return v._raw_value.unsafe_buffer_pointer()


def test_a_train_step_updates_its_state_in_place_by_default():
    m, step = Net(), nnx.jit(train)
    step(m, 1.0)  # the first call copies the arrays built outside jit once
    before = [pointer(v) for v in (m.w, m.b, m.steps)]
    for _ in range(3):
        step(m, 1.0)
    assert [pointer(v) for v in (m.w, m.b, m.steps)] == before
    assert m.w.value[0].tolist() == [4.0, 5.0, 6.0] and int(m.steps.value) == 4


def test_the_compiled_train_step_aliases_all_its_state():
    m, step = Net(), nnx.jit(train)
    stats = step.lower(m, 1.0).compile().memory_analysis()
    state_bytes = sum(v.nbytes for v in jax.tree_util.tree_leaves(nnx.state(m)))
    assert stats.alias_size_in_bytes == state_bytes


def test_an_evaluation_step_donates_nothing_and_returns_no_state():
    m = Net()
    evaluate = nnx.jit(lambda m, x: (m.w.value * x).sum())
    stats = evaluate.lower(m, 2.0).compile().memory_analysis()
    assert stats.alias_size_in_bytes == 0 and stats.output_size_in_bytes < m.w.nbytes
    w = m.w.value
    assert float(evaluate(m, 2.0)) == 30.0 and float(evaluate(m, 2.0)) == 30.0
    assert m.w.value is w and not w.is_deleted()


def test_a_step_that_replaces_some_values_donates_only_those():
    m = Net()
    f = nnx.jit(lambda m: m.steps.__iadd__(1))
    stats = f.lower(m).compile().memory_analysis()
    assert stats.alias_size_in_bytes == 4  # the int32 count only
    w = m.w.value
    f(m)
    f(m)
    assert int(m.steps.value) == 2 and m.w.value is w and w.tolist()[0] == [0.0, 1.0, 2.0]


def _keep_value(m):
    return m.w.value


def _keep_item(m):
    return m.w[...]


def _keep_asarray(m):
    return jnp.asarray(m.w)


def _keep_leaves(m):
    return jax.tree_util.tree_leaves(nnx.state(m))[2]  # steps, b, w


def _keep_pure_dict(m):
    return nnx.state(m).to_pure_dict()["w"]


def _keep_copied_variable(m):
    return copy.copy(m.w)


def _keep_mapped_state(m):
    return jax.tree.map(lambda v: v, nnx.state(m))["w"]


def _keep_clone(m):
    return nnx.clone(m).w


def _keep_get_value(m):
    return m.w.get_value()


def _keep_raw_value(m):
    return m.w.get_raw_value()


def _keep_module_leaves(m):
    return jax.tree_util.tree_leaves(m)[2]  # Modules are pytrees: steps, b, w


def _keep_mapped_module(m):
    return jax.tree.map(lambda x: x, m).w


@pytest.mark.parametrize(
    "keep",
    [
        _keep_value,
        _keep_item,
        _keep_asarray,
        _keep_leaves,
        _keep_pure_dict,
        _keep_copied_variable,
        _keep_mapped_state,
        _keep_clone,
        _keep_get_value,
        _keep_raw_value,
        _keep_module_leaves,
        _keep_mapped_module,
    ],
)
@pytest.mark.parametrize("warm", [False, True], ids=["first call", "steady state"])
def test_an_array_the_user_kept_stays_valid_and_unchanged(keep, warm):
    m, step = Net(), nnx.jit(train)
    if warm:
        step(m, 1.0)
    kept = keep(m)
    expected = np.asarray(kept).copy()
    step(m, 1.0)
    step(m, 1.0)
    np.testing.assert_array_equal(np.asarray(kept), expected)
    np.testing.assert_array_equal(np.asarray(m.w.value), expected + 2.0)


def test_a_holder_the_private_flag_cannot_see_is_caught_by_the_reference_count():
    """Every public read clears the flag; the reference count is the second guard, for a
    holder that took the array without a read (here: the raw slot, as internal code could)."""
    m, step = Net(), nnx.jit(train)
    step(m, 1.0)
    held = m.w._raw_value
    assert m.w._private
    step(m, 1.0)
    assert not held.is_deleted() and held[0].tolist() == [1.0, 2.0, 3.0]


def test_reads_that_keep_no_reference_leave_the_value_private():
    m, step = Net(), nnx.jit(train)
    step(m, 1.0)
    assert (m.w.shape, m.w.dtype, m.w.ndim, m.w.size, len(m.w)) == ((2, 3), jnp.float32, 2, 6, 2)
    assert int(m.steps) == 1 and bool(m.steps) and float(m.steps) == 1.0
    assert m.w._private and m.steps._private
    before = pointer(m.w)
    step(m, 1.0)
    assert pointer(m.w) == before  # donated as it was: no copy
    m.w.value  # noqa: B018 - a read that may keep the value
    assert not m.w._private


class _Flat(nnx.Variable[jax.Array]):
    """Reads see the value flattened: shape and length come from get_value, not the raw slot."""

    def get_value(self, *, index=nnx._variables.MISSING):
        return super().get_value(index=index).reshape(-1)


def test_shape_reads_of_a_kind_that_overrides_get_value_go_through_it():
    v = _Flat(jnp.zeros((2, 3)))
    assert (v.shape, v.ndim, len(v)) == ((6,), 1, 6) and v.get_raw_value().shape == (2, 3)


def _device_put(x):
    return jax.device_put(x, jax.devices()[0])


def _device_put_sharding(x):
    return jax.device_put(x, jax.sharding.SingleDeviceSharding(jax.devices()[0]))


def _addressable_data(x):
    return x.addressable_data(0)


def _single_device_arrays(x):
    return jax.make_array_from_single_device_arrays(x.shape, x.sharding, [x])


def _numpy_view(x):
    return np.asarray(x)


@pytest.mark.parametrize(
    "alias",
    [_device_put, _device_put_sharding, _addressable_data, _single_device_arrays, _numpy_view],
)
def test_another_array_sharing_the_buffer_stays_valid(alias):
    """These return a new object over the same device buffer: the reference count of the
    Variable's array cannot see them, reading the value marks it as no longer private."""
    m, step = Net(), nnx.jit(train)
    step(m, 1.0)
    shared = alias(m.w.value)  # the value itself is dropped: only the alias is kept
    if isinstance(shared, jax.Array):
        assert shared.unsafe_buffer_pointer() == pointer(m.w)
    step(m, 1.0)
    assert np.asarray(shared)[0].tolist() == [1.0, 2.0, 3.0]


def test_two_variables_holding_one_array_are_both_updated():
    class Tied(nnx.Module):
        def __init__(self):
            shared = jnp.ones(2)
            self.a, self.b = nnx.Param(shared), nnx.Param(shared)

    def step(m):
        m.a.value = m.a.value * 2
        m.b.value = m.b.value * 3

    m, f = Tied(), nnx.jit(step)
    f(m)
    f(m)
    assert m.a.value.tolist() == [4.0, 4.0] and m.b.value.tolist() == [9.0, 9.0]


def test_a_variable_shared_by_two_attributes_is_updated_once():
    m = Net()
    m.alias = m.w
    f = nnx.jit(train)
    f(m, 1.0)
    f(m, 1.0)
    assert m.alias is m.w and m.w.value[0].tolist() == [2.0, 3.0, 4.0]


def test_arguments_that_are_not_variables_are_never_donated():
    m = Net()
    m.raw = jnp.ones(2)  # a raw array attribute the user also holds
    raw = m.raw
    x = jnp.full((2, 3), 1.0)

    @nnx.jit
    def step(m, x):
        m.w.value = m.w.value + x
        m.raw = m.raw + 1

    step(m, x)
    step(m, x)
    assert raw.tolist() == [1.0, 1.0] and x.tolist()[0] == [1.0, 1.0, 1.0]
    assert m.raw.tolist() == [3.0, 3.0] and m.w.value[0].tolist() == [2.0, 3.0, 4.0]


def test_a_kept_state_sees_the_new_values():
    m, step = Net(), nnx.jit(train)
    s = nnx.state(m)
    step(m, 1.0)
    assert s["w"] is m.w and s["w"].value[0].tolist() == [1.0, 2.0, 3.0]


def test_a_changing_donation_mask_does_not_retrace():
    traces = []

    def counted(m, x):
        traces.append(1)
        return train(m, x)

    m, step = Net(), nnx.jit(counted)
    step(m, 1.0)  # arrays built outside jit: copied
    step(m, 1.0)  # all private: donated as they are
    kept = m.b.value
    step(m, 1.0)  # one kept array: copied
    step(m, 1.0)
    assert len(traces) == 1 and kept.tolist() == [2.0, 2.0, 2.0]


def test_a_variable_removed_inside_the_step_keeps_its_value():
    m = Net()
    b = m.b

    @nnx.jit
    def drop(m):
        m.w.value = m.w.value * 2
        del m.b

    drop(m)
    assert not hasattr(m, "b") and b.value.tolist() == [0.0, 0.0, 0.0]


def test_a_value_whose_shape_changes_is_not_donated():
    m = Net()
    w = m.w.value

    @nnx.jit
    def reshape(m):
        m.w.value = m.w.value.reshape(-1)

    reshape(m)
    assert m.w.value.shape == (6,) and w.shape == (2, 3) and not w.is_deleted()


def test_a_numpy_value_is_not_written_into():
    m = Net()
    host = np.ones(3, np.float32)
    m.b.value = host
    f = nnx.jit(train)
    f(m, 1.0)
    f(m, 1.0)
    assert host.tolist() == [1.0, 1.0, 1.0] and m.b.value.tolist() == [3.0, 3.0, 3.0]


def test_a_jit_inside_a_jit_donates_nothing_and_works():
    inner = nnx.jit(train)

    @nnx.jit
    def outer(m):
        inner(m, 1.0)
        return inner(m, 1.0)

    m = Net()
    kept = m.w.value
    assert float(outer(m)) == float((kept + 2.0).sum())
    assert int(m.steps.value) == 2 and not kept.is_deleted()


def test_sown_values_accumulate_across_donating_calls():
    class Sower(nnx.Module):
        def __call__(self, x):
            self.sow(nnx.Intermediate, "seen", x * 2)
            return x

    m, f = Sower(), nnx.jit(lambda m, x: m(x))
    f(m, jnp.ones(2))
    first = m.seen.value[0]
    f(m, jnp.ones(2))
    assert len(m.seen.value) == 2 and first.tolist() == [2.0, 2.0]


def test_an_optimizer_step_trains_in_place_and_keeps_a_saved_parameter():
    class Model(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(3))

    m = Model()
    opt = nnx.Optimizer(m, optax.adam(0.1))

    @nnx.jit
    def step(m, opt):
        grads = nnx.grad(lambda m: (m.w.value**2).sum())(m)
        opt.update(m, grads)

    step(m, opt)
    saved = m.w.value  # read between steps: the next step copies it once
    step(m, opt)
    before = [pointer(v) for v in (m.w, opt.step, *opt.opt_state)]
    step(m, opt)
    assert [pointer(v) for v in (m.w, opt.step, *opt.opt_state)] == before
    assert saved.tolist() == pytest.approx([0.9] * 3)
    assert float(m.w.value[0]) < 0.9 and int(opt.step.value) == 3


def test_donate_argnums_still_donates_without_checks():
    m = Net()
    f = nnx.jit(train, donate_argnums=0)
    stats = f.lower(m, 1.0).compile().memory_analysis()
    assert stats.alias_size_in_bytes > 0
    old = m.w._raw_value
    f(m, 1.0)
    assert old.is_deleted() and m.w.value[0].tolist() == [1.0, 2.0, 3.0]


def test_empty_donate_argnums_donates_nothing():
    m = Net()
    f = nnx.jit(train, donate_argnums=())
    assert f.lower(m, 1.0).compile().memory_analysis().alias_size_in_bytes == 0
    old = m.w._raw_value
    f(m, 1.0)
    f(m, 1.0)
    assert not old.is_deleted() and m.w.value[0].tolist() == [2.0, 3.0, 4.0]


def test_a_structure_change_inside_the_step_reaches_the_caller():
    m = Net()

    @nnx.jit
    def grow(m):
        m.extra = nnx.BatchStat(m.b.value + 5)
        m.w.value = m.w.value + 1

    grow(m)
    assert m.extra.value.tolist() == [5.0] * 3 and m.w.value[0].tolist() == [1.0, 2.0, 3.0]
    grow(m)
    assert m.w.value[0].tolist() == [2.0, 3.0, 4.0]


def test_a_step_traced_for_a_new_shape_uses_the_same_donation():
    traces = []

    @nnx.jit
    def step(m, x):
        traces.append(x.shape)
        m.steps.value = m.steps.value + x.shape[0]
        return x.sum()

    m = Net()
    step(m, jnp.ones(2))
    step(m, jnp.ones(3))
    step(m, jnp.ones(2))
    assert traces == [(2,), (3,)] and int(m.steps.value) == 7


def test_importing_nnx_core_starts_no_backend():
    """The fast path learns jax's Array class on first use, not at import: a process that only
    imports nnx (the CLI, a memory-limited probe) must not start XLA and its threads."""
    script = (
        "from jax._src import xla_bridge\n"
        "import nnx_core, nnx_layers\n"
        "print(xla_bridge.backends_are_initialized())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.split() == ["False"], done.stderr[-2000:]

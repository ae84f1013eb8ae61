"""Lifted transforms: state propagation, shared references, rngs, structure changes, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx


class Counter(nnx.Module):
    def __init__(self):
        self.n = nnx.BatchStat(jnp.array(0))


class Lin(nnx.Module):
    def __init__(self, din, dout, *, rngs):
        self.w = nnx.Param(jax.random.normal(rngs.params(), (din, dout)) * 0.5)
        self.b = nnx.Param(jnp.zeros(dout))
        self.mean = nnx.BatchStat(jnp.zeros(dout))

    def __call__(self, x):
        y = x @ self.w.value + self.b.value
        self.mean.value = 0.9 * self.mean.value + 0.1 * y.mean(0)
        return y


class Noisy(nnx.Module):
    def __init__(self, rngs):
        self.rngs = rngs

    def __call__(self, x):
        return x + jax.random.normal(self.rngs.noise(), x.shape)


# -- jit -----------------------------------------------------------------------------------------
def test_jit_propagates_state_and_returns_outputs():
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    f = nnx.jit(lambda m, x: m(x).sum())
    x = jnp.ones((4, 3))
    expected = (x @ m.w.value + m.b.value).sum()
    np.testing.assert_allclose(f(m, x), expected, rtol=1e-6)
    first = m.mean.value
    f(m, x)
    np.testing.assert_allclose(m.mean.value, 0.9 * first + 0.1 * (x @ m.w.value).mean(0), rtol=1e-6)


def test_jit_advances_rng_counts_so_keys_differ_per_call():
    m = Noisy(nnx.Rngs(noise=0))
    f = nnx.jit(lambda m, x: m(x))
    a, b = f(m, jnp.zeros(3)), f(m, jnp.zeros(3))
    assert not np.allclose(a, b)
    assert int(m.rngs.noise.count.value) == 2


def test_jit_does_not_retrace_until_the_structure_changes():
    traces = []

    @nnx.jit
    def f(m, x):
        traces.append(1)
        m.n.value = m.n.value + x
        return m.n.value

    c = Counter()
    for i in range(5):
        f(c, i)
    assert len(traces) == 1 and int(c.n.value) == 10
    c.extra = 3  # a structural (static) change retraces once
    f(c, 1)
    f(c, 1)
    assert len(traces) == 2 and int(c.n.value) == 12


def test_jit_equal_structures_share_a_trace():
    traces = []

    @nnx.jit
    def f(m):
        traces.append(1)
        return m.n.value

    f(Counter())
    f(Counter())
    assert len(traces) == 1


def test_jit_sow_and_new_attributes_reach_the_caller():
    @nnx.jit
    def f(c, x):
        c.sow(nnx.Intermediate, "seen", x * 2)
        c.new_stat = nnx.BatchStat(x + 1)
        return c

    c = Counter()
    out = f(c, jnp.ones(2))
    assert out is c
    assert c.seen.value[0].tolist() == [2.0, 2.0]
    assert c.new_stat.value.tolist() == [2.0, 2.0]
    f(c, jnp.ones(2))  # sow appends to the existing tuple: a structure change again
    assert len(c.seen.value) == 2


def test_jit_returns_new_modules_built_inside():
    m = nnx.jit(lambda: Lin(2, 3, rngs=nnx.Rngs(0)))()
    assert isinstance(m, Lin) and m.w.shape == (2, 3)
    assert not isinstance(m.w.value, jax.core.Tracer)


def test_jit_keeps_shared_references_shared_and_updates_both_views():
    shared = Counter()

    class Holder(nnx.Module):
        def __init__(self, c):
            self.c = c

    a, b = Holder(shared), Holder(shared)

    @nnx.jit
    def f(a, b):
        assert a.c is b.c
        a.c.n.value = a.c.n.value + 1
        return b.c.n.value

    assert int(f(a, b)) == 1
    assert a.c is b.c is shared and int(shared.n.value) == 1


def test_jit_accepts_modules_nested_in_pytrees_and_kwargs():
    @nnx.jit
    def f(pair, *, scale):
        pair[0].n.value = pair[0].n.value + scale
        return {"sum": pair[0].n.value + pair[1].n.value}

    a, b = Counter(), Counter()
    out = f((a, b), scale=3)
    assert int(out["sum"]) == 3 and int(a.n.value) == 3


def test_jit_static_argnums_and_argnames():
    traces = []

    @nnx.jit(static_argnums=1, static_argnames="mode")
    def f(c, k, *, mode):
        traces.append((k, mode))
        c.n.value = c.n.value + (k if mode == "add" else -k)
        return c.n.value

    c = Counter()
    f(c, 2, mode="add")
    f(c, 2, mode="add")
    f(c, 5, mode="sub")
    assert traces == [(2, "add"), (5, "sub")] and int(c.n.value) == -1


def test_jit_donation_keeps_model_usable():
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    f = nnx.jit(lambda m, x: m(x).sum(), donate_argnums=0)
    for _ in range(3):
        f(m, jnp.ones((2, 3)))
    assert np.isfinite(np.asarray(m.w.value)).all() and np.isfinite(np.asarray(m.mean.value)).all()


def test_jit_as_method_decorator():
    class M(nnx.Module):
        def __init__(self):
            self.n = nnx.BatchStat(jnp.array(0))

        @nnx.jit
        def bump(self, k):
            self.n.value = self.n.value + k
            return self.n.value

    m = M()
    m.bump(2)
    assert int(m.bump(3)) == 5 and int(m.n.value) == 5


def test_mutating_a_captured_module_inside_jax_jit_is_an_error():
    c = Counter()

    @jax.jit
    def f(x):
        c.n.value = x
        return x

    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        f(jnp.array(1))


def test_setting_a_traced_raw_attribute_on_a_captured_module_is_an_error():
    c = Counter()

    @nnx.jit
    def f(x):
        c.leak = x * 2
        return x

    with pytest.raises(nnx.TraceContextError, match="Pass it as an argument"):
        f(jnp.array(1.0))


# -- grad ----------------------------------------------------------------------------------------
def _loss(m, x):
    return jnp.sum(m(x) ** 2)


def test_grad_matches_jax_grad_on_the_pure_function():
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    x = jnp.arange(6.0).reshape(2, 3)
    grads = nnx.grad(_loss)(m, x)
    assert sorted(grads) == ["b", "w"]
    assert isinstance(grads["w"], nnx.Param)
    ref = jax.grad(lambda w, b: jnp.sum((x @ w + b) ** 2), argnums=(0, 1))(m.w.value, m.b.value)
    np.testing.assert_allclose(grads["w"].value, ref[0], rtol=1e-6)
    np.testing.assert_allclose(grads["b"].value, ref[1], rtol=1e-6)


def test_grad_propagates_non_differentiated_state_changes():
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    nnx.grad(_loss)(m, jnp.ones((2, 3)))
    assert float(jnp.abs(m.mean.value).sum()) > 0
    assert not isinstance(m.mean.value, jax.core.Tracer)


def test_value_and_grad_has_aux_and_argnums_tuple():
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3))

    def loss(m, x):
        y = m(x)
        return jnp.sum(y), {"y": y}

    (value, aux), (g_m, g_x) = nnx.value_and_grad(loss, argnums=(0, 1), has_aux=True)(m, x)
    np.testing.assert_allclose(value, aux["y"].sum(), rtol=1e-6)
    np.testing.assert_allclose(g_x, jnp.broadcast_to(m.w.value.sum(1), (2, 3)), rtol=1e-6)
    assert sorted(g_m) == ["b", "w"]
    g, aux2 = nnx.grad(loss, has_aux=True)(m, x)
    assert sorted(g) == ["b", "w"] and aux2["y"].shape == (2, 2)


def test_grad_wrt_a_custom_kind_only():
    class Lora(nnx.Param):
        pass

    class M(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array(2.0))
            self.a = Lora(jnp.array(3.0))

    g = nnx.grad(lambda m: m.w.value * m.a.value, wrt=Lora)(M())
    assert list(g) == ["a"] and float(g["a"].value) == 2.0


def test_grad_inside_jit_with_optimizer_trains():
    import optax

    m = Lin(1, 1, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(m, optax.sgd(0.1))
    x = jnp.linspace(-1, 1, 16)[:, None]
    y = 3 * x + 1

    @nnx.jit
    def step(m, opt):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(m)
        opt.update(m, grads)
        return loss

    losses = [float(step(m, opt)) for _ in range(200)]
    assert losses[-1] < 1e-3 < losses[0]
    assert int(opt.step.value) == 200


@pytest.mark.parametrize(
    ("kwargs", "args", "match"),
    [
        ({"argnums": 3}, (1.0,), "refers to argument 3"),
        ({"has_aux": True}, (1.0,), r"expects the function to return \(loss, aux\)"),
    ],
)
def test_grad_errors(kwargs, args, match):
    m = Counter()
    with pytest.raises((ValueError, TypeError), match=match):
        nnx.grad(lambda m, x: x * 2.0, **kwargs)(m, *args) if "argnums" not in kwargs else nnx.grad(
            lambda m, x: x, **kwargs
        )(m, *args)


def test_remat_gives_the_same_gradients():
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3))
    g1 = nnx.grad(_loss)(m, x)
    g2 = nnx.grad(nnx.remat(_loss))(m, x)
    np.testing.assert_allclose(g1["w"].value, g2["w"].value, rtol=1e-6)


# -- vmap ----------------------------------------------------------------------------------------
def test_vmap_creates_stacked_modules_and_maps_over_them():
    keys = jax.random.split(jax.random.key(0), 4)
    stack = nnx.vmap(lambda k: Lin(3, 2, rngs=nnx.Rngs(k)))(keys)
    assert stack.w.shape == (4, 3, 2) and stack.mean.shape == (4, 2)
    out = nnx.vmap(lambda m, x: m(x), in_axes=(0, None))(stack, jnp.ones((5, 3)))
    assert out.shape == (4, 5, 2)
    assert stack.mean.shape == (4, 2) and float(jnp.abs(stack.mean.value).sum()) > 0


def test_vmap_state_axes_broadcast_params_map_stats():
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    m.mean.value = jnp.zeros((4, 2))
    axes = nnx.StateAxes({nnx.BatchStat: 0, ...: None})
    out = nnx.vmap(lambda m, x: m(x), in_axes=(axes, 0))(m, jnp.ones((4, 5, 3)))
    assert out.shape == (4, 5, 2) and m.mean.shape == (4, 2) and m.w.shape == (3, 2)


def test_vmap_gives_each_example_its_own_rng_key():
    m = Noisy(nnx.Rngs(noise=0))
    out = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(m, jnp.zeros((4, 3)))
    assert len({tuple(np.asarray(r).round(5)) for r in out}) == 4
    before = int(m.rngs.noise.count.value)
    out2 = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(m, jnp.zeros((4, 3)))
    assert int(m.rngs.noise.count.value) > before and not np.allclose(out, out2)


@pytest.mark.parametrize(
    ("in_axes", "match"),
    [((0, 0, 0), "in_axes has 3 entries"), ((None, None), "no argument is mapped")],
)
def test_vmap_argument_errors(in_axes, match):
    with pytest.raises(ValueError, match=match):
        nnx.vmap(lambda m, x: x, in_axes=in_axes)(Counter(), jnp.ones(3))


def test_vmap_state_added_to_a_broadcast_module_per_example_is_an_error():
    def f(c, x):
        c.new = nnx.BatchStat(x)
        return x

    c = Counter()
    with pytest.raises(
        ValueError, match=r"differs per example. Unmapped Module state set by the function: new"
    ):
        nnx.vmap(f, in_axes=(None, 0))(c, jnp.ones(3))
    assert not hasattr(c, "new")  # nothing half-written


def test_vmap_state_added_to_a_module_takes_its_axis():
    def f(c, x):
        c.new = nnx.BatchStat(x * 2)  # mapped along c's axis
        c.n.value = c.n.value + 1
        return x

    c = Counter()
    axes = nnx.StateAxes({nnx.BatchStat: 0, ...: None})
    c.n.value = jnp.zeros(3, jnp.int32)
    n = c.n
    nnx.vmap(f, in_axes=(axes, 0))(c, jnp.arange(3.0))
    assert c.n is n and c.n.value.tolist() == [1, 1, 1]
    assert c.new.value.tolist() == [0.0, 2.0, 4.0]


def _weight_stack(lib):
    class WeightStack(lib.Module):
        @lib.vmap
        def __init__(self, seed):
            self.kernel = lib.Param(jax.random.uniform(jax.random.key(seed), (2, 3)))
            self.bias = lib.Param(jnp.zeros((3,)))

        @lib.vmap(in_axes=0, out_axes=1)
        def __call__(self, x):
            assert self.kernel.ndim == 2 and x.ndim == 1  # one example at a time
            return x @ self.kernel + self.bias

    return WeightStack


def test_vmap_over_init_builds_a_stack_as_flax():
    import flax.nnx as fnnx

    results = []
    for lib in (fnnx, nnx):
        weights = _weight_stack(lib)(jnp.arange(10))
        y = weights(jax.random.normal(jax.random.key(1), (10, 2)))
        results.append((weights.kernel.shape, np.asarray(y)))
    assert results[0][0] == results[1][0] == (10, 2, 3)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-6)


def test_state_axes_without_a_matching_filter_is_an_error():
    with pytest.raises(ValueError, match="has no filter matching"):
        nnx.vmap(lambda m, x: x, in_axes=(nnx.StateAxes({nnx.Param: 0}), 0))(Counter(), jnp.ones(3))


# -- scan ----------------------------------------------------------------------------------------
def test_scan_over_layers_with_dropout_and_batchnorm():
    from nnx_layers import BatchNorm, Dropout, Linear

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.linear = Linear(4, 4, rngs=rngs)
            self.bn = BatchNorm(4, rngs=rngs)
            self.dropout = Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return jax.nn.relu(self.dropout(self.bn(self.linear(x))))

    blocks = nnx.vmap(lambda k: Block(nnx.Rngs(k)))(jax.random.split(jax.random.key(0), 3))
    assert blocks.linear.kernel.shape == (3, 4, 4)
    mean_before = blocks.bn.mean.value
    counts_before = blocks.dropout.rngs.count.value

    @nnx.jit
    def forward(blocks, x):
        return nnx.scan(lambda b, x: b(x), in_axes=(0, nnx.Carry), out_axes=nnx.Carry)(blocks, x)

    x = jax.random.normal(jax.random.key(1), (8, 4))
    y1 = forward(blocks, x)
    y2 = forward(blocks, x)
    assert y1.shape == (8, 4)
    assert not np.allclose(y1, y2)  # dropout keys advance between calls
    assert blocks.bn.mean.shape == (3, 4) and not np.allclose(blocks.bn.mean.value, mean_before)
    counts = blocks.dropout.rngs.count.value  # one stream per layer, advanced per call
    assert counts.shape == (3,) and (counts - counts_before).tolist() == [2, 2, 2]
    blocks.eval()
    np.testing.assert_allclose(forward(blocks, x), forward(blocks, x), rtol=1e-6)


def test_scan_carries_a_module_and_stacks_outputs():
    c = Counter()

    def step(c, x):
        c.n.value = c.n.value + x
        return c, c.n.value

    out_c, ys = nnx.scan(step, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))(c, jnp.arange(4))
    assert out_c is c and int(c.n.value) == 6 and ys.tolist() == [0, 1, 3, 6]


def test_scan_carries_an_array_with_broadcast_rngs():
    m = Noisy(nnx.Rngs(noise=0))

    def step(m, h):
        return m(h) * 0 + h + 1

    out = nnx.scan(step, in_axes=(None, nnx.Carry), out_axes=nnx.Carry, length=5)(m, jnp.zeros(2))
    assert out.tolist() == [5.0, 5.0] and int(m.rngs.noise.count.value) == 5


def test_scan_errors():
    with pytest.raises(ValueError, match="more than one Carry"):
        nnx.scan(lambda a, b: (a, b), in_axes=(nnx.Carry, nnx.Carry))(jnp.ones(1), jnp.ones(1))

    def grow(c, x):
        c.new = nnx.BatchStat(x)
        return c, x

    with pytest.raises(ValueError, match="changed the structure"):
        nnx.scan(grow)(Counter(), jnp.arange(3))


# -- eval_shape ----------------------------------------------------------------------------------
def test_eval_shape_builds_abstract_modules_and_leaves_inputs_alone():
    m = nnx.eval_shape(lambda: Lin(1000, 1000, rngs=nnx.Rngs(0)))
    assert isinstance(m.w.value, jax.ShapeDtypeStruct) and m.w.shape == (1000, 1000)
    c = Counter()
    out = nnx.eval_shape(lambda c, x: (c.n.value + x) * 2, c, jnp.ones(3))
    assert out.shape == (3,) and not isinstance(c.n.value, jax.ShapeDtypeStruct)


# -- jit shardings -------------------------------------------------------------------------------
def test_jit_in_and_out_shardings_place_state_and_inputs():
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    shardings = nnx.get_named_sharding(nnx.state(m), mesh)
    batch = NamedSharding(mesh, P("data"))
    f = nnx.jit(
        lambda m, x: m(x), in_shardings=(shardings, batch), out_shardings=NamedSharding(mesh, P())
    )
    out = f(m, jnp.ones((4, 3)))
    assert out.shape == (4, 2) and out.sharding.spec == P()
    with pytest.raises(ValueError, match="in_shardings has 1 entries but the function got 2"):
        nnx.jit(lambda m, x: x, in_shardings=[batch])(m, jnp.ones(2))


def test_jit_donation_with_static_args_counts_original_positions():
    f = nnx.jit(lambda k, m: m(jnp.ones((1, 3))) * k, static_argnums=0, donate_argnums=1)
    m = Lin(3, 2, rngs=nnx.Rngs(0))
    f(2, m)
    assert f(2, m).shape == (1, 2)


# -- control flow --------------------------------------------------------------------------------
def test_cond_and_fori_loop_inside_jit():
    @nnx.jit
    def f(c, flag):
        nnx.cond(flag, lambda c: c.n.__iadd__(10), lambda c: c.n.__isub__(1), c)
        return nnx.fori_loop(0, 3, lambda i, c: (c.n.__iadd__(i), c)[1], c)

    c = Counter()
    assert f(c, True) is c and int(c.n.value) == 13
    f(c, False)
    assert int(c.n.value) == 15


def test_control_flow_structure_changes_are_errors():
    def grow(c):
        c.extra = nnx.BatchStat(jnp.array(1))
        return c

    with pytest.raises(ValueError, match="cond: the function changed the structure"):
        nnx.cond(True, grow, lambda c: c, Counter())
    with pytest.raises(ValueError, match="fori_loop: the function changed the structure"):
        nnx.fori_loop(0, 2, lambda i, c: grow(c), Counter())


def test_jit_swapping_submodules_moves_the_objects():
    class Pair(nnx.Module):
        def __init__(self):
            self.a, self.b = Counter(), Counter()

    p = Pair()
    a, b = p.a, p.b
    a.n.value = jnp.array(1)

    @nnx.jit
    def swap(p):
        p.a, p.b = p.b, p.a

    swap(p)
    assert p.a is b and p.b is a and int(p.b.n.value) == 1 and int(p.a.n.value) == 0


def test_jit_writes_back_raw_array_attributes():
    class Raw(nnx.Module):
        def __init__(self):
            self.total = jnp.zeros(2)
            self.history = [jnp.zeros(1)]

    r = Raw()

    @nnx.jit
    def add(r, x):
        r.total = r.total + x
        r.history[0] = r.history[0] + 1

    add(r, jnp.ones(2))
    add(r, jnp.ones(2))
    assert r.total.tolist() == [2.0, 2.0] and r.history[0].tolist() == [2.0]


def test_jit_structure_change_that_depends_on_shapes_is_an_error():
    @nnx.jit
    def f(c, x):
        if x.shape[0] > 2:
            c.sow(nnx.Intermediate, "big", x)
        return x

    c = Counter()
    f(c, jnp.ones(1))
    with pytest.raises(ValueError, match="differently for inputs of different shapes"):
        f(c, jnp.ones(3))


def test_a_jitted_function_does_not_keep_dropped_models_alive():
    import gc
    import weakref

    f = nnx.jit(lambda a, b: a.n.value + b.n.value)
    a, b = Counter(), Counter()
    f(a, b)
    f(a, b)
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is None

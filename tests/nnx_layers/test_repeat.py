"""Repeat: the stacked layout, equality with the unrolled stack, per-block state, decoding,
remat, LoRA and trainable filters, sharding names, jit, conversion both ways, and errors."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx
import nnx_layers as nl
from nnx_core import Rngs
from nnx_layers import Repeat


class Block(nnx.Module):
    """Linear + BatchNorm + Dropout, sowing its input: every kind of per-block state."""

    def __init__(self, *, rngs):
        self.lin = nl.Linear(8, 8, rngs=rngs)
        self.bn = nl.BatchNorm(8, rngs=rngs)
        self.drop = nl.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        self.sow(nnx.Intermediate, "seen", x)
        return self.drop(nl.relu(self.bn(self.lin(x))))


def _block(rngs):
    return Block(rngs=rngs)


def _x(shape=(4, 8), seed=1):
    return jax.random.normal(jax.random.key(seed), shape)


def _unrolled(layers, x, **kwargs):
    for layer in layers:
        x = layer(x, **kwargs)
    return x


def test_the_layout_is_flax_nnx_split_rngs_vmap_stack_with_the_same_values():
    ours = Repeat(lambda rngs: nl.Linear(4, 4, rngs=rngs), 3, rngs=Rngs(0))

    @fnnx.split_rngs(splits=3)
    @fnnx.vmap(in_axes=(0,), out_axes=0)
    def theirs(rngs):
        return fnnx.Linear(4, 4, rngs=rngs)

    stack = theirs(fnnx.Rngs(0))
    assert ours.block.kernel.shape == stack.kernel[...].shape == (3, 4, 4)
    np.testing.assert_array_equal(ours.block.kernel.value, stack.kernel[...])
    assert not np.array_equal(ours.block.kernel.value[0], ours.block.kernel.value[1])


def test_repeat_equals_the_unrolled_stack_forward_and_gradients():
    model = Repeat(_block, 3, rngs=Rngs(0)).eval()
    layers = [layer.eval() for layer in model.unstack()]
    x = _x()
    np.testing.assert_allclose(model(x), _unrolled(layers, x), rtol=1e-5, atol=1e-5)

    grads = nnx.grad(lambda m: (m(x) ** 2).sum())(model)
    unrolled_grads = [
        jax.grad(lambda k, i=i: (_swap_kernel(layers, i, k, x) ** 2).sum())(
            layers[i].lin.kernel.value
        )
        for i in range(3)
    ]
    np.testing.assert_allclose(
        grads["block"]["lin"]["kernel"].value, np.stack(unrolled_grads), rtol=1e-4, atol=1e-5
    )


def _swap_kernel(layers, i, kernel, x):
    layers = [nnx.clone(layer) for layer in layers]
    layers[i].lin.kernel.value = kernel
    return _unrolled(layers, x)


def test_training_mode_with_the_blocks_sharing_one_rngs_equals_the_unrolled_stack():
    # Dropout keeps the Rngs it was built with: every block shares it, and the stream's count
    # advances from block to block inside the loop exactly as through the unrolled blocks.
    model = Repeat(_block, 3, rngs=Rngs(0))
    layers = nnx.clone(model).unstack()
    x = _x()
    np.testing.assert_allclose(model(x), _unrolled(layers, x), rtol=1e-5, atol=1e-5)
    for i, layer in enumerate(layers):
        np.testing.assert_allclose(model.block.bn.mean.value[i], layer.bn.mean.value, atol=1e-6)
        np.testing.assert_allclose(model.block.seen.value[0][i], layer.seen.value[0], atol=1e-6)


def test_batchnorm_statistics_update_per_block():
    model = Repeat(_block, 3, rngs=Rngs(0))
    model(_x())
    mean = np.asarray(model.block.bn.mean.value)
    assert mean.shape == (3, 8)
    assert not np.allclose(mean[0], mean[1]) and not np.allclose(mean[1], mean[2])
    model.eval()
    before = model.block.bn.var.value
    model(_x())
    np.testing.assert_array_equal(model.block.bn.var.value, before)


class Masks(nnx.Module):
    def __init__(self, *, rngs, own_stream):
        self.drop = nl.Dropout(0.5, rngs=rngs.fork() if own_stream else rngs)

    def __call__(self, x, rngs=None):
        self.sow(nnx.Intermediate, "mask", self.drop(jnp.ones_like(x), rngs=rngs))
        return x


@pytest.mark.parametrize("own_stream", [False, True], ids=["shared-rngs", "own-stream"])
def test_dropout_draws_other_masks_per_block_and_per_step(own_stream):
    model = Repeat(lambda rngs: Masks(rngs=rngs, own_stream=own_stream), 4, rngs=Rngs(0))
    model(jnp.ones((16,)))
    model(jnp.ones((16,)))
    first, second = (np.asarray(m) for m in model.block.mask.value)
    assert first.shape == second.shape == (4, 16)
    assert len({tuple(row) for row in first}) == 4  # one mask per block
    assert not np.array_equal(first, second)  # and another one per step


def test_an_rngs_given_to_the_call_advances_from_block_to_block():
    model = Repeat(lambda rngs: Masks(rngs=rngs, own_stream=False), 3, rngs=Rngs(0))
    rngs = Rngs(dropout=5)
    model(jnp.ones(16), rngs=rngs)
    assert int(rngs.dropout.count.value) == 3
    layers = nnx.clone(model).unstack()
    reference = Rngs(dropout=5)
    for layer in layers:
        layer(jnp.ones(16), rngs=reference)
    for i, layer in enumerate(layers):
        np.testing.assert_array_equal(model.block.mask.value[0][i], layer.mask.value[-1])


def test_sown_intermediates_come_back_stacked_and_pop_like_any_state():
    model = Repeat(_block, 3, rngs=Rngs(0)).eval()
    x = _x()
    model(x)
    (seen,) = model.block.seen.value
    assert seen.shape == (3, 4, 8)
    np.testing.assert_allclose(seen[0], x)
    layers = model.unstack()
    np.testing.assert_allclose(seen[1], layers[0](x), rtol=1e-5, atol=1e-5)
    popped = nnx.pop(model, nnx.Intermediate)
    assert popped["block"]["seen"].value[0].shape == (3, 4, 8)
    assert not hasattr(model.block, "seen")


class Decoder(nnx.Module):
    def __init__(self, *, rngs):
        self.ln = nl.LayerNorm(8, rngs=rngs)
        self.attn = nl.MultiHeadAttention(2, 8, decode=True, rngs=rngs)
        self.fc = nl.Linear(8, 8, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.ln(x))
        return x + self.fc(x)


def test_the_kv_cache_decodes_one_cache_per_block_equal_to_the_unrolled_model():
    model = Repeat(lambda rngs: Decoder(rngs=rngs), 3, rngs=Rngs(0))
    layers = model.unstack()
    model.each(lambda block: block.attn.init_cache((2, 5, 8)))
    for layer in layers:
        layer.attn.init_cache((2, 5, 8))
    assert model.block.attn.cached_key.shape == (3, 2, 5, 2, 4)
    x = _x((2, 5, 8))
    step = nnx.jit(lambda m, token: m(token))
    ours = [step(model, x[:, t : t + 1]) for t in range(5)]
    theirs = []
    for t in range(5):
        theirs.append(_unrolled(layers, x[:, t : t + 1]))
    np.testing.assert_allclose(
        np.concatenate(ours, 1), np.concatenate(theirs, 1), rtol=1e-5, atol=1e-5
    )
    assert model.block.attn.cache_index.value.tolist() == [5, 5, 5]
    for i, layer in enumerate(layers):
        np.testing.assert_allclose(
            model.block.attn.cached_value.value[i], layer.attn.cached_value.value, atol=1e-5
        )


def test_init_cache_starts_one_cache_per_block_and_decodes_as_the_unrolled_model():
    model = Repeat(lambda rngs: Decoder(rngs=rngs), 3, rngs=Rngs(0))
    layers = model.unstack()
    model.init_cache((2, 4, 8))
    for layer in layers:
        layer.attn.init_cache((2, 4, 8))
    assert model.block.attn.cached_value.shape == (3, 2, 4, 2, 4)
    assert model.block.attn.cache_index.value.tolist() == [0, 0, 0]
    x = _x((2, 4, 8))
    for t in range(4):
        np.testing.assert_allclose(
            model(x[:, t : t + 1]), _unrolled(layers, x[:, t : t + 1]), rtol=1e-5, atol=1e-5
        )
    assert model.block.attn.cache_index.value.tolist() == [4, 4, 4]
    model.init_cache((1, 6, 8))  # a new sequence: fresh caches
    assert model.block.attn.cached_key.shape == (3, 1, 6, 2, 4)
    assert float(jnp.abs(model.block.attn.cached_key.value).sum()) == 0.0


def test_init_cache_gives_an_inner_layer_its_own_width_and_starts_nested_repeats():
    class Projected(nnx.Module):
        def __init__(self, rngs):
            self.up = nl.Linear(4, 8, rngs=rngs)
            self.attn = nl.MultiHeadAttention(2, 8, decode=True, rngs=rngs)
            self.down = nl.Linear(8, 4, rngs=rngs)

        def __call__(self, x):
            return x + self.down(self.attn(self.up(x)))

    model = Repeat(
        lambda rngs: Repeat(lambda inner: Projected(inner), 2, rngs=rngs), 3, rngs=Rngs(0)
    )
    model.init_cache((1, 5, 4))
    assert model.block.block.attn.cached_key.shape == (3, 2, 1, 5, 2, 4)
    assert model(jnp.ones((1, 1, 4))).shape == (1, 1, 4)
    assert model.block.block.attn.cache_index.value.tolist() == [[1, 1]] * 3


def test_each_returns_the_outputs_stacked():
    model = Repeat(lambda rngs: nl.Linear(3, 2, rngs=rngs), 4, rngs=Rngs(0))
    sums = model.each(lambda layer, scale: layer.kernel.value.sum() * scale, 2.0)
    expected = [2.0 * float(k.sum()) for k in model.block.kernel.value]
    np.testing.assert_allclose(sums, expected, rtol=1e-5)


def _mlp(rngs):
    return nl.Sequential(
        nl.Linear(64, 256, rngs=rngs), nl.tanh, nl.Linear(256, 64, rngs=rngs), nl.tanh
    )


def _grad_memory(remat):
    model = Repeat(_mlp, 8, rngs=Rngs(0), remat=remat)

    def loss(m, x):
        return jnp.sum(m(x) ** 2)

    step = nnx.jit(nnx.grad(loss))
    x = jnp.ones((256, 64))
    return step, model, x


def test_remat_recomputes_blocks_in_the_backward_pass_and_keeps_less():
    plain_step, plain_model, x = _grad_memory(remat=False)
    remat_step, remat_model, _ = _grad_memory(remat=True)
    jaxpr = str(jax.make_jaxpr(lambda m: nnx.grad(lambda m: m(x).sum())(m))(remat_model))
    assert "checkpoint" in jaxpr or "remat" in jaxpr
    assert "checkpoint" not in str(
        jax.make_jaxpr(lambda m: nnx.grad(lambda m: m(x).sum())(m))(plain_model)
    )
    g_plain, g_remat = plain_step(plain_model, x), remat_step(remat_model, x)
    np.testing.assert_allclose(
        g_plain["block"]["layers"][0]["kernel"].value,
        g_remat["block"]["layers"][0]["kernel"].value,
        rtol=1e-5,
        atol=1e-6,
    )
    temp = {
        name: step.lower(model, x).compile().memory_analysis().temp_size_in_bytes
        for name, (step, model) in {
            "plain": (plain_step, plain_model),
            "remat": (remat_step, remat_model),
        }.items()
    }
    assert temp["remat"] < temp["plain"], temp


def test_the_program_holds_one_block_whatever_the_count():
    def equations(count):
        model = Repeat(lambda rngs: nl.Linear(4, 4, rngs=rngs), count, rngs=Rngs(0))
        graphdef, state = nnx.split(model)
        jaxpr = jax.make_jaxpr(lambda s, x: nnx.merge(graphdef, s)(x))(state, jnp.ones((2, 4)))
        return len(jaxpr.eqns), str(jaxpr).count("dot_general")

    assert equations(2) == equations(16)
    assert equations(16)[1] == 1


class LoRABlock(nnx.Module):
    def __init__(self, *, rngs):
        self.lin = nl.LoRALinear(6, 6, lora_rank=2, rngs=rngs)

    def __call__(self, x):
        return nl.relu(self.lin(x))


def test_lora_adapters_inside_the_block_train_alone_under_a_trainable_filter():
    model = Repeat(lambda rngs: LoRABlock(rngs=rngs), 3, rngs=Rngs(0))
    assert model.block.lin.lora.lora_a.shape[0] == 3
    kernel = model.block.lin.kernel.value
    lora_b = model.block.lin.lora.lora_b.value
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nl.LoRAParam)
    x = _x((5, 6))

    @nnx.jit
    def step(model, optimizer):
        grads = nnx.grad(
            lambda m: ((m(x) - 1.0) ** 2).mean(), argnums=nnx.DiffState(0, nl.LoRAParam)
        )(model)
        optimizer.update(model, grads)

    step(model, optimizer)
    step(model, optimizer)
    np.testing.assert_array_equal(model.block.lin.kernel.value, kernel)
    assert not np.allclose(model.block.lin.lora.lora_b.value, lora_b)
    changed = np.abs(np.asarray(model.block.lin.lora.lora_b.value - lora_b)).sum(axis=(1, 2))
    assert (changed > 0).all()  # every block's adapter trained


class Named(nnx.Module):
    def __init__(self, *, rngs):
        init = nnx.with_partitioning(nl.initializers.lecun_normal(), ("embed", "mlp"))
        self.lin = nl.Linear(4, 4, kernel_init=init, rngs=rngs)

    def __call__(self, x):
        self.sow(nnx.Intermediate, "names", jnp.asarray(len(self.lin.kernel.sharding_names)))
        return self.lin(x)


@pytest.mark.parametrize("name", [None, "layers"])
def test_sharding_names_gain_the_block_axis_and_inside_the_loop_a_block_sees_its_own(name):
    model = Repeat(lambda rngs: Named(rngs=rngs), 3, rngs=Rngs(0), sharding_name=name)
    assert model.block.lin.kernel.sharding_names == (name, "embed", "mlp")
    assert model.block.lin.bias.sharding_names == (name, "mlp")  # (Linear's default names)
    spec = nnx.get_partition_spec(nnx.state(model), rules={"layers": "stage", "mlp": "model"})
    assert spec["block"]["lin"]["kernel"].value == jax.sharding.PartitionSpec(
        "stage" if name else None, "embed", "model"
    )
    model(jnp.ones((2, 4)))
    assert model.block.names.value[0].tolist() == [2, 2, 2]
    assert model.block.lin.kernel.sharding_names == (name, "embed", "mlp")
    assert [layer.lin.kernel.sharding_names for layer in model.unstack()][0] == ("embed", "mlp")


def test_a_repeat_model_is_created_sharded_over_a_mesh():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("stage",))
    with nnx.logical_axis_rules({"layers": "stage"}):
        model = nnx.create_sharded(
            lambda: Repeat(lambda rngs: Named(rngs=rngs), 2, rngs=Rngs(0), sharding_name="layers"),
            mesh,
        )
    sharding = model.block.lin.kernel.value.sharding
    assert sharding.spec[0] == "stage"


def test_jit_traces_once_and_propagates_what_the_blocks_create():
    traces = []

    @nnx.jit
    def forward(model, x):
        traces.append(1)
        return model(x)

    model = Repeat(_block, 3, rngs=Rngs(0))
    x = _x()
    forward(model, x)
    assert model.block.seen.value[0].shape == (3, 4, 8)
    nnx.pop(model, nnx.Intermediate)
    forward(model, x)
    forward(model, x)
    assert len(traces) == 2  # (the first call created Variables: a new structure once)
    # (each block's Dropout keeps its own forked stream, stacked: one draw per call each)
    assert model.block.drop.rngs.count.value.tolist() == [3, 3, 3]


def test_unchanged_parameters_are_not_copied_out_of_the_loop():
    model = Repeat(lambda rngs: nl.Linear(4, 4, rngs=rngs), 3, rngs=Rngs(0))
    graphdef, state = nnx.split(model)
    jaxpr = jax.make_jaxpr(lambda s, x: nnx.merge(graphdef, s)(x))(state, jnp.ones((2, 4)))
    (scan,) = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    assert len(scan.outvars) == 1  # only the carry: no parameter comes back out


def test_a_block_without_the_block_axis_is_shared_by_all_blocks():
    model = Repeat(lambda rngs: nl.Linear(4, 4, use_bias=False, rngs=rngs), 3, rngs=Rngs(0))
    model.block.kernel.value = jnp.eye(4) * 2.0  # one value, no block axis: every block uses it
    assert model(jnp.ones((1, 4))).tolist() == [[8.0, 8.0, 8.0, 8.0]]


# -- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [0, -2, 2.5, True, "3"])
def test_count_must_be_a_positive_integer(count):
    with pytest.raises(ValueError, match="Repeat count must be a positive integer, got"):
        Repeat(_block, count, rngs=Rngs(0))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"unroll": 0}, ValueError, "Repeat unroll must be a positive integer"),
        ({"remat": 1}, TypeError, "Repeat remat must be True or False, got 1"),
        ({"sharding_name": 3}, TypeError, "sharding_name must be a logical axis name"),
    ],
)
def test_bad_settings_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        Repeat(_block, 2, rngs=Rngs(0), **kwargs)


@pytest.mark.parametrize("block", [nl.Linear(2, 2, rngs=Rngs(0)), 3], ids=["a-module", "an-int"])
def test_block_must_be_a_function_that_builds_a_module(block):
    with pytest.raises(TypeError, match=r"Repeat builds each block by calling block\(rngs\)"):
        Repeat(block, 2, rngs=Rngs(0))


def test_block_that_builds_no_module_is_refused():
    with pytest.raises(TypeError, match=r"block\(rngs\) returned a int; it must build a Module"):
        Repeat(lambda rngs: 3, 2, rngs=Rngs(0))


def test_rngs_must_be_an_rngs():
    with pytest.raises(TypeError, match="Repeat needs rngs=Rngs"):
        Repeat(_block, 2, rngs=None)


def test_a_block_that_changes_the_shape_is_refused_naming_the_shapes():
    model = Repeat(lambda rngs: nl.Linear(8, 16, rngs=rngs), 2, rngs=Rngs(0))
    with pytest.raises(
        ValueError,
        match=r"the block returns float32\[4,16\] for an input of float32\[4,8\].*fixed|loop",
    ):
        model(_x())


def test_a_block_that_changes_the_dtype_is_refused_naming_both():
    model = Repeat(lambda rngs: nl.Linear(8, 8, dtype=jnp.bfloat16, rngs=rngs), 2, rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"returns bfloat16\[4,8\] for an input of float32\[4,8\]"):
        model(_x())


@pytest.mark.parametrize("shape", [(5,), (2, 0, 8), (2, 5, 8.0)])
def test_init_cache_needs_a_sequence_shape(shape):
    model = Repeat(lambda rngs: Decoder(rngs=rngs), 2, rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"Repeat.init_cache needs the shape of a whole sequence"):
        model.init_cache(shape)


def test_init_cache_of_a_block_without_caches_is_refused():
    model = Repeat(lambda rngs: nl.Linear(8, 8, rngs=rngs), 2, rngs=Rngs(0))
    with pytest.raises(ValueError, match=r"no layer of the block \(Linear\) has an init_cache"):
        model.init_cache((1, 4, 8))


def test_a_repeat_of_repeats_equals_its_unrolled_blocks():
    model = Repeat(
        lambda rngs: Repeat(lambda inner: nl.Linear(4, 4, rngs=inner), 2, rngs=rngs),
        3,
        rngs=Rngs(0),
    )
    assert model.block.block.kernel.shape == (3, 2, 4, 4)
    x = jnp.linspace(-1, 1, 8).reshape(2, 4)
    expected = x
    for outer in model.unstack():
        for layer in outer.unstack():
            expected = layer(expected)
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-6)

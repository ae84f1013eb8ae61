"""The logical axis names every built-in layer declares, and what a user's metadata does to them."""

import jax
import jax.numpy as jnp
import pytest

import nnx_core as nnx
from nnx_layers import (
    Conv,
    ConvTranspose,
    Einsum,
    Embed,
    LayerNorm,
    Linear,
    LinearGeneral,
    LoRALinear,
    MultiHeadAttention,
    PositionEmbed,
    Repeat,
    WeightNorm,
)
from nnx_layers._axis_names import dense_names, general_names, with_default_names
from nnx_plugins import build
from tests.nnx_plugins.corpus import ARGUMENTS

VOCABULARY = {"embed", "mlp", "heads", "kv_heads", "head_dim", "vocab", "conv_in", "conv_out"}
VOCABULARY |= {"layers", None}


def names(variable):
    return variable.get_metadata("sharding_names", None)


@pytest.mark.parametrize("name", sorted(n for n in ARGUMENTS if "." not in n))
def test_every_parameter_of_every_built_in_layer_names_its_axes(name):
    model = build({"type": name, **ARGUMENTS[name]}, rngs=nnx.Rngs(0))
    for path, variable in nnx.state(model, nnx.Param).flat_state():
        value = variable.get_raw_value()
        if value.ndim == 0:
            continue  # (a scalar, e.g. PReLU's slope, has no axis to name)
        declared = names(variable)
        assert declared is not None and len(declared) == value.ndim, (path, declared)
        assert set(declared) <= VOCABULARY, (path, declared)


@pytest.mark.parametrize(
    ("layer", "expected"),
    [
        (lambda r: Linear(4, 16, rngs=r), {"kernel": ("embed", "mlp"), "bias": ("mlp",)}),
        (lambda r: Linear(16, 4, rngs=r), {"kernel": ("mlp", "embed"), "bias": ("embed",)}),
        (lambda r: Embed(10, 4, rngs=r), {"embedding": ("vocab", "embed")}),
        (lambda r: PositionEmbed(8, 4, rngs=r), {"embedding": (None, "embed")}),
        (
            lambda r: Conv(3, 8, (3, 3), rngs=r),
            {"kernel": (None, None, "conv_in", "conv_out"), "bias": ("conv_out",)},
        ),
        (
            lambda r: ConvTranspose(3, 8, (3,), transpose_kernel=True, rngs=r),
            {"kernel": (None, "conv_out", "conv_in"), "bias": ("conv_out",)},
        ),
        (lambda r: LayerNorm(4, rngs=r), {"scale": ("embed",), "bias": ("embed",)}),
        (
            lambda r: LinearGeneral((2, 3), (4, 5), axis=(-2, -1), rngs=r),
            {"kernel": ("embed", None, "mlp", None), "bias": ("mlp", None)},
        ),
        (
            lambda r: Einsum("btd,dhk->bthk", (8, 2, 4), rngs=r),
            {"kernel": ("embed", "mlp", None)},
        ),
        (
            lambda r: LoRALinear(4, 8, lora_rank=2, rngs=r),
            {
                "kernel": ("embed", "mlp"),
                "lora/lora_a": ("embed", None),
                "lora/lora_b": (None, "mlp"),
            },
        ),
    ],
)
def test_the_names_of_each_layer(layer, expected):
    model = layer(nnx.Rngs(0))
    got = {"/".join(map(str, p)): names(v) for p, v in nnx.state(model, nnx.Param).flat_state()}
    assert {k: got[k] for k in expected} == expected


def test_attention_names_heads_for_megatron():
    layer = MultiHeadAttention(
        2, 8, qkv_features=8, normalize_qk=True, decode=False, rngs=nnx.Rngs(0)
    )
    assert names(layer.query.kernel) == ("embed", "heads", "head_dim")
    assert names(layer.key.kernel) == names(layer.value.kernel) == ("embed", "kv_heads", "head_dim")
    assert names(layer.query.bias) == ("heads", "head_dim")
    assert names(layer.out.kernel) == ("heads", "head_dim", "embed")
    assert names(layer.out.bias) == ("embed",)
    assert names(layer.query_ln.scale) == ("head_dim",)


def test_a_repeat_names_its_stacked_axis_layers():
    stack = Repeat(lambda r: Linear(4, 8, rngs=r), 3, rngs=nnx.Rngs(0))
    assert names(stack.block.kernel) == ("layers", "embed", "mlp")
    assert names(stack.unstack()[0].kernel) == ("embed", "mlp")
    plain = Repeat(lambda r: Linear(4, 8, rngs=r), 3, rngs=nnx.Rngs(0), sharding_name=None)
    assert names(plain.block.kernel) == (None, "embed", "mlp")


def test_weight_norm_scales_take_the_names_of_the_weights_axes():
    layer = WeightNorm(Linear(2, 3, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(0))
    assert names(layer.scales[("kernel",)]) == ("mlp",)


def test_the_optimizer_state_carries_its_parameters_names():
    import optax

    model = Linear(4, 8, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3))
    assert [names(v) for v in optimizer.opt_state] == [
        None,  # the step count
        ("mlp",),
        ("embed", "mlp"),
        ("mlp",),
        ("embed", "mlp"),
    ]


# -- what the user gives wins (as in flax.nnx, where it is the only source) -------------------
def test_metadata_given_replaces_the_default():
    layer = Linear(4, 8, kernel_metadata={"sharding_names": (None, "model")}, rngs=nnx.Rngs(0))
    assert names(layer.kernel) == (None, "model") and names(layer.bias) == ("mlp",)
    assert layer.kernel_metadata == {"sharding_names": (None, "model")}  # (the config's round trip)


def test_flax_spelling_out_sharding_is_not_doubled():
    layer = Linear(4, 8, kernel_metadata={"out_sharding": ("a", "b")}, rngs=nnx.Rngs(0))
    assert layer.kernel.get_metadata("out_sharding") == ("a", "b") and names(layer.kernel) is None


def test_names_in_the_initializer_win():
    init = nnx.with_partitioning(lambda k, s, d: jnp.zeros(s, d), ("x", "y"))
    layer = Linear(
        4, 8, kernel_init=init, kernel_metadata={"sharding_names": ("p", "q")}, rngs=nnx.Rngs(0)
    )
    assert names(layer.kernel) == ("x", "y")
    flax_style = nnx.with_metadata(lambda k, s, d: jnp.zeros(s, d), out_sharding=("x", "y"))
    layer = Linear(4, 8, kernel_init=flax_style, rngs=nnx.Rngs(0))
    assert layer.kernel.get_metadata("out_sharding") == ("x", "y") and names(layer.kernel) is None


def test_naming_helpers():
    assert dense_names(8, 8) == ("embed", "mlp")
    assert general_names((2, 3), (8,), batch=1) == ((None, "embed", None, "mlp"), (None, "mlp"))
    assert general_names((2, 3), (4,)) == (("mlp", None, "embed"), ("embed",))
    assert with_default_names({"note": 1}, ("a",)) == {"note": 1, "sharding_names": ("a",)}
    assert with_default_names({"sharding_names": None}, ("a",))["sharding_names"] == ("a",)


def test_names_do_not_change_the_numbers():
    x = jax.random.normal(jax.random.key(1), (2, 4))
    named = Linear(4, 8, rngs=nnx.Rngs(0))
    given = Linear(4, 8, kernel_metadata={"sharding_names": (None, None)}, rngs=nnx.Rngs(0))
    assert jnp.array_equal(named(x), given(x))

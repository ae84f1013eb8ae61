"""LoRA, LoRALinear and the LoRAParam kind: parity with flax.nnx, selection by kind, configs,
errors."""

import inspect

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx
from nnx_layers import Linear, LoRA, LoRALinear, LoRAParam, initializers
from nnx_plugins import ConfigError, build, default_registry
from nnx_plugins.testing import check_layer, check_variable_type


def _x(shape, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(2).standard_normal(shape), dtype)


def _nonzero(ours, theirs, names):
    """Random adapters (lora_b starts at zero, which would hide it) copied into flax's layer."""
    for i, name in enumerate(names):
        var = getattr(ours, name)
        var.value = jnp.asarray(
            np.random.default_rng(i).standard_normal(var.value.shape), var.value.dtype
        )
        getattr(theirs, name)[...] = var.value


def test_signatures_match_flax():
    for ours, theirs in [(LoRA, fnnx.LoRA), (LoRALinear, fnnx.LoRALinear)]:
        mine = inspect.signature(ours.__init__).parameters
        other = inspect.signature(theirs.__init__).parameters
        linear = inspect.signature(fnnx.Linear.__init__).parameters
        for name, parameter in mine.items():
            assert name in other or name in linear, name
            default = parameter.default
            expected = (other[name] if name in other else linear[name]).default
            if (
                name != "lora_param_type"
                and not callable(default)
                and not name.endswith("metadata")
            ):
                assert default == expected, name


def test_default_init_matches_flax_from_the_same_key():
    ours = LoRA(3, 2, 4, b_initializer=initializers.normal(1.0), rngs=nnx.Rngs(0))
    theirs = fnnx.LoRA(3, 2, 4, b_initializer=fnnx.initializers.normal(1.0), rngs=fnnx.Rngs(0))
    np.testing.assert_array_equal(ours.lora_a.value, theirs.lora_a[...])
    np.testing.assert_array_equal(ours.lora_b.value, theirs.lora_b[...])
    ours = LoRALinear(3, 4, lora_rank=2, rngs=nnx.Rngs(0))
    theirs = fnnx.LoRALinear(3, 4, lora_rank=2, rngs=fnnx.Rngs(0))
    for path in [("kernel",), ("bias",), ("lora", "lora_a"), ("lora", "lora_b")]:
        mine, other = ours, theirs
        for name in path:
            mine, other = getattr(mine, name), getattr(other, name)
        np.testing.assert_array_equal(mine.value, other[...])


@pytest.mark.parametrize(
    ("dtype", "param_dtype", "input_dtype"),
    [
        (None, jnp.bfloat16, jnp.float32),
        (jnp.bfloat16, jnp.float32, jnp.float32),
    ],
)
def test_lora_matches_flax(dtype, param_dtype, input_dtype, assert_close):
    kwargs = dict(dtype=dtype, param_dtype=param_dtype)
    ours, theirs = (
        LoRA(3, 2, 4, **kwargs, rngs=nnx.Rngs(0)),
        fnnx.LoRA(3, 2, 4, **kwargs, rngs=fnnx.Rngs(0)),
    )
    _nonzero(ours, theirs, ["lora_a", "lora_b"])
    x = _x((5, 3), input_dtype)
    assert_close(ours(x), theirs(x))

    def loss(model, x):
        return (model(x).astype(jnp.float32) ** 2).sum()

    ours_grads, ours_dx = nnx.grad(loss, argnums=(0, 1))(ours, x)
    theirs_grads, theirs_dx = fnnx.grad(loss, argnums=(0, 1))(theirs, x)
    assert_close(ours_dx, theirs_dx, 10.0)
    assert_close(ours_grads["lora_a"].value, theirs_grads["lora_a"][...], 10.0)


def test_lora_with_a_base_module_matches_flax(copy_params, assert_close):
    base = Linear(3, 4, kernel_init=initializers.zeros, rngs=nnx.Rngs(0))
    their_base = fnnx.Linear(3, 4, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(0))
    copy_params(base, their_base, ["kernel", "bias"])
    ours = LoRA(3, 2, 4, base_module=base, rngs=nnx.Rngs(1))
    theirs = fnnx.LoRA(3, 2, 4, base_module=their_base, rngs=fnnx.Rngs(1))
    _nonzero(ours, theirs, ["lora_a", "lora_b"])
    x = _x((2, 5, 3))
    assert_close(ours(x), theirs(x))
    assert ours.base_module is base


@pytest.mark.parametrize("dtype", [None, jnp.bfloat16])
def test_lora_linear_matches_flax(dtype, copy_params, assert_close):
    kwargs = dict(lora_rank=2, dtype=dtype, lora_dtype=dtype, kernel_init=initializers.zeros)
    ours = LoRALinear(3, 4, **kwargs, rngs=nnx.Rngs(0))
    theirs = fnnx.LoRALinear(
        3,
        4,
        lora_rank=2,
        dtype=dtype,
        lora_dtype=dtype,
        kernel_init=fnnx.initializers.zeros,
        rngs=fnnx.Rngs(0),
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    _nonzero(ours.lora, theirs.lora, ["lora_a", "lora_b"])
    x = _x((2, 3))
    assert_close(ours(x), theirs(x))
    assert isinstance(ours, Linear) and ours.lora.lora_param_type == "LoRAParam"


def test_lora_param_is_a_named_param_kind_that_filters_and_optimizers_select():
    assert issubclass(LoRAParam, nnx.Param) and nnx.variable_name(LoRAParam) == "LoRAParam"
    assert check_variable_type("LoRAParam") is LoRAParam
    layer = LoRALinear(3, 4, lora_rank=2, rngs=nnx.Rngs(0))
    adapters = [path for path, _ in nnx.state(layer, "LoRAParam").flat_state()]
    assert adapters == [("lora", "lora_a"), ("lora", "lora_b")]
    assert len(nnx.state(layer, nnx.Param).flat_state()) == 4
    frozen = layer.kernel.value
    optimizer = nnx.Optimizer(layer, optax.sgd(0.1), wrt=LoRAParam)
    loss = lambda model, x: (model(x) ** 2).sum()  # noqa: E731
    grads = nnx.grad(loss, wrt=LoRAParam)(layer, jnp.ones((2, 3)))
    optimizer.update(layer, grads)
    np.testing.assert_array_equal(layer.kernel.value, frozen)
    assert not np.allclose(layer.lora.lora_b.value, 0.0)


def test_lora_param_type_by_class_or_name():
    class Adapter(nnx.Param, kind="tests.Adapter"):
        pass

    by_class = LoRA(3, 2, 4, lora_param_type=Adapter, rngs=nnx.Rngs(0))
    by_name = LoRA(3, 2, 4, lora_param_type="tests.Adapter", rngs=nnx.Rngs(0))
    for layer in (by_class, by_name):
        assert type(layer.lora_a) is Adapter and layer.lora_param_type == "tests.Adapter"
    linear = LoRALinear(3, 4, lora_rank=2, lora_param_type=Adapter, rngs=nnx.Rngs(0))
    assert type(linear.lora.lora_b) is Adapter and linear.lora_param_type == "tests.Adapter"


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("LoRA", {"in_features": 8, "lora_rank": 2, "out_features": 4}),
        (
            "LoRA",
            {
                "in_features": 8,
                "lora_rank": 2,
                "out_features": 4,
                "base_module": {"type": "Linear", "in_features": 8, "out_features": 4},
                "a_initializer": {"type": "normal", "stddev": 0.1},
            },
        ),
        ("LoRALinear", {"in_features": 8, "out_features": 4, "lora_rank": 2, "use_bias": False}),
    ],
)
def test_works_from_a_config(name, config):
    assert check_layer(name, config, input_shape=(3, 8)).output_shape == (3, 4)


def test_a_plugin_kind_by_name_in_a_config():
    default_registry().get("variable", "acme.LoRAParam")  # a plugin's kinds load on first use
    config = {
        "in_features": 8,
        "lora_rank": 2,
        "out_features": 4,
        "lora_param_type": "acme.LoRAParam",
    }
    report = check_layer("LoRA", config, input_shape=(3, 8))
    assert report.config["lora_param_type"] == "acme.LoRAParam"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"lora_rank": 0}, ValueError, "LoRA lora_rank must be a positive integer, got 0"),
        (
            {"lora_rank": 4},
            ValueError,
            r"LoRA lora_rank=4 is larger than min\(in, out\) = 3 of its 3 x 4 kernel: an "
            r"adapter lora_a @ lora_b on an in x out kernel has rank at most min\(in, out\), so "
            r"a rank above 3 only adds parameters\. Pass lora_rank <= 3\.",
        ),
        ({"in_features": 2.5}, ValueError, "LoRA in_features must be a positive integer"),
        ({"base_module": 3}, TypeError, "LoRA base_module must be a callable layer, got int"),
        (
            {"lora_param_type": int},
            TypeError,
            "lora_param_type must be a Variable kind .* got <class 'int'>",
        ),
        (
            {"lora_param_type": "Nope"},
            ValueError,
            "LoRA lora_param_type: No Variable kind is registered as 'Nope'",
        ),
    ],
)
def test_lora_construction_errors(kwargs, error, match):
    kwargs = {"in_features": 3, "lora_rank": 2, "out_features": 4, **kwargs}
    with pytest.raises(error, match=match):
        LoRA(**kwargs, rngs=nnx.Rngs(0))


def test_lora_linear_construction_errors():
    with pytest.raises(ValueError, match="LoRALinear lora_rank must be a positive integer, got -1"):
        LoRALinear(3, 4, lora_rank=-1, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="LoRALinear lora_param_type must be a Variable kind"):
        LoRALinear(3, 4, lora_rank=2, lora_param_type=object, rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError,
        match=r"LoRALinear lora_rank=3 is larger than min\(in, out\) = 2 of its 16 x 2 kernel",
    ):
        LoRALinear(16, 2, lora_rank=3, rngs=nnx.Rngs(0))


def test_a_rank_the_kernel_cannot_use_is_refused_at_its_place_in_a_config():
    config = {
        "type": "Sequential",
        "layers": [
            {"type": "relu"},
            {"type": "LoRALinear", "in_features": 8, "out_features": 2, "lora_rank": 4},
        ],
    }
    with pytest.raises(
        ConfigError,
        match=r"model\.layers\[1\]: building LoRALinear raised ValueError: LoRALinear "
        r"lora_rank=4 is larger than min\(in, out\) = 2 of its 8 x 2 kernel.* Pass "
        r"lora_rank <= 2\.",
    ):
        build(config)


def test_lora_call_errors():
    layer = LoRA(3, 2, 4, base_module=Linear(3, 5, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError,
        match=r"adapter output has shape \(2, 4\) but its base_module \(Linear\) returned shape \(2, 5\)",
    ):
        layer(jnp.ones((2, 3)))
    with pytest.raises(
        ValueError,
        match=r"LoRA expects an input whose last axis is 3 \(in_features\), got shape \(2, 5\)",
    ):
        layer(jnp.ones((2, 5)))
    with pytest.raises(TypeError, match="LoRA expects a numeric input, got dtype key"):
        layer(jax.random.split(jax.random.key(0), (2, 3)))


def test_adapter_dtypes_that_cannot_be_trained_are_refused():
    floating = (
        r"must be a floating dtype .* got {}\. Use a floating dtype such as float32 or bfloat16\."
    )
    with pytest.raises(ValueError, match="LoRA param_dtype " + floating.format("int8")):
        LoRA(3, 2, 4, param_dtype=jnp.int8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="LoRALinear lora_param_dtype " + floating.format("int8")):
        LoRALinear(3, 4, lora_rank=2, lora_param_dtype="int8", rngs=nnx.Rngs(0))
    config = {"type": "LoRALinear", "in_features": 3, "out_features": 4, "lora_rank": 2}
    with pytest.raises(
        ConfigError,
        match=r"building LoRALinear raised ValueError: LoRALinear lora_param_dtype "
        + floating.format("int8"),
    ):
        build({**config, "lora_param_dtype": "int8"})

"""The package's public names and its entry points."""

import inspect
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import tomllib

import nnx_core
import nnx_layers
from nnx_core import Rngs

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_public_names():
    groups = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]
    entry_points = groups["nnx.layers"]
    builtin = {name for name, target in entry_points.items() if target.startswith("nnx_layers:")}
    kinds = {name for name, target in groups["nnx.variables"].items() if "nnx_layers" in target}
    assert kinds == {"LoRAParam"}
    others = {
        "initializers",
        "activations",
        "Initializer",
        "RNNCellBase",
        "pool",
        "promote_dtype",
        "rope_frequencies",
        "default_positions",
    }  # (no config spelling)
    assert set(nnx_layers.__all__) == builtin | kinds | others
    for name, target in entry_points.items():
        if target.startswith("nnx_layers:"):
            assert getattr(nnx_layers, target.split(":")[1]) is not None, name


def test_every_public_name_has_a_docstring_example():
    for name in nnx_layers.__all__:
        doc = inspect.getdoc(getattr(nnx_layers, name)) or ""
        assert ">>>" in doc, name


def test_layer_constructors_take_keyword_only_rngs():
    for name in [
        "Linear",
        "Embed",
        "Conv",
        "ConvTranspose",
        "BatchNorm",
        "LayerNorm",
        "RMSNorm",
    ] + ["MultiHeadAttention", "LinearGeneral", "Einsum", "LoRA", "LoRALinear"]:
        parameters = inspect.signature(getattr(nnx_layers, name)).parameters
        assert parameters["rngs"].kind is inspect.Parameter.KEYWORD_ONLY, name


def test_every_constructor_argument_is_stored_under_its_name():
    zeros = nnx_layers.initializers.zeros
    layers = [
        nnx_layers.Linear(2, 3, kernel_init=zeros, rngs=Rngs(0)),
        nnx_layers.Embed(4, 3, embedding_init=zeros, rngs=Rngs(0)),
        nnx_layers.Conv(2, 3, (3, 3), kernel_init=zeros, rngs=Rngs(0)),
        nnx_layers.ConvTranspose(2, 3, 3, kernel_init=zeros, rngs=Rngs(0)),
        nnx_layers.BatchNorm(3, rngs=Rngs(0)),
        nnx_layers.LayerNorm(3, rngs=Rngs(0)),
        nnx_layers.RMSNorm(3, rngs=Rngs(0)),
        nnx_layers.Dropout(0.5),
        nnx_layers.Sequential(nnx_layers.relu),
        nnx_layers.Flatten(),
        nnx_layers.MultiHeadAttention(2, 4, kernel_init=zeros, rngs=Rngs(0)),
        nnx_layers.LinearGeneral(2, (3, 2), kernel_init=zeros, rngs=Rngs(0)),
        nnx_layers.Einsum("ab,bc->ac", (2, 3), (3,), kernel_init=zeros, rngs=Rngs(0)),
        nnx_layers.PReLU(),
        nnx_layers.LoRA(2, 1, 3, rngs=Rngs(0)),
        nnx_layers.LoRALinear(2, 3, lora_rank=1, kernel_init=zeros, rngs=Rngs(0)),
    ]
    for layer in layers:
        for name in inspect.signature(type(layer)).parameters:
            if name != "rngs":
                assert hasattr(layer, name), f"{type(layer).__name__}.{name}"


def _model(seed):
    rngs = Rngs(seed)
    return nnx_layers.Sequential(
        nnx_layers.Conv(1, 2, [3, 3], padding=[[1, 1], [1, 1]], rngs=rngs),
        nnx_layers.BatchNorm(2, axis_index_groups=[[0, 1]], rngs=rngs),
        nnx_layers.relu,
        nnx_layers.Flatten(),
        nnx_layers.Dropout(0.1, broadcast_dims=[0], rngs=rngs),
        nnx_layers.Linear(2 * 4 * 4, 3, kernel_metadata={"sharding_names": ("a", "b")}, rngs=rngs),
        nnx_layers.LayerNorm(3, rngs=rngs),
    )


def test_equal_structures_have_equal_hashable_graphdefs():
    first, second = nnx_core.graphdef(_model(0)), nnx_core.graphdef(_model(1))
    assert first == second and hash(first) == hash(second)


def test_numpy_scalars_are_accepted_as_sizes_and_rates():
    linear = nnx_layers.Linear(np.int64(2), np.int32(3), rngs=Rngs(0))
    assert linear.in_features == 2 and type(linear.in_features) is int
    conv = nnx_layers.Conv(
        2, 2, (np.int64(3),), strides=np.int64(1), padding=np.int64(1), rngs=Rngs(0)
    )
    assert conv.kernel_size == (3,) and conv(jnp.ones((1, 4, 2))).shape == (1, 4, 2)
    assert nnx_layers.Dropout(np.float32(0.25)).rate == 0.25
    assert nnx_layers.LayerNorm(2, epsilon=np.float32(0.5), rngs=Rngs(0)).epsilon == 0.5

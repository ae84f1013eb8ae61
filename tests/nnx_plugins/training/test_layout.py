"""Laying Variables out on a mesh from their logical axis names and the sharding rules.

Planned against axis sizes only (no devices needed): `Layout.plan_spec` / `Layout.specs` take
the sizes of a mesh that does not exist here. Runs on 8 simulated devices: test_layouts.py.
"""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import nnx_core as nnx
from nnx_plugins import ConfigError, load_config
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._layout import Layout, LayoutError, ShardingRulesWarning
from nnx_plugins.training._mesh import run_layout
from nnx_plugins.training._rules import MeshSection, RulesSection

SIZES = {"data": 2, "fsdp": 2, "model": 2}


def layout(sizes=SIZES, **given):
    return Layout.of(sizes, {name: tuple(axes) for name, axes in given.items()})


def param(shape, names=None, kind=nnx.Param):
    value = jax.ShapeDtypeStruct(shape, jnp.float32)
    return kind(value, sharding_names=names) if names is not None else kind(value)


@pytest.mark.parametrize(
    ("shape", "names", "sizes", "spec"),
    [
        # Megatron over model, the other dimension over fsdp
        ((64, 256), ("embed", "mlp"), SIZES, P("fsdp", "model")),
        ((256, 64), ("mlp", "embed"), SIZES, P("model", "fsdp")),
        ((1000, 64), ("vocab", "embed"), SIZES, P("model", "fsdp")),
        ((64, 4, 16), ("embed", "heads", "head_dim"), SIZES, P("fsdp", "model")),
        ((4, 16, 64), ("heads", "head_dim", "embed"), SIZES, P("model", None, "fsdp")),
        # fsdp alone: the largest dimension (the first of equal ones), whatever its name
        ((64, 256), ("embed", "mlp"), {"fsdp": 8}, P(None, "fsdp")),
        ((256, 64), ("mlp", "embed"), {"fsdp": 8}, P("fsdp")),
        ((32, 32), ("embed", "mlp"), {"fsdp": 8}, P("fsdp")),
        ((64,), ("embed",), {"fsdp": 8}, P("fsdp")),
        # a Repeat's layer axis stays whole, even when it is the largest
        ((48, 8, 16), ("layers", "embed", "mlp"), {"fsdp": 8}, P(None, None, "fsdp")),
        # what fsdp does not divide stays whole; the next largest it divides is taken
        ((12, 8), ("embed", "mlp"), {"fsdp": 8}, P(None, "fsdp")),
        ((12, 6), ("embed", "mlp"), {"fsdp": 8}, P()),
        # a default rule that does not divide leaves the dimension whole
        ((64, 10), ("embed", "mlp"), {"model": 4}, P()),
        # no names: fsdp still applies; data and size-1 axes never split a parameter
        ((16, 64), None, SIZES, P(None, "fsdp")),
        ((16, 64), ("embed", "mlp"), {"data": 8}, P()),
        ((), None, SIZES, P()),
    ],
)
def test_default_rules(shape, names, sizes, spec):
    assert layout(sizes).plan_spec(("w",), param(shape, names)) == spec


def test_optimizer_moments_are_laid_out_like_their_parameters():
    kernel = param((64, 256), ("embed", "mlp"))
    moment = param((64, 256), ("embed", "mlp"), kind=nnx.OptState)
    plan = layout()
    assert plan.plan_spec(("k",), moment) == plan.plan_spec(("k",), kernel) == P("fsdp", "model")


def test_only_parameters_and_optimizer_state_are_split_over_fsdp():
    stats = param((64,), ("embed",), kind=nnx.BatchStat)
    assert layout({"fsdp": 8}).plan_spec(("mean",), stats) == P()
    keys = nnx.RngKey(jax.ShapeDtypeStruct((8,), jax.random.key(0).dtype))
    assert layout({"fsdp": 8}).plan_spec(("key",), keys) == P()


def test_rules_the_user_gives_replace_the_defaults():
    assert layout(embed=["fsdp"]).plan_spec(("w",), param((64, 256), ("embed", "mlp"))) == P(
        "fsdp", "model"
    )
    # mlp kept whole (by fsdp too): fsdp goes to the largest other dimension
    assert layout(mlp=[]).plan_spec(("w",), param((64, 256), ("embed", "mlp"))) == P("fsdp")
    # several axes on one dimension
    spec = layout({"fsdp": 2, "model": 2}, embed=["fsdp", "model"], mlp=[]).plan_spec(
        ("w",), param((64, 256), ("embed", "mlp"))
    )
    assert spec == P(("fsdp", "model"))
    # a name that is a mesh axis (metadata written for a mesh) splits over it
    assert layout().plan_spec(("w",), param((64, 8), (None, "data"))) == P("fsdp", "data")


def test_an_indivisible_dimension_of_a_users_rule_names_the_parameter_shape_and_axis():
    with pytest.raises(
        LayoutError,
        match=r"model\.layers\[0\]\.kernel has shape \(64, 10\): dimension 1 \('mlp', size 10\) "
        r"cannot be split over mesh axis 'model' of size 4, which sharding_rules\.mlp lays it "
        r"on\. Use a mesh whose model size divides 10, or keep 'mlp' whole "
        r"\(sharding_rules: \{mlp: null\}\)\.",
    ):
        layout({"model": 4}, mlp=["model"]).plan_spec(
            ("layers", 0, "kernel"), param((64, 10), ("embed", "mlp"))
        )
    with pytest.raises(
        LayoutError,
        match=r"model\.w has shape \(6, 3\): dimension 1 \('data', size 3\) cannot be split over "
        r"mesh axis 'data' of size 2, which the sharding_names of model\.w lays it on",
    ):
        layout().plan_spec(("w",), param((6, 3), (None, "data")))


def test_conflicting_rules_name_both():
    with pytest.raises(
        LayoutError,
        match=r"conflicting rules: model\.w \(names \('embed', 'mlp'\)\) would be split over mesh "
        r"axis 'model' on dimension 0 \('embed', by sharding_rules\.embed\) and on dimension 1 "
        r"\('mlp', by the default rules\)",
    ) as caught:
        layout(embed=["model"]).plan_spec(("w",), param((64, 256), ("embed", "mlp")))
    assert caught.value.problems[0].where == ("sharding_rules", "embed")


def test_every_problem_of_a_state_is_reported_at_once():
    state = nnx.State(
        {
            "a": param((64, 10), ("embed", "mlp")),
            "b": param((64, 6), ("embed", "mlp")),
            "c": param((64, 256), ("embed", "mlp")),
        }
    )
    with pytest.raises(LayoutError) as caught:
        layout({"model": 4}, mlp=["model"]).specs(state)
    assert [p.message.split(" has shape")[0] for p in caught.value.problems] == [
        "model.a",
        "model.b",
    ]


def test_a_rule_naming_what_no_layer_declares_is_warned_and_named():
    state = nnx.State({"w": param((4, 8), ("embed", "mlp"))})
    with pytest.warns(
        ShardingRulesWarning,
        match=r"sharding_rules names \['embd'\], which no layer of the model declares; those "
        r"rules do nothing\. Did you mean 'embed'\? The model's logical axis names: embed, mlp\.",
    ):
        assert layout(embd=["fsdp"], mlp=["model"]).warn_unused(state) == ["embd"]


def test_a_rule_naming_an_axis_a_users_mesh_lacks():
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("batch",))
    with pytest.raises(
        LayoutError,
        match=r"the rule embed: \['model'\] names mesh axes \['model'\] that the mesh does not "
        r"have \(its axes: batch\)",
    ):
        Layout.of(mesh, {"embed": ("model",)})


# -- the config sections ---------------------------------------------------------------------
def test_the_sections_parse():
    assert MeshSection.model_validate({"model": 2}).sizes() == {"data": 1, "fsdp": 1, "model": 2}
    rules = RulesSection.model_validate({"embed": ["data", "fsdp"], "layers": None, "mlp": "model"})
    assert rules.given() == {"embed": ("data", "fsdp"), "layers": (), "mlp": ("model",)}


def test_bad_sections_are_located_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 2, out_features: 2}\n"
        "mesh: {data: 2, pipeline: 4, model: 0}\n"
        "sharding_rules:\n"
        "  embed: [fsdp, fsdp]\n"
        "  mlp: tensor\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "unknown mesh axis 'pipeline'; the mesh axes are data, fsdp and model" in text
    assert "mesh.model: Input should be greater than or equal to 1" in text
    assert (
        "sharding_rules.embed: a rule names each mesh axis at most once, got ['fsdp', 'fsdp']"
        in text
    )
    assert "unknown mesh axis 'tensor'; the mesh axes are data, fsdp and model" in text
    assert f"{path}:2:" in text and f"{path}:5:" in text


def test_the_run_layout_comes_from_the_argument_or_the_config():
    config = load_train_config(
        {
            "model": {"type": "Linear", "in_features": 2, "out_features": 2},
            "mesh": {"data": 1},
            "sharding_rules": {"embed": "fsdp"},
        }
    )
    plan = run_layout(config, None)
    assert plan.mesh.shape == {"data": 1, "fsdp": 1, "model": 1}
    assert plan.given == {"embed": ("fsdp",)} and plan.rules["mlp"] == ("model",)
    assert run_layout(load_train_config({"model": config.model}), None) is None
    with pytest.raises(ValueError, match=r"mesh= takes a jax\.sharding\.Mesh or the axis sizes"):
        run_layout(config, "fsdp=8")


def test_a_layout_problem_is_a_config_error_at_the_rule(tmp_path):
    from nnx_plugins.training._layout import layout_error

    path = tmp_path / "c.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 64, out_features: 10}\nsharding_rules:\n  mlp: model\n"
    )
    config = load_train_config(path)
    state = nnx.State({"kernel": param((64, 10), ("embed", "mlp"))})
    with pytest.raises(LayoutError) as caught:
        Layout.of({"model": 4}, {"mlp": ("model",)}).specs(state)
    error = layout_error(config, caught.value)
    assert isinstance(error, ConfigError)
    assert str(error.problems[0]).startswith(
        f"{path}:3:8: sharding_rules.mlp: model.kernel has shape (64, 10): dimension 1 ('mlp', "
        "size 10) cannot be split over mesh axis 'model' of size 4"
    )

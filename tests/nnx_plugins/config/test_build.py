"""load_config, build and to_config: round trips, every problem at once, nothing half built."""

import json

import jax
import pydantic
import pytest

from nnx_core import Module, Rngs, state
from nnx_plugins import Config, ConfigError, build, load_config, to_config
from nnx_plugins._text import format_path

from ..conftest import BROKEN, COLLIDING, OtherGatedDense
from ..corpus import ARGUMENTS, NESTED


def shapes(module):
    return jax.tree.map(jax.numpy.shape, state(module))


@pytest.mark.parametrize("name", sorted(ARGUMENTS))
def test_round_trip_for_every_layer(nnx_registry, name):
    node = {"type": name, **ARGUMENTS[name]}
    normalized = load_config({"model": node}).model
    module = build(node)
    assert to_config(module) == normalized
    rebuilt = build(to_config(module))
    assert to_config(rebuilt) == normalized
    assert jax.tree.leaves(shapes(rebuilt)) == jax.tree.leaves(shapes(module))


def test_corpus_covers_every_registered_layer(nnx_registry):
    for name in nnx_registry.names("layer"):
        obj = nnx_registry.get("layer", name)
        assert name in ARGUMENTS or not isinstance(obj, type), name


@pytest.mark.parametrize("name", ["relu", "gelu", "acme.Swish"])
def test_activations_build_to_the_function(nnx_registry, name):
    assert build({"type": name}) is nnx_registry.get("layer", name)
    assert to_config(build({"type": "Sequential", "layers": [{"type": name}]}))["layers"] == [
        {"type": name}
    ]


def test_nested_model_round_trip_and_forward(nnx_registry):
    config = load_config({"model": NESTED})
    model = build(config, rngs=Rngs(params=1, dropout=2))
    assert to_config(model) == config.model
    model.eval()
    assert model(jax.numpy.ones((2, 8, 8, 1))).shape == (2, 10)


def test_yaml_and_json_files(nnx_registry, tmp_path):
    import yaml

    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"model": NESTED, "train": {"steps": 3}}))
    (tmp_path / "m.json").write_text(json.dumps({"model": NESTED}))
    from_yaml, from_json = load_config(tmp_path / "m.yaml"), load_config(str(tmp_path / "m.json"))
    assert from_yaml.model == from_json.model
    assert from_yaml.sections["train"].steps == 3
    assert from_yaml.to_dict()["train"]["steps"] == 3
    assert load_config(from_yaml) is from_yaml


def test_an_unknown_top_level_section_is_an_error_naming_the_known_ones(tmp_path):
    (tmp_path / "m.yaml").write_text("model: {type: relu}\ndefaults: [base]\ntrian: {steps: 3}\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "m.yaml")
    messages = [str(p) for p in info.value.problems]
    assert messages[0].endswith(
        "m.yaml:2:1: defaults: unknown section 'defaults'. Known sections: callbacks, checkpoint, "
        "data, loggers, metrics, model, optimizer, plugins, task, train."
    )
    assert "m.yaml:3:1: trian: unknown section 'trian'. Did you mean 'train'?" in messages[1]


BAD = """\
model:
  type: Sequential
  layers:
    - {type: Lienar, in_features: 2, out_features: 3}
    - {type: Conv, in_features: 1, out_feature: 16, kernel_size: [3, 3]}
    - {type: BatchNorm, num_features: sixteen}
    - {type: Linear, in_features: 2, out_features: 3, kernel_init: {type: nromal}, param_dtype: flaot32}
    - {tpye: relu}
    - {type: Dense, in_features: 2}
    - 7
"""


def test_every_problem_at_once_with_locations_and_suggestions(nnx_registry, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    with pytest.raises(ConfigError, match=r"8 problems in .*bad\.yaml") as info:
        load_config(path)
    lines = [f"{p.line}:{p.column} {format_path(p.path)}: {p.message}" for p in info.value.problems]
    expected = [
        r"4:14 model\.layers\[0\]\.type: Unknown layer 'Lienar'\. Did you mean 'Linear'( or '\w+')*\?",
        r"5:36 model\.layers\[1\]\.out_feature: unknown key 'out_feature' for Conv\. Did you mean 'out_features'\?",
        r"6:39 model\.layers\[2\]\.num_features: Input should be a valid integer.*got str 'sixteen'",
        r"7:68 model\.layers\[3\]\.kernel_init: unknown initializer 'nromal'\. Did you mean 'normal'\?",
        r"7:97 model\.layers\[3\]\.param_dtype: unknown dtype 'flaot32'\. Did you mean 'float32'\?",
        r"8:7 model\.layers\[4\]: missing the 'type' key naming the layer\. Is 'tpye' a misspelling of 'type'\?",
        r"9:14 model\.layers\[5\]\.type: Unknown layer 'Dense'\.",
        r"10:7 model\.layers\[6\]: expected a layer config: a mapping with a 'type' key, got int 7",
    ]
    assert len(lines) == len(expected)
    for line, pattern in zip(lines, expected):
        assert __import__("re").match(pattern, line), (line, pattern)
    assert str(info.value).count(str(path)) == 9


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"modle": {}}, r"modle: unknown section 'modle'\. Did you mean 'model'\?"),
        ({"optimizer": {}}, r"<root>: missing the 'model' section"),
        ({"model": {"type": 3}}, r"model\.type: 'type' must be a layer name, got int 3"),
        (
            {"model": {"type": "Linear", "in_features": 2}},
            r"model\.out_features: missing required key 'out_features' for Linear",
        ),
        (
            {"model": {"type": "Sequential", "layers": {"type": "relu"}}},
            r"model\.layers: Input should be a valid list",
        ),
        (
            {"model": {"type": "Linear", "in_features": 1, "out_features": 1, "bias_init": 3}},
            r"bias_init: expected an initializer name",
        ),
        (
            {
                "model": {
                    "type": "acme.GatedDense",
                    "in_features": 1,
                    "out_features": 1,
                    "gate_activation": "Linear",
                }
            },
            r"gate_activation: 'Linear' is a layer, not a function",
        ),
        (
            {
                "model": {
                    "type": "acme.GatedDense",
                    "in_features": 1,
                    "out_features": 1,
                    "gate_activation": "rleu",
                }
            },
            r"gate_activation: Unknown layer 'rleu'\. Did you mean 'relu' or .*'relu6'\?$",
        ),
        (
            {
                "model": {
                    "type": "acme.GatedDense",
                    "in_features": 1,
                    "out_features": 1,
                    "gate_activation": 3,
                }
            },
            r"gate_activation: expected a function's name such as 'relu'.*got 3",
        ),
        (
            {"model": {"type": "relu"}, "plugins": {"prefer": 3}},
            r"plugins\.prefer: Input should be a valid dictionary",
        ),
        ({"model": {"type": "Residual", "block": None}}, r"model\.block: expected a layer config"),
    ],
)
def test_single_problems(nnx_registry, config, message):
    with pytest.raises(ConfigError, match=message):
        load_config(config)


def test_top_level_must_be_a_mapping(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(
        ConfigError,
        match=r"list.yaml:1:1: <root>: expected a mapping with a 'model' section, got a list of 1 "
        r"item in 4 bytes\.",
    ):
        load_config(tmp_path / "list.yaml")


def test_load_config_rejects_other_types():
    with pytest.raises(TypeError, match="load_config expects a file path or a mapping, got int"):
        load_config(3)


def test_layer_raising_while_built_is_reported_with_its_path(nnx_registry):
    config = {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": 2, "out_features": 2},
                {"type": "Parallel", "branches": {}},
            ],
        }
    }
    with pytest.raises(
        ConfigError,
        match=r"<dict>: model\.layers\[1\]: building Parallel raised "
        r"ValueError: Parallel needs at least one branch",
    ) as info:
        build(config)
    assert isinstance(info.value.__cause__, ValueError)


def test_nothing_is_built_from_an_invalid_config(nnx_registry, monkeypatch):
    built = []
    from nnx_layers import Linear

    monkeypatch.setattr(Linear, "__init__", lambda self, *a, **k: built.append(a))
    with pytest.raises(ConfigError):
        build(
            {
                "model": {
                    "type": "Sequential",
                    "layers": [
                        {"type": "Linear", "in_features": 2, "out_features": 2},
                        {"type": "Nope"},
                    ],
                }
            }
        )
    assert built == []


def test_only_named_plugins_are_imported(with_fakes):
    with with_fakes(BROKEN) as registry:  # the broken pack is never touched: no warning
        build({"type": "Linear", "in_features": 1, "out_features": 1})
        assert registry.providers("layer", "acme.GatedDense")[0].status == "not loaded"
        assert registry.providers("layer", "broken.Dense")[0].status == "not loaded"


def test_config_naming_a_failed_plugin_says_why(with_fakes):
    with with_fakes(BROKEN), pytest.warns(Warning, match="boom at import"):
        with pytest.raises(
            ConfigError,
            match=r"model\.type: broken-layers 0\.3 failed to load layer "
            r"'broken.Dense' from boom:Dense: RuntimeError: boom at import",
        ):
            load_config({"model": {"type": "broken.Dense"}})


def test_collisions_in_configs_and_the_prefer_key(with_fakes):
    node = {"type": "acme.GatedDense", "in_features": 2}
    with with_fakes(COLLIDING):
        with pytest.raises(
            ConfigError,
            match=r"model\.type: Layer 'acme.GatedDense' is provided by 2 "
            r"distributions: acme-layers 0\.1\.0 .* and other-layers 2\.0",
        ):
            load_config({"model": node})
        config = load_config(
            {"model": node, "plugins": {"prefer": {"acme.GatedDense": "other-layers"}}}
        )
        assert config.prefer == {"acme.GatedDense": "other-layers"}
        assert config.to_dict()["plugins"] == {"prefer": {"acme.GatedDense": "other-layers"}}
        assert isinstance(build(config), OtherGatedDense)


def test_to_config_needs_constructor_attributes(nnx_registry):
    from nnx_layers import Linear

    layer = Linear(2, 3, rngs=Rngs(0))
    del layer.use_bias
    with pytest.raises(
        ValueError, match=r"to_config cannot read Linear.use_bias at model: store each"
    ):
        to_config(layer)


def test_to_config_rejects_values_without_spelling(nnx_registry):
    from nnx_layers import Linear

    layer = Linear(2, 3, rngs=Rngs(0))
    layer.precision = object()
    with pytest.raises(ConfigError, match=r"precision: .*has no config spelling"):
        to_config(layer)


def test_to_config_rejects_changed_opaque_fields(with_fakes, fake_modules):
    from .test_fields import Everything

    module = Everything.__new__(Everything)
    spec_fields = dict(
        size=1,
        block=None,
        head=None,
        towers=[],
        named=None,
        act=print,
        weight_init=None,
        compute_dtype=None,
        fn=len,
        untyped=(),
    )
    for key, value in spec_fields.items():
        setattr(module, key, value)
    from nnx_plugins import default_registry
    from nnx_plugins.registry._registry import Provider

    with with_fakes() as registry:
        registry._providers["layer"]["test.Everything"] = {
            "t": Provider(
                "layer",
                "test.Everything",
                default_registry().distributions()[0].plugin,
                "x:y",
                obj=Everything,
                loaded=True,
            )
        }
        with pytest.raises(
            ValueError, match=r"to_config cannot express Everything\.fn = <built-in function len>"
        ):
            to_config(module)


def test_config_object_is_plain():
    config = Config({"type": "relu"})
    assert config.to_dict() == {"model": {"type": "relu"}} and config.source == "<dict>"


def test_unregistered_activation_objects_are_reported(nnx_registry):
    node = {
        "type": "acme.GatedDense",
        "in_features": 1,
        "out_features": 1,
        "gate_activation": print,
    }
    with pytest.raises(
        ConfigError, match=r"model\.gate_activation: print is not a registered layer"
    ):
        load_config({"model": node})


class Raising(Module):
    class config_model(pydantic.BaseModel):  # noqa: N801 - the attribute name is the protocol
        @pydantic.model_validator(mode="before")
        @classmethod
        def explode(cls, data):
            raise RuntimeError("custom validator exploded")


_STRANGE = object()


class Unmodellable(Module):
    def __init__(self, size: int = "not an int", *, init_weights=None, kernel_init=_STRANGE):
        pass


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("Raising", r"model: validating odd.Layer raised RuntimeError: custom validator exploded"),
        ("Unmodellable", r"model\.type: cannot derive a config model for 'odd.Layer'"),
    ],
)
def test_layers_whose_models_fail_are_config_problems(fake_modules, target, message):
    from nnx_plugins.testing import fake_distribution, isolated_registry

    from ..conftest import installed

    setattr(fake_modules, target, globals()[target])
    pack = fake_distribution(
        "odd", entry_points={"nnx.layers": {"odd.Layer": f"fakepack:{target}"}}
    )
    with isolated_registry(distributions=[*installed("nnx-jax"), pack]):
        with pytest.raises(ConfigError, match=message):
            load_config({"model": {"type": "odd.Layer"}})


REPEAT = {
    "type": "Repeat",
    "count": 3,
    "block": {
        "type": "Sequential",
        "layers": [{"type": "Linear", "in_features": 4, "out_features": 4}, {"type": "relu"}],
    },
}


def test_a_repeat_builds_each_block_from_its_spec_and_round_trips(nnx_registry):
    model = build(REPEAT)
    assert model.block.layers[0].kernel.shape == (3, 4, 4)
    assert model(jax.numpy.ones((2, 4))).shape == (2, 4)
    config = to_config(model)
    assert config["count"] == 3 and config["block"]["layers"][1] == {"type": "relu"}
    assert to_config(build(config)) == config == load_config({"model": REPEAT}).model


def test_a_repeat_whose_block_fails_to_build_reports_the_block_path(nnx_registry):
    bad = {**REPEAT, "block": {"type": "MultiHeadAttention", "num_heads": 3, "in_features": 4}}
    with pytest.raises(ConfigError, match=r"model.block: building MultiHeadAttention raised"):
        build({"model": bad})


@pytest.mark.parametrize("count", [0, -1, 2.5, True, "3"])
def test_a_repeat_count_is_a_positive_integer(nnx_registry, count):
    with pytest.raises(ConfigError, match=r"model.count: Input should be"):
        load_config({"model": {**REPEAT, "count": count}})

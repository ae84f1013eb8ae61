"""load_config end to end: composition, the resolved config, every problem of a file at once."""

import contextlib
import io
import pathlib
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnx_plugins import ConfigError, load_config
from nnx_plugins.cli._main import main

LINEAR = {"model": {"type": "Linear", "in_features": 2, "out_features": 3}}


def test_overrides_on_a_loaded_config():
    config = load_config(LINEAR)
    assert load_config(config) is config
    assert load_config(config, overrides=["model.use_bias=false"]).model["use_bias"] is False


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((LINEAR,), {"overrides": "model.x=1"}),
        ((42,), {}),
    ],
)
def test_wrong_argument_types(arguments, message):
    expected = (
        r"load_config\(overrides=...\) takes a list of KEY=VALUE strings, got the string "
        r"'model.x=1'; write overrides=\['model.x=1'\]"
        if message
        else r"load_config expects a file path or a mapping, got int"
    )
    with pytest.raises(TypeError, match=expected):
        load_config(*arguments, **message)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "m.yaml",
            "model:\n  type: Linear\n  in_features: 2\n  in_features: 3\n  out_feature: 4\n"
            "  dtype: !!python/name:os.system ''\ntrain: {stepz: 1}\n",
        ),
        (
            "m.json",
            '{"model": {"type": "Linear",\n "in_features": 2,\n "in_features": 3,\n'
            ' "out_feature": 4, "dtype": "flaot32"},\n "train": {"stepz": 1}}',
        ),
    ],
)
def test_a_duplicate_key_is_reported_with_every_other_problem(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / name)
    found = {(p.path, p.message.split(".")[0].split(":")[0]) for p in info.value.problems}
    assert (("model", "in_features"), "duplicate key 'in_features'; only one may be given") in found
    assert (("model", "out_feature"), "unknown key 'out_feature' for Linear") in found
    assert (("train", "stepz"), "unknown key 'stepz'") in found
    assert any(p[0] == ("model", "dtype") for p in found)
    assert all(p.line is not None for p in info.value.problems)
    lines = [p.line for p in info.value.problems]
    assert lines == sorted(lines)


def test_the_resolved_config_loads_back_the_same():
    config = load_config(
        {
            "model": {
                "type": "Sequential",
                "layers": [{"type": "Linear", "in_features": 2, "out_features": "${train.seed}"}],
            },
            "optimizer": {"type": "sgd", "learning_rate": 0.1},
            "train": {"seed": 5},
        },
        overrides=["train.steps=3"],
    )
    text = config.to_yaml()
    again = load_config(yaml.safe_load(text))
    assert again.to_dict() == config.to_dict() and again.model == config.model
    assert again.model["layers"][0]["out_features"] == 5
    assert yaml.safe_load(text)["train"] == {
        "steps": 3,
        "epochs": None,
        "batch_size": 64,
        "seed": 5,
        "eval_interval": None,
        "log_interval": 10,
        "precision": "float32",
    }


def test_a_literal_interpolation_is_escaped_in_the_resolved_config():
    config = load_config({"model": {"type": "relu"}, "plugins": {"prefer": {"a.X": "\\${d}"}}})
    assert config.prefer == {"a.X": "${d}"}
    assert config.to_dict()["plugins"] == {"prefer": {"a.X": "\\${d}"}}
    assert load_config(yaml.safe_load(config.to_yaml())).prefer == {"a.X": "${d}"}


# -- the property: base file + overrides, printed by `config show`, is the same model ----------------
def _layer(width_in, width_out, draw):
    return {
        "type": "Linear",
        "in_features": width_in,
        "out_features": width_out,
        "use_bias": draw(st.booleans()),
        "param_dtype": draw(st.sampled_from(["float32", "bfloat16"])),
    }


@st.composite
def configs(draw):
    widths = draw(st.lists(st.integers(1, 64), min_size=2, max_size=5))
    layers = []
    for width_in, width_out in zip(widths, widths[1:]):
        layers.append(_layer(width_in, width_out, draw))
        activation = draw(st.sampled_from([None, "relu", "gelu", "tanh"]))
        if activation:
            layers.append({"type": activation})
    return {
        "model": {"type": "Sequential", "layers": layers},
        "train": {"steps": draw(st.integers(1, 1000)), "seed": draw(st.integers(0, 9))},
    }


@st.composite
def compositions(draw):
    """An original config, and a base file + an including file + overrides that give it."""
    original = draw(configs())
    base = yaml.safe_load(yaml.safe_dump(original))
    overrides = []
    for i, layer in enumerate(base["model"]["layers"]):
        for key in [k for k in layer if k != "type"]:
            if draw(st.integers(0, 3)) == 0:  # move this value to an override
                layer[key] = draw(st.sampled_from([7, "float32", True, None]))
                value = yaml.safe_dump(original["model"]["layers"][i][key], default_flow_style=True)
                overrides.append(
                    f"model.layers[{i}].{key}={value.strip().removesuffix('...').strip()}"
                )
    top = {"include": ["base.yaml"], "train": base.pop("train")}
    if draw(st.booleans()):  # the seed through an interpolation, the steps through an override
        original["train"]["seed"] = original["train"]["steps"]
        top["train"] = {"seed": "${train.steps}", "steps": 1}
        overrides.append(f"train.steps={original['train']['steps']}")
    return original, base, top, draw(st.permutations(overrides))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(compositions())
def test_composed_and_shown_configs_validate_to_the_original_model(composition):
    original, base, top, overrides = composition
    folder = pathlib.Path(tempfile.mkdtemp())
    (folder / "base.yaml").write_text(yaml.safe_dump(base))
    (folder / "top.yaml").write_text(yaml.safe_dump(top))
    shown = folder / "shown.yaml"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["config", "show", str(folder / "top.yaml"), *overrides])
    assert status == 0, err.getvalue()
    shown.write_text(out.getvalue())
    expected = load_config(original)
    again = load_config(shown)
    assert again.model == expected.model
    assert again.to_dict() == expected.to_dict()

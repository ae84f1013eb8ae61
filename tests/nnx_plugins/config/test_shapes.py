"""check_model: every layer built abstractly, then the model run abstractly on its input."""

import jax
import pytest

from nnx_plugins import ConfigError
from nnx_plugins.config._shapes import DataSpec, check_model


def spec(*shape, dtype="float32", check=None, hint=""):
    return DataSpec(jax.ShapeDtypeStruct(shape, dtype), "input", check, hint)


def seq(*layers):
    return {"model": {"type": "Sequential", "layers": list(layers)}}


def linear(i, o):
    return {"type": "Linear", "in_features": i, "out_features": o}


MISMATCH = """\
model:
  type: Sequential
  layers:
    - {type: Conv, in_features: 1, out_features: 16, kernel_size: [3, 3]}
    - {type: relu}
    - {type: BatchNorm, num_features: 8}
"""


def test_a_shape_mismatch_is_located_to_its_line(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MISMATCH)
    with pytest.raises(ConfigError) as info:
        check_model(path, data=spec(8, 8, 1))
    (problem,) = info.value.problems
    assert (problem.line, problem.column, problem.path) == (6, 7, ("model", "layers", 2))
    assert problem.message.startswith(
        "BatchNorm cannot take float32[2,8,8,16] from model.layers[1] (relu): ValueError: "
        "BatchNorm expects 8 features over axes (3,), got shape (2, 8, 8, 16) (16 features)."
    )
    assert not problem.message.endswith("..")  # (no doubled period)


@pytest.mark.parametrize(
    ("config", "data", "path", "message"),
    [
        (
            seq(
                linear(4, 4),
                {"type": "Residual", "block": seq({"type": "relu"}, linear(5, 4))["model"]},
            ),
            spec(4),
            ("model", "layers", 1, "block", "layers", 1),
            r"Linear cannot take float32\[2,4\] from its container: ValueError: Linear expects "
            r"an input whose last axis is 5",
        ),
        (
            {"model": {"type": "Residual", "block": linear(4, 3)}},
            spec(4),
            ("model",),
            r"Residual cannot take float32\[2,4\] from the input: ValueError: Residual: the "
            r"block returns shape \(2, 3\)",
        ),
        (
            seq({"type": "Parallel", "branches": {"a": linear(5, 2), "b": linear(4, 2)}}),
            spec(5),
            ("model", "layers", 0, "branches", "b"),
            r"Linear cannot take float32\[2,5\]",
        ),
        (
            {"model": {"type": "acme.GatedDense", "in_features": 4, "out_features": 3}},
            spec(5),
            ("model",),
            r"in its sublayer value: Linear cannot take float32\[2,5\]",
        ),
        (
            seq({"type": "Embed", "num_embeddings": 4, "features": 3}),
            spec(5),
            ("model", "layers", 0),
            r"Embed cannot take float32\[2,5\] from the input: TypeError: Embed expects integer ids",
        ),
        (
            seq({"type": "glu"}, linear(3, 2)),
            spec(5),
            ("model", "layers", 0),
            r"glu cannot take float32\[2,5\] from the input: .*",
        ),
    ],
)
def test_the_failing_layer_is_found_inside_containers(config, data, path, message):
    with pytest.raises(ConfigError) as info:
        check_model(config, data=data)
    (problem,) = info.value.problems
    assert problem.path == path
    assert __import__("re").search(message, problem.message), problem.message


def test_function_layers_with_arguments_run_with_their_arguments():
    check = check_model(seq({"type": "glu", "axis": 0}, linear(4, 2)), data=spec(4))
    assert check.output == jax.ShapeDtypeStruct((1, 2), "float32")


def test_every_constructor_error_at_once_nothing_allocated():
    config = seq(
        {"type": "Parallel", "branches": {}},
        linear(2, 2),
        {"type": "Residual", "block": {"type": "Parallel", "branches": {}}},
    )
    with pytest.raises(ConfigError) as info:
        check_model(config, data=spec(2))
    assert [p.path for p in info.value.problems] == [
        ("model", "layers", 0),
        ("model", "layers", 2, "block"),
    ]
    assert all("Parallel needs at least one branch" in p.message for p in info.value.problems)


def test_the_output_check_points_at_the_last_layer():
    def logits(out):
        return None if out.shape[-1] == 10 else f"expected 10 logits, got {out.shape}"

    config = seq(linear(4, 8), seq({"type": "relu"}, linear(8, 5))["model"])
    with pytest.raises(ConfigError, match=r"model\.layers\[1\]\.layers\[1\]: expected 10 logits"):
        check_model(config, data=spec(4, check=logits))


def test_the_hint_is_added_when_the_first_layer_refuses_the_data():
    with pytest.raises(ConfigError, match=r"in_features=4\. Use layout flat\.$"):
        check_model(seq(linear(64, 2)), data=spec(4, hint="Use layout flat."))


def test_without_an_input_the_model_is_only_built():
    check = check_model(seq(linear(4, 2)))
    assert check.data is None and check.output is None
    assert [(p, v.value.shape) for p, v in check.state.flat_state()] == [
        (("layers", 0, "bias"), (2,)),
        (("layers", 0, "kernel"), (4, 2)),
    ]


def test_a_data_section_gives_the_input(tmp_path):
    config = {**seq(linear(64, 10)), "data": {"type": "digits", "layout": "NHWC"}}
    with pytest.raises(ConfigError, match=r"from the data \(digits, layout NHWC\).*layout: flat"):
        check_model(config)
    config["data"]["layout"] = "flat"
    assert check_model(config).output.shape == (2, 10)


def test_a_bare_function_model_and_integer_inputs():
    assert check_model({"model": {"type": "relu"}}, data=spec(3)).output.shape == (2, 3)
    embed = seq({"type": "Embed", "num_embeddings": 4, "features": 3})
    assert check_model(embed, data=spec(5, dtype="int32")).output.shape == (2, 5, 3)


REPEAT_MISMATCH = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 4, out_features: 8}
    - type: Repeat
      count: 6
      block: {type: Linear, in_features: 8, out_features: 16}
"""


def test_a_repeat_whose_block_changes_the_shape_is_refused_naming_the_shapes(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(REPEAT_MISMATCH)
    with pytest.raises(ConfigError) as info:
        check_model(path, data=spec(4))
    (problem,) = info.value.problems
    assert (problem.line, problem.path) == (5, ("model", "layers", 1))
    assert "Repeat: the block returns float32[2,16] for an input of float32[2,8]" in (
        problem.message
    )
    path.write_text(REPEAT_MISMATCH.replace("out_features: 16", "out_features: 8"))
    assert check_model(path, data=spec(4)).output.shape == (2, 8)

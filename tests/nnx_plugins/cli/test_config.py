"""nnx config validate/show and nnx build: KEY=VALUE overrides, --input-shape, the memory check."""

import pytest
import yaml

from nnx_plugins import load_config
from nnx_plugins.cli._config import split_arguments
from nnx_plugins.cli._main import build_parser, main

from ..corpus import HUGE

MLP = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 8, out_features: 16}
    - {type: relu}
    - {type: Linear, in_features: "${model.layers[0].out_features}", out_features: 2}
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path, monkeypatch):
    (tmp_path / "mlp.yaml").write_text(MLP)
    (tmp_path / "wide.yaml").write_text("include: [mlp.yaml]\ntrain: {steps: 10}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_split_arguments(files):
    (files / "a=b.yaml").write_text(MLP)
    assert split_arguments(["mlp.yaml", "a=b.yaml", "x=1", "y.z=[1, 2]", "--bogus"]) == (
        ["mlp.yaml", "a=b.yaml", "--bogus"],
        ["x=1", "y.z=[1, 2]"],
    )


def test_config_show_prints_the_resolved_config(capsys, files):
    code, out, err = run(capsys, "config", "show", "wide.yaml", "model.layers[0].out_features=4")
    assert code == 0 and err == ""
    shown = yaml.safe_load(out)
    assert shown["model"]["layers"][2]["in_features"] == 4
    assert shown["train"]["steps"] == 10 and shown["train"]["batch_size"] == 64
    assert "include" not in shown
    assert shown == load_config("wide.yaml", overrides=["model.layers[0].out_features=4"]).to_dict()


def test_validate_applies_the_overrides_to_every_file(capsys, files):
    code, out, _ = run(capsys, "config", "validate", "mlp.yaml", "wide.yaml", "train.seed=3")
    assert code == 0 and "mlp.yaml: ok (Sequential)" in out and "wide.yaml: ok" in out
    code, out, err = run(capsys, "config", "validate", "mlp.yaml", "wide.yaml", "train.sede=3")
    assert code == 1 and out == ""
    assert (
        err.count(
            "<override train.sede=3>:1:7: train.sede: unknown key 'sede'. Did you mean 'seed'?"
        )
        == 2
    )


def test_overrides_may_follow_the_options(capsys, files):
    code, out, _ = run(capsys, "build", "mlp.yaml", "--summary", "model.layers[2].out_features=5")
    assert code == 0 and "total: 229 values" in out  # (8*16+16 + 16*5+5)
    code, out, _ = run(capsys, "build", "mlp.yaml", "model.layers[2].out_features=5")
    assert out.splitlines()[0] == "total: 229 values, 916 B (916 bytes)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["config", "show", "mlp.yaml", "wide.yaml"],
            "give one config FILE, then KEY=VALUE overrides; got files ['mlp.yaml', 'wide.yaml']",
        ),
        (["build", "mlp.yaml", "--bogus"], "nnx: error: unknown option --bogus. Options are"),
        (["config", "validate", "x=1"], "give at least one config FILE"),
        (["train", "mlp.yaml", "other.yaml"], "got files ['mlp.yaml', 'other.yaml']"),
    ],
)
def test_usage_errors_exit_2(capsys, files, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and message in err and err.startswith("usage: nnx ")


def test_unknown_options_of_a_command_without_overrides_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as info:
        main(["config", "schema", "--bogus"])
    assert info.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_bad_overrides_exit_1_with_their_location(capsys, files):
    code, _, err = run(capsys, "config", "show", "mlp.yaml", "model.layers[9].x=1", "model..x=2")
    assert code == 1
    assert err.splitlines()[1:] == [
        "  <override model.layers[9].x=1>:1:13: model.layers: index 9 is out of range: "
        "model.layers has 3 items.",
        "  <override model..x=2>:1:6: <root>: expected '=' after the key 'model'; write "
        "KEY=VALUE, e.g. model.layers[1].out_features=64.",
    ]


# -- shapes and memory ----------------------------------------------------------------------------
CONV = """\
model:
  type: Sequential
  layers:
    - {type: Conv, in_features: 1, out_features: 16, kernel_size: [3, 3]}
    - {type: BatchNorm, num_features: 8}
"""


def test_validate_runs_the_model_on_the_given_input_shape(capsys, tmp_path):
    path = tmp_path / "conv.yaml"
    path.write_text(CONV)
    code, out, err = run(capsys, "config", "validate", str(path))
    assert code == 0 and "shapes not checked: give --input-shape or a data section" in out
    code, out, err = run(capsys, "config", "validate", str(path), "--input-shape", "8,8,1")
    assert code == 1 and out == "" and "Traceback" not in err
    assert f"{path}:5:7: model.layers[1]: BatchNorm cannot take float32[2,8,8,16] from " in err
    path.write_text(CONV.replace("num_features: 8", "num_features: 16"))
    code, out, _ = run(capsys, "config", "validate", str(path), "--input-shape", "8,8,1")
    assert code == 0
    assert "ok (Sequential); float32[2,8,8,1] -> float32[2,8,8,16] from the input" in out


def test_validate_uses_the_data_section(capsys, tmp_path):
    path = tmp_path / "mlp.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 64, out_features: 10}\n"
        "data: {type: digits, layout: flat}\n"
    )
    code, out, _ = run(capsys, "config", "validate", str(path))
    assert code == 0
    assert "float32[2,64] -> float32[2,10] from the data (digits, layout flat)" in out
    code, _, err = run(
        capsys,
        "config",
        "validate",
        str(path),
        "--input-shape",
        "8,8,1",
        "--input-dtype",
        "bfloat16",
    )
    assert code == 1 and "Linear cannot take bfloat16[2,8,8,1] from the input" in err


@pytest.mark.parametrize("shape", ["8,x", "0", "", "8,,1"])
def test_a_bad_input_shape_is_a_usage_error(capsys, tmp_path, shape):
    with pytest.raises(SystemExit) as info:
        main(["config", "validate", "m.yaml", "--input-shape", shape])
    assert info.value.code == 2
    assert "expected positive sizes separated by commas" in capsys.readouterr().err


def test_build_prints_the_training_estimate_and_refuses_what_cannot_fit(capsys, tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text(HUGE)
    code, out, err = run(capsys, "build", str(path))
    assert code == 1 and "Traceback" not in err
    assert "training needs at least 14.6 TB (Variables, gradients and adam state" in out
    assert f"{path}:2:3: model: training this model needs at least 14.6 TB" in err
    code, out, err = run(capsys, "build", str(path), "--allow-large")
    assert code == 0 and err == "" and "total: 1,000,076,000,010 values, 3.6 TB" in out


def test_train_takes_allow_large():
    assert build_parser().parse_args(["train", "m.yaml", "--allow-large"]).allow_large
    assert not build_parser().parse_args(["train", "m.yaml"]).allow_large


def test_build_summary_shows_a_repeat_as_its_blocks(capsys, tmp_path, monkeypatch):
    (tmp_path / "deep.yaml").write_text(
        "model:\n  type: Repeat\n  count: 12\n"
        "  block: {type: Linear, in_features: 8, out_features: 8}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(capsys, "build", "deep.yaml", "--summary")
    assert code == 0
    assert "12 blocks of Linear, stacked on a leading axis of 12" in out
    assert "Linear x12" in out and "(12, 8, 8)" in out
    assert "total: 864 values" in out  # 12 * (8*8 + 8)


def _row(out, path):
    """The cells of the table row of ``path``."""
    line = next(line for line in out.splitlines() if line.startswith(f"│ {path} "))
    return [cell.strip() for cell in line.strip("│").split("│")]


def test_build_summary_shows_each_layers_output_shape_keras_style(capsys, files):
    code, out, _ = run(capsys, "build", "mlp.yaml", "--summary", "--input-shape", "8")
    assert code == 0 and "┃ Output " in out
    assert _row(out, "model.layers[0]")[:3] == ["model.layers[0]", "Linear", "(None, 16) float32"]
    assert _row(out, "model.layers[1]") == [
        "model.layers[1]",
        "relu",
        "(None, 16) float32",
        "",
        "0",
        "0 B",
    ]  # (a layer without Variables has its row)
    assert _row(out, "model.layers[2]")[2] == "(None, 2) float32"
    order = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│ model")]
    assert order == ["model.layers[0]", "model.layers[1]", "model.layers[2]"]


def test_build_summary_takes_the_input_from_the_data_section(capsys, files):
    (files / "cnn.yaml").write_text(
        "model:\n  type: Sequential\n  layers:\n"
        "    - {type: Conv, in_features: 1, out_features: 4, kernel_size: [3, 3], strides: 2}\n"
        "    - {type: Flatten}\n"
        "    - {type: Linear, in_features: 64, out_features: 10}\n"
        "data: {type: digits}\n"
    )
    code, out, _ = run(capsys, "build", "cnn.yaml", "--summary")
    assert code == 0
    assert _row(out, "model.layers[0]")[2] == "(None, 4, 4, 4) float32"
    assert _row(out, "model.layers[1]")[1:3] == ["Flatten", "(None, 64) float32"]


def test_build_summary_without_an_input_says_how_to_give_one(capsys, files):
    code, out, _ = run(capsys, "build", "mlp.yaml", "--summary")
    assert code == 0 and _row(out, "model.layers[0]")[2] == ""
    assert "output shapes: give --input-shape (one example's shape) or a data section" in out


def test_build_summary_with_an_input_the_model_cannot_take(capsys, files):
    code, out, err = run(capsys, "build", "mlp.yaml", "--summary", "--input-shape", "9")
    assert code == 1 and out == ""
    assert (
        "model.layers[0]: Linear cannot take float32[2,9] from the input (--input-shape 9)" in err
    )


def test_validate_reads_an_overridden_data_path_from_the_current_directory(
    capsys, tmp_path, monkeypatch
):
    import numpy as np

    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "c.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 4, out_features: 3}\n"
        "data: {type: npz, path: elsewhere.npz}\n"
        "train: {batch_size: 2}\n"
    )
    np.savez(tmp_path / "mine.npz", x=np.zeros((20, 4), np.float32), y=np.zeros(20, np.int32))
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "config", "validate", "model/c.yaml", "data.path=mine.npz")
    assert code == 0, err
    assert "float32[2,4] -> float32[2,3] from the data (mine.npz" in out
    code, _, err = run(capsys, "config", "validate", "model/c.yaml")
    assert code == 1 and "no such file" in err and "elsewhere.npz" in err


def test_a_problem_of_an_overridden_value_is_located_at_the_override(capsys, tmp_path, monkeypatch):
    # (it was located at the line of the file's value that the override replaced)
    path = tmp_path / "c.yaml"
    path.write_text(
        "model: {type: Embed, num_embeddings: 256, features: 4}\n"
        "task: {type: language_model}\n"
        "data: {type: text, path: notes.txt, seq_len: 8}\n"
        "train: {batch_size: 2}\n"
    )
    (tmp_path / "empty.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "config", "validate", str(path), "data.path=empty.txt")
    assert code == 1
    assert "<override data.path=empty.txt>:1:11: data.path: " in err, err
    assert "holds no text" in err
    assert "c.yaml:3" not in err

"""``nnx config validate --input-shape`` and the memory check of ``nnx build`` / ``nnx train``."""

import pytest

from nnx_plugins.cli._main import build_parser, main

from ..corpus import HUGE

CONV = """\
model:
  type: Sequential
  layers:
    - {type: Conv, in_features: 1, out_features: 16, kernel_size: [3, 3]}
    - {type: BatchNorm, num_features: 8}
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


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

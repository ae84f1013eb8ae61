"""What a data section feeds a model (for `nnx config validate`) and the checks before a run."""

import jax
import numpy as np
import pytest

from nnx_plugins import ConfigError
from nnx_plugins.config._shapes import check_model
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._preflight import data_spec, preflight
from nnx_plugins.training.data._bundled import Digits
from nnx_plugins.training.tasks._classification import Classification


@pytest.mark.parametrize(("layout", "shape"), [("flat", (64,)), ("NHWC", (8, 8, 1))])
def test_digits_spec_matches_the_loaded_data(layout, shape):
    data = Digits(layout=layout)
    spec = data_spec(data.describe(), Classification())
    assert spec.example == jax.ShapeDtypeStruct(shape, np.float32)
    assert spec.example.shape == data.x_train.shape[1:]
    assert spec.origin == f"data (digits, layout {layout})"


def test_the_output_must_be_logits_for_every_class():
    check = data_spec(Digits(layout="flat").describe(), Classification()).check_output
    assert check(jax.ShapeDtypeStruct((2, 10), "float32")) is None
    assert check(jax.ShapeDtypeStruct((2, 10, 1), "float32")).startswith(
        "the model returns float32[2,10,1] but the 10 classes of digits need logits"
    )
    assert "returns (float32[2,10], float32[2,10])" in check(
        (jax.ShapeDtypeStruct((2, 10), "float32"),) * 2
    )


def test_an_npz_input_shape_comes_from_the_file_header(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((30, 5, 3), np.float64), y=np.arange(30) % 4)
    (tmp_path / "m.yaml").write_text(
        "model: {type: Sequential, layers: [{type: Flatten}, "
        "{type: Linear, in_features: 16, out_features: 4}]}\n"
        "data: {type: npz, path: d.npz}\n"
    )
    config = load_train_config(tmp_path / "m.yaml")
    spec = config.sections["data"].data_spec(config)
    assert spec.example == jax.ShapeDtypeStruct((5, 3), np.float32)
    assert spec.check_output(jax.ShapeDtypeStruct((2, 3), "float32")) is None  # (labels: at train)
    assert spec.check_output(jax.ShapeDtypeStruct((2, 3, 1), "float32")).endswith(
        "classification needs logits of shape (batch, classes): end the model with a layer of "
        "one output per class."
    )
    with pytest.raises(
        ConfigError,
        match=r"m\.yaml:1:53: model\.layers\[1\]: Linear cannot take "
        r"float32\[2,15\] from model\.layers\[0\] \(Flatten\)",
    ):
        check_model(tmp_path / "m.yaml")


def test_a_regression_config_is_checked_against_its_task(tmp_path):
    (tmp_path / "r.yaml").write_text(
        "model: {type: Linear, in_features: 10, out_features: 3}\n"
        "task: {type: regression}\n"
        "data: {type: diabetes}\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"r\.yaml:1:8: model: the model returns float32\[2,3\] but the regression targets "
        r"of diabetes are float32\[\] per example, so the outputs must have shape \(batch,\) or "
        r"\(batch, 1\)",
    ):
        check_model(tmp_path / "r.yaml")


def test_an_unreadable_npz_gives_no_spec(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    for name in ("bad.npz", "none.npz"):
        config = load_train_config(
            {"model": {"type": "Flatten"}, "data": {"type": "npz", "path": str(tmp_path / name)}}
        )
        assert config.sections["data"].data_spec(config) is None


def test_preflight_refuses_a_model_too_big_for_memory(monkeypatch):
    from nnx_plugins.training import _memory

    monkeypatch.setattr(_memory, "available_memory", lambda: (1000, "available host memory"))
    config = load_train_config({"model": {"type": "Linear", "in_features": 64, "out_features": 10}})
    info = Digits(layout="flat").describe()
    with pytest.raises(
        ConfigError,
        match=r"model: training this model needs at least 10\.2 KB \(2\.5 KB of Variables",
    ):
        preflight(config, info, Classification(), allow_large=False)
    assert preflight(config, info, Classification(), allow_large=True).output.shape == (2, 10)

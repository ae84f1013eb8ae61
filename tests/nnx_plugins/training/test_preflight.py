"""What a data section feeds a model, for `nnx config validate` and before a run."""

import jax
import numpy as np
import pytest

from nnx_plugins import ConfigError
from nnx_plugins.config._shapes import check_model
from nnx_plugins.training._config import DataSection
from nnx_plugins.training._data import load_digits
from nnx_plugins.training._preflight import data_spec, dataset_spec


@pytest.mark.parametrize(("layout", "shape"), [("flat", (64,)), ("NHWC", (8, 8, 1))])
def test_digits_spec_matches_the_loaded_data(layout, shape):
    spec = data_spec(DataSection(layout=layout), "<dict>")
    loaded = dataset_spec(load_digits(layout=layout), DataSection(layout=layout))
    assert spec.example == loaded.example == jax.ShapeDtypeStruct(shape, np.float32)
    assert spec.origin == loaded.origin == f"data (digits, layout {layout})"


def test_the_output_must_be_logits_for_every_class():
    check = data_spec(DataSection(layout="flat"), "<dict>").check_output
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
    spec = data_spec(DataSection(type="npz", path="d.npz"), str(tmp_path / "m.yaml"))
    assert spec.example == jax.ShapeDtypeStruct((5, 3), np.float32)
    assert spec.check_output(jax.ShapeDtypeStruct((2, 3), "float32")).endswith(
        "the 4 classes of d.npz need logits of shape (batch, 4): end the model with a layer "
        "of 4 outputs."
    )
    with pytest.raises(
        ConfigError,
        match=r"m\.yaml:1:53: model\.layers\[1\]: Linear cannot take "
        r"float32\[2,15\] from model\.layers\[0\] \(Flatten\)",
    ):
        check_model(tmp_path / "m.yaml")


def test_an_unreadable_npz_gives_no_spec(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    assert data_spec(DataSection(type="npz", path=str(tmp_path / "bad.npz")), "<dict>") is None
    assert data_spec(DataSection(type="npz", path=str(tmp_path / "none.npz")), "<dict>") is None

"""acme-layers conformance, through the real entry points and nnx_plugins.testing."""

import jax.numpy as jnp
import pytest

import nnx_core
from nnx_plugins import build, get_layer
from nnx_plugins.testing import check_layer, check_variable_type


@pytest.mark.parametrize(
    "config",
    [
        {"in_features": 4, "out_features": 3},
        {"in_features": 4, "out_features": 3, "lora_rank": 2, "gate_activation": "acme.Swish"},
        {"in_features": 4, "out_features": 3, "use_bias": False, "kernel_init": "zeros"},
    ],
)
def test_gated_dense_conforms(nnx_registry, config):
    report = check_layer("acme.GatedDense", config, input_shape=(2, 4))
    assert report.output_shape == (2, 3)


def test_swish_is_registered_by_the_hook(nnx_registry):
    check_layer("acme.Swish")
    assert float(get_layer("acme.Swish")(jnp.zeros(()))) == 0.0


def test_lora_param_kind(nnx_registry):
    cls = check_variable_type("acme.LoRAParam")
    model = build({"type": "acme.GatedDense", "in_features": 4, "out_features": 3, "lora_rank": 2})
    adapters = nnx_core.state(model, "acme.LoRAParam")
    assert issubclass(cls, nnx_core.Param)
    assert sorted(p[-1] for p, _ in adapters.flat_state()) == ["lora_a", "lora_b"]


def test_negative_rank_is_reported_with_its_path(nnx_registry):
    from nnx_plugins import ConfigError

    with pytest.raises(ConfigError, match=r"model: building acme.GatedDense raised ValueError"):
        build({"type": "acme.GatedDense", "in_features": 4, "out_features": 3, "lora_rank": -1})


# -- run parts: found through the pack's real entry points (and its pluggy hook) -------------
def test_waves_dataset_conforms(nnx_registry):
    from nnx_plugins.testing import check_dataset

    data = check_dataset("acme.waves", {"examples": 64, "noise": 0.0}, batch_size=8)
    assert data.describe().inputs.shape == (1,)


def test_quantile_task_conforms(nnx_registry):
    from nnx_plugins.testing import check_task

    task = check_task(
        "acme.quantile", {"quantile": 0.9}, data={"type": "acme.waves"}, output_shape=(1,)
    )
    assert task.quantile == 0.9


def test_text_logger_conforms(nnx_registry, tmp_path):
    from nnx_plugins.testing import check_logger

    assert check_logger("acme.text", run_dir=tmp_path / "run") == ["log.txt"]
    # (the resume at step 5 dropped the first run's lines: only the second run's remain)
    assert (tmp_path / "run" / "log.txt").read_text().splitlines() == [
        "step 10 train loss=0.5 examples_per_second=100",
        "step 10 test loss=0.25 accuracy=0.75",
    ]


def test_stop_below_callback_from_the_hook_conforms(nnx_registry):
    from nnx_plugins.testing import check_callback

    assert check_callback("acme.stop_below", {"value": 0.2}).value == 0.2


def test_a_run_made_of_the_pack_parts(nnx_registry, tmp_path):
    from nnx_plugins import train

    result = train(
        {
            "model": {
                "type": "Sequential",
                "layers": [
                    {"type": "Linear", "in_features": 1, "out_features": 32},
                    {"type": "acme.Swish"},
                    {"type": "Linear", "in_features": 32, "out_features": 1},
                ],
            },
            "task": {"type": "acme.quantile"},
            "data": {"type": "acme.waves", "examples": 512},
            "loggers": [{"type": "acme.text"}],
            "callbacks": [{"type": "acme.stop_below", "value": 0.2}],
            "optimizer": {"type": "adam", "learning_rate": 0.01},
            "train": {"steps": 400, "batch_size": 32},
        },
        run_dir=tmp_path,
        progress=False,
    )
    assert result.stopped_by == "acme.stop_below" and result.metrics["loss"] < 0.2
    assert (
        (tmp_path / "log.txt")
        .read_text()
        .splitlines()[-1]
        .startswith(f"step {result.step} test loss=")
    )


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: __import__("acme_layers.waves").waves.Waves(examples=0),
            r"examples and test_examples must be >= 1",
        ),
        (lambda: __import__("acme_layers.waves").waves.Waves(noise=-1.0), r"noise must be >= 0"),
        (
            lambda: __import__("acme_layers.quantile").quantile.Quantile(quantile=1.0),
            r"quantile must be in \(0, 1\)",
        ),
        (
            lambda: __import__("acme_layers.text_log").text_log.TextLog(file="../x"),
            r"file must be a plain file name",
        ),
    ],
)
def test_the_run_parts_check_their_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_the_converter_conforms(nnx_registry):
    from nnx_plugins.testing import check_converter

    tensors = check_converter(
        "acme.AcmeMLPForClassification", {"input_size": 4, "hidden_size": 8, "num_labels": 3}
    )
    assert tensors == {
        "fc1.weight": (8, 4),
        "fc1.bias": (8,),
        "fc2.weight": (3, 8),
        "fc2.bias": (3,),
    }


def test_nnx_import_hf_finds_the_converter_by_architecture(nnx_registry, tmp_path):
    import json

    import numpy as np
    from safetensors.numpy import save_file

    import nnx_plugins

    source = tmp_path / "acme-mlp"
    source.mkdir()
    config = {
        "architectures": ["AcmeMLPForClassification"],
        "input_size": 4,
        "hidden_size": 8,
        "num_labels": 3,
    }
    (source / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    tensors = {
        "fc1.weight": rng.normal(size=(8, 4)).astype(np.float32),
        "fc1.bias": rng.normal(size=(8,)).astype(np.float32),
        "fc2.weight": rng.normal(size=(3, 8)).astype(np.float32),
        "fc2.bias": rng.normal(size=(3,)).astype(np.float32),
    }
    save_file(tensors, str(source / "model.safetensors"))
    done = nnx_plugins.import_hf(source, tmp_path / "out")
    model = nnx_plugins.load(done.checkpoint)
    x = rng.normal(size=(2, 4)).astype(np.float32)
    hidden = np.maximum(x @ tensors["fc1.weight"].T + tensors["fc1.bias"], 0)
    expected = hidden @ tensors["fc2.weight"].T + tensors["fc2.bias"]
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-5)

"""`nnx config validate` checks ``checkpoint.init_from`` as `nnx train` does before its first
step (a missing checkpoint, one of another model shape, one trained on other token ids), with
train's message; `nnx build` sizes the model and leaves the checkpoint alone."""

import pathlib

import pytest
import yaml

import nnx_core as nnx
import nnx_plugins
from nnx_plugins import CheckpointError, import_hf, train
from nnx_plugins.cli._main import main
from nnx_plugins.training._validate import check_config

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "hf"
MLP = {
    "type": "Sequential",
    "layers": [
        {"type": "Linear", "in_features": 64, "out_features": 16},
        {"type": "relu"},
        {"type": "Linear", "in_features": 16, "out_features": 10},
    ],
}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    model = nnx_plugins.build(MLP, rngs=nnx.Rngs(7))
    return nnx_plugins.save(model, tmp_path_factory.mktemp("pretrained") / "checkpoint", step=3)


def job(folder: pathlib.Path, model: dict, init_from, data=None) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "model": model,
        "data": data or {"type": "digits", "layout": "flat"},
        "optimizer": {"type": "adam", "learning_rate": 0.01},
        "train": {"steps": 2, "batch_size": 8},
        "checkpoint": {"init_from": str(init_from)},
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def refused(path: pathlib.Path, capsys) -> str:
    """validate's stderr, after checking that it refused ``path`` without a traceback."""
    assert main(["config", "validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_missing_checkpoint_is_refused_as_train_refuses_it(tmp_path, capsys):
    path = job(tmp_path / "job", MLP, "nowhere")
    with pytest.raises(CheckpointError, match=r"no such directory") as raised:
        check_config(path)
    first = raised.value.problems[0]
    assert first.startswith(f"{path}:") and "checkpoint.init_from: the run starts from" in first
    err = refused(path, capsys)
    assert f"cannot start from checkpoint {tmp_path / 'job' / 'nowhere'}:" in err
    assert "no such directory." in err


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (
            {**MLP, "layers": MLP["layers"][:2]},
            r"model\.layers\[2\]\.kernel: unexpected entry in the checkpoint",
        ),
        (
            {
                **MLP,
                "layers": [
                    {"type": "Linear", "in_features": 64, "out_features": 8},
                    {"type": "relu"},
                    {"type": "Linear", "in_features": 8, "out_features": 10},
                ],
            },
            r"model\.layers\[0\]\.kernel: the checkpoint holds float32\(64, 16\) but the model "
            r"expects float32\(64, 8\)",
        ),
    ],
)
def test_a_checkpoint_of_another_shape_is_refused(pretrained, tmp_path, capsys, model, match):
    path = job(tmp_path / "job", model, pretrained)
    with pytest.raises(CheckpointError, match=match):
        check_config(path)
    err = refused(path, capsys)
    assert f"cannot start from checkpoint {pretrained}:" in err
    with pytest.raises(CheckpointError, match=match):  # (the same refusal as train's)
        train(str(path), run_dir=tmp_path / "run", progress=False)


def test_a_checkpoint_trained_on_other_token_ids_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    model = {
        "type": "Sequential",
        "layers": [
            {"type": "Embed", "num_embeddings": 256, "features": 4},
            {"type": "Linear", "in_features": 4, "out_features": 256},
        ],
    }
    data = {"type": "text", "path": str(tmp_path / "notes.txt"), "seq_len": 8}
    config = {
        "model": model,
        "data": data,
        "task": "language_model",
        "train": {"steps": 1, "batch_size": 4},
    }
    trained = train(config, run_dir=tmp_path / "run", progress=False)
    checkpoint = trained.run_dir / "checkpoints"
    path = job(tmp_path / "job", model, checkpoint, {**data, "level": "characters"})
    text = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**text, "task": "language_model"}, sort_keys=False))
    match = r"the checkpoint was trained on text read as bytes, this data reads it as characters"
    with pytest.raises(CheckpointError, match=match):
        check_config(path)
    assert "checkpoint.init_from: the run starts from" in refused(path, capsys)


def test_adapters_may_be_missing_and_an_imported_config_validates(pretrained, tmp_path, capsys):
    layers = [
        {**layer, "type": "LoRALinear", "lora_rank": 2} if layer["type"] == "Linear" else layer
        for layer in MLP["layers"]
    ]
    assert main(["config", "validate", str(job(tmp_path / "lora", {**MLP, "layers": layers},
                                                pretrained))]) == 0  # fmt: skip
    import_hf(FIXTURES / "llama", tmp_path / "llama")  # (its config starts from its checkpoint)
    assert main(["config", "validate", str(tmp_path / "llama" / "config.yaml")]) == 0
    assert ": ok (CausalLM)" in capsys.readouterr().out


def test_build_sizes_the_model_without_the_checkpoint(tmp_path, capsys):
    """nnx build reports the model's size and memory, which no checkpoint changes."""
    assert main(["build", str(job(tmp_path / "job", MLP, "nowhere"))]) == 0
    assert "total: 1,210 values" in capsys.readouterr().out

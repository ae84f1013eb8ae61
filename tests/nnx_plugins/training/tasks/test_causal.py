"""A next-token model must not see the token it predicts: non-causal attention, or a MaskedLM,
is refused before training (`nnx train`, `nnx config validate`); a causal model, and a MaskedLM
trained with ``data.masking``, pass."""

import pathlib

import pytest
import yaml

from nnx_core import Module, Rngs
from nnx_plugins import ConfigError, load_config, register_layer
from nnx_plugins.cli._main import main
from nnx_plugins.training._validate import check_config
from nnx_plugins.training.tasks._causal import first_acausal
from nnx_plugins.training.tasks._language_model import LanguageModel

ROOT = pathlib.Path(__file__).resolve().parents[4]


def attention(is_causal):
    return {"type": "MultiHeadAttention", "num_heads": 1, "in_features": 8,
            "is_causal": is_causal, "decode": False}  # fmt: skip


def run_config(text_file, is_causal=False):
    return {
        "model": {"type": "Sequential", "layers": [
            {"type": "Embed", "num_embeddings": 256, "features": 8},
            {"type": "Residual", "block": attention(is_causal)},
            {"type": "Linear", "in_features": 8, "out_features": 256}]},
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": str(text_file), "level": "bytes", "seq_len": 8},
        "optimizer": {"type": "adam", "learning_rate": 0.01},
        "train": {"steps": 2, "batch_size": 2},
    }  # fmt: skip


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("hello world, the cat sat on the mat. " * 20, encoding="utf-8")
    return path


def imported_config(folder, text_file, **changes):
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    config["data"]["path"] = str(text_file)
    config["data"]["seq_len"] = 16
    config["checkpoint"] = {"init_from": None}
    config["tokenizer"]["path"] = str(folder / "tokenizer.json")
    for key, value in changes.items():
        config["data" if key == "masking" else "model"][key] = value
    return config


@pytest.mark.parametrize(
    "model, found",
    [
        (run_config("t.txt", False)["model"],
         (("model", "layers", 1, "block"), "MultiHeadAttention has is_causal: false")),
        ({"type": "Sequential", "layers": [attention(True), attention(False)]},
         (("model", "layers", 1), "MultiHeadAttention has is_causal: false")),
        (run_config("t.txt", True)["model"], None),
        ({"type": "Sequential", "layers": [{**attention(False), "decode": True}]}, None),
        ({"type": "Parallel", "branches": {
            "a": {"type": "SelfAttention", "in_features": 8, "num_heads": 2, "is_causal": True},
            "b": {"type": "SelfAttention", "in_features": 8, "num_heads": 2}}},
         (("model", "branches", "b"), "SelfAttention has is_causal: false")),
    ],
)  # fmt: skip
def test_first_acausal_finds_the_first_attention_that_sees_ahead(model, found):
    assert first_acausal(load_config({"model": model}).model) == found


def test_examples_that_train_a_language_model_are_causal():
    examples = [
        load_config(path)
        for path in sorted((ROOT / "examples").glob("*.yaml"))
        if yaml.safe_load(path.read_text(encoding="utf-8")).get("task", {}).get("type")
        == "language_model"
    ]
    assert examples  # (text_gpt.yaml)
    assert [first_acausal(config.model) for config in examples] == [None] * len(examples)


def test_a_third_party_layer_is_not_judged(nnx_registry):
    @register_layer("tests.Wrapped")
    class Wrapped(Module):  # (may call its attention with a causal mask: unknown)
        def __init__(self, inner: Module, *, rngs: Rngs):
            self.inner = inner

    model = {"type": "tests.Wrapped", "inner": attention(False)}
    assert first_acausal(load_config({"model": model}).model) is None


def test_the_task_refuses_a_non_causal_model_on_next_token_data(text_file):
    config = load_config(run_config(text_file))
    data = config.sections["data"].make()
    where, why = LanguageModel().check_model(config, data)
    assert where == ("model", "layers", 1, "block")
    assert why.startswith("MultiHeadAttention has is_causal: false, so each position sees the")


def test_validate_refuses_non_causal_attention(text_file):
    with pytest.raises(
        ConfigError,
        match=r"model\.layers\[1\]\.block: MultiHeadAttention has is_causal: false, so each "
        r"position sees the tokens after it, the very token it must predict: next-token "
        r"training would learn to copy it .* Set is_causal: true",
    ):
        check_config(run_config(text_file))
    check_config(run_config(text_file, is_causal=True))


def test_an_imported_causal_lm_with_is_causal_false_is_refused(imported, text_file):
    folder = imported("llama")
    config = imported_config(folder, text_file)
    check_config(config)  # (as imported: causal)
    config["model"]["blocks"]["block"]["attention"]["is_causal"] = False
    with pytest.raises(
        ConfigError,
        match=r"model\.blocks\.block\.attention: SelfAttention has is_causal: false",
    ):
        check_config(config)


def test_bert_trains_as_a_masked_lm_only(imported, text_file):
    config = imported_config(imported("bert"), text_file)
    check_config(config)  # (its masked-LM data: data.masking)
    config["data"]["masking"] = None
    with pytest.raises(
        ConfigError,
        match=r"model: the model is a MaskedLM, which attends to every position, the very "
        r"token each must predict: .* train it as a masked LM: give the data "
        r"masking: \{probability: 0\.15, mask_token_id: ID\}",
    ):
        check_config(config)


def refusal(err, path):
    """The one located problem of a ConfigError as the CLI prints it (no traceback)."""
    header, problem = err.strip().splitlines()
    assert header == f"1 problem in {path}:" and "Traceback" not in err
    return problem.strip()


def test_cli_train_refuses_before_the_run_directory(tmp_path, text_file, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run_config(text_file)), encoding="utf-8")
    code = main(["train", str(path), "--no-progress", "--run-dir", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    problem = refusal(err, path)
    assert problem.startswith(f"{path}:12:7: model.layers[1].block: MultiHeadAttention has ")
    assert "Set is_causal: true" in problem
    assert not (tmp_path / "run").exists()


def test_cli_validate_refuses(tmp_path, text_file, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run_config(text_file)), encoding="utf-8")
    code = main(["config", "validate", str(path)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    problem = refusal(err, path)
    assert problem.startswith(f"{path}:12:7: model.layers[1].block: MultiHeadAttention has ")


def test_a_check_model_that_returns_something_else_is_named(text_file, monkeypatch):
    monkeypatch.setattr(LanguageModel, "check_model", lambda self, config, data: "no")
    with pytest.raises(
        ConfigError,
        match=r"task: task 'language_model' .*returned str from check_model\(config, data\); "
        r"it must return None",
    ):
        check_config(run_config(text_file, is_causal=True))


@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral", "qwen2", "qwen3"])
def test_imported_causal_lms_are_causal(imported, family):
    config = load_config(imported(family) / "config.yaml")
    assert config.sections["task"].type == "language_model"
    assert first_acausal(config.model) is None

"""The imported BERT config is a complete run: task language_model, text data with masking
(the tokenizer's mask id), and `nnx train DST/config.yaml data.path=notes.txt` trains the
masked-LM loss from the imported weights."""

import json
import math

import numpy as np
import optax
import pytest

import nnx_core as nnx
import nnx_plugins
from nnx_plugins import PretrainedError, import_hf
from nnx_plugins.cli._main import main
from nnx_plugins.training.data._text import TextDataset

from .conftest import FIXTURES

NOTES = "The quick brown fox jumps over the lazy dog. Once upon a time there was a model. " * 8


def test_the_bert_config_has_a_task_and_masked_text_data(imported):
    destination = imported("bert")
    config = nnx_plugins.load_train_config(destination / "config.yaml")
    assert config.sections["task"].type == "language_model"
    data = config.sections["data"].arguments
    assert data["masking"] == {"probability": 0.15, "mask_token_id": 4}
    assert data["seq_len"] == 64  # (its position table)
    tokenizer = json.loads((FIXTURES / "bert" / "tokenizer.json").read_text())
    assert {"id": 4, "content": "[MASK]"}.items() <= tokenizer["added_tokens"][4].items()
    head = (destination / "config.yaml").read_text().split("model:")[0]
    assert "A masked LM: data.masking picks 15% of the tokens" in head
    assert "mask id 4 (80%)" in head and "nnx generate" not in head


def _rename_mask_token(source):
    """The fixture's tokenizer without a mask token: [MASK] becomes [MSK], and no mask_token."""
    path = source / "tokenizer.json"
    path.write_text(path.read_text().replace('"[MASK]"', '"[MSK]"'))
    side = source / "tokenizer_config.json"
    settings = json.loads(side.read_text())
    del settings["mask_token"]
    side.write_text(json.dumps(settings))


def test_without_a_mask_token_no_masking_is_written_and_the_header_says_what_to_set(
    copy_of, tmp_path
):
    source = copy_of("bert")
    _rename_mask_token(source)
    done = import_hf(source, tmp_path / "out")
    config = nnx_plugins.load_train_config(done.config)
    assert "masking" not in config.sections["data"].arguments or (
        config.sections["data"].arguments["masking"] is None
    )
    head = done.config.read_text().split("model:")[0]
    assert "no mask token was found" in head
    assert "set data.masking: {probability: 0.15, mask_token_id: ID} before training" in head


def test_config_json_mask_token_id_is_the_fallback_and_is_checked(copy_of, tmp_path):
    source = copy_of("bert")
    _rename_mask_token(source)
    settings = json.loads((source / "config.json").read_text())
    settings["mask_token_id"] = 4
    (source / "config.json").write_text(json.dumps(settings))
    done = import_hf(source, tmp_path / "out")
    masking = nnx_plugins.load_train_config(done.config).sections["data"].arguments["masking"]
    assert masking == {"probability": 0.15, "mask_token_id": 4}
    settings["mask_token_id"] = 250
    (source / "config.json").write_text(json.dumps(settings))
    with pytest.raises(
        PretrainedError,
        match=r"config.json: the mask token id 250 is outside the tokenizer's vocabulary of 200 "
        r"token ids \(0 to 199\)",
    ):
        import_hf(source, tmp_path / "again")
    assert not (tmp_path / "again").exists()


def test_a_tokenizer_mask_token_outside_the_model_is_refused(copy_of, tmp_path):
    source = copy_of("bert")
    settings = json.loads((source / "config.json").read_text())
    settings["vocab_size"] = 4  # (the tokenizer's [MASK] is id 4; the tensors no longer fit)
    (source / "config.json").write_text(json.dumps(settings))
    with pytest.raises(
        PretrainedError,
        match=r"tokenizer.json: the mask token id 4 is outside the model's vocabulary of 4 token "
        r"ids \(0 to 3\)",
    ):
        import_hf(source, tmp_path / "out")


def test_nnx_train_fine_tunes_the_imported_bert_on_the_masked_lm_loss(imported, tmp_path, capsys):
    """One step by the command; its loss is the imported model's masked-LM loss on the first
    batch (so the run started from the imported weights, on masked data)."""
    destination = imported("bert")
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES, encoding="utf-8")
    argv = ["train", str(destination / "config.yaml"), f"data.path={notes}", "data.seq_len=16"]
    argv += ["train.steps=1", "train.batch_size=2", "data.validation=0", "train.log_interval=1"]
    assert main([*argv, "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 0
    summary = capsys.readouterr().out
    assert "masked-token accuracy" in summary and "next-token" not in summary
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    logged = {row["split"]: row for row in map(json.loads, lines)}
    assert math.isfinite(logged["train"]["loss"]) and math.isfinite(logged["test"]["loss"])
    tokenizer = {"type": "hf", "path": str(destination / "tokenizer.json")}
    data = TextDataset(
        str(notes),
        seq_len=16,
        tokenizer=tokenizer,
        masking={"probability": 0.15, "mask_token_id": 4},
    )
    batch = data.batch(0, 2, seed=0)
    model = nnx_plugins.load(destination / "checkpoint")
    logits = nnx.jit(lambda model, tokens: model(tokens))(model, batch["inputs"])  # (one compile)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
    expected = float((losses * batch["mask"]).sum() / batch["mask"].sum())
    assert logged["train"]["loss"] == pytest.approx(expected, rel=1e-4)
    trained = nnx_plugins.load(tmp_path / "run" / "checkpoints")
    assert not np.array_equal(trained.embed.embedding.value, model.embed.embedding.value)


def test_generate_refuses_a_masked_lm(imported):
    """It printed meaningless 'continuations' (a bidirectional model read left to right)."""
    from nnx_plugins import GenerationError, generate

    bert = imported("bert")
    with pytest.raises(GenerationError, match=r"the model is a MaskedLM: it fills in masked"):
        generate(bert / "config.yaml", checkpoint=bert / "checkpoint", prompt="hello", max_tokens=2)

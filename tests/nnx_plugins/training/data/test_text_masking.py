"""The text dataset's masked-language-model objective (``data.masking``): BERT's choice of
positions and replacements, unshifted targets, the mask marking the chosen positions, seeded
by (seed, step, row); validation and test the same in every run; and every bad setting."""

import pathlib

import numpy as np
import pytest

from nnx_plugins import ConfigError, DataError
from nnx_plugins.cli._main import main
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training.data._masking import Masking, as_masking, mask_rows
from nnx_plugins.training.data._text import TextDataset

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
BERT_TOKENIZER = str(
    pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "hf" / "bert" / "tokenizer.json"
)


@pytest.fixture
def notes(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text(TEXT, encoding="utf-8")
    return str(path)


def masked(path, **masking):
    return TextDataset(path, seq_len=16, masking={"mask_token_id": 0, **masking})


def test_masked_batches_keep_unshifted_targets_and_mark_the_chosen_positions(notes):
    plain, data = TextDataset(notes, seq_len=16), masked(notes, probability=0.3)
    batch = data.batch(5, 8, seed=3)
    assert sorted(batch) == ["inputs", "mask", "targets"]
    assert batch["inputs"].dtype == np.int32 and batch["mask"].shape == (8, 16)
    # the same windows as next-token data, the targets not shifted: the original tokens
    np.testing.assert_array_equal(batch["targets"], plain.batch(5, 8, seed=3)["inputs"])
    chosen = batch["mask"].astype(bool)
    assert (chosen.sum(axis=1) >= 1).all() and chosen.sum() < chosen.size
    np.testing.assert_array_equal(batch["inputs"][~chosen], batch["targets"][~chosen])
    assert (batch["inputs"][chosen] == 0).any()  # (the mask id; NUL is never in the text)
    assert 0 not in batch["targets"]


def test_the_choice_is_a_pure_function_of_seed_step_and_row(notes):
    data = masked(notes)
    first = data.batch(7, 4, seed=1)
    again = masked(notes).batch(7, 4, seed=1)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    other_seed, other_step = data.batch(7, 4, seed=2), data.batch(8, 4, seed=1)
    assert not np.array_equal(first["mask"], other_seed["mask"])
    assert not np.array_equal(first["mask"], other_step["mask"])
    # a row's choice depends on (seed, step, row) only, not on the tokens of its window
    windows = np.tile(np.arange(1, 17, dtype=np.int32), (2, 1))
    real = np.ones((2, 16), bool)
    one = mask_rows(windows, real, (9, 1), Masking(mask_token_id=0), vocab_size=20)
    two = mask_rows(windows + 1, real, (9, 1), Masking(mask_token_id=0), vocab_size=20)
    np.testing.assert_array_equal(one["mask"], two["mask"])
    assert not np.array_equal(one["mask"][0], one["mask"][1])


def test_bert_shares_of_the_chosen_positions(notes):
    """15% chosen; of those 80% the mask id, 10% a random id, 10% kept (seeded: exact)."""
    windows = np.full((200, 64), 7, np.int32)
    out = mask_rows(
        windows, np.ones(windows.shape, bool), (1, 2), Masking(mask_token_id=5), vocab_size=1000
    )
    chosen = out["mask"].astype(bool)
    assert 0.13 < chosen.mean() < 0.17
    picked = out["inputs"][chosen]
    assert 0.75 < (picked == 5).mean() < 0.85
    assert 0.05 < (picked == 7).mean() < 0.15  # (kept; a random id is 7 one time in 1000)
    assert 0.05 < ((picked != 5) & (picked != 7)).mean() < 0.15
    assert picked.min() >= 0 and picked.max() < 1000


def test_probability_one_chooses_every_real_position_and_padding_never(notes):
    windows = np.arange(8, dtype=np.int32).reshape(2, 4) + 10
    real = np.array([[1, 1, 1, 1], [1, 0, 0, 0]], bool)
    out = mask_rows(windows, real, (0, 1), Masking(probability=1.0, mask_token_id=0), vocab_size=20)
    np.testing.assert_array_equal(out["mask"], real.astype(np.int32))
    rare = mask_rows(
        windows, real, (0, 1), Masking(probability=1e-9, mask_token_id=0), vocab_size=20
    )
    assert rare["mask"].sum(axis=1).tolist() == [1, 1] and rare["mask"][1, 0] == 1


def test_test_and_validation_windows_cover_every_token_once_the_same_in_every_run(notes):
    data = masked(notes)
    assert data.hold_out(0.2, seed=0)
    held = data.tokens[data._corpus[2] :]
    batches = list(data.test_batches(4))
    targets = np.concatenate([b["targets"] for b in batches]).reshape(-1)
    np.testing.assert_array_equal(targets[: len(held)], held)
    mask = np.concatenate([b["mask"] for b in batches]).reshape(-1)
    assert mask[len(held) :].sum() == 0 and mask.sum() >= len(batches)
    assert all((batch["mask"].sum(axis=1) >= 1).all() for batch in batches)
    # the same windows masked the same, whatever the batch size and the run
    again = masked(notes)
    again.hold_out(0.2, seed=5)
    by_one = np.concatenate([b["inputs"] for b in again.test_batches(1)])
    np.testing.assert_array_equal(by_one, np.concatenate([b["inputs"] for b in batches]))
    val = list(data.val_batches(8))
    assert val and all(b["mask"].sum() >= 1 for b in val)
    np.testing.assert_array_equal(val[0]["inputs"], next(again.val_batches(8))["inputs"])


def test_with_the_bert_tokenizer_the_mask_is_its_id(notes):
    data = TextDataset(
        notes,
        seq_len=16,
        tokenizer={"type": "hf", "path": BERT_TOKENIZER},
        masking={"mask_token_id": 4},
    )
    info = data.describe()
    assert info.vocab_size == 200 and "15% masked" in info.origin
    batch = data.batch(0, 4, seed=0)
    assert (batch["inputs"][batch["mask"] == 1] == 4).any() and 4 not in batch["targets"]
    assert data.input_arrays()[1][1].tolist() == [4, 199]


@pytest.mark.parametrize(
    "masking, match",
    [
        ({"mask_token_id": 0, "probability": 0}, r"probability: Input should be greater than 0"),
        ({"mask_token_id": 0, "probability": 1.5}, r"probability: Input should be less than or"),
        ({"mask_token_id": 0, "probability": float("nan")}, r"probability: .*finite number"),
        ({"mask_token_id": -1}, r"mask_token_id: Input should be greater than or equal to 0"),
        ({"mask_token_id": True}, r"mask_token_id: Input should be a valid integer"),
        ({"probability": 0.2}, r"mask_token_id: Field required"),
        ({"mask_token_id": 0, "mask": 1}, r"unknown key\(s\) 'mask' in masking; it takes"),
        (3, r"masking must be a mapping such as \{probability: 0.15, mask_token_id: 103\}"),
    ],
)
def test_bad_masking_is_refused(notes, masking, match):
    with pytest.raises(DataError, match=match) as error:
        TextDataset(notes, seq_len=8, masking=masking)
    assert error.value.key == "masking"


def test_masking_that_cannot_work_is_refused(notes):
    assert as_masking(None) is None and TextDataset(notes).masking is None
    with pytest.raises(DataError, match=r"masking needs seq_len of at least 2, got 1") as error:
        TextDataset(notes, seq_len=1, masking={"mask_token_id": 0})
    assert error.value.key == "seq_len"
    with pytest.raises(DataError, match=r"with level: characters every id is a character"):
        TextDataset(notes, seq_len=8, level="characters", masking={"mask_token_id": 0})


def test_a_mask_id_outside_the_vocabulary_is_refused_with_its_size(notes):
    with pytest.raises(
        DataError,
        match=r"masking.mask_token_id is 256, outside the vocabulary of level bytes: "
        r"256 token ids \(0 to 255\)",
    ):
        masked(notes, mask_token_id=256).describe()
    bert = TextDataset(
        notes,
        seq_len=8,
        tokenizer={"type": "hf", "path": BERT_TOKENIZER},
        masking={"mask_token_id": 200},
    )
    with pytest.raises(DataError, match=r"the tokenizer '.*tokenizer.json': 200 token ids"):
        bert.batch(0, 2, seed=0)


def config(tmp_path, notes, *, rows=256, masking="{mask_token_id: 0}"):
    path = tmp_path / "mlm.yaml"
    path.write_text(
        "model:\n  type: Sequential\n  layers:\n"
        f"  - {{type: Embed, num_embeddings: {rows}, features: 8}}\n"
        "  - {type: Linear, in_features: 8, out_features: 256}\n"
        "task: language_model\n"
        f"data: {{type: text, path: {notes}, seq_len: 8, masking: {masking}}}\n"
        "train: {steps: 1, batch_size: 2}\n",
        encoding="utf-8",
    )
    return path


def test_the_config_section_locates_bad_masking(tmp_path, notes, capsys):
    path = config(tmp_path, notes, masking="{probability: 2, mask_token_id: 0}")
    with pytest.raises(
        ConfigError,
        match=r"mlm.yaml:7:\d+: data.masking.probability: Input "
        r"should be less than or equal to 1 \(got int 2\)",
    ):
        load_train_config(path)
    assert main(["train", str(path), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "data.masking.probability" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_mask_id_outside_the_models_embedding_is_refused_at_the_cli(tmp_path, notes, capsys):
    path = config(tmp_path, notes, rows=128, masking="{mask_token_id: 0}")
    text = TEXT.replace("z", "y")  # (bytes below 128 only)
    pathlib.Path(notes).write_text(text, encoding="utf-8")
    assert main(["train", str(path), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "masking (mask_token_id, largest random id)[1] is 255, outside the 128 rows" in err
    assert "Traceback" not in err

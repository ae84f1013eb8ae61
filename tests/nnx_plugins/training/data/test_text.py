"""The text dataset: files, folders, globs and the standard library as token windows."""

import os
import pathlib
import re
import sysconfig

import numpy as np
import pytest

from nnx_plugins import DataError, Vocabulary
from nnx_plugins.training.data._text import TextDataset, text_files

TEXT = "the quick brown fox jumps over the lazy dog. " * 40


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_bytes_windows_and_next_token_targets(tmp_path):
    data = TextDataset(write(tmp_path / "a.txt", TEXT), seq_len=16, test_fraction=0.25)
    info = data.describe()
    assert info.vocab_size == 256 and info.inputs.shape == info.targets.shape == (16,)
    assert info.inputs.dtype == np.int32 and info.masked
    batch = data.batch(3, 4, seed=0)
    assert batch["inputs"].shape == (4, 16) and "mask" not in batch
    np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])
    np.testing.assert_array_equal(data.batch(3, 4, seed=0)["inputs"], batch["inputs"])
    assert data.vocabulary.decode(batch["inputs"][0]) in TEXT


def test_test_windows_cover_the_held_out_tokens_once_with_a_mask(tmp_path):
    data = TextDataset(write(tmp_path / "a.txt", TEXT), seq_len=16, test_fraction=0.25)
    held = data.tokens[len(data.tokens) - int(round(len(data.tokens) * 0.25)) :]
    batches = list(data.test_batches(8))
    masks = np.concatenate([b["mask"] for b in batches])
    assert masks.sum() == len(held) - 1  # (every next-token target of the test split, once)
    targets = np.concatenate([b["targets"] for b in batches]).reshape(-1)[: len(held) - 1]
    np.testing.assert_array_equal(targets, held[1:])
    assert masks.reshape(-1)[len(held) - 1 :].sum() == 0  # (the padding does not count)


def test_characters_vocabulary_and_its_check(tmp_path):
    data = TextDataset(
        write(tmp_path / "a.txt", "abcabc" * 30 + "é"), seq_len=4, level="characters"
    )
    assert data.vocabulary.characters == "abcé" and data.describe().vocab_size == 4
    assert data.state() == {"level": "characters", "vocabulary": "abcé"}
    assert data.check_state(data.state()) is None
    other = TextDataset(write(tmp_path / "b.txt", "abcabd" * 30), seq_len=4, level="characters")
    assert (
        "differs from this text's (4): new characters 'd', missing characters 'é'"
        in other.check_state(data.state())
    )
    assert "this data reads it as bytes; set data.level: characters" in TextDataset(
        str(tmp_path / "b.txt"), seq_len=4
    ).check_state(data.state())


def test_a_tokenizer_is_part_of_the_state_a_checkpoint_is_checked_against(tmp_path):
    hf = pathlib.Path(__file__).parents[3] / "fixtures" / "hf"
    path = write(tmp_path / "a.txt", TEXT)

    def read_with(model):
        spec = model and {"type": "hf", "path": str(hf / model / "tokenizer.json")}
        return TextDataset(path, seq_len=4, tokenizer=spec)

    llama, bert, raw = read_with("llama"), read_with("bert"), read_with(None)
    saved = llama.state()
    assert saved["level"] == "tokenizer" and saved["vocab_size"] == 320
    assert llama.check_state(saved) is None  # (refused: "set data.level: tokenizer")
    moved = {**saved, "tokenizer": {**saved["tokenizer"], "path": "elsewhere/tokenizer.json"}}
    assert llama.check_state(moved) is None  # (the same tokenizer, its file moved)
    assert llama.check_state({k: v for k, v in saved.items() if k != "vocab_size"}) is None
    assert re.search(
        r"tokenizer of 320 token ids \('.*llama/tokenizer.json'\); this config's tokenizer "
        r"'.*bert/tokenizer.json' has 200: token ids would mean other tokens",
        bert.check_state(saved),
    )
    assert re.search(
        r"token ids are those of the tokenizer '.*llama/tokenizer.json' \(type 'hf'\); "
        r"this config has no tokenizer section, so it reads the text as bytes",
        raw.check_state(saved),
    )
    assert re.search(
        r"trained on text read as bytes \(no tokenizer\); this config reads it with the "
        r"tokenizer '.*llama/tokenizer.json': remove the config's tokenizer section",
        llama.check_state(raw.state()),
    )
    other = {**saved, "tokenizer": {"type": "sentencepiece", "path": "t.model"}}
    assert "a tokenizer of type 'sentencepiece' ('t.model'); this config's is of type 'hf'" in (
        llama.check_state(other)
    )


def test_vocabulary_round_trips_and_refuses_unknown_characters():
    chars = Vocabulary.from_state({"level": "characters", "vocabulary": " abc"})
    assert chars.decode(chars.encode("a cab")) == "a cab"
    with pytest.raises(
        DataError,
        match=r"the character 'z' \(position 2\) is not in the vocabulary of 4 characters",
    ):
        chars.encode("abz")
    raw = Vocabulary.from_state({"level": "bytes", "vocabulary": None})
    assert raw.decode(raw.encode("héllo")) == "héllo" and raw.size == 256
    with pytest.raises(DataError, match=r"the checkpoint records no text vocabulary"):
        Vocabulary.from_state({})
    with pytest.raises(  # (a manifest's record is described, never quoted: it may be huge)
        DataError,
        match=r"no text vocabulary \(its data record, a mapping of 2 keys, has no level 'bytes' "
        r"or 'characters' with its characters\)",
    ):
        Vocabulary.from_state({"level": "characters", "vocabulary": ["secret"] * 10**5})


def test_folders_globs_and_the_standard_library(tmp_path):
    (tmp_path / "docs" / "__pycache__").mkdir(parents=True)
    write(tmp_path / "docs" / "b.txt", "second")
    write(tmp_path / "docs" / "a.txt", "first")
    (tmp_path / "docs" / "__pycache__" / "c.pyc").write_bytes(b"\0\1\2")
    write(tmp_path / "docs" / ".hidden", "no")
    assert [os.path.basename(f) for f in text_files(str(tmp_path / "docs"))] == ["a.txt", "b.txt"]
    assert [os.path.basename(f) for f in text_files(str(tmp_path / "docs" / "*.txt"))] == [
        "a.txt",
        "b.txt",
    ]
    stdlib = text_files("stdlib:json")
    assert stdlib and all(f.startswith(sysconfig.get_paths()["stdlib"]) for f in stdlib)
    assert TextDataset.resolve_path("stdlib:json", "/configs") == "stdlib:json"
    assert TextDataset.resolve_path("a.txt", "/configs") == "/configs/a.txt"


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", r"holds no text \(its files are empty\)"),
        (b"   \n\n", r"holds no text"),
        (b"text\x00binary", r"is binary, not text \(a NUL byte at offset 4\)"),
        (b"caf\xe9 au lait", r"is not UTF-8 text: the byte 0xe9 at offset 3 does not decode"),
        (b"short", r"holds 5 tokens: too few for training windows of seq_len 16"),
    ],
)
def test_bad_text_is_refused(tmp_path, content, match):
    (tmp_path / "t.txt").write_bytes(content)
    with pytest.raises(DataError, match=match):
        TextDataset(str(tmp_path / "t.txt"), seq_len=16).describe()


def test_nothing_named_and_bad_arguments(tmp_path):
    with pytest.raises(DataError, match=r"names no file"):
        text_files(str(tmp_path / "*.md"))
    with pytest.raises(DataError, match=r"no such file"):
        TextDataset(str(tmp_path / "none.txt")).describe()
    with pytest.raises(DataError, match=r"seq_len must be at least 1, got 0"):
        TextDataset("a.txt", seq_len=0)
    with pytest.raises(DataError, match=r"test_fraction must be in \(0, 1\)"):
        TextDataset("a.txt", test_fraction=0)
    data = TextDataset(write(tmp_path / "a.txt", TEXT), seq_len=64)
    with pytest.raises(
        DataError, match=r"training windows of 64 tokens, fewer than one batch of 999"
    ):
        data.steps_per_epoch(999)

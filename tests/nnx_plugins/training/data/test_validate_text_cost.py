"""`nnx config validate` encodes text read with a tokenizer only as far as its checks need (a
20 MB file was encoded whole: 70 s), with every refusal it made before; `nnx train` still
encodes the whole text."""

import pathlib

import pytest
import yaml

from nnx_plugins import ConfigError, DataError, train
from nnx_plugins.training._validate import check_config
from nnx_plugins.training.data import _text
from nnx_plugins.training.data._tokenizers import HFTokenizer

TOKENIZER = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "hf" / "llama"
REPEATS = 40_000  # ("zebra\n": 240,000 characters, 6 tokens each: ids 67 to 201)
LATE = "the quick brown fox\n"  # (ids up to 311)


@pytest.fixture
def encoded(monkeypatch):
    """The lengths of the texts the hf tokenizer encodes."""
    lengths: list[int] = []
    encode = HFTokenizer.encode

    def recorded(self, text, **options):
        lengths.append(len(text))
        return encode(self, text, **options)

    monkeypatch.setattr(HFTokenizer, "encode", recorded)
    return lengths


def run(
    folder: pathlib.Path, *, rows: int = 320, batch_size: int = 4, late: str = ""
) -> pathlib.Path:
    (folder / "notes.txt").write_text("zebra\n" * REPEATS + late)
    config = {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Embed", "num_embeddings": rows, "features": 4},
                {"type": "Linear", "in_features": 4, "out_features": 320},
            ],
        },
        "tokenizer": {"type": "hf", "path": str(TOKENIZER / "tokenizer.json")},
        "data": {"type": "text", "path": "notes.txt", "seq_len": 16},
        "task": "language_model",
        "train": {"steps": 1, "batch_size": batch_size},
    }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_validate_encodes_a_prefix_when_it_proves_the_checks(tmp_path, encoded):
    check_config(run(tmp_path))
    assert encoded and max(encoded) <= _text.FIRST_SAMPLE  # (of the 240,000 characters)


def test_train_still_encodes_the_whole_text(tmp_path, encoded):
    train(str(run(tmp_path)), run_dir=tmp_path / "run", progress=False)
    assert max(encoded) == 6 * REPEATS


def test_too_few_windows_is_refused_with_the_whole_texts_count(tmp_path, encoded):
    """The prefix cannot prove a batch of 20,000 windows: the whole text is encoded, and the
    refusal is train's."""
    path = run(tmp_path, batch_size=20_000)
    match = r"notes\.txt' has 12149 training windows of 16 tokens, fewer than one batch of 20000"
    with pytest.raises(ConfigError, match=match):
        check_config(path)
    assert max(encoded) == 6 * REPEATS
    with pytest.raises(DataError, match=match):
        train(str(path), run_dir=tmp_path / "run", progress=False)


def test_an_id_past_the_prefix_outside_the_embedding_is_still_found(tmp_path, encoded):
    """The Embed takes fewer ids than the tokenizer has: the ids of a prefix prove nothing, so
    the whole text is encoded for them and the first bad one (at its end) is named."""
    path = run(tmp_path, rows=250, late=LATE)
    match = r"token id tokens\[240000\] is 291, outside the 250 rows of the model's Embed"
    with pytest.raises(ConfigError, match=match):
        check_config(path)
    assert max(encoded) == 6 * REPEATS + len(LATE)

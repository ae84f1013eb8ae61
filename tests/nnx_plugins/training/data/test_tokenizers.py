"""Tokenizers: bytes and hf (tokenizer.json through the tokenizers library), the tokenizer
section, the text dataset reading through it, and malformed tokenizer files."""

import os
import pathlib

import numpy as np
import pytest

import nnx_plugins
from nnx_plugins import DataError, TokenizerError, train
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._validate import check_config
from nnx_plugins.training.data._tokenizers import BytesTokenizer, HFTokenizer, make_tokenizer

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "hf"


def _reference(family):
    with np.load(FIXTURES / family / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_hf_ids_equal_transformers_ids(family):
    ref = _reference(family)
    tokenizer = HFTokenizer(str(FIXTURES / family / "tokenizer.json"))
    for prompt, ids, mask in zip(
        ref["generate_prompts"], ref["generate_prompt_ids"], ref["generate_attention_mask"]
    ):
        assert tokenizer.encode(str(prompt)).tolist() == ids[mask.astype(bool)].tolist()
    assert tokenizer.vocab_size == 320


def test_special_tokens_come_from_tokenizer_config_unless_given():
    path = str(FIXTURES / "llama" / "tokenizer.json")
    tokenizer = HFTokenizer(path)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_ids, tokenizer.pad_token_id) == (1, (2,), 2)
    given = HFTokenizer(path, eos_token_ids=[170, 2], pad_token_id=0)
    assert given.eos_token_ids == (170, 2) and given.pad_token_id == 0
    ids = tokenizer.encode("fox")
    assert (
        ids[0] == 1 and tokenizer.encode("fox", special_tokens=False).tolist() == ids[1:].tolist()
    )
    assert (
        tokenizer.decode(ids) == "fox"
        and tokenizer.decode(ids, skip_special_tokens=False) == "<s>fox"
    )


@pytest.mark.parametrize(
    "tokenizer", [BytesTokenizer(), HFTokenizer(str(FIXTURES / "gpt2" / "tokenizer.json"))]
)
def test_streaming_decode_gives_each_character_once_complete(tokenizer):
    text = "héllo wörld, ünïcode"
    stream = tokenizer.stream()
    pieces = [stream.step(int(i)) for i in tokenizer.encode(text)]
    assert "".join(pieces) == text and all("\ufffd" not in p for p in pieces)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (
            '{"model": {"type": "BPE", "vocab": 3}}',
            r"bad\.json: not a tokenizer\.json .*line 1, column",
        ),
        ("{not json", r"bad\.json: not a tokenizer\.json .*line 1, column 2"),
        (  # (the library quotes values: its message is not shown)
            '{"model": "hunter2-secret"}',
            r"bad\.json: not a tokenizer\.json the tokenizers library can read \(it stops at "
            r"line 1, column \d+; the library's message is not shown: it quotes the file\)",
        ),
        (b"\xff\xfe\x00", r"bad\.json: not UTF-8 text \(byte 0xff at offset 0\)"),
    ],
)
def test_a_malformed_tokenizer_json_is_a_located_error(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(TokenizerError, match=match) as error:
        HFTokenizer(str(path)).encode("hi")
    assert "hunter2" not in str(error.value)


def test_a_missing_or_huge_tokenizer_file(tmp_path, monkeypatch):
    with pytest.raises(TokenizerError, match="none.json: cannot be read: No such file"):
        HFTokenizer(str(tmp_path / "none.json")).vocab_size  # noqa: B018
    monkeypatch.setattr("nnx_plugins.training.data._tokenizers.MAX_TOKENIZER_BYTES", 10)
    (tmp_path / "big.json").write_text("{" + " " * 20 + "}")
    with pytest.raises(
        TokenizerError, match="22 bytes, more than the 10 a tokenizer.json may have"
    ):
        HFTokenizer(str(tmp_path / "big.json")).vocab_size  # noqa: B018
    with pytest.raises(TokenizerError, match="path must name a tokenizer.json file"):
        HFTokenizer("")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (
            '{\n  "eos_token": "</s>",\n  "pad_token": \n}\n',
            r"tok/tokenizer_config\.json: not JSON \(Expecting value at line 4, column 1\); it "
            r"names the tokenizer's special tokens \(eos_token, pad_token\)\. Fix it",
        ),
        (
            '["</s>"]',
            r"tok/tokenizer_config\.json: holds a list of 1 item, not a mapping: a "
            r"tokenizer_config\.json maps names to the tokenizer's special tokens",
        ),
        (b"\xff{}", r"tok/tokenizer_config\.json: not UTF-8 text \(byte 0xff at offset 0\); it is "
         r"not a tokenizer_config\.json\."),
        ("[" * 100_000 + "]" * 100_000, r"tokenizer_config\.json: (JSON nested too deeply|not JSON)"),
    ],
)  # fmt: skip
def test_a_malformed_tokenizer_config_json_is_a_located_error(tmp_path, content, match):
    """It was ignored: no EOS, so generation ran on past the model's end of text."""
    (tmp_path / "tok").mkdir()
    path = tmp_path / "tok" / "tokenizer.json"
    path.write_bytes((FIXTURES / "llama" / "tokenizer.json").read_bytes())
    side = tmp_path / "tok" / "tokenizer_config.json"
    side.write_bytes(content if isinstance(content, bytes) else content.encode())
    for read in ("eos_token_ids", "pad_token_id", "bos_token_id"):
        with pytest.raises(TokenizerError, match=match):
            getattr(HFTokenizer(str(path)), read)
    given = HFTokenizer(str(path), eos_token_ids=[2], pad_token_id=0)  # (the file not needed)
    assert (given.eos_token_ids, given.pad_token_id) == ((2,), 0)
    side.unlink()  # (no file at all: no special tokens, as before)
    assert HFTokenizer(str(path)).eos_token_ids == ()


def test_a_huge_tokenizer_config_json_is_refused_unread(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((FIXTURES / "llama" / "tokenizer.json").read_bytes())
    with open(tmp_path / "tokenizer_config.json", "wb") as file:
        file.truncate(16 * 1024 * 1024 + 1)  # (sparse: nothing written)
    with pytest.raises(
        TokenizerError,
        match=r"tokenizer_config\.json: 16,777,217 bytes, more than the 16,777,216 a "
        r"tokenizer_config\.json may have",
    ):
        HFTokenizer(str(tmp_path / "tokenizer.json")).eos_token_ids  # noqa: B018


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: "/dev/zero", r"/dev/zero: it is a character device .*, not a regular file"),
        (lambda p: os.mkfifo(p / "fifo.json") or p / "fifo.json", r"it is a FIFO"),
        (lambda p: p, r"cannot be read: .*directory|it is a directory"),
    ],
)
def test_a_tokenizer_path_that_is_no_regular_file_is_refused_unread(tmp_path, make, match):
    """A device's size is 0 and its bytes endless (it was read until memory ran out); opening a
    FIFO would wait for a writer."""
    with pytest.raises(TokenizerError, match=match):
        HFTokenizer(str(make(tmp_path))).vocab_size  # noqa: B018


def test_the_section_resolves_its_path_and_feeds_the_text_dataset(tmp_path):
    (tmp_path / "tok").mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "tok" / name).write_bytes((FIXTURES / "llama" / name).read_bytes())
    (tmp_path / "notes.txt").write_text("The quick brown fox jumps over the lazy dog. " * 40)
    (tmp_path / "run.yaml").write_text(
        "model: {type: Linear, in_features: 2, out_features: 2}\n"
        "tokenizer: {type: hf, path: tok/tokenizer.json}\n"
        "data: {type: text, path: notes.txt, seq_len: 8}\n"
        "task: {type: language_model}\n"
    )
    config = load_train_config(tmp_path / "run.yaml")
    assert config.sections["tokenizer"].arguments["path"] == str(
        tmp_path / "tok" / "tokenizer.json"
    )
    data = config.sections["data"].make()
    tokenizer = config.sections["tokenizer"].make()
    assert data.describe().vocab_size == 320
    expected = tokenizer.encode("The quick brown fox", special_tokens=False).tolist()
    assert data.tokens[: len(expected)].tolist() == expected
    assert data.state() == {
        "level": "tokenizer",
        "tokenizer": config.sections["data"].arguments["tokenizer"],
        "vocab_size": 320,
    }


def test_the_default_tokenizer_is_bytes_and_leaves_the_data_alone():
    config = load_train_config(
        {
            "model": {"type": "Linear", "in_features": 2, "out_features": 2},
            "data": {"type": "text", "path": "stdlib:json", "seq_len": 8},
            "task": "language_model",
        }
    )
    assert (
        "tokenizer" not in config.sections["data"].arguments
        or config.sections["data"].arguments["tokenizer"] is None
    )
    assert make_tokenizer(None).vocab_size == 256


def test_an_unknown_tokenizer_type_is_a_config_error():
    with pytest.raises(
        nnx_plugins.ConfigError, match=r"tokenizer\.type: .*Unknown tokenizer 'sentencepiece'"
    ):
        load_train_config(
            {
                "model": {"type": "Linear", "in_features": 2, "out_features": 2},
                "tokenizer": {"type": "sentencepiece"},
            }
        )


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        (
            "tokenizer: {type: hf, path: bad.json}\ndata: {type: text, path: notes.txt}\n",
            r"run\.yaml:2:29: tokenizer\.path",
        ),
        (  # (the data's own tokenizer argument: located there)
            "data: {type: text, path: notes.txt, tokenizer: {type: hf, path: BAD}}\n",
            r"run\.yaml:2:\d+: data\.tokenizer\.path",
        ),
    ],
)
def test_a_malformed_tokenizer_file_is_located_where_the_config_names_it(tmp_path, lines, where):
    """Not at data.path (the text, which is fine) when training, nor at the prompt when
    generating (tests/nnx_plugins/pretrained/test_generate_hf.py)."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    (tmp_path / "notes.txt").write_text("The quick brown fox jumps over the lazy dog. " * 40)
    (tmp_path / "run.yaml").write_text(
        "model: {type: Linear, in_features: 2, out_features: 2}\n"
        + lines.replace("BAD", str(bad))
        + "task: {type: language_model}\n"
    )
    message = rf"{where}: {bad}: not a tokenizer\.json the tokenizers library can read"
    with pytest.raises(DataError, match=message):
        train(tmp_path / "run.yaml", run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    with pytest.raises(nnx_plugins.ConfigError, match=message):  # (nnx config validate)
        check_config(tmp_path / "run.yaml")

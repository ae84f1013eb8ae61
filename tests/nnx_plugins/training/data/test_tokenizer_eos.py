"""A special token that tokenizer_config.json names but tokenizer.json lacks is refused (it gave
no id: no EOS, so generation never stopped early), by the tokenizer, `nnx config validate` and
`nnx train`; a legitimate import is unaffected."""

import json
import pathlib

import pytest

from nnx_plugins import ConfigError, DataError, import_hf, train
from nnx_plugins.cli._main import main
from nnx_plugins.training._validate import check_config
from nnx_plugins.training.data._tokenizers import HFTokenizer, TokenizerError, check_special_tokens

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "hf"


def tokenizer_dir(folder: pathlib.Path, family: str = "llama", **special) -> pathlib.Path:
    """A copy of a fixture's tokenizer.json, with its tokenizer_config.json changed by
    ``special`` (None: removed)."""
    folder.mkdir(parents=True, exist_ok=True)
    source = FIXTURES / family
    (folder / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    config = json.loads((source / "tokenizer_config.json").read_text())
    config.update(special)
    config = {k: v for k, v in config.items() if v is not None}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder / "tokenizer.json"


@pytest.mark.parametrize(
    ("key", "value", "read", "match"),
    [
        ("eos_token", "</S>", "eos_token_ids",
         r"tokenizer_config\.json: 'eos_token' is '</S>', which is not a token of .*tokenizer\.json: "
         r"it would have no id \(no EOS: generation would never stop at the end of a text\)\. "
         r"Did you mean '</s>' or '<s>'\? Name one of its tokens, or remove the field, or give "
         r"tokenizer\.eos_token_ids in the config\."),
        ("eos_token", {"content": "[END_OF_TEXT]"}, "eos_token_ids", r"'eos_token' is '\[END_OF_TEXT\]'.*"
         r"Its special tokens are '<unk>', '<s>', '</s>'\."),
        ("pad_token", "<pad>", "pad_token_id", r"'pad_token' is '<pad>', which is not a token.*"
         r"padded with the first EOS instead.*give tokenizer\.pad_token_id in the config"),
        ("bos_token", "<bos>", "bos_token_id", r"'bos_token' is '<bos>'.*Did you mean '<s>'"),
    ],
)  # fmt: skip
def test_a_special_token_the_tokenizer_lacks_is_refused(tmp_path, key, value, read, match):
    path = tokenizer_dir(tmp_path / "tok", **{key: value})
    with pytest.raises(TokenizerError, match=match):
        getattr(HFTokenizer(str(path)), read)
    with pytest.raises(TokenizerError, match=match):
        check_special_tokens(HFTokenizer(str(path)))


def test_ids_the_config_gives_need_no_token_of_the_file(tmp_path):
    path = tokenizer_dir(tmp_path / "tok", eos_token="</S>", pad_token="<pad>")
    given = HFTokenizer(str(path), eos_token_ids=[2], pad_token_id=0)
    assert (given.eos_token_ids, given.pad_token_id, given.bos_token_id) == ((2,), 0, 1)


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "qwen2"])
def test_the_fixtures_special_tokens_all_resolve(family):
    tokenizer = HFTokenizer(str(FIXTURES / family / "tokenizer.json"))
    check_special_tokens(tokenizer)  # (raises on a special token that is not a token)
    assert tokenizer.eos_token_ids or family == "bert"


LANGUAGE_MODEL = (
    "model:\n"
    "  type: Sequential\n"
    "  layers: [{type: Embed, num_embeddings: 320, features: 8},\n"
    "           {type: Linear, in_features: 8, out_features: 320}]\n"
    "data: {type: text, path: notes.txt, seq_len: 8}\n"
    "task: {type: language_model}\n"
)
CLASSIFIER = (  # (its data does not read the tokenizer: only generation would)
    "model: {type: Linear, in_features: 64, out_features: 10}\ndata: {type: digits, layout: flat}\n"
)


def run_config(folder: pathlib.Path, body: str = LANGUAGE_MODEL) -> pathlib.Path:
    (folder / "notes.txt").write_text("The quick brown fox jumps over the lazy dog. " * 60)
    path = folder / "run.yaml"
    path.write_text(
        f"{body}tokenizer: {{type: hf, path: tok/tokenizer.json}}\n"
        "train: {steps: 2, batch_size: 2}\n"
    )
    return path


@pytest.mark.parametrize("body", [LANGUAGE_MODEL, CLASSIFIER])
def test_validate_refuses_it_at_the_tokenizer_path(tmp_path, capsys, body):
    tokenizer_dir(tmp_path / "tok", eos_token="</S>")
    path = run_config(tmp_path, body)
    with pytest.raises(ConfigError, match=r"run\.yaml:\d+:\d+: tokenizer\.path: .*'eos_token' "
                       r"is '</S>', which is not a token of .*Did you mean '</s>'"):  # fmt: skip
        check_config(path)
    assert main(["config", "validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "'eos_token' is '</S>'" in err and "Traceback" not in err


def test_train_refuses_it_before_a_step(tmp_path):
    tokenizer_dir(tmp_path / "tok", eos_token="</S>")
    path = run_config(tmp_path)
    with pytest.raises(DataError, match=r"tokenizer\.path: .*'eos_token' is '</S>'"):
        train(str(path), run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_an_imported_config_validates(tmp_path, family):
    """nnx import hf writes the EOS and padding ids of generation_config.json into the section;
    the special tokens of the copied tokenizer_config.json resolve."""
    import_hf(FIXTURES / family, tmp_path / family)
    check_config(tmp_path / family / "config.yaml")

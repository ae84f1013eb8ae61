"""generate() through an ``hf`` tokenizer (the tiny imported Llama): the EOS and pad ids of the
config's tokenizer section, rows that end at different EOS ids, prompts the tokenizer keeps
nothing of, and text of any script in one left-padded batch."""

import json
import pathlib

import pytest

import nnx_plugins
from nnx_plugins import GenerationError, generate
from nnx_plugins.training.data._tokenizers import HFTokenizer

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "hf"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """The tiny Llama imported (320 tokens, 64 positions, EOS 170, pad 2)."""
    return nnx_plugins.import_hf(FIXTURES / "llama", tmp_path_factory.mktemp("llama") / "llama")


def with_overrides(llama, *overrides):
    return nnx_plugins.load_config(llama.config, overrides=list(overrides))


@pytest.mark.parametrize(
    ("eos", "shown"), [(99999999999, "99,999,999,999"), (320, "320"), (-1, "-1")]
)
def test_an_eos_id_that_is_no_token_of_the_model_is_refused(llama, eos, shown):
    """Past int32 it was a traceback (OverflowError) after the whole decoding; another id the
    model has no token for was accepted, and no row could ever end at it."""
    config = with_overrides(llama, f"tokenizer.eos_token_ids=[170, {eos}]")
    with pytest.raises(
        GenerationError,
        match=rf"tokenizer\.eos_token_ids: the EOS token id {shown} is not a token of the model "
        r"\(0 to 319\): no row would ever end at it\. Give the ids of the model's",
    ):
        generate(config, checkpoint=llama.checkpoint, prompt="The fox", max_tokens=2)


def test_the_pad_id_of_a_single_prompt_pads_nothing(llama):
    """One prompt is not padded: a pad id past int32 was a traceback (OverflowError)."""
    options = dict(checkpoint=llama.checkpoint, prompt="The fox", max_tokens=4, temperature=0)
    plain = generate(llama.config, **options)
    config = with_overrides(llama, "tokenizer.pad_token_id=99999999999")
    assert generate(config, **options).tokens == plain.tokens


def test_rows_end_at_any_of_several_eos_ids_and_show_their_own_tokens(llama):
    prompts = ["a", "The quick brown fox", "hello there"]
    options = dict(checkpoint=llama.checkpoint, prompt=prompts, max_tokens=6, temperature=0)
    free = generate(with_overrides(llama, "tokenizer.eos_token_ids=[]"), **options)
    assert [len(row) for row in free.tokens] == [6, 6, 6]
    first, later = free.tokens[0][0], free.tokens[1][3]  # (row 0 ends at its first token)
    assert first not in free.tokens[1][:3] + free.tokens[2] and later not in free.tokens[2]
    config = with_overrides(llama, f"tokenizer.eos_token_ids=[{first}, {later}]")
    out = generate(config, **options)
    assert out.tokens == (free.tokens[0][:1], free.tokens[1][:4], free.tokens[2])
    tokenizer = HFTokenizer(str(llama.config.parent / "tokenizer.json"))
    assert out.text == tuple(tokenizer.decode(list(row)) for row in out.tokens)


def test_a_prompt_the_tokenizer_keeps_nothing_of(llama, tmp_path):
    table = json.loads((llama.config.parent / "tokenizer.json").read_text())
    table["normalizer"] = {"type": "Strip", "strip_left": True, "strip_right": True}
    table["post_processor"] = None  # (no BOS: a blank prompt is no token at all)
    (tmp_path / "strip.json").write_text(json.dumps(table))
    config = with_overrides(llama, f"tokenizer.path={tmp_path / 'strip.json'}")
    with pytest.raises(
        GenerationError, match=r"prompt 2 of 2: the prompt ' \\t ' is no token at all"
    ):
        generate(config, checkpoint=llama.checkpoint, prompt=["a", " \t "], max_tokens=2)


def test_text_of_any_script_in_one_batch_gives_what_each_gives_alone(llama):
    prompts = ["\x00", "\U0001f600 e\u0301 \u05e9\u05dc\u05d5\u05dd"]  # (NUL, emoji, RTL)
    options = dict(checkpoint=llama.checkpoint, max_tokens=3, temperature=0)
    together = generate(llama.config, prompt=prompts, **options)
    alone = generate(llama.config, prompt=prompts[0], **options)  # (the left-padded row)
    assert (alone.tokens, alone.text) == (together.tokens[0], together.text[0])

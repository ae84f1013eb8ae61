"""generate() through an ``hf`` tokenizer (the tiny imported Llama): the EOS and pad ids of the
config's tokenizer section, rows that end at different EOS ids, prompts the tokenizer keeps
nothing of, and text of any script in one left-padded batch."""

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

import nnx_plugins
from nnx_plugins import ConfigError, GenerationError, generate
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


# --- hostile input: a broken checkpoint, other models, configs that are not the import's ------


@pytest.mark.parametrize("options", [{"temperature": 0}, {"temperature": 1.0, "top_k": 3}])
def test_a_checkpoint_whose_logits_are_not_finite_is_refused(llama, tmp_path, options):
    """A NaN in the final norm made every new token id 0, printed nothing, and exited 0."""
    model = nnx_plugins.load(llama.checkpoint)
    model.norm.scale.value = jnp.full_like(model.norm.scale.value, jnp.nan)
    nan = nnx_plugins.save(model, tmp_path / "nan")
    with pytest.raises(
        GenerationError,
        match=r"the model's outputs \(logits\) are not finite \(NaN or infinite\) at new token 1 "
        rf"of prompt 1 of 2 \(and 1 other prompt\): .* The weights of the checkpoint {nan} hold "
        r"NaN or infinite values, .*: check the checkpoint",
    ):
        generate(
            llama.config, checkpoint=nan, prompt=["Hello", "Hi there"], max_tokens=5, **options
        )


def test_numpy_integer_options_are_python_integers(llama):
    """np.uint8(3) raised a bare OverflowError in the memory estimate."""
    options = dict(checkpoint=llama.checkpoint, prompt="Hi", temperature=0)
    plain = generate(llama.config, **options, max_tokens=3, top_k=2, seed=1)
    for kind in (np.uint8, np.int16, np.int32):
        out = generate(llama.config, **options, max_tokens=kind(3), top_k=kind(2), seed=kind(1))
        assert out.tokens == plain.tokens


def test_a_model_of_another_task_is_refused_before_the_checkpoint_is_read(tmp_path):
    """An image classifier: 'the checkpoint records no text vocabulary', and with a tokenizer
    given a traceback of the classifier refusing token ids."""
    vit = nnx_plugins.import_hf(FIXTURES / "vit", tmp_path / "vit").config
    tokenizer = FIXTURES / "llama" / "tokenizer.json"
    given = nnx_plugins.load_config(vit, overrides=["tokenizer.type=hf", f"tokenizer.path={tokenizer}"])  # fmt: skip
    for config, checkpoint in ((vit, vit.parent / "checkpoint"), (given, tmp_path / "nowhere")):
        with pytest.raises(
            GenerationError,
            match=r"the model is an ImageClassifier \(task classification\): generate needs a "
            r"causal language model, .* Run this model with nnx predict",
        ):
            generate(config, checkpoint=checkpoint, prompt="hello", max_tokens=2)


def without_tokenizer(llama, folder):
    """The import's config.yaml, its tokenizer: section left out."""
    lines = (llama.config.parent / "config.yaml").read_text().splitlines(keepends=True)
    start = lines.index("tokenizer:\n")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    (folder / "config.yaml").write_text("".join(lines[:start] + lines[end:]))
    return folder / "config.yaml"


def test_an_imported_checkpoint_needs_the_configs_tokenizer_section(llama, tmp_path):
    """It said 'it was not trained on data of type text': true, and no help."""
    config = without_tokenizer(llama, tmp_path)
    with pytest.raises(
        GenerationError,
        match=rf"{config}: tokenizer: the checkpoint {llama.checkpoint} was imported \(from "
        r"LlamaForCausalLM\) by nnx import hf, whose token ids are its tokenizer's, and the config has "
        r"no tokenizer: section: give the config.yaml that nnx import hf wrote beside the "
        r"checkpoint, whose tokenizer: section names the model's tokenizer",
    ):
        generate(config, checkpoint=llama.checkpoint, prompt="hi", max_tokens=2)


@pytest.mark.parametrize("pad", ["-5", "320", "99999999999"])
def test_a_pad_id_outside_the_model_is_located_and_its_range_named(llama, tmp_path, pad):
    """-5 was told to be 'set to a token id below that' (320), without a location."""
    text = (llama.config.parent / "config.yaml").read_text()
    assert "  pad_token_id: 2\n" in text
    config = tmp_path / "config.yaml"
    text = text.replace("path: tokenizer.json", f"path: {llama.config.parent / 'tokenizer.json'}")
    config.write_text(text.replace("  pad_token_id: 2\n", f"  pad_token_id: {pad}\n"))
    shown = f"{int(pad):,}"
    with pytest.raises(
        GenerationError,
        match=rf"config\.yaml:\d+:\d+: tokenizer\.pad_token_id: the tokenizer's pad_token_id "
        rf"{shown} is not a token of the model \(0 to 319\), and the 2 prompts are padded with it: set "
        r"tokenizer\.pad_token_id to a token id from 0 to 319",
    ):
        generate(config, checkpoint=llama.checkpoint, prompt=["a", "bc"], max_tokens=2)


def test_transformers_config_json_is_named_as_such(llama):
    """26 lines of "unknown section 'architectures'", one per key of config.json."""
    given = llama.config.parent / "config.json"
    with pytest.raises(
        ConfigError,
        match=rf"1 problem in {given}:\n  {given}:1:1: <root>: it is transformers' config\.json "
        rf"\(LlamaForCausalLM\), not an nnx config: give {llama.config}, the config that nnx "
        r"import hf wrote beside it\.$",
    ):
        generate(given, checkpoint=llama.checkpoint, prompt="hi", max_tokens=2)

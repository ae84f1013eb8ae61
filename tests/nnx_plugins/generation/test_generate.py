"""generate(): a trained character-level GPT continues the text it learned, from its config and
checkpoint; the vocabulary comes from the checkpoint; every bad input is a located error."""

import jax.numpy as jnp
import numpy as np
import pytest
import yaml

import nnx_plugins
from nnx_plugins import (
    CheckpointError,
    ConfigError,
    DataError,
    Generation,
    GenerationError,
    generate,
    train,
)
from nnx_plugins.generation._generate import MAX_PROMPTS
from nnx_plugins.training._loop import build_model

from .gpt import gpt_config

TEXT = "the cat sat on the mat. " * 300
CHARACTERS = "".join(sorted(set(TEXT)))  # ' .acehmnost'
SEQ = 16


def write_run_config(folder, text_name="cat.txt"):
    model = gpt_config(vocab=len(CHARACTERS), length=SEQ)
    model["layers"][0]["embedding_init"] = {"type": "normal", "stddev": 0.02}
    model["layers"][1]["embedding_init"] = {"type": "normal", "stddev": 0.02}
    config = {
        "model": model,
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": text_name, "level": "characters", "seq_len": SEQ},
        "optimizer": {"type": "adam", "learning_rate": 0.01},
        "train": {"steps": 150, "batch_size": 16, "eval_interval": 150},
    }
    path = folder / "gpt.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt")
    (folder / "cat.txt").write_text(TEXT, encoding="utf-8")
    config = write_run_config(folder)
    result = train(config, run_dir=folder / "run", progress=False)
    assert result.metrics["accuracy"] > 0.9  # the pattern is learned
    return config, folder / "run" / "checkpoints", result


def test_a_trained_model_continues_the_text_it_learned(run):
    config, checkpoint, result = run
    out = generate(config, checkpoint=checkpoint, prompt="the cat s", max_tokens=6, temperature=0)
    assert isinstance(out, Generation)
    assert out.prompt == "the cat s" and out.text == "at on "
    assert len(out.tokens) == 6 and all(0 <= t < len(CHARACTERS) for t in out.tokens)
    assert out.step == 150 and out.checkpoint == result.checkpoint and out.seconds > 0
    filled = generate(config, checkpoint=checkpoint, prompt="the cat", temperature=0)
    assert filled.text == "the cat sat on the mat. "[7:SEQ]  # as many as the model holds


def test_a_prompt_that_fills_the_model(run):
    config, checkpoint, _ = run
    with pytest.raises(
        GenerationError,
        match=r"a prompt of 16 tokens leaves no room to generate: the model's maximum length is "
        r"16 .* Shorten the prompt to at most 15 tokens\.",
    ):
        generate(config, checkpoint=checkpoint, prompt="the cat sat on t")


def test_sampling_is_seeded_and_stays_in_the_vocabulary(run):
    config, checkpoint, _ = run
    options = dict(checkpoint=checkpoint, prompt="t", max_tokens=SEQ - 1, temperature=2.0)
    first = generate(config, **options, seed=1)
    assert generate(config, **options, seed=1).text == first.text
    assert set(first.text) <= set(CHARACTERS) and len(first.text) == SEQ - 1
    assert (
        generate(config, **options, top_k=1).text
        == generate(config, **{**options, "temperature": 0}).text
    )


def test_the_public_names():
    assert nnx_plugins.generate is generate and nnx_plugins.Generation is Generation
    assert issubclass(GenerationError, nnx_plugins.NnxError)
    assert nnx_plugins.decode.__name__ == "decode"


# --- bad input ---------------------------------------------------------------------------------


def test_a_character_outside_the_vocabulary_is_named_with_its_position(run):
    config, checkpoint, _ = run
    with pytest.raises(
        GenerationError,
        match=r"the prompt 'the dog': the character 'd' \(position 4\) is not in the vocabulary "
        r"of 11 characters",
    ):
        generate(config, checkpoint=checkpoint, prompt="the dog")


def test_an_empty_prompt(run):
    config, checkpoint, _ = run
    with pytest.raises(GenerationError, match="the prompt must be non-empty text, got ''"):
        generate(config, checkpoint=checkpoint, prompt="")


def test_max_tokens_past_the_models_maximum_length(run):
    config, checkpoint, _ = run
    with pytest.raises(
        GenerationError,
        match=r"a prompt of 3 tokens and max_tokens=14 make 17 tokens, past the model's maximum "
        r"length of 16 \(the max_length of its PositionEmbed at model.layers\[1\]\)",
    ):
        generate(config, checkpoint=checkpoint, prompt="the", max_tokens=14)


def test_a_vocabulary_that_differs_between_the_checkpoint_and_the_data(run, tmp_path):
    config, checkpoint, _ = run
    (tmp_path / "dog.txt").write_text("the dog sat on the log. " * 300, encoding="utf-8")
    other = nnx_plugins.load_config(config, overrides=[f"data.path={tmp_path / 'dog.txt'}"])
    with pytest.raises(
        GenerationError,
        match=r"step_00000150 does not fit the config's data: <override data\.path=.*>:1:\d+: "
        r"data.path: the checkpoint's character vocabulary \(11 characters\) differs from this "
        r"text's \(12\): new characters 'dgl', missing characters 'cm'",
    ):
        generate(other, checkpoint=checkpoint, prompt="the")


def test_a_checkpoint_without_a_text_vocabulary(run, tmp_path):
    config, _, _ = run
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    where = nnx_plugins.save(model, tmp_path / "plain", step=1)
    with pytest.raises(GenerationError, match="records no text vocabulary"):
        generate(config, checkpoint=where, prompt="the")


def test_missing_checkpoint_and_data_and_a_bad_config(run, tmp_path):
    config, checkpoint, _ = run
    with pytest.raises(CheckpointError, match="no such directory"):
        generate(config, checkpoint=tmp_path / "nowhere", prompt="the")
    gone = nnx_plugins.load_config(config, overrides=[f"data.path={tmp_path / 'gone.txt'}"])
    with pytest.raises(DataError, match=r"data.path: .*gone.txt"):
        generate(gone, checkpoint=checkpoint, prompt="the")
    with pytest.raises(ConfigError, match="max_tokens"):  # (a config key that does not exist)
        generate(
            nnx_plugins.load_config(config, overrides=["train.max_tokens=3"]),
            checkpoint=checkpoint,
            prompt="the",
        )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_tokens": 0}, "max_tokens must be a whole number >= 1, got 0"),
        ({"temperature": -0.5}, "temperature must be a finite number >= 0"),
        ({"temperature": 10**400}, "temperature must be a finite number >= 0"),
        ({"top_k": 0}, "top_k must be a whole number >= 1 or None"),
        (
            {"seed": 2**63},
            r"seed must be a whole number from 0 to 2\*\*63-1 \(as train.seed\), "
            r"got 9223372036854775808\.",
        ),
        ({"seed": 2**64 + 5}, r"seed must be a whole number from 0 to 2\*\*63-1"),
    ],
)
def test_bad_arguments(run, options, match):
    config, checkpoint, _ = run
    with pytest.raises(GenerationError, match=match):
        generate(config, checkpoint=checkpoint, prompt="the", **options)
    with pytest.raises(GenerationError, match=match):  # (refused before anything is read)
        generate(config, checkpoint="/nonexistent", prompt="the", **options)


# --- text that cannot be encoded, text that is not finished ------------------------------------


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        (
            "caf\udce9",  # what Python makes of the argument $'caf\xe9' (Latin-1 bytes)
            r"the prompt holds the byte 0xe9 \(position 3\), which is not UTF-8: the terminal or "
            r"the shell passed text in another encoding \(Latin-1\?\)\. Give the prompt as "
            r"UTF-8 text\.",
        ),
        ("ab\ud800c", r"the prompt holds U\+D800 \(position 2\), a lone surrogate"),
        (b"the", r"the prompt must be non-empty text, got bytes b'the'"),
        (
            "t" * 10_000 + "z",
            r"the prompt 't{35}\.\.\.: "
            r"the character 'z' \(position 10000\)",
        ),
    ],
)
def test_a_prompt_that_is_not_text_of_the_vocabulary(run, prompt, match):
    config, checkpoint, _ = run
    with pytest.raises(GenerationError, match=match) as error:
        generate(config, checkpoint=checkpoint, prompt=prompt)
    assert len(str(error.value)) < 400  # (a long prompt is not quoted whole)


def byte_model_run(folder, continuation: bytes, prompt: bytes = b"ab"):
    """A byte-level model and its checkpoint whose greedy continuation of ``prompt`` is
    ``continuation``: the logits at position t are a row of the head chosen by a one-hot
    position embedding (no training)."""
    length = len(prompt) + len(continuation)
    (folder / "bytes.txt").write_bytes(b"any text at all, " * 40)
    config = {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Embed", "num_embeddings": 256, "features": length},
                {"type": "PositionEmbed", "max_length": length, "features": length},
                {"type": "Linear", "in_features": length, "out_features": 256},
            ],
        },
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": "bytes.txt", "level": "bytes", "seq_len": 8},
    }
    path = folder / "bytes.yaml"
    path.write_text(yaml.safe_dump(config))
    model = build_model(str(path))
    embed, position, head = model.layers
    embed.embedding.value = jnp.zeros_like(embed.embedding.value)
    position.embedding.value = jnp.eye(length)
    kernel = np.zeros((length, 256), np.float32)
    for t, byte in enumerate(continuation):
        kernel[len(prompt) - 1 + t, byte] = 10.0  # the token after position t
    head.kernel.value = jnp.asarray(kernel)
    head.bias.value = jnp.zeros(256)
    data = {"level": "bytes", "vocabulary": None}
    nnx_plugins.save(model, folder / "ckpt", step=1, run={"data": data})
    return path, folder / "ckpt"


def test_bytes_of_an_unfinished_character_are_held_back(tmp_path):
    """``--prompt "import "`` printed U+FFFD: max_tokens cut a character in two. The bytes
    of an unfinished last character are held back, so the text is always valid."""
    config, checkpoint = byte_model_run(tmp_path, "aé".encode() + "€".encode()[:2])
    out = generate(config, checkpoint=checkpoint, prompt="ab", temperature=0)
    assert out.tokens == (0x61, 0xC3, 0xA9, 0xE2, 0x82)
    assert out.text == "aé" and out.unfinished == b"\xe2\x82"
    done = generate(config, checkpoint=checkpoint, prompt="ab", temperature=0, max_tokens=3)
    assert done.text == "aé" and done.unfinished == b""


def test_bytes_that_form_no_character_become_the_replacement_character(tmp_path):
    config, checkpoint = byte_model_run(tmp_path, b"\xe2a\xffb")
    out = generate(config, checkpoint=checkpoint, prompt="ab", temperature=0)
    assert out.text == "\ufffda\ufffdb" and out.unfinished == b""
    assert out.text.encode("utf-8").decode("utf-8") == out.text


# --- several prompts (a model without a mask: one batch per prompt length) ----------------


def test_prompts_of_different_lengths_give_what_each_gives_alone(run):
    config, checkpoint, _ = run
    prompts = ["the cat s", "the m", "the cat sat"]
    together = generate(config, checkpoint=checkpoint, prompt=prompts, max_tokens=4, temperature=0)
    assert together.prompt == tuple(prompts) and together.unfinished == (b"", b"", b"")
    for index, prompt in enumerate(prompts):
        alone = generate(config, checkpoint=checkpoint, prompt=prompt, max_tokens=4, temperature=0)
        assert together.tokens[index] == alone.tokens and together.text[index] == alone.text
    assert together.text[0] == "at o" and together.text[2] == " on "  # (as it learned)


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        ([], r"give from 1 to 4,096 prompts, got 0"),
        (["t"] * (MAX_PROMPTS + 1), r"give from 1 to 4,096 prompts, got 4,097"),
        (["the", "", "t"], r"prompt 2 of 3: the prompt must be non-empty text, got ''"),
        (["the", "dog"], r"prompt 2 of 2: the prompt 'dog': the character 'd' \(position 0\)"),
        (("the", b"cat"), r"prompt 2 of 2: the prompt must be non-empty text, got bytes"),
    ],
)
def test_a_bad_list_of_prompts(run, prompt, match):
    config, checkpoint, _ = run
    with pytest.raises(GenerationError, match=match):
        generate(config, checkpoint=checkpoint, prompt=prompt, max_tokens=2)


# --- checks before anything is allocated; logits that are not finite --------------------------


def unlimited_byte_model(folder):
    """A byte-level model without a maximum length (no PositionEmbed) nor a mask, and its
    checkpoint: several prompts are decoded one batch per prompt length."""
    (folder / "bytes.txt").write_bytes(b"any text at all, " * 40)
    attention = {"type": "MultiHeadAttention", "num_heads": 2, "in_features": 8}
    config = {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Embed", "num_embeddings": 256, "features": 8},
                {**attention, "is_causal": True, "decode": False},
                {"type": "Linear", "in_features": 8, "out_features": 256},
            ],
        },
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": "bytes.txt", "level": "bytes", "seq_len": 8},
    }
    path = folder / "unlimited.yaml"
    path.write_text(yaml.safe_dump(config))
    data = {"level": "bytes", "vocabulary": None}
    nnx_plugins.save(build_model(str(path)), folder / "ckpt", step=1, run={"data": data})
    return path, folder / "ckpt"


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        (["ab"] * 100, r"after 100 prompts of 2 needs at least"),
        (["ab", "abc"] * 50, r"after 50 prompts of \d needs at least .* and the new tokens of 50 other prompts\)"),
    ],
)  # fmt: skip
def test_many_prompts_past_the_memory_are_refused_before_anything_is_allocated(
    tmp_path, prompt, match
):
    """The batch's tokens (100 x 10**9) were allocated before the estimate: a MemoryError."""
    config, checkpoint = unlimited_byte_model(tmp_path)
    with pytest.raises(GenerationError, match=match + r".* Ask for at most [\d,]+ new tokens\."):
        generate(config, checkpoint=checkpoint, prompt=prompt, max_tokens=10**9)


def test_logits_that_are_not_finite_are_refused_naming_the_prompt_and_token(tmp_path):
    """Every token after them was id 0 and the command exited 0."""
    config, checkpoint = byte_model_run(tmp_path, b"cdef")
    model = nnx_plugins.load(checkpoint)
    position = model.layers[1].embedding
    position.value = position.value.at[2].set(jnp.nan)  # (the logits of the second new token)
    data = {"level": "bytes", "vocabulary": None}
    nan = nnx_plugins.save(model, tmp_path / "nan", step=1, run={"data": data})
    for prompt, where in (("ab", "the prompt"), (["ab", "cd"], r"prompt 1 of 2 \(and 1 other prompt\)")):  # fmt: skip
        with pytest.raises(
            GenerationError,
            match=rf"the model's outputs \(logits\) are not finite \(NaN or infinite\) at new "
            rf"token 2 of {where}: no token can be drawn from them\. The weights of the "
            rf"checkpoint {nan} hold NaN or infinite values",
        ):
            generate(config, checkpoint=nan, prompt=prompt, temperature=0)
    assert generate(config, checkpoint=nan, prompt="ab", max_tokens=1, temperature=0).text == "c"

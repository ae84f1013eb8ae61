"""Batched generation of the imported causal LMs equals transformers' greedy generate: the
prompts of the fixtures (three lengths, one left-padded batch), token for token, each row
stopping at the EOS of generation_config.json; from Python and from the command."""

import numpy as np
import pytest

import nnx_plugins
from nnx_plugins import GenerationError, generate
from nnx_plugins.cli._main import main
from nnx_plugins.generation._decode import decode, decode_by_recomputation
from nnx_plugins.training.data._tokenizers import HFTokenizer

from .conftest import CAUSAL, reference


def expected(family: str) -> tuple[list[str], list[tuple[int, ...]], int]:
    """transformers' prompts, each row's new tokens (its EOS included) and max_new_tokens."""
    ref = reference(family)
    rows = [
        tuple(int(t) for t in row[:length])
        for row, length in zip(ref["generate_tokens"], ref["generate_lengths"])
    ]
    return [str(p) for p in ref["generate_prompts"]], rows, int(ref["generate_max_new_tokens"])


@pytest.mark.parametrize("family", CAUSAL)
def test_batched_greedy_generation_equals_transformers(imported, family):
    source = imported(family)
    prompts, rows, new = expected(family)
    out = generate(
        source / "config.yaml",
        checkpoint=source / "checkpoint",
        prompt=prompts,
        max_tokens=new,
        temperature=0,
    )
    assert out.tokens == tuple(rows)
    assert out.prompt == tuple(prompts) and out.unfinished == (b"", b"", b"")
    assert any(len(row) < new for row in rows)  # (the fixtures stop a row early at its EOS)
    tokenizer = HFTokenizer(str(source / "tokenizer.json"))
    assert out.text == tuple(tokenizer.decode(list(row)) for row in rows)


def test_the_prompt_ids_are_transformers_left_padded_batch(imported):
    """What generate feeds the model: the fixture's padded ids where its mask is 1."""
    source, ref = imported("llama"), reference("llama")
    tokenizer = HFTokenizer(str(source / "tokenizer.json"))
    for prompt, ids, mask in zip(
        ref["generate_prompts"], ref["generate_prompt_ids"], ref["generate_attention_mask"]
    ):
        assert tokenizer.encode(str(prompt)).tolist() == ids[mask.astype(bool)].tolist()


def test_one_prompt_alone_gives_what_it_gives_in_the_batch(imported):
    source = imported("qwen2")
    prompts, rows, new = expected("qwen2")
    alone = generate(
        source / "config.yaml",
        checkpoint=source / "checkpoint",
        prompt=prompts[2],
        max_tokens=new,
        temperature=0,
    )
    assert alone.tokens == rows[2] and isinstance(alone.text, str)


def test_the_chunked_prefill_equals_recomputing_every_step(imported):
    """The prompt as one chunk then the cache (decode) against the whole sequence run again
    for every token (decode_by_recomputation): equal greedy tokens."""
    model = nnx_plugins.load(imported("gpt2") / "checkpoint")
    ids = reference("gpt2")["input_ids"]
    cached = decode(model, ids, max_tokens=6, temperature=0)
    again = decode_by_recomputation(model, ids, max_tokens=6, temperature=0)
    np.testing.assert_array_equal(cached, again)


def test_a_batch_past_the_models_positions_is_refused(imported):
    source = imported("llama")  # (64 positions)
    prompts, _, _ = expected("llama")
    with pytest.raises(GenerationError, match=r"past the model's maximum length of 64 \(the "):
        generate(
            source / "config.yaml",
            checkpoint=source / "checkpoint",
            prompt=prompts,
            max_tokens=60,
        )


def test_token_ids_past_the_models_embeddings_are_refused(imported, tmp_path):
    """A pad id or a tokenizer that is not the model's: the lookup past the embedding table
    would be read silently (rows of token 0 came out)."""
    import json

    import nnx_plugins

    source = imported("llama")  # (320 tokens)
    prompts, _, _ = expected("llama")
    config = nnx_plugins.load_config(
        source / "config.yaml", overrides=["tokenizer.pad_token_id=320"]
    )
    with pytest.raises(
        GenerationError, match=r"pad_token_id 320 is not a token of the model \(0 to 319\)"
    ):
        generate(config, checkpoint=source / "checkpoint", prompt=prompts, max_tokens=2)
    table = json.loads((source / "tokenizer.json").read_text())
    table["added_tokens"].append(
        {
            "id": 320,
            "content": "XYZ",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": False,
        }
    )
    (tmp_path / "bigger.json").write_text(json.dumps(table))
    config = nnx_plugins.load_config(
        source / "config.yaml", overrides=[f"tokenizer.path={tmp_path / 'bigger.json'}"]
    )
    with pytest.raises(
        GenerationError,
        match=r"prompt 2 of 2 encodes to the token id 320, but the model embeds 320 tokens "
        r"\(0 to 319\): the config's tokenizer is not the model's",
    ):
        generate(config, checkpoint=source / "checkpoint", prompt=["a", "aXYZ"], max_tokens=2)


def test_a_malformed_tokenizer_file_is_named_at_tokenizer_path_not_at_the_prompt(
    imported, tmp_path
):
    source = imported("llama")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    config = nnx_plugins.load_config(source / "config.yaml", overrides=[f"tokenizer.path={bad}"])
    with pytest.raises(
        GenerationError,
        match=rf"tokenizer\.path: {bad}: not a tokenizer\.json the tokenizers library can read "
        r"\(it stops at line 1, column 2",
    ) as raised:
        generate(config, checkpoint=source / "checkpoint", prompt="The fox", max_tokens=2)
    assert "prompt" not in str(raised.value)


def test_the_command_prints_each_continuation(imported, capsys):
    source = imported("mistral")
    prompts, rows, new = expected("mistral")
    argv = ["generate", str(source / "config.yaml"), "--checkpoint", str(source / "checkpoint")]
    for prompt in prompts:
        argv += ["--prompt", prompt]
    assert main([*argv, "--max-tokens", str(new), "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    tokenizer = HFTokenizer(str(source / "tokenizer.json"))
    texts = [prompt + tokenizer.decode(list(row)) for prompt, row in zip(prompts, rows)]
    assert out == "\n".join(text + "\n" for text in texts)
    counts = ", ".join(str(len(row)) for row in rows)
    assert (
        f"nnx: {sum(map(len, rows))} tokens ({counts} per prompt) from {source / 'checkpoint'} in "
        in err
    )

"""Padding, masks and rows that end at an EOS: a CausalLM decodes a left-padded row as it
decodes it alone; a mask that fits neither the prompt nor the model is refused. (Lists of
prompts through generate: test_generate.py.)"""

import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import CausalLM, Embed, RMSNorm, SelfAttention
from nnx_plugins import GenerationError
from nnx_plugins.generation._decode import decode
from nnx_plugins.generation._padding import after_eos, left_padded, takes_mask

from .gpt import gpt


def tiny_lm() -> CausalLM:
    rngs = nnx.Rngs(0)
    attention = SelfAttention(8, 2, is_causal=True, rngs=rngs)
    return CausalLM(Embed(11, 8, rngs=rngs), attention, RMSNorm(8, rngs=rngs), max_length=16)


def test_which_models_take_a_mask():
    assert takes_mask(tiny_lm()) and not takes_mask(gpt())


@pytest.mark.parametrize(
    ("model", "mask", "match"),
    [
        (tiny_lm, np.ones((2, 3)), r"the mask must be booleans \(or 0/1\) of the prompt's shape "),
        (tiny_lm, np.ones((2, 4), np.float32), r"got float32\[2, 4\]"),
        (
            tiny_lm,
            [[1, 1, 1, 0], [1, 1, 1, 1]],
            r"mark the last token of every row as real \(rows "
            r"\[0\] end in padding\): pad prompts on the left",
        ),
        (
            gpt,
            [[0, 1, 1, 1], [1, 1, 1, 1]],
            r"Sequential takes no padding mask .* decode them apart",
        ),
    ],
)
def test_a_mask_that_does_not_fit(model, mask, match):
    with pytest.raises(GenerationError, match=match):
        decode(model(), np.ones((2, 4), np.int32), max_tokens=2, mask=mask)


def test_a_full_mask_for_a_model_without_one_is_no_mask():
    model, prompt = gpt(), np.array([[1, 2, 3]])
    with_mask = decode(model, prompt, max_tokens=3, temperature=0, mask=np.ones((1, 3), bool))
    np.testing.assert_array_equal(with_mask, decode(model, prompt, max_tokens=3, temperature=0))


def test_a_padded_row_decodes_as_it_does_alone():
    """The CausalLM path: a row padded on the left, its mask given, gives the tokens it gives
    in a batch of its own (its positions numbered from its first real token)."""
    model = tiny_lm()
    short, long = np.array([3, 4]), np.array([5, 6, 7, 8])
    ids, mask = left_padded([short, long], pad_token_id=0)
    both = np.asarray(decode(model, ids, mask=mask, max_tokens=5, temperature=0))
    alone = np.asarray(decode(model, short[None], max_tokens=5, temperature=0))
    np.testing.assert_array_equal(both[0], alone[0])


def test_rows_end_at_any_of_their_eos_tokens():
    tokens = np.array([[5, 6, 7, 6], [9, 9, 9, 9], [7, 5, 5, 5]])
    cut, lengths = after_eos(tokens, eos_token_ids=(6, 7), pad_token_id=1)
    assert cut.tolist() == [[5, 6, 1, 1], [9, 9, 9, 9], [7, 1, 1, 1]] and lengths == [2, 4, 1]
    same, full = after_eos(tokens, eos_token_ids=(), pad_token_id=1)
    assert same.tolist() == tokens.tolist() and full == [4, 4, 4]

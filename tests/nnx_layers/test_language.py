"""CausalLM, MaskedLM, ImageClassifier: positions and padding, decoding against the full
pass, tied heads, logical axis names, errors."""

import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import (
    MLP,
    CausalLM,
    Conv,
    Embed,
    GatedMLP,
    ImageClassifier,
    LayerNorm,
    Linear,
    MaskedLM,
    Repeat,
    RMSNorm,
    RoPE,
    SelfAttention,
    TransformerBlock,
    default_positions,
)


def _lm(*, head=True, position_embed=False, max_length=None):
    rngs = nnx.Rngs(0)

    def block(rngs):
        return TransformerBlock(
            SelfAttention(16, 4, num_kv_heads=2, rope=RoPE(), is_causal=True, rngs=rngs),
            GatedMLP(16, 32, rngs=rngs),
            RMSNorm(16, rngs=rngs),
            RMSNorm(16, rngs=rngs),
        )

    return CausalLM(
        Embed(40, 16, rngs=rngs),
        Repeat(block, 2, rngs=rngs),
        RMSNorm(16, rngs=rngs),
        Linear(16, 40, use_bias=False, rngs=rngs) if head else None,
        position_embed=Embed(12, 16, rngs=rngs) if position_embed else None,
        max_length=max_length,
    )


def test_default_positions_count_real_tokens_as_transformers_does():
    mask = jnp.array([[0, 0, 1, 1], [1, 1, 1, 1]], bool)
    assert default_positions(mask, (2, 4)).tolist() == [[1, 1, 0, 1], [0, 1, 2, 3]]
    assert default_positions(None, (1, 3)).tolist() == [[0, 1, 2]]


def test_a_left_padded_row_computes_what_it_computes_alone():
    model = _lm()
    alone = model(jnp.array([[5, 6, 7]]))
    padded = model(jnp.array([[0, 0, 5, 6, 7]]), mask=jnp.array([[0, 0, 1, 1, 1]], bool))
    np.testing.assert_allclose(padded[:, 2:], alone, atol=1e-5)


@pytest.mark.parametrize("learned_positions", [False, True])
def test_decoding_a_left_padded_batch_equals_the_full_pass(learned_positions):
    model = _lm(position_embed=learned_positions, head=not learned_positions)
    tokens = jnp.array([[0, 0, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16]])
    mask = jnp.array([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8], bool)
    full = model(tokens, mask=mask)
    model.set_attributes(decode=True)
    model.init_cache((2, 10, 16))
    pieces = [model(tokens[:, :5], mask=mask[:, :5])]
    pieces += [model(tokens[:, t : t + 1]) for t in range(5, 8)]
    decoded = jnp.concatenate(pieces, axis=1)
    np.testing.assert_allclose(decoded[mask], full[mask], atol=1e-4)
    assert model.next_position.value.tolist() == [6, 8]


def test_the_tied_head_is_the_embedding_transposed():
    model = _lm(head=False)
    x = model.norm(model.blocks(model.embed(jnp.array([[1, 2]])), positions=jnp.array([[0, 1]])))
    np.testing.assert_allclose(
        model(jnp.array([[1, 2]])), x @ model.embed.embedding.value.T, atol=1e-5
    )


def test_parameters_get_the_logical_names_of_their_role():
    model = _lm(position_embed=True)
    assert model.embed.embedding.sharding_names == ("vocab", "embed")
    assert model.position_embed.embedding.sharding_names == (None, "embed")
    assert model.head.kernel.sharding_names == ("embed", "vocab")
    assert model.norm.scale.sharding_names == ("embed",)
    named = Embed(5, 4, embedding_metadata={"sharding_names": ("a", "b")}, rngs=nnx.Rngs(0))
    kept = CausalLM(named, _lm().blocks, RMSNorm(16, rngs=nnx.Rngs(0)))
    assert kept.embed.embedding.sharding_names == ("a", "b")


def test_causal_lm_errors():
    model = _lm(max_length=4)
    with pytest.raises(
        ValueError, match="expects token ids of shape \\(batch, length\\), integers"
    ):
        model(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="takes at most 4 positions \\(max_length\\) but got 5"):
        model(jnp.ones((1, 5), int))
    with pytest.raises(ValueError, match="mask must have the shape of the tokens"):
        model(jnp.ones((1, 3), int), mask=jnp.ones((1, 2), bool))
    with pytest.raises(ValueError, match="more than the model's max_length \\(4\\)"):
        model.init_cache((1, 6, 16))
    model.decode = True
    with pytest.raises(ValueError, match="its cache is not initialized"):
        model(jnp.ones((1, 1), int))
    with pytest.raises(ValueError, match="head maps 16 -> 30 features but the embedding has 40"):
        CausalLM(
            Embed(40, 16, rngs=nnx.Rngs(0)),
            model.blocks,
            model.norm,
            Linear(16, 30, rngs=nnx.Rngs(0)),
        )
    with pytest.raises(ValueError, match="no layer of the blocks .* decodes from a cache"):
        CausalLM(
            Embed(40, 16, rngs=nnx.Rngs(0)), MLP(16, 8, rngs=nnx.Rngs(0)), model.norm
        ).init_cache((1, 2, 16))


def _bert():
    rngs = nnx.Rngs(0)
    block = TransformerBlock(
        SelfAttention(8, 2, qkv_bias=True, out_bias=True, rngs=rngs),
        MLP(8, 16, rngs=rngs),
        LayerNorm(8, rngs=rngs),
        LayerNorm(8, rngs=rngs),
        post_norm=True,
    )
    return MaskedLM(
        Embed(30, 8, rngs=rngs),
        Embed(6, 8, rngs=rngs),
        block,
        Linear(8, 8, rngs=rngs),
        type_embed=Embed(2, 8, rngs=rngs),
        embed_norm=LayerNorm(8, rngs=rngs),
    )


def test_masked_lm_ignores_padding_and_adds_its_bias():
    model = _bert()
    model.bias.value = jnp.arange(30.0)
    tokens = jnp.array([[3, 4, 5, 0]])
    padded = model(tokens, mask=jnp.array([[1, 1, 1, 0]], bool))
    np.testing.assert_allclose(padded[:, :3], model(tokens[:, :3]), atol=1e-5)
    types = model(tokens, token_types=jnp.array([[0, 0, 1, 1]]))
    assert not np.allclose(types, model(tokens))
    with pytest.raises(ValueError, match="takes at most 6 positions"):
        model(jnp.ones((1, 7), int))


def test_image_classifier_reads_nhwc_patches():
    rngs = nnx.Rngs(0)
    block = TransformerBlock(
        SelfAttention(8, 2, rngs=rngs),
        MLP(8, 16, rngs=rngs),
        LayerNorm(8, rngs=rngs),
        LayerNorm(8, rngs=rngs),
    )
    model = ImageClassifier(
        Conv(3, 8, (4, 4), 4, padding="VALID", rngs=rngs),
        block,
        LayerNorm(8, rngs=rngs),
        Linear(8, 5, rngs=rngs),
        image_size=(8, 12),
        rngs=rngs,
    )
    assert model.position_embedding.shape == (2 * 3 + 1, 8)
    assert model(jnp.ones((2, 8, 12, 3))).shape == (2, 5)
    with pytest.raises(
        ValueError, match=r"takes images of shape \(batch, 8, 12, 3\) \(NHWC\), got \(2, 3, 8, 12\)"
    ):
        model(jnp.ones((2, 3, 8, 12)))
    with pytest.raises(ValueError, match="is not a multiple of the patch size"):
        ImageClassifier(
            Conv(3, 8, (4, 4), 4, rngs=rngs),
            block,
            LayerNorm(8, rngs=rngs),
            Linear(8, 5, rngs=rngs),
            image_size=10,
            rngs=rngs,
        )


def test_causal_lm_refuses_a_max_length_past_its_position_table():
    rngs = nnx.Rngs(0)
    parts = _lm(head=False)
    with pytest.raises(
        ValueError,
        match=r"CausalLM max_length=13 is more than its position_embed's num_embeddings \(12\): "
        r"positions past 11 have no row .* Pass max_length <= 12, or a position_embed with "
        r"num_embeddings=13\.",
    ):
        CausalLM(
            parts.embed,
            parts.blocks,
            parts.norm,
            position_embed=Embed(12, 16, rngs=rngs),
            max_length=13,
        )
    with pytest.raises(TypeError, match="CausalLM position_embed must be an Embed, got Linear"):
        CausalLM(parts.embed, parts.blocks, parts.norm, position_embed=Linear(12, 16, rngs=rngs))
    with pytest.raises(
        ValueError,
        match=r"CausalLM position_embed has 8 features but the token embed has 16: give the "
        r"position_embed features=16\.",
    ):
        CausalLM(parts.embed, parts.blocks, parts.norm, position_embed=Embed(12, 8, rngs=rngs))


def test_without_max_length_the_position_table_limits_the_length():
    model = _lm(head=False, position_embed=True)
    assert model.max_length is None
    assert model(jnp.ones((1, 12), int)).shape == (1, 12, 40)
    with pytest.raises(
        ValueError,
        match=r"CausalLM takes at most 12 positions \(position_embed\.num_embeddings\) but got "
        r"13 tokens per row",
    ):
        model(jnp.ones((1, 13), int))
    with pytest.raises(
        ValueError,
        match=r"CausalLM.init_cache: 13 positions is more than the model's "
        r"position_embed\.num_embeddings \(12\)",
    ):
        model.init_cache((1, 13, 16))


def test_a_max_length_past_the_position_table_is_refused_at_its_place_in_a_config():
    from nnx_plugins import ConfigError, build

    norm = {"type": "LayerNorm", "num_features": 8}
    config = {
        "type": "CausalLM",
        "embed": {"type": "Embed", "num_embeddings": 40, "features": 8},
        "blocks": {
            "type": "TransformerBlock",
            "attention": {"type": "SelfAttention", "in_features": 8, "num_heads": 2},
            "mlp": {"type": "MLP", "features": 8, "hidden": 16},
            "attention_norm": norm,
            "mlp_norm": norm,
        },
        "norm": norm,
        "position_embed": {"type": "Embed", "num_embeddings": 12, "features": 8},
        "max_length": 1000,
    }
    with pytest.raises(
        ConfigError,
        match=r"building CausalLM raised ValueError: CausalLM max_length=1000 is more than its "
        r"position_embed's num_embeddings \(12\)",
    ):
        build(config)


def test_image_classifier_refuses_a_parameter_dtype_that_cannot_be_trained():
    rngs = nnx.Rngs(0)
    with pytest.raises(
        ValueError,
        match=r"ImageClassifier param_dtype must be a floating dtype .* got int32\. Use a "
        r"floating dtype such as float32 or bfloat16\.",
    ):
        ImageClassifier(
            Conv(3, 8, (4, 4), 4, padding="VALID", rngs=rngs),
            MLP(8, 16, rngs=rngs),
            LayerNorm(8, rngs=rngs),
            Linear(8, 5, rngs=rngs),
            image_size=8,
            param_dtype=jnp.int32,
            rngs=rngs,
        )

"""SelfAttention, MLP, GatedMLP, TransformerBlock: numerics against plain formulas, the KV
cache against the full pass, LoRA adapters, sharding names, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import (
    MLP,
    GatedMLP,
    LayerNorm,
    LoRAParam,
    RMSNorm,
    RoPE,
    SelfAttention,
    TransformerBlock,
    gelu,
)
from nnx_layers._transformer import _project


def _x(*shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _plain_attention(layer, x, keep):
    """Attention written out: projections, repeated key/value heads, masked softmax."""
    b, t, _ = x.shape
    h, g, d = layer.num_heads, layer.kv_heads, layer.head_size
    q = (x @ layer.query.kernel.value).reshape(b, t, h, d)
    k = jnp.repeat((x @ layer.key.kernel.value).reshape(b, t, g, d), h // g, axis=2)
    v = jnp.repeat((x @ layer.value.kernel.value).reshape(b, t, g, d), h // g, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
    weights = jax.nn.softmax(jnp.where(keep, scores, -1e30), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, h * d) @ layer.out.kernel.value


def test_grouped_query_attention_equals_the_written_out_formula():
    layer = SelfAttention(16, 4, num_kv_heads=2, head_dim=6, rngs=nnx.Rngs(0))
    x = _x(2, 5, 16)
    mask = jnp.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], bool)
    expected = _plain_attention(layer, x, mask[:, None, None, :])
    np.testing.assert_allclose(layer(x, mask=mask), expected, atol=1e-5)
    causal = jnp.tril(jnp.ones((5, 5), bool))
    layer.is_causal = True
    np.testing.assert_allclose(layer(x), _plain_attention(layer, x, causal), atol=1e-5)


def test_sliding_window_sees_only_the_last_positions():
    layer = SelfAttention(8, 2, is_causal=True, sliding_window=2, rngs=nnx.Rngs(1))
    x = _x(1, 6, 8)
    slots = jnp.arange(6)
    keep = (slots[:, None] >= slots[None]) & (slots[:, None] - slots[None] < 2)
    np.testing.assert_allclose(layer(x), _plain_attention(layer, x, keep), atol=1e-5)


def test_qk_norm_normalizes_each_head_before_rope():
    layer = SelfAttention(8, 2, qk_norm="rms", qk_norm_epsilon=1e-6, rope=RoPE(), rngs=nnx.Rngs(2))
    assert layer.query_norm.scale.shape == (4,) and layer.query_norm.scale.sharding_names == (None,)
    x = _x(1, 3, 8)
    q = layer.query_norm((x @ layer.query.kernel.value).reshape(1, 3, 2, 4))
    rms = np.sqrt(np.mean(np.asarray(q) ** 2, axis=-1))
    np.testing.assert_allclose(rms, 1.0, rtol=1e-3)
    assert layer(x).shape == (1, 3, 8)


@pytest.mark.parametrize("window", [None, 3])
def test_decoding_in_chunks_with_left_padding_equals_the_full_pass(window):
    layer = SelfAttention(
        8, 4, num_kv_heads=2, rope=RoPE(), is_causal=True, sliding_window=window, rngs=nnx.Rngs(3)
    )
    x = _x(2, 7, 8)
    mask = jnp.array([[0, 0, 1, 1, 1, 1, 1], [1] * 7], bool)
    positions = jnp.where(mask, jnp.cumsum(mask, -1) - 1, 1)
    full = layer(x, positions=positions, mask=mask)
    layer.init_cache((2, 9, 8))
    parts = [layer(x[:, :4], positions=positions[:, :4], mask=mask[:, :4], decode=True)]
    parts += [
        layer(x[:, t : t + 1], positions=positions[:, t : t + 1], decode=True) for t in range(4, 7)
    ]
    decoded = jnp.concatenate(parts, axis=1)
    np.testing.assert_allclose(decoded[mask], full[mask], atol=1e-5)
    assert int(layer.cache_index.value) == 7
    assert layer.cached_mask.value[0].tolist() == [False, False] + [True] * 5 + [False] * 2


def test_decoding_errors():
    layer = SelfAttention(8, 2, is_causal=True, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="its cache is not initialized"):
        layer(_x(1, 1, 8), decode=True)
    layer.init_cache((1, 2, 8))
    with pytest.raises(ValueError, match="decodes 1 rows .* got a chunk of 2 rows"):
        layer(_x(2, 1, 8), decode=True)
    layer(_x(1, 2, 8), decode=True)
    with pytest.raises(ValueError, match="runs past the end of the cache"):
        layer(_x(1, 1, 8), decode=True)
    with pytest.raises(ValueError, match=r"needs \(batch, max_length, features\)"):
        layer.init_cache((1, 2, 3, 8))


def test_decoding_past_the_end_under_jit_returns_nan():
    layer = SelfAttention(8, 2, is_causal=True, decode=True, rngs=nnx.Rngs(0))
    layer.init_cache((1, 1, 8))
    step = nnx.jit(lambda layer, x: layer(x))
    assert bool(jnp.isfinite(step(layer, _x(1, 1, 8))).all())
    assert bool(jnp.isnan(step(layer, _x(1, 1, 8))).all())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            dict(num_kv_heads=3),
            ValueError,
            r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)",
        ),
        (dict(sliding_window=4), ValueError, "needs is_causal=True"),
        (dict(qk_norm="layer"), ValueError, "qk_norm must be 'rms' or None"),
        (dict(lora_rank=-1), ValueError, "lora_rank must be a whole number >= 0"),
        (dict(lora_rank=2, lora_alpha=0), ValueError, "lora_alpha must be a finite number > 0"),
        (
            dict(lora_alpha=16.0),
            ValueError,
            r"SelfAttention lora_alpha=16\.0 has no effect without lora_rank .* Set lora_rank "
            r"\(e\.g\. lora_rank=8\) to add adapters, or remove lora_alpha",
        ),
        (  # (the key and value kernels are 8 x 2: one head of 2)
            dict(num_kv_heads=1, lora_rank=3),
            ValueError,
            r"SelfAttention lora_rank=3 is larger than min\(in, out\) = 2 of its 8 x 2 kernel: "
            r"an adapter .* has rank at most min\(in, out\), .* Pass lora_rank <= 2\.",
        ),
        (dict(rope="rope"), TypeError, "rope must be a RoPE or None"),
        (dict(is_causal=1), TypeError, "is_causal must be True or False"),
    ],
)
def test_attention_construction_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        SelfAttention(8, 4, rngs=nnx.Rngs(0), **kwargs)


def test_attention_call_errors():
    layer = SelfAttention(8, 2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"expects inputs of shape \(batch, length, 8\)"):
        layer(_x(2, 5, 6))
    with pytest.raises(ValueError, match=r"mask must have the shape \(batch, length\) = \(2, 5\)"):
        layer(_x(2, 5, 8), mask=jnp.ones((2, 4), bool))
    with pytest.raises(ValueError, match="in_features .* is not a multiple of num_heads"):
        SelfAttention(10, 4, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("mlp", [MLP, GatedMLP])
def test_mlp_lora_settings_that_would_do_nothing_are_refused(mlp):
    name = mlp.__name__
    with pytest.raises(
        ValueError,
        match=rf"{name} lora_alpha=4 has no effect without lora_rank .* remove lora_alpha",
    ):
        mlp(8, 16, lora_alpha=4, rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError,
        match=rf"{name} lora_rank=9 is larger than min\(in, out\) = 8 of its 8 x 16 kernel",
    ):
        mlp(8, 16, lora_rank=9, rngs=nnx.Rngs(0))
    assert mlp(8, 16, lora_rank=8, lora_alpha=4, rngs=nnx.Rngs(0)).lora_rank == 8


def test_mlps_equal_their_formulas():
    x = _x(3, 8)
    mlp = MLP(8, 16, rngs=nnx.Rngs(0))
    up = x @ mlp.up.kernel.value + mlp.up.bias.value
    np.testing.assert_allclose(
        mlp(x), gelu(up) @ mlp.down.kernel.value + mlp.down.bias.value, atol=1e-5
    )
    gated = GatedMLP(8, 16, rngs=nnx.Rngs(1))
    hidden = jax.nn.silu(x @ gated.gate.kernel.value) * (x @ gated.up.kernel.value)
    np.testing.assert_allclose(gated(x), hidden @ gated.down.kernel.value, atol=1e-5)
    assert gated.gate.bias is None and gated.up.kernel.sharding_names == ("embed", "mlp")


def test_lora_adapters_start_as_a_no_op_and_scale_by_alpha_over_rank():
    plain = SelfAttention(8, 2, rngs=nnx.Rngs(0))
    adapted = SelfAttention(8, 2, lora_rank=2, lora_alpha=8.0, rngs=nnx.Rngs(0))
    for name in ("query", "key", "value", "out"):
        getattr(plain, name).kernel.value = getattr(adapted, name).kernel.value
    x = _x(1, 3, 8)
    np.testing.assert_allclose(adapted(x), plain(x), atol=1e-6)
    kinds = {type(v) for _, v in nnx.state(adapted, LoRAParam).flat_state()}
    assert kinds == {LoRAParam} and len(nnx.state(adapted, LoRAParam).flat_state()) == 8
    lora = adapted.query.lora
    lora.lora_b.value = jnp.ones_like(lora.lora_b.value)
    q_plain = x @ adapted.query.kernel.value
    expected = q_plain + 4.0 * (x @ lora.lora_a.value @ lora.lora_b.value)
    np.testing.assert_allclose(_project(adapted.query, x, adapted._scale), expected, atol=1e-5)
    mlp, bare = GatedMLP(8, 16, lora_rank=4, rngs=nnx.Rngs(0)), GatedMLP(8, 16, rngs=nnx.Rngs(0))
    assert mlp.down.lora.lora_a.sharding_names == ("mlp", None)
    for name in ("gate", "up", "down"):
        getattr(bare, name).kernel.value = getattr(mlp, name).kernel.value
    np.testing.assert_allclose(mlp(x), bare(x), atol=1e-6)


def test_pre_and_post_norm_blocks():
    rngs = nnx.Rngs(0)
    attention, mlp = SelfAttention(8, 2, rngs=rngs), MLP(8, 16, rngs=rngs)
    first, second = LayerNorm(8, rngs=rngs), LayerNorm(8, rngs=rngs)
    x = _x(2, 4, 8)
    pre = TransformerBlock(attention, mlp, first, second)
    h = x + attention(first(x))
    np.testing.assert_allclose(pre(x), h + mlp(second(h)), atol=1e-5)
    post = TransformerBlock(attention, mlp, first, second, post_norm=True)
    h = first(x + attention(x))
    np.testing.assert_allclose(post(x), second(h + mlp(h)), atol=1e-5)
    with pytest.raises(TypeError, match="TransformerBlock mlp must be a layer"):
        TransformerBlock(attention, 3, first, second)


def test_a_block_of_rms_norms_and_swiglu_lives_in_a_repeat():
    from nnx_layers import Repeat

    def block(rngs):
        return TransformerBlock(
            SelfAttention(8, 2, rope=RoPE(), is_causal=True, rngs=rngs),
            GatedMLP(8, 16, rngs=rngs),
            RMSNorm(8, rngs=rngs),
            RMSNorm(8, rngs=rngs),
        )

    stack = Repeat(block, 3, rngs=nnx.Rngs(0), sharding_name="layers")
    assert stack.block.attention.query.kernel.sharding_names == ("layers", "embed", "heads")
    x, mask = _x(2, 4, 8), jnp.ones((2, 4), bool)
    unrolled = x
    for layer in stack.unstack():
        unrolled = layer(unrolled, mask=mask)
    np.testing.assert_allclose(stack(x, mask=mask), unrolled, atol=1e-5)


@pytest.mark.parametrize("alpha", [1e30, float("inf"), float("nan")])
@pytest.mark.parametrize("layer", ["SelfAttention", "MLP", "GatedMLP"])
def test_a_lora_alpha_whose_scale_overflows_the_optimizer_is_refused(layer, alpha):
    build = {
        "SelfAttention": lambda **kw: SelfAttention(8, 2, rngs=nnx.Rngs(0), **kw),
        "MLP": lambda **kw: MLP(8, 16, rngs=nnx.Rngs(0), **kw),
        "GatedMLP": lambda **kw: GatedMLP(8, 16, rngs=nnx.Rngs(0), **kw),
    }[layer]
    if np.isfinite(alpha):
        match = (
            rf"{layer} lora_alpha=1e\+30 with lora_rank=2 scales the adapters by lora_alpha / "
            r"lora_rank = 5e\+29, past 1\.8e\+19 \(the square root of float32's largest "
            r"value\).* Usual values are lora_alpha = lora_rank to 2 \* lora_rank"
        )
    else:
        match = rf"{layer} lora_alpha must be a finite number > 0 or None, got {alpha!r}"
    with pytest.raises(ValueError, match=match):
        build(lora_rank=2, lora_alpha=alpha)
    assert build(lora_rank=2, lora_alpha=1e19).lora_alpha == 1e19


@pytest.mark.parametrize("param_dtype", [jnp.bool_, jnp.int32, "int8"])
@pytest.mark.parametrize("layer", ["SelfAttention", "MLP", "GatedMLP"])
def test_a_parameter_dtype_that_cannot_be_trained_is_refused(layer, param_dtype):
    build = {
        "SelfAttention": lambda **kw: SelfAttention(8, 2, qk_norm="rms", rngs=nnx.Rngs(0), **kw),
        "MLP": lambda **kw: MLP(8, 16, rngs=nnx.Rngs(0), **kw),
        "GatedMLP": lambda **kw: GatedMLP(8, 16, rngs=nnx.Rngs(0), **kw),
    }[layer]
    name = jnp.dtype(param_dtype).name
    with pytest.raises(
        ValueError,
        match=rf"{layer} param_dtype must be a floating dtype .* got {name}\. Use a floating "
        r"dtype such as float32 or bfloat16\.",
    ):
        build(param_dtype=param_dtype)
    assert build(param_dtype=jnp.bfloat16).param_dtype == jnp.bfloat16


def test_rope_max_seq_len_is_applied_inside_self_attention():
    rope = RoPE(max_seq_len=4)
    layer = SelfAttention(8, 2, rope=rope, is_causal=True, rngs=nnx.Rngs(0))
    assert layer(_x(1, 4, 8)).shape == (1, 4, 8)
    with pytest.raises(
        ValueError, match=r"RoPE holds 4 positions \(max_seq_len\) but got a sequence of length 5"
    ):
        layer(_x(1, 5, 8))
    with pytest.raises(
        ValueError, match=r"RoPE holds 4 positions \(max_seq_len\) but got a sequence of length 5"
    ):
        jax.jit(lambda x: layer(x))(_x(1, 5, 8))
    with pytest.raises(
        ValueError,
        match=r"SelfAttention.init_cache: a cache of 5 positions is longer than its rope's "
        r"max_seq_len \(4\)\. Call init_cache with max_length <= 4, or build the RoPE with "
        r"max_seq_len=5 or without one\.",
    ):
        layer.init_cache((1, 5, 8))
    layer.init_cache((1, 4, 8))
    assert layer(_x(1, 3, 8), decode=True).shape == (1, 3, 8)

"""MultiHeadAttention: parity with flax.nnx (init, outputs, gradients, dropout, decoding, sown
weights), modes, configs and every error path."""

import inspect
import warnings

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import MultiHeadAttention, initializers, make_attention_mask, make_causal_mask
from nnx_plugins.testing import check_layer

B, T, F = 2, 5, 8


def _x(shape, dtype=jnp.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def _flax_variable(theirs, path):
    for name in path:
        theirs = getattr(theirs, name)
    return theirs


def _randomize_and_copy(ours, theirs):
    """Give every Param of ours visible non-default values and copy them into flax's layer."""
    for i, (path, var) in enumerate(nnx.state(ours, nnx.Param).flat_state()):
        shape, dtype = var.value.shape, var.value.dtype
        values = np.random.default_rng(i).standard_normal(shape) * 0.5
        if path[-1] == "scale":
            values = values * 0.2 + 1.0
        var.value = jnp.asarray(values, dtype)
        target = _flax_variable(theirs, path)
        assert target[...].shape == shape and target[...].dtype == dtype, path
        target[...] = var.value


def _pair(*args, **kwargs):
    zeros = dict(kernel_init=initializers.zeros)
    ours = MultiHeadAttention(*args, **kwargs, **zeros, rngs=nnx.Rngs(0))
    theirs = fnnx.MultiHeadAttention(
        *args, **kwargs, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(0)
    )
    _randomize_and_copy(ours, theirs)
    return ours, theirs


def _assert_grads_close(ours_grads, theirs_grads, assert_close, scale):
    mine = dict(ours_grads.flat_state())
    other = dict(fnnx.to_flat_state(theirs_grads))
    assert set(mine) == set(other)
    for path, value in mine.items():
        assert_close(jnp.asarray(value), jnp.asarray(other[path][...]), scale)


# --- construction ----------------------------------------------------------------------------


OURS_ONLY = {"is_causal"}  # the causal option a config can set (flax.nnx: the call only)


def test_signature_matches_flax_for_shared_arguments():
    ours = inspect.signature(MultiHeadAttention.__init__).parameters
    theirs = inspect.signature(fnnx.MultiHeadAttention.__init__).parameters
    assert OURS_ONLY <= set(ours) and not OURS_ONLY & set(theirs)
    for name, parameter in ours.items():
        if name in OURS_ONLY:
            continue
        assert name in theirs, name
        default = parameter.default
        if name in ("out_kernel_init", "out_bias_init"):  # flax: None (= kernel/bias_init)
            assert theirs[name].default is None, name
        elif not callable(default) and not name.endswith("metadata"):
            assert default == theirs[name].default, name
    assert ours["rngs"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize(
    "options", [{"normalize_qk": True, "num_kv_heads": 1, "dropout_rate": 0.1, "out_features": 3}]
)
def test_default_init_matches_flax_from_the_same_key(options):
    ours = MultiHeadAttention(2, F, 4, **options, rngs=nnx.Rngs(0))
    theirs = fnnx.MultiHeadAttention(2, F, 4, **options, rngs=fnnx.Rngs(0))
    for path, var in nnx.state(ours, nnx.Param).flat_state():
        np.testing.assert_array_equal(var.value, _flax_variable(theirs, path)[...])
    n_theirs = len(jax.tree.leaves(fnnx.state(theirs, fnnx.Param)))
    assert len(jax.tree.leaves(nnx.state(ours, nnx.Param))) == n_theirs


def test_attributes_submodules_and_metadata():
    layer = MultiHeadAttention(
        4,
        F,
        num_kv_heads=2,
        in_kv_features=6,
        use_bias=False,
        kernel_metadata={"sharding_names": ("embed", "heads", "kv")},
        out_kernel_metadata={"sharding_names": ("heads", "kv", "embed")},
        rngs=nnx.Rngs(0),
    )
    assert layer.head_dim == 2 and layer.qkv_features is None and layer.num_kv_heads == 2
    assert layer.key.kernel.value.shape == (6, 2, 2) and layer.query.kernel.value.shape == (8, 4, 2)
    assert layer.query.bias is None and layer.rngs is None and layer.cached_key is None
    assert layer.query.kernel.sharding_names == ("embed", "heads", "kv")
    assert layer.out.kernel.sharding_names == ("heads", "kv", "embed")
    for name in inspect.signature(MultiHeadAttention).parameters:
        if name != "rngs":
            assert hasattr(layer, name), name


def test_out_initializers_default_and_none():
    ones, half = initializers.ones, initializers.constant(0.5)
    layer = MultiHeadAttention(
        2,
        F,
        kernel_init=ones,
        bias_init=half,
        out_kernel_init=None,
        out_bias_init=None,
        rngs=nnx.Rngs(0),
    )
    assert layer.out_kernel_init is ones and layer.out_bias_init is half
    np.testing.assert_array_equal(layer.out.kernel.value, jnp.ones((2, 4, F)))
    np.testing.assert_array_equal(layer.out.bias.value, jnp.full((F,), 0.5))
    default = MultiHeadAttention(2, F, kernel_init=ones, rngs=nnx.Rngs(0))
    assert default.out_kernel_init == initializers.lecun_normal()
    assert not np.all(default.out.kernel.value == 1.0)


# --- forward and gradient parity -------------------------------------------------------------

PADDING = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
MASKS = {
    "none": None,
    "padding": make_attention_mask(PADDING, PADDING),
    "causal": make_causal_mask(PADDING),
    "combined": make_attention_mask(PADDING, PADDING) * make_causal_mask(PADDING),
    "per_head": jnp.tril(jnp.ones((B, 2, T, T))),
}


SELF_CASES = [
    ({}, "none"),
    ({}, "padding"),
    ({}, "per_head"),
    ({"num_kv_heads": 1, "normalize_qk": True}, "combined"),
    ({"qkv_features": 4, "out_features": 3, "use_bias": False}, "combined"),
]


@pytest.mark.parametrize(("options", "mask"), SELF_CASES)
def test_self_attention_matches_flax(options, mask, assert_close):
    ours, theirs = _pair(2, F, decode=False, **options)
    x = _x((B, T, F))
    assert_close(ours(x, mask=MASKS[mask]), theirs(x, mask=MASKS[mask]))


@pytest.mark.parametrize(
    ("dtype", "param_dtype", "input_dtype"),
    [
        (None, jnp.float32, jnp.bfloat16),
        (None, jnp.bfloat16, jnp.bfloat16),
        (jnp.bfloat16, jnp.float32, jnp.float32),
    ],
)
def test_dtypes_match_flax(dtype, param_dtype, input_dtype, assert_close):
    ours, theirs = _pair(2, F, decode=False, dtype=dtype, param_dtype=param_dtype)
    x = _x((B, T, F), input_dtype)
    assert_close(ours(x, mask=MASKS["combined"]), theirs(x, mask=MASKS["combined"]), 2.0)


def test_cross_attention_and_is_causal_match_flax(assert_close):
    ours, theirs = _pair(2, F, 4, in_kv_features=6, decode=False)
    q, kv = _x((B, T, F)), _x((B, 7, 6), seed=1)
    assert_close(ours(q, kv), theirs(q, kv))
    assert_close(ours(q, kv, _x((B, 7, 6), seed=2)), theirs(q, kv, _x((B, 7, 6), seed=2)))
    assert_close(ours(q, kv, is_causal=True), theirs(q, kv, is_causal=True))
    x = _x((3, B, T, F))  # two batch axes
    assert_close(ours(x, _x((3, B, 7, 6))), theirs(x, _x((3, B, 7, 6))))


def test_is_causal_on_the_layer_is_the_default_of_every_call(assert_close):
    causal, theirs = _pair(2, F, decode=False)
    causal.is_causal = True
    plain, _ = _pair(2, F, decode=False)
    x = _x((B, T, F))
    expected = theirs(x, is_causal=True)
    assert_close(causal(x), expected)
    assert_close(causal(x, mask=MASKS["causal"]), expected)
    assert_close(causal(x, mask=MASKS["padding"]), theirs(x, mask=MASKS["combined"]))
    assert_close(causal(x, is_causal=False), theirs(x))  # the call's word wins
    assert_close(plain(x, is_causal=True), expected)
    assert not np.allclose(plain(x), expected)
    built = MultiHeadAttention(2, F, is_causal=True, decode=False, rngs=nnx.Rngs(0))
    assert built.is_causal is True
    first = built(x)[:, :1]  # position 0 sees only itself, whatever follows it
    np.testing.assert_allclose(built(x.at[:, 1:].set(0.0))[:, :1], first, atol=1e-6)


def test_a_causal_layer_decodes_like_its_full_pass(assert_close):
    layer = MultiHeadAttention(2, F, is_causal=True, decode=False, rngs=nnx.Rngs(0))
    x = _x((B, T, F))
    full = layer(x)
    layer.init_cache(x.shape)
    steps = [layer(x[:, t : t + 1], decode=True) for t in range(T)]
    assert_close(jnp.concatenate(steps, axis=1), full)


def test_gradients_match_flax(assert_close):
    ours, theirs = _pair(2, F, num_kv_heads=1, decode=False)
    x, mask = _x((B, T, F)), MASKS["combined"]

    def loss(model, x):
        return (model(x, mask=mask) ** 2).sum()

    ours_grads, ours_dx = nnx.grad(loss, argnums=(0, 1))(ours, x)
    theirs_grads, theirs_dx = fnnx.grad(loss, argnums=(0, 1))(theirs, x)
    assert_close(ours_dx, theirs_dx, 10.0)
    _assert_grads_close(ours_grads, theirs_grads, assert_close, 10.0)


def test_sow_weights_match_flax(assert_close):
    ours, theirs = _pair(2, F, decode=False)
    x = _x((B, T, F))
    with warnings.catch_warnings():  # flax.nnx deprecates sow outside nnx.capture
        warnings.simplefilter("ignore", DeprecationWarning)
        expected = theirs(x, sow_weights=True)
    assert_close(ours(x, sow_weights=True), expected)
    (mine,) = ours.attention_weights.value
    (other,) = theirs.attention_weights.get_value()
    assert mine.shape == (B, 2, T, T)
    assert_close(mine, other)


# --- dropout ---------------------------------------------------------------------------------


def test_dropout_train_matches_flax_and_eval_is_deterministic(assert_close):
    ours, theirs = _pair(2, F, dropout_rate=0.5, decode=False)
    x = _x((B, T, F))
    train = ours(x, deterministic=False)
    assert_close(train, theirs(x, deterministic=False))  # the same kept dropout stream
    assert_close(ours(x, deterministic=False), theirs(x, deterministic=False))
    evaluation = ours(x, deterministic=True)
    assert_close(evaluation, theirs(x, deterministic=True))
    assert not np.allclose(train, evaluation)
    ours.eval()
    assert ours.deterministic is True
    np.testing.assert_array_equal(ours(x), evaluation)
    ours.train()
    assert not np.allclose(ours(x), evaluation)


def test_dropout_rngs_given_to_the_call(assert_close):
    ours, theirs = _pair(2, F, dropout_rate=0.5, decode=False, keep_rngs=False)
    assert ours.rngs is None
    x = _x((B, T, F))
    mine = ours(x, deterministic=False, rngs=nnx.Rngs(dropout=3))
    assert_close(mine, theirs(x, deterministic=False, rngs=fnnx.Rngs(dropout=3)))
    key = jax.random.key(7)
    first = ours(x, deterministic=False, rngs=key)
    np.testing.assert_array_equal(first, ours(x, deterministic=False, rngs=key))
    stream = nnx.Rngs(dropout=3)["dropout"]
    np.testing.assert_array_equal(ours(x, deterministic=False, rngs=stream), mine)


# --- decoding --------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"num_kv_heads": 1, "normalize_qk": True}])
def test_decoding_step_by_step_equals_the_causal_pass(options, assert_close):
    ours, theirs = _pair(2, F, **options)
    x = _x((B, T, F))
    full = ours(x, mask=make_causal_mask(jnp.ones((B, T))), decode=False)
    ours.init_cache(x.shape)
    theirs.init_cache(x.shape)
    steps = []
    for t in range(T):
        step = ours(x[:, t : t + 1], decode=True)
        assert_close(step, theirs(x[:, t : t + 1], decode=True))
        steps.append(step)
    assert_close(jnp.concatenate(steps, axis=1), full)
    assert int(ours.cache_index.value) == T
    assert isinstance(ours.cached_key, nnx.Cache) and ours.cached_key.value.shape[:2] == (B, T)


def test_decoding_under_jit_with_a_padding_mask_equals_the_full_pass(assert_close):
    ours, _ = _pair(2, F, decode=True)
    x = _x((B, T, F))
    padding = make_attention_mask(jnp.ones((B, T)), PADDING)
    full = ours(x, mask=padding * make_causal_mask(PADDING), decode=False)
    ours.init_cache(x.shape)
    step = nnx.jit(lambda model, x, mask: model(x, mask=mask))
    outs = [step(ours, x[:, t : t + 1], padding[:, :, t : t + 1]) for t in range(T)]
    assert_close(jnp.concatenate(outs, axis=1), full)
    assert int(ours.cache_index.value) == T


def test_decode_ignores_is_causal_and_init_cache_restarts(assert_close):
    ours, _ = _pair(2, F, decode=True)
    x = _x((B, T, F))
    ours.init_cache(x.shape)
    first = [ours(x[:, t : t + 1]) for t in range(2)]
    ours.init_cache(x.shape)
    again = [ours(x[:, t : t + 1], is_causal=True) for t in range(2)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


# --- configs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"num_heads": 2, "in_features": 8, "decode": False},
        {
            "num_heads": 4,
            "in_features": 8,
            "qkv_features": 16,
            "out_features": 4,
            "num_kv_heads": 2,
            "normalize_qk": True,
            "dropout_rate": 0.1,
            "deterministic": True,
            "decode": False,
            "kernel_init": {"type": "normal", "stddev": 0.02},
            "dtype": "bfloat16",
        },
        {"num_heads": 2, "in_features": 8, "decode": False, "is_causal": True},
    ],
)
def test_works_from_a_config(config):
    report = check_layer("MultiHeadAttention", config, input_shape=(2, 5, 8))
    assert report.output_shape == (2, 5, config.get("out_features", 8))
    assert report.config["attention_fn"] == "dot_product_attention"
    assert report.config["is_causal"] is config.get("is_causal", False)


def test_is_causal_in_a_config_is_checked_before_building():
    from nnx_plugins import ConfigError, load_config

    model = {"type": "MultiHeadAttention", "num_heads": 2, "in_features": 8, "is_causal": "yes"}
    with pytest.raises(ConfigError, match=r"model.is_causal: Input should be a valid boolean"):
        load_config({"model": model})


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"qkv_features": 6, "num_heads": 4},
            r"qkv_features \(6\) must be divisible by num_heads \(4\)",
        ),
        (
            {"num_heads": 4, "num_kv_heads": 3},
            r"num_heads \(4\) must be divisible by num_kv_heads \(3\)",
        ),
        ({"num_heads": 0}, "MultiHeadAttention num_heads must be a positive integer, got 0"),
        ({"out_features": -1}, "MultiHeadAttention out_features must be a positive integer"),
        ({"dropout_rate": 1.5}, r"dropout_rate must be a number in \[0, 1\], got 1.5"),
    ],
)
def test_construction_errors(kwargs, match):
    kwargs = {"num_heads": 2, "in_features": F, **kwargs}
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(**kwargs, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_is_causal_must_be_a_bool(value):
    with pytest.raises(TypeError, match=rf"is_causal must be True or False, got {value!r}"):
        MultiHeadAttention(2, F, is_causal=value, rngs=nnx.Rngs(0))


def test_call_errors_on_inputs_and_masks():
    layer = MultiHeadAttention(2, F, in_kv_features=6, decode=False, rngs=nnx.Rngs(0))
    x = jnp.ones((B, T, F))
    with pytest.raises(
        ValueError,
        match=r"expects inputs_q of shape \(batch..., length, 8\) \(in_features\), got shape \(2, 5, 7\)",
    ):
        layer(jnp.ones((B, T, 7)), jnp.ones((B, T, 6)))
    with pytest.raises(
        ValueError,
        match=r"inputs_k of shape \(batch..., length, 6\) \(in_kv_features\), got shape \(2, 5, 8\)",
    ):
        layer(x)
    with pytest.raises(ValueError, match="got inputs_v but no inputs_k"):
        layer(x, None, jnp.ones((B, T, 6)))
    with pytest.raises(
        TypeError, match="MultiHeadAttention expects a numeric input, got dtype key"
    ):
        layer(jax.random.split(jax.random.key(0), (B, T, F)), jnp.ones((B, T, 6)))
    with pytest.raises(
        ValueError, match=r"mask of shape \(2, 3, 5, 5\) does not broadcast to .* = \(2, 2, 5, 5\)"
    ):
        layer(x, jnp.ones((B, T, 6)), mask=jnp.ones((B, 3, T, T)))


def test_call_errors_on_unset_modes():
    x = jnp.ones((B, T, F))
    with pytest.raises(ValueError, match="has decode=None and none was passed to the call"):
        MultiHeadAttention(2, F, rngs=nnx.Rngs(0))(x)
    layer = MultiHeadAttention(2, F, dropout_rate=0.1, decode=False, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="has deterministic=None and none was passed"):
        layer(x)
    no_rngs = MultiHeadAttention(
        2, F, dropout_rate=0.1, decode=False, keep_rngs=False, rngs=nnx.Rngs(0)
    )
    with pytest.raises(ValueError, match="applies dropout .* but has no rngs"):
        no_rngs(x, deterministic=False)


def test_decode_errors():
    layer = MultiHeadAttention(2, F, decode=True, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="cache is not initialized. Call layer.init_cache"):
        layer(jnp.ones((B, 1, F)))
    layer.init_cache((B, 2, F))
    with pytest.raises(
        ValueError, match=r"decodes one position at a time .* got keys \(2, 3, 2, 4\)"
    ):
        layer(jnp.ones((B, 3, F)))
    with pytest.raises(ValueError, match=r"got keys \(3, 1, 2, 4\)"):
        layer(jnp.ones((3, 1, F)))
    layer(jnp.ones((B, 1, F)))
    layer(jnp.ones((B, 1, F)))
    with pytest.raises(ValueError, match=r"decode step 2 is past the end of the cache \(length 2"):
        layer(jnp.ones((B, 1, F)))
    with pytest.raises(ValueError, match=r"init_cache needs the shape of a whole sequence"):
        layer.init_cache((F,))
    with pytest.raises(ValueError, match=r"with positive sizes, got \(2, 0, 8\)"):
        layer.init_cache((B, 0, F))


def test_decode_past_the_end_under_jit_returns_nan_until_init_cache():
    layer = MultiHeadAttention(2, F, decode=True, rngs=nnx.Rngs(0))
    layer.init_cache((B, 1, F))
    step = nnx.jit(lambda model, x: model(x))
    assert np.isfinite(step(layer, jnp.ones((B, 1, F)))).all()
    assert np.isnan(step(layer, jnp.ones((B, 1, F)))).all()
    assert np.isnan(step(layer, jnp.ones((B, 1, F)))).all()
    layer.init_cache((B, 1, F))
    assert np.isfinite(step(layer, jnp.ones((B, 1, F)))).all()


def test_decode_past_the_end_under_jit_is_nan_even_where_a_mask_hides_the_last_position():
    layer = MultiHeadAttention(2, F, decode=True, rngs=nnx.Rngs(0))
    layer.init_cache((B, 3, F))
    step = nnx.jit(lambda model, x, mask: model(x, mask=mask))
    first_only = jnp.zeros((B, 1, 1, 3), bool).at[..., 0].set(True)
    for _ in range(3):
        assert np.isfinite(step(layer, jnp.ones((B, 1, F)), first_only)).all()
    for _ in range(2):
        assert np.isnan(step(layer, jnp.ones((B, 1, F)), first_only)).all()


def test_set_view_sets_the_modes_and_creates_the_cache():
    layer = MultiHeadAttention(2, 6, dropout_rate=0.5, rngs=nnx.Rngs(0))
    layer.set_view(deterministic=True)
    assert layer.deterministic is True and layer.decode is None and layer.cached_key is None
    layer.set_view(decode=True, batch_size=(2, 3), max_length=4)
    assert layer.decode is True and layer.cached_key.value.shape == (2, 3, 4, 2, 3)
    assert layer(jnp.ones((2, 3, 1, 6))).shape == (2, 3, 1, 6)
    layer.set_view(decode=False)
    assert layer.decode is False and layer.cached_key is not None
    with pytest.raises(
        TypeError, match=r"set_view\(decode=True\) creates the decoding cache, so it needs"
    ):
        MultiHeadAttention(2, 6, rngs=nnx.Rngs(0)).set_view(decode=True, batch_size=1)


def test_decoding_under_x64_matches_flax():
    with jax.enable_x64(True):
        ours, theirs = _pair(2, 4, qkv_features=4, decode=True)
        x = jnp.ones((1, 4, 4))
        ours.init_cache(x.shape, dtype=x.dtype)
        theirs.init_cache(x.shape, dtype=x.dtype)
        for t in range(2):
            np.testing.assert_allclose(
                ours(x[:, t : t + 1]), theirs(x[:, t : t + 1]), rtol=1e-6, atol=1e-6
            )


def test_dot_general_hooks_reach_the_projections():
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1].shape)
        return jax.lax.dot_general(*args, **kwargs)

    class Counted:
        def __call__(self, *args, **kwargs):
            return counted(*args, **kwargs)

    layer = MultiHeadAttention(
        2, 4, decode=False, qkv_dot_general=counted, out_dot_general_cls=Counted, rngs=nnx.Rngs(0)
    )
    layer(jnp.ones((1, 3, 4)))
    assert calls == [(4, 2, 2)] * 3 + [(2, 2, 4)]

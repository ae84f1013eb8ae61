"""RNN and Bidirectional: outputs, carries and gradients equal to flax.nnx; state; config; errors."""

import inspect
import warnings

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
import nnx_layers as nl
from nnx_core import Rngs
from nnx_layers import RNN, Bidirectional, GRUCell, LSTMCell, RNNCellBase, initializers
from nnx_plugins.testing import check_layer

from ._parity import check_grads, sync_params

# flax-only argument of RNN: a transform setting (how each kind of the cell's state is scanned).
FLAX_ONLY = {"state_axes"}


def _cells(name="LSTMCell", **options):
    """Our cell and flax's (3 -> 4), zero-initialized then given the same random values."""
    ours = getattr(nl, name)(
        3,
        4,
        kernel_init=initializers.zeros,
        recurrent_kernel_init=initializers.zeros,
        **options,
        rngs=Rngs(0),
    )
    zeros = fnnx.initializers.zeros
    theirs = getattr(fnnx, name)(
        3, 4, kernel_init=zeros, recurrent_kernel_init=zeros, **options, rngs=fnnx.Rngs(0)
    )
    sync_params(ours, theirs)
    return ours, theirs


def _x(shape, dtype=jnp.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def test_signature_matches_flax():
    for ours, theirs in [(RNN, fnnx.RNN), (Bidirectional, fnnx.Bidirectional)]:
        mine = inspect.signature(ours.__init__).parameters
        other = inspect.signature(theirs.__init__).parameters
        assert list(mine) == [p for p in other if p not in FLAX_ONLY]
        for key in mine:
            if key not in ("cell", "forward_rnn", "backward_rnn", "merge_fn"):
                assert mine[key].default == other[key].default, key
        call, flax_call = (inspect.signature(c.__call__).parameters for c in (ours, theirs))
        assert list(call) == list(flax_call)


# (layer options, call options, input shape, compare gradients too); seq_lengths=True means a
# ragged batch. Gradients are compared where they take a new path (compiling them is slow).
RNN_CASES = [
    ({}, {}, (2, 5, 3), True),
    ({"time_major": True}, {}, (5, 2, 3), True),
    ({"reverse": True}, {}, (2, 5, 3), False),
    ({"reverse": True, "keep_order": True}, {}, (2, 5, 3), True),
    ({"return_carry": True, "unroll": 2}, {}, (2, 5, 3), False),
    ({}, {"return_carry": True}, (5, 3), True),  # no batch axis
    ({}, {}, (2, 2, 5, 3), False),  # two batch axes
    ({"return_carry": True}, {"seq_lengths": True}, (3, 5, 3), False),
    ({"reverse": True}, {"seq_lengths": True, "return_carry": True}, (3, 5, 3), True),
    ({"reverse": True, "keep_order": True}, {"seq_lengths": True}, (3, 5, 3), False),
    (
        {"time_major": True, "reverse": True},
        {"seq_lengths": True, "return_carry": True},
        (5, 3, 3),
        True,
    ),
]
LENGTHS = jnp.array([5, 1, 3])


@pytest.mark.parametrize(("options", "call_options", "shape", "gradients"), RNN_CASES)
def test_rnn_matches_flax(options, call_options, shape, gradients, assert_close):
    cells = _cells()
    ours, theirs = RNN(cells[0], **options), fnnx.RNN(cells[1], **options)
    call_options = dict(call_options)
    if call_options.pop("seq_lengths", False):
        call_options["seq_lengths"] = LENGTHS
    x = _x(shape)
    jax.tree.map(assert_close, ours(x, **call_options), theirs(x, **call_options))
    if gradients:
        check_grads(ours, theirs, lambda m, x: m(x, **call_options), x, assert_close, scale=10)


@pytest.mark.parametrize("name", ["GRUCell", "OptimizedLSTMCell", "SimpleCell"])
def test_rnn_of_every_cell_matches_flax(name, assert_close):
    cells = _cells(name)
    x = _x((2, 4, 3))
    options = {"reverse": True, "seq_lengths": jnp.array([4, 2]), "return_carry": True}
    jax.tree.map(assert_close, RNN(cells[0])(x, **options), fnnx.RNN(cells[1])(x, **options))


@pytest.mark.parametrize(
    ("input_dtype", "options"),
    [(jnp.bfloat16, {}), (jnp.float32, {"dtype": jnp.bfloat16})],
    ids=["bfloat16-inputs", "bfloat16-compute"],
)
def test_rnn_dtypes_match_flax(input_dtype, options, assert_close):
    cells = _cells(**options)
    x = _x((2, 5, 3), input_dtype)
    jax.tree.map(
        assert_close,
        RNN(cells[0], return_carry=True)(x),
        fnnx.RNN(cells[1], return_carry=True)(x),
    )


def test_bfloat16_params_keep_a_bfloat16_carry():
    # flax.nnx fails here (its scan carry changes dtype: bfloat16 in, float32 out).
    cell = GRUCell(3, 4, param_dtype=jnp.bfloat16, rngs=Rngs(0))
    carry, y = RNN(cell, return_carry=True)(_x((2, 5, 3)))
    assert carry.dtype == jnp.bfloat16 and y.dtype == jnp.float32 and y.shape == (2, 5, 4)


def test_initial_carry_and_a_random_carry_init_match_flax(assert_close):
    cells = _cells()
    x = _x((2, 5, 3))
    initial = (_x((2, 4), seed=1), _x((2, 4), seed=2))
    jax.tree.map(
        assert_close,
        RNN(cells[0])(x, initial_carry=initial),
        fnnx.RNN(cells[1])(x, initial_carry=initial),
    )
    ours = RNN(GRUCell(3, 4, carry_init=initializers.normal(1.0), rngs=Rngs(0)))
    with warnings.catch_warnings():  # flax warns about carry_init given to the constructor
        warnings.simplefilter("ignore")
        flax_cell = fnnx.GRUCell(3, 4, carry_init=fnnx.initializers.normal(1.0), rngs=fnnx.Rngs(0))
    theirs = fnnx.RNN(flax_cell)
    sync_params(ours.cell, theirs.cell)
    for _ in range(2):  # both draw the initial carry from a 'carry' stream seeded 0
        jax.tree.map(assert_close, ours(x, return_carry=True), theirs(x, return_carry=True))
    assert int(ours.rngs.count.value) == 2


def test_rnn_rngs_choices():
    cell = GRUCell(3, 4, rngs=Rngs(0))
    assert RNN(cell, rngs=False).rngs is None
    rngs = Rngs(0)
    forked = RNN(cell, rngs=rngs).rngs
    assert forked.tag == "default" and int(rngs.default.count.value) == 1
    stream = Rngs(carry=3)["carry"]
    assert RNN(cell, rngs=stream).rngs is stream
    # a zero carry needs no key: neither the layer's stream nor the call's advances
    layer = RNN(cell)
    layer(_x((1, 2, 3)), rngs=Rngs(carry=0))
    assert int(layer.rngs.count.value) == 0


def test_zero_carry_needs_no_rngs_but_a_random_one_does():
    x = _x((1, 2, 3))
    assert RNN(GRUCell(3, 4, rngs=Rngs(0)), rngs=False)(x).shape == (1, 2, 4)
    random = RNN(GRUCell(3, 4, carry_init=initializers.normal(), rngs=Rngs(0)), rngs=False)
    with pytest.raises(ValueError, match=r"GRUCell.initialize_carry needs rngs for carry_init"):
        random(x)
    assert random(x, rngs=Rngs(carry=0)).shape == (1, 2, 4)


class _Counting(RNNCellBase):
    """A cell with state besides its Params: counts its steps."""

    def __init__(self):
        self.in_features, self.hidden_features = 2, 2
        self.param_dtype, self.carry_init = jnp.float32, initializers.zeros
        self.w = nnx.Param(jnp.eye(2))
        self.steps = nnx.Variable(jnp.array(0))

    def __call__(self, carry, x):
        self.steps.value = self.steps.value + 1
        new = carry + x @ self.w.value
        return new, new


def test_cell_state_is_carried_through_time_and_written_back():
    layer = RNN(_Counting())
    x = jnp.ones((1, 4, 2))
    np.testing.assert_allclose(layer(x)[0, :, 0], [1.0, 2.0, 3.0, 4.0])
    assert int(layer.cell.steps.value) == 4
    step = nnx.jit(lambda layer, x: layer(x))
    step(layer, x)
    assert int(layer.cell.steps.value) == 8


def test_a_pure_rnn_runs_under_plain_jax_transforms(assert_close):
    layer = RNN(LSTMCell(3, 4, rngs=Rngs(0)))
    x = _x((2, 5, 3))
    assert_close(jax.jit(lambda x: layer(x))(x), layer(x))
    grads = jax.grad(lambda x: layer(x).sum())(x)
    assert grads.shape == x.shape and bool(jnp.isfinite(grads).all())


def test_rnn_trains_under_nnx_jit_and_grad():
    model = RNN(LSTMCell(3, 4, rngs=Rngs(0)))
    x, target = _x((2, 5, 3)), jnp.zeros((2, 5, 4))

    @nnx.jit
    def loss_and_grads(model, x):
        return nnx.value_and_grad(lambda m: jnp.mean((m(x) - target) ** 2))(model)

    loss, grads = loss_and_grads(model, x)
    assert sorted(grads["cell"]) == ["hf", "hg", "hi", "ho", "if_", "ig", "ii", "io"]
    assert float(loss) > 0 and grads["cell"]["hi"]["bias"].value.shape == (4,)


# --- Bidirectional ---------------------------------------------------------------------------

BIDIRECTIONAL_CASES = [
    ({}, {}, (2, 5, 3), False),
    ({"return_carry": True}, {"seq_lengths": True}, (3, 5, 3), True),
    ({"time_major": True}, {"return_carry": True}, (5, 2, 3), False),
]


@pytest.mark.parametrize(("options", "call_options", "shape", "gradients"), BIDIRECTIONAL_CASES)
def test_bidirectional_matches_flax(options, call_options, shape, gradients, assert_close):
    forward, backward = _cells("GRUCell"), _cells("GRUCell")
    sync_params(backward[0], backward[1], seed=1)
    ours = Bidirectional(RNN(forward[0]), RNN(backward[0]), **options)
    theirs = fnnx.Bidirectional(fnnx.RNN(forward[1]), fnnx.RNN(backward[1]), **options)
    call_options = dict(call_options)
    if call_options.pop("seq_lengths", False):
        call_options["seq_lengths"] = LENGTHS
    x = _x(shape)
    jax.tree.map(assert_close, ours(x, **call_options), theirs(x, **call_options))
    if gradients:
        check_grads(ours, theirs, lambda m, x: m(x, **call_options), x, assert_close, scale=10)


def test_bidirectional_merge_fn_and_initial_carry(assert_close):
    forward, backward = _cells("GRUCell"), _cells("GRUCell")
    x = _x((2, 4, 3))
    initial = (_x((2, 4), seed=1), _x((2, 4), seed=2))
    ours = Bidirectional(RNN(forward[0]), RNN(backward[0]), merge_fn=jnp.add)
    theirs = fnnx.Bidirectional(fnnx.RNN(forward[1]), fnnx.RNN(backward[1]), merge_fn=jnp.add)
    y = ours(x, initial_carry=initial)
    assert y.shape == (2, 4, 4)
    assert_close(y, theirs(x, initial_carry=initial))


# --- config ----------------------------------------------------------------------------------


def test_rnn_and_bidirectional_work_from_a_config():
    cell = {"type": "LSTMCell", "in_features": 3, "hidden_features": 4}
    report = check_layer("RNN", {"cell": cell, "reverse": True}, input_shape=(2, 5, 3))
    assert report.output_shape == (2, 5, 4) and report.config["cell"]["type"] == "LSTMCell"
    rnn = {"type": "RNN", "cell": {"type": "GRUCell", "in_features": 3, "hidden_features": 4}}
    report = check_layer(
        "Bidirectional", {"forward_rnn": rnn, "backward_rnn": rnn}, input_shape=(2, 5, 3)
    )
    assert report.output_shape == (2, 5, 8)


# --- errors ----------------------------------------------------------------------------------


def test_a_sequence_needs_a_time_axis():
    layer = RNN(GRUCell(3, 4, rngs=Rngs(0)))
    with pytest.raises(
        ValueError, match=r"RNN expects a sequence \(batch..., time, features\) .* got shape \(3,\)"
    ):
        layer(jnp.ones(3))
    with pytest.raises(ValueError, match=r"RNN expects a sequence \(time, batch..., features\)"):
        layer(jnp.ones(3), time_major=True)


def test_the_cell_must_fit_the_input_features():
    with pytest.raises(ValueError, match=r"GRUCell.initialize_carry expects .* is 3 \(in_features"):
        RNN(GRUCell(3, 4, rngs=Rngs(0)))(jnp.ones((2, 5, 6)))
    with pytest.raises(ValueError, match=r"GRUCell expects an input whose last axis is 3"):
        RNN(GRUCell(3, 4, rngs=Rngs(0)))(jnp.ones((2, 5, 6)), initial_carry=jnp.zeros((2, 4)))


@pytest.mark.parametrize(
    "lengths", [jnp.array([5, 5, 5]), jnp.array([[5, 5]]), jnp.array([5.0, 2.0])]
)
def test_seq_lengths_must_fit_the_batch(lengths):
    layer = RNN(GRUCell(3, 4, rngs=Rngs(0)))
    with pytest.raises(
        ValueError, match=r"RNN seq_lengths must be integers with the batch shape \(2,\)"
    ):
        layer(jnp.ones((2, 5, 3)), seq_lengths=lengths)


def test_rngs_must_be_rngs_a_stream_or_a_bool():
    cell = GRUCell(3, 4, rngs=Rngs(0))
    with pytest.raises(
        TypeError, match="RNN rngs must be an Rngs, an RngStream or a bool, got int"
    ):
        RNN(cell, rngs=0)
    with pytest.raises(TypeError, match="Bidirectional rngs must be an Rngs, an RngStream or a"):
        Bidirectional(RNN(cell), RNN(cell), rngs="carry")


class _RecurrentDropoutCell(LSTMCell):
    """An LSTM whose output goes through a Dropout on its own stream (flax.nnx's test case)."""

    def __init__(self, *args, rngs, **kwargs):
        super().__init__(*args, rngs=rngs, **kwargs)
        self.recurrent_dropout = nl.Dropout(0.5, rng_collection="recurrent_dropout", rngs=rngs)

    def __call__(self, carry, x):
        (c, h), _ = super().__call__(carry, x)
        mask = self.recurrent_dropout(jnp.ones_like(h))
        return (c, h * mask), mask


@pytest.mark.parametrize("only", ["recurrent_dropout", nnx.WithTag("recurrent_dropout")])
def test_broadcast_rngs_give_every_step_the_same_keys(only):
    rnn = RNN(_RecurrentDropoutCell(3, 16, rngs=Rngs(0, recurrent_dropout=1)), broadcast_rngs=only)
    stream = rnn.cell.recurrent_dropout.rngs
    key = jax.random.key_data(stream.key.value)
    masks = rnn(jnp.ones((2, 5, 3)))
    assert all(bool((masks[:, t] == masks[:, 0]).all()) for t in range(5))
    assert not bool((masks[:, 0] == masks[:, 0, :1]).all())  # (a real mask, not all kept)
    # one draw per call: the count advanced by one, the key is the stream's own again
    assert int(stream.count.value) == 1
    np.testing.assert_array_equal(jax.random.key_data(stream.key.value), key)
    again = nnx.jit(lambda m, x: m(x))(rnn, jnp.ones((2, 5, 3)))
    assert int(stream.count.value) == 2 and not bool((again[:, 0] == masks[:, 0]).all())
    assert all(bool((again[:, t] == again[:, 0]).all()) for t in range(5))


def test_without_broadcast_rngs_each_step_draws_its_own_keys():
    rnn = RNN(_RecurrentDropoutCell(3, 16, rngs=Rngs(0, recurrent_dropout=1)))
    masks = rnn(jnp.ones((2, 5, 3)))
    assert not all(bool((masks[:, t] == masks[:, 0]).all()) for t in range(5))
    assert int(rnn.cell.recurrent_dropout.rngs.count.value) == 5

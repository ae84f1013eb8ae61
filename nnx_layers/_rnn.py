"""Running a recurrent cell over a sequence: `RNN` and `Bidirectional`.

`RNN` scans its cell over the time axis with ``jax.lax.scan`` on the cell's split state: the
Params are loop constants, any other Variable of the cell is carried from step to step (so a
cell may update its own state), and the loop compiles one step however long the sequence is.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Any as AnyOf
from nnx_core import (
    Module,
    Param,
    Rngs,
    RngStream,
    State,
    WithTag,
    iter_graph,
    merge,
    split,
    to_predicate,
    update,
)

from ._cells import RNNCellBase
from ._constraints import Size

__all__ = ["RNN", "Bidirectional"]

Path = tuple[Any, ...]


def _carry_stream(layer: str, rngs: Any) -> RngStream | None:
    """The stream a layer keeps for random initial carries (see ``RNN``'s ``rngs``)."""
    if rngs is True:
        return RngStream(0, tag="carry")
    if rngs is False or rngs is None:
        return None
    if isinstance(rngs, Rngs):
        stream = rngs["carry"]
        return RngStream(stream(), tag=stream.tag)
    if isinstance(rngs, RngStream):
        return rngs
    raise TypeError(
        f"{layer} rngs must be an Rngs, an RngStream or a bool, got {type(rngs).__name__}. "
        f"Pass rngs=Rngs(carry=0), or rngs=True for a fixed stream."
    )


def _flip(x: jax.Array, seq_lengths: jax.Array | None, time_axis: int) -> jax.Array:
    """Reverse the first ``seq_lengths`` steps of each sequence, keeping padding at the end."""
    if seq_lengths is None:
        return jnp.flip(x, axis=time_axis)
    steps = x.shape[time_axis]
    lengths = jnp.expand_dims(seq_lengths, time_axis)  # batch shape with a time axis of 1
    order = jnp.arange(steps - 1, -1, -1).reshape(
        [steps if a == time_axis else 1 for a in range(lengths.ndim)]
    )
    index = (order + lengths) % steps
    index = index.reshape(index.shape + (1,) * (x.ndim - index.ndim))
    return jnp.take_along_axis(x, index, axis=time_axis)


def _stream_filter(only: Any) -> Any:
    """``broadcast_rngs`` as a filter: a string names a stream's tag (as in flax.nnx)."""
    if isinstance(only, str):
        return WithTag(only)
    if isinstance(only, (tuple, list)):
        return AnyOf(*(_stream_filter(item) for item in only))
    return only


def _broadcast_streams(cell: Module, only: Any) -> list[tuple[Path, RngStream, Any, Any]]:
    """Give the cell's streams matched by ``only`` one fresh key each for a whole scan.

    Each matched stream draws one key (advancing its count, which is what the scan leaves
    behind) and restarts from it; returns ``(path, stream, key, count)`` to restore afterwards.
    """
    if only is None:
        return []
    matches = to_predicate(_stream_filter(only))
    streams = [
        (tuple(path), node)
        for path, node in iter_graph(cell)
        if isinstance(node, RngStream) and matches((*path, "key"), node.key)
    ]
    backups = []
    for path, stream in streams:
        key = stream()
        backups.append((path, stream, stream.key.value, stream.count.value))
        stream.key.value = key
        stream.count.value = jnp.zeros_like(stream.count.value)
    return backups


def _scan_cell(
    cell: RNNCellBase,
    carry: Any,
    steps: jax.Array,
    unroll: int,
    keep_carries: bool,
    broadcast_rngs: Any = None,
) -> tuple[Any, Any]:
    """``jax.lax.scan`` of ``cell`` over the leading axis of ``steps``.

    The cell's Params are constants of the loop; its other Variables (e.g. Rng counts) are
    carried from step to step and written back to the cell at the end. So a cell that only
    reads its parameters leaves the model untouched, and no parameter leaves a jitted step.
    The streams matched by ``broadcast_rngs`` are constants too: every step restarts them from
    one fresh key, so they draw the same keys at every step (e.g. one recurrent dropout mask).
    """
    backups = _broadcast_streams(cell, broadcast_rngs)
    fixed_paths = {(*path, name) for path, *_ in backups for name in ("key", "count")}

    def fixed_filter(path: Path, _: Any) -> bool:
        return tuple(path) in fixed_paths

    graphdef, params, fixed, others = split(cell, Param, fixed_filter, ...)

    def step(loop: tuple[State, State, Any], x: jax.Array) -> tuple[tuple[State, State, Any], Any]:
        # (the broadcast streams ride in the loop, but each step draws from a copy of their
        # first state and hands that state on unchanged)
        first, variables, carry = loop
        stepped = merge(graphdef, params, jax.tree.map(lambda a: a, first), variables)
        new_carry, y = stepped(carry, x)
        # The carry keeps its dtype (e.g. param_dtype) whatever the step computes in.
        new_carry = jax.tree.map(lambda new, old: new.astype(old.dtype), new_carry, carry)
        _, _, _, variables = split(stepped, Param, fixed_filter, ...)
        return (first, variables, new_carry), ((new_carry, y) if keep_carries else y)

    loop = (fixed, others, carry)
    (_, others, carry), stacked = jax.lax.scan(step, loop, steps, unroll=unroll)
    if others:
        update(cell, others)
    for _, stream, key, count in backups:
        stream.key.value, stream.count.value = key, count
    return carry, stacked


def _last_valid(carries: Any, seq_lengths: jax.Array) -> Any:
    """From carries stacked over time (axis 0), pick each sequence's carry at its last step."""
    last = seq_lengths - 1

    def pick(x: jax.Array) -> jax.Array:
        index = last.reshape((1,) + last.shape + (1,) * (x.ndim - 1 - last.ndim))
        return jnp.take_along_axis(x, index, axis=0)[0]

    return jax.tree.map(pick, carries)


class RNN(Module):
    """Apply a recurrent cell to every step of a sequence.

    Inputs are ``(batch..., time, features)``, or ``(time, batch..., features)`` with
    ``time_major=True``; any number of batch axes (or none) works. The cell starts from
    ``initial_carry`` or from ``cell.initialize_carry``, and the outputs of all steps are
    stacked along the time axis. The call's keyword arguments override the settings stored
    on the layer for that call.

    ``seq_lengths`` (one length per sequence, for batches padded at the end) makes
    ``reverse=True`` reverse only the real steps of each sequence and the returned carry the
    one after each sequence's last real step. Outputs at padded steps are computed but
    meaningless.

    Args:
        cell: the recurrent cell, e.g. `LSTMCell` (any `RNNCellBase`).
        time_major: the time axis is the first axis instead of the one before the features.
        return_carry: return ``(final_carry, outputs)`` instead of ``outputs``.
        reverse: process the sequence from its last step to its first.
        keep_order: with ``reverse``, return the outputs in the input's order (else reversed).
        unroll: how many steps one iteration of the compiled loop runs.
        broadcast_rngs: the cell's Rng streams (a stream tag such as
            ``"recurrent_dropout"``, or a filter) that draw the same keys at every step: each
            call gives them one fresh key for the whole sequence (e.g. one recurrent dropout
            mask per sequence), as flax.nnx's ``broadcast_rngs``.
        rngs: where random initial carries come from: ``True`` keeps a fixed ``carry``
            stream (seed 0), an `Rngs` forks its ``carry`` stream (or the default one), an
            ``RngStream`` is kept as is, ``False`` keeps none.

    Raises:
        TypeError: for ``rngs`` of another type.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import RNN, LSTMCell
        >>> rnn = RNN(LSTMCell(3, 8, rngs=Rngs(0)))
        >>> x = jnp.ones((2, 5, 3))  # (batch, time, features)
        >>> rnn(x).shape
        (2, 5, 8)
        >>> (c, h), y = rnn(x, return_carry=True, seq_lengths=jnp.array([5, 3]))
        >>> bool((h[1] == y[1, 2]).all())  # the carry after step 3 of the second sequence
        True
    """

    def __init__(
        self,
        cell: RNNCellBase,
        *,
        time_major: bool = False,
        return_carry: bool = False,
        reverse: bool = False,
        keep_order: bool = False,
        unroll: Size = 1,
        broadcast_rngs: Any = None,
        rngs: Rngs | RngStream | bool = True,
    ):
        self.cell = cell
        self.time_major = time_major
        self.return_carry = return_carry
        self.reverse = reverse
        self.keep_order = keep_order
        self.unroll = unroll
        self.broadcast_rngs = broadcast_rngs
        self.rngs = _carry_stream("RNN", rngs)

    def __call__(
        self,
        inputs: jax.Array,
        *,
        initial_carry: Any = None,
        seq_lengths: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        rngs: Rngs | RngStream | None = None,
    ) -> Any:
        """Run the cell over ``inputs``; returns the outputs (and the final carry).

        Raises:
            ValueError: for inputs without a time axis, or ``seq_lengths`` whose shape is not
                the batch shape or that are not integers.
        """
        time_major = self.time_major if time_major is None else time_major
        reverse = self.reverse if reverse is None else reverse
        inputs = jnp.asarray(inputs)
        time_axis = self._time_axis(inputs, time_major)
        if seq_lengths is not None:
            seq_lengths = self._lengths(seq_lengths, inputs, time_axis, time_major)
        if reverse:
            inputs = _flip(inputs, seq_lengths, time_axis)
        if initial_carry is None:
            stream = self.rngs if rngs is None else _carry_stream("RNN", rngs)
            step_shape = inputs.shape[:time_axis] + inputs.shape[time_axis + 1 :]
            initial_carry = self.cell.initialize_carry(step_shape, stream)
        return_carry = self.return_carry if return_carry is None else return_carry
        carry, outputs = self._scan(inputs, initial_carry, time_axis, seq_lengths, return_carry)
        keep_order = self.keep_order if keep_order is None else keep_order
        if reverse and keep_order:
            outputs = jax.tree.map(lambda y: _flip(y, seq_lengths, time_axis), outputs)
        return (carry, outputs) if return_carry else outputs

    def _scan(
        self,
        inputs: jax.Array,
        carry: Any,
        time_axis: int,
        seq_lengths: jax.Array | None,
        return_carry: bool,
    ) -> tuple[Any, Any]:
        """Scan the cell over ``time_axis``; outputs are stacked back on ``time_axis``."""
        keep_carries = seq_lengths is not None and return_carry
        carry, stacked = _scan_cell(
            self.cell,
            carry,
            jnp.moveaxis(inputs, time_axis, 0),
            self.unroll,
            keep_carries,
            self.broadcast_rngs,
        )
        if keep_carries:
            carries, stacked = stacked
            carry = _last_valid(carries, seq_lengths)
        outputs = jax.tree.map(lambda y: jnp.moveaxis(y, 0, time_axis), stacked)
        return carry, outputs

    def _time_axis(self, inputs: jax.Array, time_major: bool) -> int:
        features = self.cell.num_feature_axes
        if inputs.ndim < features + 1:
            layout = "(time, batch..., features)" if time_major else "(batch..., time, features)"
            raise ValueError(
                f"RNN expects a sequence {layout} with a time axis before the {features} "
                f"feature axis/axes, got shape {inputs.shape}. Add a time axis, e.g. "
                f"x[..., None, :] for a single step."
            )
        return 0 if time_major else inputs.ndim - features - 1

    def _lengths(
        self, seq_lengths: Any, inputs: jax.Array, time_axis: int, time_major: bool
    ) -> jax.Array:
        seq_lengths = jnp.asarray(seq_lengths)
        features = self.cell.num_feature_axes
        batch = inputs.shape[1:-features] if time_major else inputs.shape[:time_axis]
        if seq_lengths.shape != batch or not jnp.issubdtype(seq_lengths.dtype, jnp.integer):
            raise ValueError(
                f"RNN seq_lengths must be integers with the batch shape {batch} of inputs "
                f"{inputs.shape} (one length per sequence), got {seq_lengths.dtype} with shape "
                f"{seq_lengths.shape}. Pass e.g. seq_lengths=jnp.array([...], jnp.int32)."
            )
        return seq_lengths


def _concatenate(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.concatenate([a, b], axis=-1)


class Bidirectional(Module):
    """Run one RNN forward and one backward over a sequence and merge their outputs.

    The backward RNN is called with ``reverse=True, keep_order=True``, so both outputs are in
    the input's order; ``merge_fn`` (concatenation on the last axis by default) combines them.
    ``seq_lengths`` reaches both RNNs, so the backward pass starts at each sequence's last
    real step.

    Args:
        forward_rnn: the RNN run forward (an `RNN`, or any Module with its call signature).
        backward_rnn: the RNN run backward; pass the same object to share parameters.
        merge_fn: ``(forward_outputs, backward_outputs) -> outputs``.
        time_major: the time axis is the first axis.
        return_carry: return ``((forward_carry, backward_carry), outputs)``.
        rngs: where random initial carries come from (see `RNN`).

    Raises:
        TypeError: for ``rngs`` that is not an Rngs, an RngStream or a bool.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import RNN, Bidirectional, GRUCell
        >>> layer = Bidirectional(
        ...     RNN(GRUCell(3, 4, rngs=Rngs(0))), RNN(GRUCell(3, 4, rngs=Rngs(1)))
        ... )
        >>> layer(jnp.ones((2, 5, 3))).shape
        (2, 5, 8)
    """

    def __init__(
        self,
        forward_rnn: Module,
        backward_rnn: Module,
        *,
        merge_fn: Callable[[jax.Array, jax.Array], jax.Array] = _concatenate,
        time_major: bool = False,
        return_carry: bool = False,
        rngs: Rngs | RngStream | bool = True,
    ):
        self.forward_rnn = forward_rnn
        self.backward_rnn = backward_rnn
        self.merge_fn = merge_fn
        self.time_major = time_major
        self.return_carry = return_carry
        self.rngs = _carry_stream("Bidirectional", rngs)

    def __call__(
        self,
        inputs: jax.Array,
        *,
        initial_carry: tuple[Any, Any] | None = None,
        rngs: Rngs | RngStream | None = None,
        seq_lengths: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Any:
        """Run both directions; ``reverse``/``keep_order`` are accepted and ignored (RNN's
        call signature, so a Bidirectional can stand where an RNN is expected)."""
        del reverse, keep_order
        time_major = self.time_major if time_major is None else time_major
        return_carry = self.return_carry if return_carry is None else return_carry
        stream = self.rngs if rngs is None else _carry_stream("Bidirectional", rngs)
        forward_carry, backward_carry = (None, None) if initial_carry is None else initial_carry
        common = {"rngs": stream, "seq_lengths": seq_lengths, "time_major": time_major}
        carry_f, outputs_f = self.forward_rnn(
            inputs, initial_carry=forward_carry, return_carry=True, reverse=False, **common
        )
        carry_b, outputs_b = self.backward_rnn(
            inputs,
            initial_carry=backward_carry,
            return_carry=True,
            reverse=True,
            keep_order=True,
            **common,
        )
        outputs = jax.tree.map(self.merge_fn, outputs_f, outputs_b)
        return ((carry_f, carry_b), outputs) if return_carry else outputs

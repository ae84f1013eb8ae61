"""Recurrent cells: one time step ``(carry, inputs) -> (carry, outputs)``.

`LSTMCell`, `OptimizedLSTMCell` (the same LSTM with fused matrices), `GRUCell` and
`SimpleCell`, all built from `Linear` layers, plus their base `RNNCellBase`. `RNN` scans a cell
over a sequence. Inputs are ``(batch..., in_features)``; the carry is
``(batch..., hidden_features)`` (a ``(c, h)`` pair for the LSTMs).
"""

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from nnx_core import Module, Rngs, RngStream

from . import initializers
from ._checks import (
    Dtype,
    PromoteDtypeFn,
    as_input,
    check_last_axis,
    check_positive_int,
    metadata,
    promote_dtype,
)
from ._constraints import Size
from ._linear import Linear
from .activations import sigmoid, tanh
from .initializers import Initializer

__all__ = ["RNNCellBase", "LSTMCell", "OptimizedLSTMCell", "GRUCell", "SimpleCell"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_KERNEL_INIT = initializers.lecun_normal()
_RECURRENT_INIT = initializers.orthogonal()
# Initializers that ignore their key: a carry made with them needs no rngs.
_KEYLESS = (initializers.Zeros, initializers.Ones, initializers.Constant)


class RNNCellBase(Module):
    """Base class of recurrent cells, the ``cell`` that `RNN` scans over time.

    A cell implements ``__call__(carry, inputs) -> (new_carry, outputs)`` for one time step and
    ``initialize_carry(input_shape, rngs)``. This base provides ``initialize_carry`` for cells
    that store ``in_features``, ``hidden_features``, ``param_dtype`` and ``carry_init`` and
    whose carry is ``carry_count`` arrays of shape ``(batch..., hidden_features)``.

    Example:
        >>> from nnx_core import Rngs
        >>> from nnx_layers import GRUCell, RNNCellBase
        >>> cell = GRUCell(3, 5, rngs=Rngs(0))
        >>> isinstance(cell, RNNCellBase), cell.num_feature_axes
        (True, 1)
        >>> cell.initialize_carry((2, 3)).shape
        (2, 5)
    """

    #: How many arrays the carry holds (2 for an LSTM's ``(c, h)``).
    carry_count: ClassVar[int] = 1

    def __call__(self, carry: Any, inputs: jax.Array) -> tuple[Any, jax.Array]:
        """One time step: ``(carry, inputs) -> (new_carry, outputs)``."""
        raise NotImplementedError(
            f"{type(self).__name__} subclasses RNNCellBase but does not define "
            f"__call__(carry, inputs) -> (new_carry, outputs)."
        )

    @property
    def num_feature_axes(self) -> int:
        """How many trailing axes of the inputs are features (1 for these cells)."""
        return 1

    def initialize_carry(
        self,
        input_shape: Sequence[int],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> Any:
        """The initial carry for inputs of shape ``input_shape`` (one time step).

        Args:
            input_shape: ``(batch..., in_features)``.
            rngs: keys for a random ``carry_init`` (the ``carry`` stream of an `Rngs`, or a
                stream); not needed for the default zeros.
            carry_init: overrides the cell's ``carry_init`` for this call.

        Returns:
            An array of shape ``(batch..., hidden_features)`` in ``param_dtype`` (a ``(c, h)``
            pair of them for the LSTMs).

        Raises:
            ValueError: if the last axis of ``input_shape`` is not ``in_features``, or a random
                initializer gets no ``rngs``.
        """
        name = type(self).__name__
        shape = tuple(input_shape)
        if not shape or shape[-1] != self.in_features:
            raise ValueError(
                f"{name}.initialize_carry expects an input shape whose last axis is "
                f"{self.in_features} (in_features), got {shape}. Pass the shape of one time "
                f"step, e.g. x.shape[:1] + x.shape[2:] for x of shape (batch, time, features)."
            )
        init = carry_init if carry_init is not None else self.carry_init
        stream = rngs["carry"] if isinstance(rngs, Rngs) else rngs
        keyless = isinstance(init, _KEYLESS)  # draws no key, so the stream does not advance
        if stream is None and not keyless:
            raise ValueError(
                f"{name}.initialize_carry needs rngs for carry_init={init!r}. Pass rngs="
                f"Rngs(carry=0) here, or to the RNN that runs the cell."
            )
        carry_shape = shape[:-1] + (self.hidden_features,)
        parts = tuple(
            init(None if keyless else stream(), carry_shape, self.param_dtype)
            for _ in range(self.carry_count)
        )
        return parts if self.carry_count > 1 else parts[0]

    def _check_step(self, carry: Any, inputs: Any) -> tuple[tuple[jax.Array, ...], jax.Array]:
        """Check one step's ``carry`` and ``inputs``; return the carry's arrays and the inputs."""
        name = type(self).__name__
        inputs = as_input(name, inputs)
        check_last_axis(name, inputs, self.in_features, "in_features")
        parts = carry if self.carry_count > 1 else (carry,)
        if not isinstance(parts, (tuple, list)) or len(parts) != self.carry_count:
            raise ValueError(
                f"{name} expects a carry of {self.carry_count} arrays, got "
                f"{type(carry).__name__}. Build it with cell.initialize_carry(inputs.shape)."
            )
        parts = tuple(jnp.asarray(p) for p in parts)
        for part in parts:
            if part.ndim == 0 or part.shape[-1] != self.hidden_features:
                raise ValueError(
                    f"{name} expects carry arrays whose last axis is {self.hidden_features} "
                    f"(hidden_features), got shape {part.shape}. Build the carry with "
                    f"cell.initialize_carry(inputs.shape)."
                )
        return parts, inputs


def _store(cell: RNNCellBase, in_features: int, hidden_features: int, **attributes: Any) -> None:
    """Check the sizes and store every constructor argument under its own name."""
    name = type(cell).__name__
    cell.in_features = check_positive_int(name, "in_features", in_features)
    cell.hidden_features = check_positive_int(name, "hidden_features", hidden_features)
    for key, value in attributes.items():
        setattr(cell, key, metadata(value) if key.endswith("_metadata") else value)


def _dense(cell: RNNCellBase, sizes: tuple[int, int], *, recurrent: bool, rngs: Rngs) -> Linear:
    """An input (``recurrent=False``) or hidden-state projection, without a bias."""
    return Linear(
        *sizes,
        use_bias=False,
        kernel_init=cell.recurrent_kernel_init if recurrent else cell.kernel_init,
        dtype=cell.dtype,
        param_dtype=cell.param_dtype,
        promote_dtype=cell.promote_dtype,
        rngs=rngs,
        kernel_metadata=cell.recurrent_kernel_metadata if recurrent else cell.kernel_metadata,
    )


def _biased(cell: RNNCellBase, sizes: tuple[int, int], *, recurrent: bool, rngs: Rngs) -> Linear:
    """A projection with the cell's bias (initializer and metadata)."""
    return Linear(
        *sizes,
        use_bias=True,
        kernel_init=cell.recurrent_kernel_init if recurrent else cell.kernel_init,
        bias_init=cell.bias_init,
        dtype=cell.dtype,
        param_dtype=cell.param_dtype,
        promote_dtype=cell.promote_dtype,
        rngs=rngs,
        kernel_metadata=cell.recurrent_kernel_metadata if recurrent else cell.kernel_metadata,
        bias_metadata=cell.bias_metadata,
    )


class _GatedCell(RNNCellBase):
    """The constructor shared by the LSTM and GRU cells; subclasses create their layers."""

    def __init__(
        self,
        in_features: Size,
        hidden_features: Size,
        *,
        gate_fn: Callable[[jax.Array], jax.Array] = sigmoid,
        activation_fn: Callable[[jax.Array], jax.Array] = tanh,
        kernel_init: Initializer = _KERNEL_INIT,
        recurrent_kernel_init: Initializer = _RECURRENT_INIT,
        bias_init: Initializer = initializers.zeros,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer = initializers.zeros,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        recurrent_kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        _store(
            self,
            in_features,
            hidden_features,
            gate_fn=gate_fn,
            activation_fn=activation_fn,
            kernel_init=kernel_init,
            recurrent_kernel_init=recurrent_kernel_init,
            bias_init=bias_init,
            dtype=dtype,
            param_dtype=param_dtype,
            carry_init=carry_init,
            promote_dtype=promote_dtype,
            kernel_metadata=kernel_metadata,
            recurrent_kernel_metadata=recurrent_kernel_metadata,
            bias_metadata=bias_metadata,
        )
        self._build(rngs)


class LSTMCell(_GatedCell):
    """Long short-term memory cell; the carry is ``(c, h)`` and the output is ``h``.

    With ``x`` the input, ``h`` the previous output and ``c`` the memory::

        i = gate_fn(ii(x) + hi(h))        f = gate_fn(if_(x) + hf(h))
        g = activation_fn(ig(x) + hg(h))  o = gate_fn(io(x) + ho(h))
        c' = f * c + i * g                h' = o * activation_fn(c')

    ``ii, if_, ig, io`` are `Linear` layers without bias on the input; ``hi, hf, hg, ho`` are
    `Linear` layers with bias on the hidden state.

    Args:
        in_features: width of the inputs' last axis.
        hidden_features: width of the carry and the outputs.
        gate_fn: activation of the gates ``i``, ``f``, ``o``.
        activation_fn: activation of the candidate ``g`` and of the output.
        kernel_init: initializer of the input kernels.
        recurrent_kernel_init: initializer of the hidden-state kernels.
        bias_init: initializer of the bias.
        dtype: computation dtype; ``None`` promotes inputs, carry and parameters together.
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of the carry used by ``initialize_carry``.
        promote_dtype: passed to the cell's `Linear` layers (see `promote_dtype`: integer
            inputs become float32).
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata for the input kernels.
        recurrent_kernel_metadata: metadata for the hidden-state kernels.
        bias_metadata: metadata for the bias.

    Raises:
        ValueError: for inputs whose last axis is not ``in_features`` or a carry that is not
            a pair of ``(batch..., hidden_features)`` arrays.
        TypeError: for non-numeric inputs.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import LSTMCell
        >>> cell = LSTMCell(3, 4, rngs=Rngs(0))
        >>> carry = cell.initialize_carry((2, 3))
        >>> (c, h), y = cell(carry, jnp.ones((2, 3)))
        >>> c.shape, h.shape, bool((y == h).all())
        ((2, 4), (2, 4), True)
    """

    carry_count: ClassVar[int] = 2

    def _build(self, rngs: Rngs) -> None:
        inputs = (self.in_features, self.hidden_features)
        hidden = (self.hidden_features, self.hidden_features)
        self.ii = _dense(self, inputs, recurrent=False, rngs=rngs)
        self.if_ = _dense(self, inputs, recurrent=False, rngs=rngs)
        self.ig = _dense(self, inputs, recurrent=False, rngs=rngs)
        self.io = _dense(self, inputs, recurrent=False, rngs=rngs)
        self.hi = _biased(self, hidden, recurrent=True, rngs=rngs)
        self.hf = _biased(self, hidden, recurrent=True, rngs=rngs)
        self.hg = _biased(self, hidden, recurrent=True, rngs=rngs)
        self.ho = _biased(self, hidden, recurrent=True, rngs=rngs)

    def __call__(
        self, carry: tuple[jax.Array, jax.Array], inputs: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        """One step: ``((c, h), x) -> ((c', h'), h')``."""
        (c, h), x = self._check_step(carry, inputs)
        i = self.gate_fn(self.ii(x) + self.hi(h))
        f = self.gate_fn(self.if_(x) + self.hf(h))
        g = self.activation_fn(self.ig(x) + self.hg(h))
        o = self.gate_fn(self.io(x) + self.ho(h))
        new_c = f * c + i * g
        new_h = o * self.activation_fn(new_c)
        return (new_c, new_h), new_h


class OptimizedLSTMCell(_GatedCell):
    """`LSTMCell` with the four gates fused into two matrix products (often faster).

    ``dense_i`` (no bias) maps the input and ``dense_h`` (with bias) the hidden state to
    ``4 * hidden_features`` columns, split into the gates ``i, f, g, o`` in that order; the
    equations are those of `LSTMCell`.

    Args:
        in_features: width of the inputs' last axis.
        hidden_features: width of the carry and the outputs.
        gate_fn: activation of the gates ``i``, ``f``, ``o``.
        activation_fn: activation of the candidate ``g`` and of the output.
        kernel_init: initializer of the input kernel.
        recurrent_kernel_init: initializer of the hidden-state kernel.
        bias_init: initializer of the bias.
        dtype: computation dtype; ``None`` promotes inputs, carry and parameters together.
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of the carry used by ``initialize_carry``.
        promote_dtype: passed to the cell's `Linear` layers (see `promote_dtype`: integer
            inputs become float32).
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata for the input kernel.
        recurrent_kernel_metadata: metadata for the hidden-state kernel.
        bias_metadata: metadata for the bias.

    Raises:
        ValueError: for inputs whose last axis is not ``in_features`` or a carry that is not
            a pair of ``(batch..., hidden_features)`` arrays.
        TypeError: for non-numeric inputs.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import OptimizedLSTMCell
        >>> cell = OptimizedLSTMCell(3, 4, rngs=Rngs(0))
        >>> cell.dense_i.kernel.value.shape, cell.dense_h.kernel.value.shape
        ((3, 16), (4, 16))
        >>> _, y = cell(cell.initialize_carry((2, 3)), jnp.ones((2, 3)))
        >>> y.shape
        (2, 4)
    """

    carry_count: ClassVar[int] = 2

    def _build(self, rngs: Rngs) -> None:
        gates = 4 * self.hidden_features
        self.dense_i = _dense(self, (self.in_features, gates), recurrent=False, rngs=rngs)
        self.dense_h = _biased(self, (self.hidden_features, gates), recurrent=True, rngs=rngs)

    def __call__(
        self, carry: tuple[jax.Array, jax.Array], inputs: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        """One step: ``((c, h), x) -> ((c', h'), h')``."""
        (c, h), x = self._check_step(carry, inputs)
        i, f, g, o = jnp.split(self.dense_i(x) + self.dense_h(h), 4, axis=-1)
        new_c = self.gate_fn(f) * c + self.gate_fn(i) * self.activation_fn(g)
        new_h = self.gate_fn(o) * self.activation_fn(new_c)
        return (new_c, new_h), new_h


class GRUCell(_GatedCell):
    """Gated recurrent unit; the carry and the output are ``h``.

    With ``x`` the input and ``h`` the previous output, ``dense_i`` (with bias) and ``dense_h``
    (no bias) each produce ``3 * hidden_features`` columns, split into ``r, z, n`` parts::

        r = gate_fn(x_r + h_r)    z = gate_fn(x_z + h_z)
        n = activation_fn(x_n + r * h_n)
        h' = (1 - z) * n + z * h

    Args:
        in_features: width of the inputs' last axis.
        hidden_features: width of the carry and the outputs.
        gate_fn: activation of the gates ``r`` and ``z``.
        activation_fn: activation of the candidate ``n``.
        kernel_init: initializer of the input kernel.
        recurrent_kernel_init: initializer of the hidden-state kernel.
        bias_init: initializer of the bias (on the input projection).
        dtype: computation dtype; ``None`` promotes inputs, carry and parameters together.
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of the carry used by ``initialize_carry``.
        promote_dtype: passed to the cell's `Linear` layers (see `promote_dtype`: integer
            inputs become float32).
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata for the input kernel.
        recurrent_kernel_metadata: metadata for the hidden-state kernel.
        bias_metadata: metadata for the bias.

    Raises:
        ValueError: for inputs whose last axis is not ``in_features`` or a carry whose last
            axis is not ``hidden_features``.
        TypeError: for non-numeric inputs.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import GRUCell
        >>> cell = GRUCell(3, 4, rngs=Rngs(0))
        >>> h, y = cell(jnp.zeros((2, 4)), jnp.ones((2, 3)))
        >>> h.shape, bool((y == h).all())
        ((2, 4), True)
    """

    def _build(self, rngs: Rngs) -> None:
        parts = 3 * self.hidden_features
        self.dense_i = _biased(self, (self.in_features, parts), recurrent=False, rngs=rngs)
        self.dense_h = _dense(self, (self.hidden_features, parts), recurrent=True, rngs=rngs)

    def __call__(self, carry: jax.Array, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One step: ``(h, x) -> (h', h')``."""
        (h,), x = self._check_step(carry, inputs)
        x_r, x_z, x_n = jnp.split(self.dense_i(x), 3, axis=-1)
        h_r, h_z, h_n = jnp.split(self.dense_h(h), 3, axis=-1)
        r = self.gate_fn(x_r + h_r)
        z = self.gate_fn(x_z + h_z)
        n = self.activation_fn(x_n + r * h_n)
        new_h = (1.0 - z) * n + z * h
        return new_h, new_h


class SimpleCell(RNNCellBase):
    """Elman cell ``h' = activation_fn(dense_i(x) + dense_h(h) [+ h])``; output ``h'``.

    ``dense_i`` has the bias, ``dense_h`` has none; ``residual=True`` adds ``h`` before the
    activation.

    Args:
        in_features: width of the inputs' last axis.
        hidden_features: width of the carry and the outputs.
        dtype: computation dtype (float32 by default, as in flax.nnx; ``None`` promotes).
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of the carry used by ``initialize_carry``.
        residual: add the previous carry before the activation.
        activation_fn: the activation.
        kernel_init: initializer of the input kernel.
        recurrent_kernel_init: initializer of the hidden-state kernel.
        bias_init: initializer of the bias.
        promote_dtype: passed to the cell's `Linear` layers (see `promote_dtype`: integer
            inputs become float32).
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata for the input kernel.
        recurrent_kernel_metadata: metadata for the hidden-state kernel.
        bias_metadata: metadata for the bias.

    Raises:
        ValueError: for inputs whose last axis is not ``in_features`` or a carry whose last
            axis is not ``hidden_features``.
        TypeError: for non-numeric inputs.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import SimpleCell, initializers
        >>> cell = SimpleCell(2, 2, kernel_init=initializers.zeros, rngs=Rngs(0))
        >>> h, y = cell(jnp.zeros((1, 2)), jnp.ones((1, 2)))
        >>> y
        Array([[0., 0.]], dtype=float32)
    """

    def __init__(
        self,
        in_features: Size,
        hidden_features: Size,
        *,
        dtype: Dtype | None = jnp.float32,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer = initializers.zeros,
        residual: bool = False,
        activation_fn: Callable[[jax.Array], jax.Array] = tanh,
        kernel_init: Initializer = _KERNEL_INIT,
        recurrent_kernel_init: Initializer = _RECURRENT_INIT,
        bias_init: Initializer = initializers.zeros,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        recurrent_kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        _store(
            self,
            in_features,
            hidden_features,
            dtype=dtype,
            param_dtype=param_dtype,
            carry_init=carry_init,
            residual=residual,
            activation_fn=activation_fn,
            kernel_init=kernel_init,
            recurrent_kernel_init=recurrent_kernel_init,
            bias_init=bias_init,
            promote_dtype=promote_dtype,
            kernel_metadata=kernel_metadata,
            recurrent_kernel_metadata=recurrent_kernel_metadata,
            bias_metadata=bias_metadata,
        )
        hidden = (hidden_features, hidden_features)
        self.dense_h = _dense(self, hidden, recurrent=True, rngs=rngs)
        self.dense_i = _biased(self, (in_features, hidden_features), recurrent=False, rngs=rngs)

    def __call__(self, carry: jax.Array, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One step: ``(h, x) -> (h', h')``."""
        (h,), x = self._check_step(carry, inputs)
        new_h = self.dense_i(x) + self.dense_h(h)
        if self.residual:
            new_h = new_h + h
        new_h = self.activation_fn(new_h)
        return new_h, new_h

"""Low-rank adapters: the `LoRAParam` Variable kind, `LoRA` and `LoRALinear`."""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Param, Rngs, Variable, variable_name, variable_type

from . import initializers
from ._axis_names import dense_names, named_variable
from ._checks import (
    Dtype,
    PromoteDtypeFn,
    as_input,
    check_last_axis,
    check_param_dtype,
    check_positive_int,
    metadata,
    promote_dtype,
)
from ._constraints import Size
from ._linear import Linear
from .initializers import Initializer

__all__ = ["LoRAParam", "LoRA", "LoRALinear"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_A_INIT = initializers.he_uniform()
_DEFAULT_KERNEL_INIT = initializers.lecun_normal()


class LoRAParam(Param, kind="LoRAParam"):
    """The kind of the low-rank adapter matrices ``lora_a`` and ``lora_b``.

    A subclass of `Param`, so ``Param`` filters (``grad``, ``Optimizer``) include it; the
    filter ``LoRAParam`` or the registered name ``"LoRAParam"`` selects the adapters alone,
    e.g. to train only them.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> from nnx_layers import LoRALinear, LoRAParam
        >>> layer = LoRALinear(3, 4, lora_rank=2, rngs=nnx.Rngs(0))
        >>> [path for path, _ in nnx.state(layer, "LoRAParam").flat_state()]
        [('lora', 'lora_a'), ('lora', 'lora_b')]
        >>> isinstance(layer.lora.lora_a, nnx.Param), nnx.variable_name(LoRAParam)
        (True, 'LoRAParam')
    """


def check_rank(layer: str, lora_rank: Any, in_features: int, out_features: int) -> int:
    """``lora_rank`` checked positive and at most ``min(in_features, out_features)``: an
    adapter ``lora_a @ lora_b`` on an ``in x out`` kernel has at most that rank, so a larger one
    only adds parameters."""
    rank = check_positive_int(layer, "lora_rank", lora_rank)
    largest = min(in_features, out_features)
    if rank > largest:
        raise ValueError(
            f"{layer} lora_rank={rank} is larger than min(in, out) = {largest} of its "
            f"{in_features} x {out_features} kernel: an adapter lora_a @ lora_b on an in x out "
            f"kernel has rank at most min(in, out), so a rank above {largest} only adds "
            f"parameters. Pass lora_rank <= {largest}."
        )
    return rank


def _param_type(layer: str, lora_param_type: Any) -> tuple[type[Variable], str]:
    """The Variable kind given as a class or a registered name, and its registered name."""
    if isinstance(lora_param_type, str):
        try:
            kind = variable_type(lora_param_type)
        except KeyError as error:
            raise ValueError(f"{layer} lora_param_type: {error.args[0]}") from None
        return kind, lora_param_type
    if not (isinstance(lora_param_type, type) and issubclass(lora_param_type, Variable)):
        raise TypeError(
            f"{layer} lora_param_type must be a Variable kind (a subclass of "
            f"nnx_core.Variable) or its registered name, got {lora_param_type!r}. Pass e.g. "
            f"lora_param_type=LoRAParam or lora_param_type='LoRAParam'."
        )
    return lora_param_type, variable_name(lora_param_type)


class LoRA(Module):
    """A low-rank adapter ``x @ lora_a @ lora_b``, optionally added to a base layer's output.

    ``lora_a`` has shape ``(in_features, lora_rank)`` and ``lora_b`` ``(lora_rank,
    out_features)``; with the default zero ``b_initializer`` the adapter starts as a no-op.
    Given ``base_module``, the call returns ``base_module(x) + x @ lora_a @ lora_b``.

    Args:
        in_features: width of the input's last axis.
        lora_rank: the rank of the adapter (the inner width), at most the smaller feature size.
        out_features: width of the output's last axis.
        base_module: a layer whose output the adapter is added to (called with the same
            input and the call's keyword arguments).
        dtype: computation dtype; ``None`` promotes the input and the adapters together.
        param_dtype: dtype of ``lora_a`` and ``lora_b``.
        a_initializer: initializer of ``lora_a``.
        b_initializer: initializer of ``lora_b``.
        lora_param_type: the Variable kind of ``lora_a`` and ``lora_b``, as a class or its
            registered name (what the layer stores and a config writes).
        promote_dtype: brings ``(x, lora_a, lora_b)`` to one dtype, called with
            ``dtype=dtype`` (see `promote_dtype`: integer inputs become float32).
        rngs: random streams; ``rngs.params()`` initializes the adapters.
        a_metadata: metadata for ``lora_a``.
        b_metadata: metadata for ``lora_b``.

    Raises:
        ValueError: sizes that are not positive integers, a ``lora_rank`` above
            ``min(in_features, out_features)``, a ``param_dtype`` that is not floating (the
            adapters are trained) or an unknown kind name; at call time, an
            input whose last axis is not ``in_features`` wide, or a base output of another
            shape.
        TypeError: a ``base_module`` that is not callable or a ``lora_param_type`` that is not
            a Variable kind; a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear, LoRA
        >>> layer = LoRA(3, 2, 4, rngs=Rngs(0))
        >>> layer.lora_a.value.shape, layer.lora_b.value.shape
        ((3, 2), (2, 4))
        >>> layer(jnp.ones((16, 3))).shape
        (16, 4)
        >>> base = Linear(3, 4, rngs=Rngs(0))
        >>> wrapped = LoRA(3, 2, 4, base_module=base, rngs=Rngs(1))
        >>> bool((wrapped(jnp.ones((1, 3))) == base(jnp.ones((1, 3)))).all())  # lora_b = 0
        True
    """

    def __init__(
        self,
        in_features: Size,
        lora_rank: Size,
        out_features: Size,
        *,
        base_module: Module | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        a_initializer: Initializer = _DEFAULT_A_INIT,
        b_initializer: Initializer = initializers.zeros,
        lora_param_type: type[Variable] | str = "LoRAParam",
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        a_metadata: Mapping[str, Any] = _EMPTY,
        b_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.in_features = check_positive_int("LoRA", "in_features", in_features)
        self.out_features = check_positive_int("LoRA", "out_features", out_features)
        self.lora_rank = check_rank("LoRA", lora_rank, self.in_features, self.out_features)
        if base_module is not None and not callable(base_module):
            raise TypeError(
                f"LoRA base_module must be a callable layer, got {type(base_module).__name__}. "
                f"Pass a layer with __call__, e.g. base_module=Linear(...)."
            )
        self.base_module = base_module
        self.dtype = dtype
        self.param_dtype = check_param_dtype("LoRA", "param_dtype", param_dtype)
        self.a_initializer = a_initializer
        self.b_initializer = b_initializer
        kind, self.lora_param_type = _param_type("LoRA", lora_param_type)
        self.promote_dtype = promote_dtype
        self.a_metadata = metadata(a_metadata)
        self.b_metadata = metadata(b_metadata)
        a = a_initializer(rngs.params(), (self.in_features, self.lora_rank), param_dtype)
        b = b_initializer(rngs.params(), (self.lora_rank, self.out_features), param_dtype)
        first, last = dense_names(self.in_features, self.out_features)
        self.lora_a = named_variable(kind, a, self.a_metadata, (first, None))
        self.lora_b = named_variable(kind, b, self.b_metadata, (None, last))

    def __call__(self, inputs: jax.Array, **kwargs: Any) -> jax.Array:
        """Return ``inputs @ lora_a @ lora_b`` (plus ``base_module(inputs, **kwargs)``)."""
        inputs = as_input("LoRA", inputs)
        check_last_axis("LoRA", inputs, self.in_features, "in_features")
        x, a, b = self.promote_dtype(
            (inputs, self.lora_a.value, self.lora_b.value), dtype=self.dtype
        )
        out = x @ a @ b
        if self.base_module is None:
            return out
        base = self.base_module(x, **kwargs)
        if jnp.shape(base) != out.shape:
            raise ValueError(
                f"LoRA's adapter output has shape {out.shape} but its base_module "
                f"({type(self.base_module).__name__}) returned shape {jnp.shape(base)}. Build "
                f"LoRA with the base layer's in_features and out_features."
            )
        return out + base


class LoRALinear(Linear):
    """A `Linear` layer plus a low-rank adapter: ``x @ kernel + bias + x @ lora_a @ lora_b``.

    The ``kernel`` and ``bias`` are those of `Linear` (same names, shapes and initialization
    from the same key), so a trained `Linear` state loads into it; the adapter lives in the
    submodule ``lora`` (a `LoRA`) with `LoRAParam` weights.

    Args:
        in_features: width of the input's last axis.
        out_features: width of the output's last axis.
        lora_rank: the rank of the adapter, at most the smaller feature size.
        lora_dtype: computation dtype of the adapter.
        lora_param_dtype: dtype of the adapter weights.
        a_initializer: initializer of ``lora.lora_a``.
        b_initializer: initializer of ``lora.lora_b``.
        lora_param_type: the Variable kind of the adapter weights (class or registered
            name).
        lora_promote_dtype: the adapter's ``promote_dtype`` (see `LoRA`).
        use_bias: as `Linear`.
        dtype: as `Linear` (the dense part's computation dtype).
        param_dtype: as `Linear`.
        precision: as `Linear`.
        kernel_init: as `Linear`.
        bias_init: as `Linear`.
        dot_general: as `Linear`.
        promote_dtype: as `Linear` (the dense part's).
        preferred_element_type: as `Linear`.
        rngs: random streams; the dense part draws first, then the adapter.
        a_metadata: metadata for ``lora.lora_a``.
        b_metadata: metadata for ``lora.lora_b``.
        kernel_metadata: as `Linear`.
        bias_metadata: as `Linear`.

    Raises:
        ValueError: as `Linear` and `LoRA`; a ``lora_param_dtype`` that is not floating (the
            adapters are trained; ``param_dtype``, the base kernel's, is `Linear`'s to check).
        TypeError: as `Linear` and `LoRA`.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear, LoRALinear
        >>> layer = LoRALinear(3, 4, lora_rank=2, rngs=Rngs(0))
        >>> layer.kernel.value.shape, layer.lora.lora_a.value.shape
        ((3, 4), (3, 2))
        >>> bool((layer.kernel.value == Linear(3, 4, rngs=Rngs(0)).kernel.value).all())
        True
        >>> layer(jnp.ones((16, 3))).shape
        (16, 4)
    """

    def __init__(
        self,
        in_features: Size,
        out_features: Size,
        *,
        lora_rank: Size,
        lora_dtype: Dtype | None = None,
        lora_param_dtype: Dtype = jnp.float32,
        a_initializer: Initializer = _DEFAULT_A_INIT,
        b_initializer: Initializer = initializers.zeros,
        lora_param_type: type[Variable] | str = "LoRAParam",
        lora_promote_dtype: PromoteDtypeFn = promote_dtype,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        dot_general: Callable[..., jax.Array] = jax.lax.dot_general,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        a_metadata: Mapping[str, Any] = _EMPTY,
        b_metadata: Mapping[str, Any] = _EMPTY,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        _, kind_name = _param_type("LoRALinear", lora_param_type)
        check_param_dtype("LoRALinear", "lora_param_dtype", lora_param_dtype)
        super().__init__(
            in_features,
            out_features,
            use_bias=use_bias,
            dtype=dtype,
            param_dtype=param_dtype,
            precision=precision,
            kernel_init=kernel_init,
            bias_init=bias_init,
            dot_general=dot_general,
            promote_dtype=promote_dtype,
            preferred_element_type=preferred_element_type,
            rngs=rngs,
            kernel_metadata=kernel_metadata,
            bias_metadata=bias_metadata,
        )
        rank = check_rank("LoRALinear", lora_rank, self.in_features, self.out_features)
        self.lora_rank = rank
        self.lora_dtype = lora_dtype
        self.lora_param_dtype = lora_param_dtype
        self.a_initializer = a_initializer
        self.b_initializer = b_initializer
        self.lora_param_type = kind_name
        self.lora_promote_dtype = lora_promote_dtype
        self.a_metadata = metadata(a_metadata)
        self.b_metadata = metadata(b_metadata)
        self.lora = LoRA(
            self.in_features,
            rank,
            self.out_features,
            dtype=lora_dtype,
            param_dtype=lora_param_dtype,
            a_initializer=a_initializer,
            b_initializer=b_initializer,
            lora_param_type=kind_name,
            promote_dtype=lora_promote_dtype,
            rngs=rngs,
            a_metadata=a_metadata,
            b_metadata=b_metadata,
        )

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        """Apply the dense layer and add the adapter's output.

        ``out_sharding`` lays the dense part's output out over the mesh (see `Linear`).
        """
        return super().__call__(inputs, out_sharding=out_sharding) + self.lora(inputs)

"""The logical axis names the built-in layers declare for their Variables (``sharding_names``).

One vocabulary for every layer, so that sharding rules (``{"mlp": "model"}``; see
docs/multi-device.md) lay out any model built from them without per-layer metadata:

| name | the axis of |
|---|---|
| ``embed`` | the model's width (the features a layer takes and gives back) |
| ``mlp`` | a feed-forward block's hidden width |
| ``heads``, ``kv_heads``, ``head_dim`` | attention heads (query; key/value) and their width |
| ``vocab`` | a token table's rows |
| ``conv_in``, ``conv_out`` | a convolution's input and output channels |
| ``layers`` | the stacked blocks of a `Repeat` (in front) |

A plain `Linear` cannot know its role, so it is named by its shape: one that widens its input
(or keeps its width) is an MLP's up projection, ``(embed, mlp)``; one that narrows it is the
down projection, ``(mlp, embed)``. A GPT's MLP of two Linears is then split column-wise, then
row-wise over a ``model`` axis (Megatron's layout).

What the user gives wins: names in the initializer (``with_partitioning``) first, then the
layer's ``*_metadata`` (``sharding_names``, or flax.nnx's ``out_sharding``), then the defaults.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_layers._axis_names import dense_names, named_param
    >>> dense_names(64, 256), dense_names(256, 64)
    (('embed', 'mlp'), ('mlp', 'embed'))
    >>> named_param(jnp.ones((2, 3)), {}, ("embed", "mlp")).sharding_names
    ('embed', 'mlp')
    >>> named_param(jnp.ones((2, 3)), {"sharding_names": (None, "x")}, ("embed", "mlp")).sharding_names
    (None, 'x')
"""

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from nnx_core import Param, Variable, VariableMetadata

V = TypeVar("V", bound=Variable[Any])

__all__ = [
    "EMBED",
    "MLP",
    "HEADS",
    "KV_HEADS",
    "HEAD_DIM",
    "VOCAB",
    "LAYERS",
    "CONV_IN",
    "CONV_OUT",
    "NAME_KEYS",
    "dense_names",
    "general_names",
    "feature_names",
    "names_given",
    "with_default_names",
    "named_variable",
    "named_param",
]

EMBED, MLP, VOCAB, LAYERS = "embed", "mlp", "vocab", "layers"
HEADS, KV_HEADS, HEAD_DIM = "heads", "kv_heads", "head_dim"
CONV_IN, CONV_OUT = "conv_in", "conv_out"

#: the metadata entries that name a Variable's axes (``out_sharding`` is flax.nnx's spelling)
NAME_KEYS = ("sharding_names", "out_sharding")

Names = tuple[str | None, ...]


def dense_names(in_features: int, out_features: int) -> tuple[str, str]:
    """``(embed, mlp)`` for a projection that widens (or keeps) the width, else ``(mlp, embed)``."""
    return (EMBED, MLP) if out_features >= in_features else (MLP, EMBED)


def general_names(
    in_shape: Sequence[int], out_shape: Sequence[int], batch: int = 0
) -> tuple[Names, Names]:
    """The kernel's and the bias' names of a projection ``(*batch, *in_shape, *out_shape)``:
    the first input and output axes named as by `dense_names` (of the products), others None."""
    first_in, first_out = dense_names(math.prod(in_shape), math.prod(out_shape))
    ins = (first_in, *[None] * (len(in_shape) - 1)) if in_shape else ()
    outs = (first_out, *[None] * (len(out_shape) - 1)) if out_shape else ()
    return (*[None] * batch, *ins, *outs), (*[None] * batch, *outs)


def feature_names(ndim: int) -> Names:
    """A per-feature Variable (a norm's scale, a bias of the width): ``embed`` on its last axis."""
    return (*[None] * (ndim - 1), EMBED) if ndim else ()


def names_given(metadata: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` names the axes itself."""
    return any(metadata.get(key) is not None for key in NAME_KEYS)


def with_default_names(metadata: Mapping[str, Any], names: Sequence[str | None]) -> dict[str, Any]:
    """``metadata`` plus ``sharding_names=names`` unless it names the axes itself."""
    if names_given(metadata):
        return dict(metadata)
    return {**metadata, "sharding_names": tuple(names)}


def named_variable(
    kind: type[V], value: Any, metadata: Mapping[str, Any], names: Sequence[str | None]
) -> V:
    """A ``kind`` Variable of ``value`` with ``metadata`` and the default axis ``names``.

    ``value`` may be an initializer's output boxed with metadata (``with_partitioning``): names
    there win over those of ``metadata``, which win over ``names``.
    """
    boxed = value.metadata if isinstance(value, VariableMetadata) else {}
    if names_given(boxed):
        metadata = {k: v for k, v in metadata.items() if k not in NAME_KEYS}
    else:
        metadata = with_default_names(metadata, names)
    return kind(value, **metadata)


def named_param(value: Any, metadata: Mapping[str, Any], names: Sequence[str | None]) -> Param:
    """`named_variable` of the kind `Param`."""
    return named_variable(Param, value, metadata, names)

"""flax.nnx's ``filterlib`` module path: the filter forms and ``to_predicate``.

Example:
    >>> import jax.numpy as jnp
    >>> import nnx_core as nnx
    >>> from nnx_core import filterlib
    >>> filterlib.to_predicate((nnx.Param, "dropout"))((), nnx.Param(jnp.ones(1)))
    True
"""

from ._filters import (
    All,
    Everything,
    Filter,
    Not,
    Nothing,
    OfType,
    PathContains,
    WithTag,
    to_predicate,
)
from ._filters import Any_ as Any

__all__ = [
    "All",
    "Any",
    "Everything",
    "Filter",
    "Not",
    "Nothing",
    "OfType",
    "PathContains",
    "WithTag",
    "to_predicate",
]

"""Value constraints that layers declare in their signatures, for configs to check before building.

A layer states what a config may pass with ``typing.Literal`` (allowed strings) and
``typing.Annotated[T, annotated_types.Interval(...)]`` (ranges). Python does not enforce
annotations, so each layer still checks its arguments itself; the config layer (nnx_plugins)
reads these annotations to report every out-of-range value with its file position before
anything is built, and the JSON Schema shows them (``minimum``, ``maximum``, ``enum``).
annotated_types is the dependency-free package pydantic itself reads: nnx_layers does not import
pydantic.

Example:
    >>> import typing
    >>> from nnx_layers._constraints import Rate, Size
    >>> typing.get_args(Rate)
    (<class 'float'>, Interval(gt=None, ge=0, lt=None, le=1))
    >>> typing.get_args(Size)[1].le
    2147483647
"""

from collections.abc import Sequence
from typing import Annotated

from annotated_types import Ge, Gt, Interval

__all__ = ["MAX_SIZE", "Size", "Count", "Rate", "NonNegative", "Positive", "Sizes"]

#: the largest size a config may give one axis (XLA indexes with int32 by default)
MAX_SIZE = 2**31 - 1

#: a positive size of one axis: features, channels, embeddings, kernel widths
Size = Annotated[int, Interval(ge=1, le=MAX_SIZE)]
#: a non-negative count of one axis: padding, offsets
Count = Annotated[int, Interval(ge=0, le=MAX_SIZE)]
#: a probability or a decay factor, in ``[0, 1]``
Rate = Annotated[float, Interval(ge=0, le=1)]
#: a non-negative number such as an epsilon
NonNegative = Annotated[float, Ge(0)]
#: a positive number such as a scale
Positive = Annotated[float, Gt(0)]
#: one positive size, or one per spatial axis
Sizes = Size | Sequence[Size]

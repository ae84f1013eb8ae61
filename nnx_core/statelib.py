"""flax.nnx's ``statelib`` module path: State and the functions over States.

Example:
    >>> from nnx_core import statelib
    >>> statelib.diff({"a": 1, "b": 2}, {"a": 5}).to_pure_dict()
    {'b': 2}
"""

from ._state import State
from ._state_functions import (
    diff,
    filter_state,
    from_flat_state,
    map_state,
    merge_state,
    replace_by_pure_dict,
    restore_int_paths,
    split_state,
    to_flat_state,
    to_pure_dict,
)

GraphState = State

__all__ = [
    "GraphState",
    "State",
    "diff",
    "filter_state",
    "from_flat_state",
    "map_state",
    "merge_state",
    "replace_by_pure_dict",
    "restore_int_paths",
    "split_state",
    "to_flat_state",
    "to_pure_dict",
]

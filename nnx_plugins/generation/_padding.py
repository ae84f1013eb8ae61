"""Prompts of different lengths in one batch: left padding and its mask, the models that take a
mask, and rows that end at an EOS, as transformers' ``generate`` does them.

Prompts are padded on the left, so that every row's last real token is the batch's last
position and the next token of every row is drawn from the same column. The mask (True for a
real token) tells the model the padding apart: a model that takes one (`nnx_layers.CausalLM`)
numbers each row's positions from its first real token and never attends to the padding.

Example:
    >>> import numpy as np
    >>> from nnx_plugins.generation._padding import after_eos, left_padded
    >>> ids, mask = left_padded([np.array([5, 6, 7]), np.array([8])], pad_token_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6, 7], [0, 0, 8]], [[True, True, True], [False, False, True]])
    >>> after_eos(np.array([[4, 2, 9, 9], [3, 3, 3, 3]]), eos_token_ids=(2,), pad_token_id=0)
    (array([[4, 2, 0, 0],
           [3, 3, 3, 3]], dtype=int32), [2, 4])
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import NnxError

__all__ = ["PaddingError", "takes_mask", "check_mask", "left_padded", "after_eos"]


class PaddingError(NnxError, ValueError):
    """A mask that does not fit its prompt or its model (`GenerationError` says it to users)."""


def takes_mask(model: Any) -> bool:
    """Whether ``model`` is called with a padding mask, ``model(tokens, mask=...)`` (as
    `nnx_layers.CausalLM`): then `decode` gives it the prompt as one chunk.

    Example:
        >>> import nnx_core as nnx
        >>> from nnx_layers import Embed
        >>> from nnx_plugins.generation._padding import takes_mask
        >>> takes_mask(Embed(4, 2, rngs=nnx.Rngs(0)))
        False
    """
    try:
        parameters = inspect.signature(type(model).__call__).parameters
    except (TypeError, ValueError):
        return False
    found = parameters.get("mask")
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return found is not None and found.kind in kinds


def check_mask(model: Any, shape: tuple[int, int], mask: Any) -> np.ndarray | None:
    """The mask `decode` gives ``model`` for a prompt of ``shape``: ``mask`` as booleans (all
    True when None) for a model that takes one; None for a model that does not.

    Raises:
        PaddingError: a mask of another shape or kind; one whose last column is not all real
            (the padding goes on the left); padding for a model that takes no mask.
    """
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != tuple(shape) or not (mask.dtype == bool or mask.dtype.kind in "iu"):
            raise PaddingError(
                f"the mask must be booleans (or 0/1) of the prompt's shape {list(shape)}, got "
                f"{mask.dtype}{list(mask.shape)}. True marks a real token, False padding."
            )
        mask = mask.astype(bool)
        if not mask[:, -1].all():
            raise PaddingError(
                "the mask must mark the last token of every row as real (rows "
                f"{np.flatnonzero(~mask[:, -1]).tolist()[:8]} end in padding): pad prompts on "
                "the left, so that each row's next token follows its last real one."
            )
    if takes_mask(model):
        return np.ones(shape, bool) if mask is None else mask
    if mask is not None and not mask.all():
        raise PaddingError(
            f"{type(model).__name__} takes no padding mask (its call has no 'mask' argument), "
            "so prompts of different lengths cannot share a batch: decode them apart, or "
            "build the model from layers that take one (CausalLM)."
        )
    return None


def left_padded(rows: Sequence[np.ndarray], *, pad_token_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)``: the token ids of ``rows`` (each 1-D, at least one token) padded on the
    left with ``pad_token_id`` to the longest, and True where a token is real."""
    length = max(len(row) for row in rows)
    ids = np.full((len(rows), length), pad_token_id, np.int32)
    mask = np.zeros((len(rows), length), bool)
    for index, row in enumerate(rows):
        ids[index, length - len(row) :] = row
        mask[index, length - len(row) :] = True
    return ids, mask


def after_eos(
    tokens: Any, *, eos_token_ids: Sequence[int], pad_token_id: int
) -> tuple[np.ndarray, list[int]]:
    """``tokens`` ``(batch, new)`` with every token after a row's first EOS (any of
    ``eos_token_ids``) replaced by ``pad_token_id``, as transformers' ``generate`` fills a
    finished row, and each row's length (its EOS included).

    Rows never see each other, so every other row's tokens are those of a loop that stops each
    row at its EOS; decoding runs every row to the end and cuts here.
    """
    tokens = np.array(tokens, np.int32)
    lengths = [tokens.shape[1]] * tokens.shape[0]
    if len(eos_token_ids):
        hits = np.isin(tokens, np.asarray(eos_token_ids, np.int32))
        for row in np.flatnonzero(hits.any(axis=1)):
            end = int(np.argmax(hits[row])) + 1
            tokens[row, end:] = pad_token_id
            lengths[row] = end
    return tokens, lengths

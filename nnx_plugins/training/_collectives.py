"""What the processes of a multi-process run tell each other: short texts, over JAX's collectives.

A checkpoint written by several processes needs them to agree: on the temporary directory
process 0 made, on whether every process wrote its part (and the checksum of it), on whether
process 0 committed it. These are tiny all-gathers and broadcasts
(`jax.experimental.multihost_utils`); with one process they return at once.

Every process must make the same calls in the same order, as with any collective.

Example:
    >>> from nnx_plugins.training._collectives import broadcast_text, gather_text
    >>> broadcast_text("step_00000010.tmp-ab12")     # one process: its own text
    'step_00000010.tmp-ab12'
    >>> gather_text("ok")
    ['ok']
"""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils

__all__ = ["TEXT_BYTES", "broadcast_text", "gather_text", "sync", "process_label"]

TEXT_BYTES = 1024
"""The longest text (UTF-8 bytes) exchanged; longer texts are cut."""


def _encode(text: str, size: int) -> np.ndarray:
    data = text.encode("utf-8")[:size]
    buffer = np.zeros(size + 2, np.uint8)
    buffer[:2] = divmod(len(data), 256)
    buffer[2 : 2 + len(data)] = np.frombuffer(data, np.uint8)
    return buffer


def _decode(buffer: np.ndarray) -> str:
    length = int(buffer[0]) * 256 + int(buffer[1])
    return bytes(buffer[2 : 2 + length].tolist()).decode("utf-8", errors="replace")


def broadcast_text(text: str, *, size: int = TEXT_BYTES) -> str:
    """Process 0's ``text``, in every process (the others' arguments are ignored)."""
    if jax.process_count() == 1:
        return text
    return _decode(np.asarray(multihost_utils.broadcast_one_to_all(_encode(text, size))))


def gather_text(text: str, *, size: int = TEXT_BYTES) -> list[str]:
    """Every process's ``text``, by process index, in every process."""
    if jax.process_count() == 1:
        return [text]
    gathered = np.asarray(multihost_utils.process_allgather(_encode(text, size)))
    return [_decode(row) for row in gathered]


def sync(name: str) -> None:
    """Wait until every process has called ``sync`` with the same ``name``."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def process_label(index: int | None = None) -> str:
    """``"process 1 of 2"``: how messages name a process (this one by default).

    Example:
        >>> from nnx_plugins.training._collectives import process_label
        >>> process_label()
        'process 0 of 1'
    """
    return f"process {jax.process_index() if index is None else index} of {jax.process_count()}"

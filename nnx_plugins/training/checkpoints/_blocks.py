"""Blocks of arrays sharded across processes: who writes which block, and reading any region.

A block is the part of an array one device holds, as ``((start, stop), ...)`` per dimension.
When a checkpoint is written by several processes, each distinct block of each array is
written once, by the lowest-numbered process holding it (a replicated array: by process 0).
When it is read, possibly into another mesh over another number of processes, each process
assembles the regions its own devices need from the blocks that overlap them.

The blocks of a manifest are untrusted: `tiling_problem` checks that they cut the array into an
exact grid (no gap, no overlap, nothing outside) before anything is read.

Example:
    >>> import numpy as np
    >>> from nnx_plugins.training.checkpoints._blocks import assemble, tiling_problem
    >>> data = np.arange(12).reshape(3, 4)
    >>> blocks = [((0, 3), (0, 2)), ((0, 3), (2, 4))]        # two column blocks
    >>> print(tiling_problem((3, 4), blocks))
    None
    >>> pieces = [(b, lambda index, b=b: data[tuple(slice(*d) for d in b)][index]) for b in blocks]
    >>> assemble(((1, 2), (1, 4)), pieces, data.dtype).tolist()   # row 1, columns 1-3
    [[5, 6, 7]]
    >>> tiling_problem((3, 4), [((0, 3), (0, 3)), ((0, 3), (2, 4))])
    'its blocks overlap or leave gaps along dimension 1: [(0, 3), (2, 4)]'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

__all__ = ["Block", "SHARD_FILE", "shard_file", "block_of", "layout", "tiling_problem", "assemble"]

Block = tuple[tuple[int, int], ...]
"""``(start, stop)`` along each dimension."""

SHARD_FILE = re.compile(r"tensors-(\d{5})-of-(\d{5})\.safetensors\Z")
"""The tensor file of one process: ``tensors-00001-of-00002.safetensors``."""


def shard_file(process: int, count: int) -> str:
    """The tensor file that process ``process`` of ``count`` writes.

    Example:
        >>> from nnx_plugins.training.checkpoints._blocks import shard_file
        >>> shard_file(1, 2)
        'tensors-00001-of-00002.safetensors'
    """
    return f"tensors-{process:05d}-of-{count:05d}.safetensors"


def block_of(index: Sequence[slice], shape: Sequence[int]) -> Block:
    """The block an index (a tuple of slices, as `jax` gives them) selects in ``shape``.

    Example:
        >>> from nnx_plugins.training.checkpoints._blocks import block_of
        >>> block_of((slice(None), slice(2, 4)), (3, 4))
        ((0, 3), (2, 4))
    """
    return tuple((start, stop) for start, stop, _ in (s.indices(n) for s, n in zip(index, shape)))


def layout(array: Any) -> tuple[dict[Block, int], dict[Block, np.ndarray]]:
    """Every distinct block of ``array`` with the process that writes it (sorted by block: the
    same in every process), and the host data of the blocks this process writes.

    A block is written by the lowest-numbered process holding it. An array that is not spread
    over processes (a host array, or one on this process's devices only) is one block written
    by process 0.

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.training.checkpoints._blocks import layout
        >>> owners, mine = layout(np.zeros((2, 3)))
        >>> owners, [data.shape for data in mine.values()]
        ({((0, 2), (0, 3)): 0}, [(2, 3)])
    """
    full: Block = tuple((0, n) for n in np.shape(array))
    if not isinstance(array, jax.Array) or array.is_fully_addressable:
        mine = {full: np.asarray(array)} if jax.process_index() == 0 else {}
        return {full: 0}, mine
    holders: dict[Block, Any] = {}
    devices = sorted(array.sharding.device_set, key=lambda d: (d.process_index, d.id))
    index_map = array.sharding.devices_indices_map(array.shape)
    for device in devices:
        holders.setdefault(block_of(index_map[device], array.shape), device)
    here = {shard.device: shard for shard in array.addressable_shards}
    mine = {
        block: np.asarray(here[device].data) for block, device in holders.items() if device in here
    }
    return {block: holders[block].process_index for block in sorted(holders)}, mine


def tiling_problem(shape: Sequence[int], blocks: Sequence[Block]) -> str | None:
    """How ``blocks`` fail to cut ``shape`` into an exact grid; ``None`` when they do."""
    if not blocks:
        return "it has no blocks"
    cuts: list[set[tuple[int, int]]] = [set() for _ in shape]
    for block in blocks:
        if len(block) != len(shape) or any(
            not (0 <= start <= stop <= size) or (start == stop and size > 0)
            for (start, stop), size in zip(block, shape)
        ):
            return f"the block {list(block)} does not fit its shape {list(shape)}"
        for axis, extent in enumerate(block):
            cuts[axis].add(extent)
    for axis, size in enumerate(shape):
        ordered = sorted(cuts[axis])
        edges = [0] + [stop for _, stop in ordered]
        if [start for start, _ in ordered] != edges[:-1] or edges[-1] != size:
            return f"its blocks overlap or leave gaps along dimension {axis}: {ordered}"
    if len(set(blocks)) != len(blocks) or len(blocks) != math.prod(len(c) for c in cuts):
        return "its blocks do not form a grid (one is missing or repeated)"
    return None


def assemble(
    region: Block,
    pieces: Sequence[tuple[Block, Callable[[tuple[slice, ...]], np.ndarray]]],
    dtype: Any,
    trailing: Sequence[int] = (),
) -> np.ndarray:
    """The ``region`` of an array, from the ``pieces`` (block, reader) that tile it.

    A reader takes slices relative to its block and returns that part of the block. Dimensions
    after the blocked ones (``trailing``, the data of a PRNG key) are read whole.
    """
    out = np.empty([stop - start for start, stop in region] + list(trailing), dtype)
    whole = (slice(None),) * len(trailing)
    for block, read in pieces:
        overlap = [(max(a, c), min(b, d)) for (a, b), (c, d) in zip(region, block)]
        if any(start >= stop for start, stop in overlap):
            continue
        source = tuple(slice(lo - b[0], hi - b[0]) for (lo, hi), b in zip(overlap, block))
        target = tuple(slice(lo - r[0], hi - r[0]) for (lo, hi), r in zip(overlap, region))
        out[target + whole] = read(source + whole)
    return out

"""Blocks of sharded arrays: the grid check on untrusted blocks, and assembling any region."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_plugins.training.checkpoints._blocks import (
    SHARD_FILE,
    assemble,
    block_of,
    layout,
    shard_file,
    tiling_problem,
)


def test_block_of_normalizes_slices():
    assert block_of((slice(None), slice(2, 4)), (3, 4)) == ((0, 3), (2, 4))
    assert block_of((slice(1, None),), (5,)) == ((1, 5),)
    assert block_of((), ()) == ()


def test_shard_file_names_match_the_pattern():
    assert shard_file(0, 2) == "tensors-00000-of-00002.safetensors"
    assert SHARD_FILE.match(shard_file(12, 300))
    assert not SHARD_FILE.match("tensors-1-of-2.safetensors")
    assert not SHARD_FILE.match("tensors-00000-of-00002.safetensors/../x")


def test_a_host_array_is_one_block_written_by_process_0():
    owners, mine = layout(np.arange(6).reshape(2, 3))
    assert owners == {((0, 2), (0, 3)): 0}
    assert [a.tolist() for a in mine.values()] == [[[0, 1, 2], [3, 4, 5]]]
    assert layout(np.float32(2.0))[0] == {(): 0}


@pytest.mark.parametrize(
    ("shape", "blocks", "problem"),
    [
        ((4, 6), [((0, 4), (0, 6))], None),
        ((4, 6), [((0, 2), (0, 6)), ((2, 4), (0, 6))], None),
        ((4, 6), [((a, a + 2), (b, b + 3)) for a in (0, 2) for b in (0, 3)], None),
        ((), [()], None),
        ((0, 3), [((0, 0), (0, 3))], None),
        ((4,), [], "it has no blocks"),
        ((4,), [((0, 5),)], "the block [(0, 5)] does not fit its shape [4]"),
        ((4,), [((-1, 4),)], "does not fit its shape"),
        ((4,), [((2, 2),), ((0, 4),)], "does not fit its shape"),  # empty in a non-empty dim
        ((4, 6), [((0, 4),)], "does not fit its shape"),  # too few dimensions
        ((4,), [((0, 3),), ((2, 4),)], "overlap or leave gaps along dimension 0: [(0, 3), (2, 4)]"),
        ((4,), [((0, 1),), ((2, 4),)], "overlap or leave gaps along dimension 0"),
        ((4,), [((0, 2),), ((0, 4),)], "overlap or leave gaps along dimension 0"),
        ((4,), [((0, 2),)], "overlap or leave gaps along dimension 0"),
        ((4,), [((0, 2),), ((2, 4),), ((2, 4),)], "do not form a grid"),
        (
            (4, 6),
            [((0, 2), (0, 3)), ((0, 2), (3, 6)), ((2, 4), (0, 3))],
            "do not form a grid (one is missing or repeated)",
        ),
    ],
)
def test_tiling_problems(shape, blocks, problem):
    found = tiling_problem(shape, blocks)
    assert found == problem if problem is None else problem in found


@st.composite
def grids(draw):
    """An array, a grid of blocks over it, and a region to read."""
    shape = draw(st.lists(st.integers(1, 6), min_size=0, max_size=3))
    cuts = []
    for size in shape:
        inner = sorted(draw(st.sets(st.integers(1, size - 1), max_size=2))) if size > 1 else []
        edges = [0, *inner, size]
        cuts.append(list(zip(edges[:-1], edges[1:])))
    blocks = [()]
    for axis in cuts:
        blocks = [(*block, extent) for block in blocks for extent in axis]
    region = []
    for size in shape:
        start = draw(st.integers(0, size - 1))
        region.append((start, draw(st.integers(start + 1, size))))
    return tuple(shape), blocks, tuple(region)


@settings(max_examples=150, deadline=None)
@given(grids())
def test_any_region_assembles_from_the_blocks_of_a_grid(case):
    shape, blocks, region = case
    assert tiling_problem(shape, blocks) is None
    data = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    pieces = []
    for block in blocks:
        part = data[tuple(slice(a, b) for a, b in block)].copy()
        pieces.append((block, part.__getitem__))
    want = data[tuple(slice(a, b) for a, b in region)]
    np.testing.assert_array_equal(assemble(region, pieces, np.int32), want)


def test_trailing_dimensions_are_read_whole():
    keys = np.arange(8, dtype=np.uint32).reshape(4, 2)  # four keys of two words
    blocks = [((0, 2),), ((2, 4),)]
    pieces = [(b, keys[b[0][0] : b[0][1]].__getitem__) for b in blocks]
    got = assemble(((1, 3),), pieces, np.uint32, trailing=(2,))
    assert got.tolist() == [[2, 3], [4, 5]]

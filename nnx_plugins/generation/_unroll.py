"""A model's `Repeat`s unrolled for decoding, with each block's weights as arrays of their own.

A decoding step through a `Repeat` runs a scan over its blocks, which slices every block's
weights and stacked caches in and stacks them out whole at every token (3.1-3.4x the time of a
hand-written decoder on a CPU). Unrolled, each block has its own weights and caches, and a step
writes one position of each cache in place.

Where the blocks' weights are taken apart matters for the compile time. Sliced inside the
compiled program (before the loop, or in the step), each slice is a kernel of its own: 16
weights x 48 blocks are 768 kernels, which doubled the program's compile time against a decoder
handed the blocks' weights as separate arrays (the slices compile at about 10 ms each on a
CPU). So `unstack` takes the blocks apart before the program, with one small program that
takes block ``i`` of every stacked weight at a dynamic index: compiled once whatever the
depth, called once per block. `Unrolling` is what that needs to know about a model's structure
(found once per structure, by unrolling an abstract copy), and `unstack` gives the leaves of
the unrolled model's State for a call.

Example:
    >>> import jax, jax.numpy as jnp
    >>> import nnx_core as nnx
    >>> from nnx_layers import Linear, Repeat, Sequential
    >>> from nnx_plugins.generation._unroll import unrolling, unstack
    >>> model = Sequential(Repeat(lambda rngs: Linear(2, 2, rngs=rngs), 3, rngs=nnx.Rngs(0)))
    >>> graphdef, state = nnx.split(model)
    >>> leaves, treedef = jax.tree.flatten(state)
    >>> plan = unrolling(graphdef, treedef, leaves)
    >>> unrolled = nnx.merge(plan.graphdef, jax.tree.unflatten(plan.treedef, unstack(plan, leaves)))
    >>> [layer.kernel.shape for layer in unrolled.layers[0].blocks]
    [(2, 2), (2, 2), (2, 2)]
    >>> x = jnp.ones((1, 2))
    >>> bool(jnp.allclose(unrolled(x), model(x)))
    True
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import jax
import numpy as np

import nnx_core as nnx
from nnx_layers import Repeat

__all__ = ["Blocks", "Unrolling", "unrolled", "unrolling", "unstack"]

_KEPT = 16  # Unrollings kept (one per model structure and shapes decoded recently)


class Blocks(nnx.Module):
    """A `Repeat`'s blocks unrolled for decoding: each called in turn, as the Repeat calls them
    (``args``/``kwargs`` to every block), each with its own weights and caches."""

    def __init__(self, blocks: list[Any]):
        self.blocks = blocks

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        for block in self.blocks:
            x = block(x, *args, **kwargs)
        return x


def unrolled(model: Any) -> Any:
    """``model`` with every `Repeat` in it replaced by its blocks, unrolled (`Blocks`; a
    `Blocks` itself when ``model`` is a Repeat). The Repeats' weights are sliced: see the
    module docstring for where `decode` does that instead."""
    if isinstance(model, Repeat):
        return Blocks([unrolled(block) for block in model.unstack()])
    found = [(path, m) for path, m in model.iter_modules() if isinstance(m, Repeat)]
    done: list[tuple[Any, ...]] = []
    for path, repeat in found:
        if any(path[: len(outer)] == outer for outer in done):
            continue  # inside a Repeat already unrolled
        parent = model
        for key in path[:-1]:
            parent = getattr(parent, key) if isinstance(parent, nnx.Module) else parent[key]
        blocks = unrolled(repeat)
        if isinstance(parent, nnx.Module):
            setattr(parent, path[-1], blocks)
        else:
            parent[path[-1]] = blocks
        done.append(tuple(path))
    return model


class Unrolling:
    """How to feed a model's unrolled copy from the model's own State.

    Attributes:
        graphdef: the unrolled model's GraphDef (no Repeat left).
        treedef: the pytree structure of the unrolled model's State.
        kept: per leaf of the unrolled State, the position of the model's State leaf it is, or
            -1 when it is sliced from a stacked leaf (see ``taken``).
        taken: ``(index, positions, sources)`` per block: the leaves at ``positions`` of the
            unrolled State are entry ``index`` (a tuple: one entry per nested Repeat) of the
            model's leaves at ``sources``.
    """

    def __init__(self, graphdef: Any, treedef: Any, kept: list[int], taken: list[Any]):
        self.graphdef, self.treedef, self.kept, self.taken = graphdef, treedef, kept, taken


_UNROLLINGS: OrderedDict[Any, Unrolling] = OrderedDict()


def unrolling(graphdef: Any, treedef: Any, leaves: list[Any]) -> Unrolling:
    """The `Unrolling` of the model ``nnx.merge(graphdef, jax.tree.unflatten(treedef,
    leaves))``: found once per structure and shapes (by unrolling an abstract copy, which
    computes nothing); the last few are kept."""
    shapes = tuple((getattr(x, "shape", ()), getattr(x, "dtype", type(x))) for x in leaves)
    key = (graphdef, treedef, shapes)
    found = _UNROLLINGS.get(key)
    if found is None:
        found = _UNROLLINGS[key] = _find(graphdef, jax.tree.unflatten(treedef, leaves))
        while len(_UNROLLINGS) > _KEPT:
            _UNROLLINGS.popitem(last=False)
    else:
        _UNROLLINGS.move_to_end(key)
    return found


def _value(leaf: Any) -> Any:
    return leaf.value if isinstance(leaf, nnx.Variable) else leaf


def _find(graphdef: Any, state: Any) -> Unrolling:
    """Unroll an abstract copy of the model and see where each leaf of its State came from: a
    leaf of ``state`` as it is (the same traced value), or one sliced from a stacked leaf (the
    path through each `Blocks` names the Repeat's ``block`` and the block's index)."""
    found: list[Unrolling] = []

    def unroll(state: Any) -> Any:
        position = {id(x): i for i, x in enumerate(jax.tree.leaves(state))}
        sources = {path: _value(leaf) for path, leaf in state.flat_state()}
        model = unrolled(nnx.merge(graphdef, state))
        blocks = {p: len(m.blocks) for p, m in model.iter_modules() if isinstance(m, Blocks)}
        graphdef_out, out = nnx.split(model)
        kept: list[int] = []
        taken: dict[tuple[int, ...], tuple[list[int], list[int]]] = {}
        paths = {id(_value(leaf)): path for path, leaf in out.flat_state()}
        for i, value in enumerate(jax.tree.leaves(out)):
            kept.append(position.get(id(value), -1))
            if kept[-1] < 0:
                source, index = _source(paths[id(value)], blocks, sources)
                positions, stacked = taken.setdefault(index, ([], []))
                positions.append(i)
                stacked.append(position[id(source)])
        found.append(
            Unrolling(
                graphdef_out,
                jax.tree.structure(out),
                kept,
                [(index, *columns) for index, columns in taken.items()],
            )
        )
        return out

    jax.eval_shape(unroll, state)
    return found[0]


def _source(
    path: tuple[Any, ...], blocks: dict[tuple[Any, ...], int], sources: dict[Any, Any]
) -> tuple[Any, tuple[int, ...]]:
    """The stacked value a leaf of the unrolled model at ``path`` is sliced from, and the
    index per Repeat level; as `nnx_layers.Repeat.unstack` does, a level whose count is not
    the leading size of the value leaves it whole (a Variable the blocks share)."""
    stacked: list[Any] = []
    levels: list[tuple[int, int]] = []
    i = 0
    while i < len(path):
        if tuple(path[:i]) in blocks and path[i] == "blocks":
            levels.append((path[i + 1], blocks[tuple(path[:i])]))
            stacked.append("block")
            i += 2
        else:
            stacked.append(path[i])
            i += 1
    source = sources[tuple(stacked)]
    shape = tuple(getattr(source, "shape", ()))
    index = []
    for block, count in levels:
        if shape and shape[0] == count:
            index.append(block)
            shape = shape[1:]
    return source, tuple(index)


@jax.jit
def _take(stacked: list[Any], index: jax.Array) -> list[Any]:
    """Entry ``index`` (one position per Repeat level) of each stacked value: one program
    for every block of a Repeat."""
    out = []
    for x in stacked:
        for level in range(index.shape[0]):
            x = jax.lax.dynamic_index_in_dim(x, index[level], keepdims=False)
        out.append(x)
    return out


def unstack(plan: Unrolling, leaves: list[Any]) -> list[Any]:
    """The leaves of the unrolled model's State (``plan.treedef``) for the model's State
    ``leaves``: its own leaves, and each block's slices of the stacked ones (one `_take` call
    per block)."""
    if not plan.taken:
        return leaves
    out = [leaves[j] if j >= 0 else None for j in plan.kept]
    for index, positions, sources in plan.taken:
        sliced = _take([leaves[j] for j in sources], np.asarray(index, np.int32))
        for i, x in zip(positions, sliced):
            out[i] = x
    return out

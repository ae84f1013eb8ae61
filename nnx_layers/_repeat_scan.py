"""Running a stack of layers one after another with ``jax.lax.scan``.

The stack's Variables are the scanned inputs (one slice per layer); the carry is the value
passed from layer to layer plus the state of any Module among the call's other arguments (an
``Rngs`` given to the call advances from layer to layer, as it does through an unrolled stack).
Only the layer is traced, once, whatever the number of layers. What a layer changes comes back
stacked: Variables it updates (BatchNorm statistics, Rng counts) and Variables it creates
(``sow``, ``init_cache``); Variables it leaves alone are not copied out of the loop.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import (
    Module,
    State,
    Variable,
    format_path,
    graphdef,
    merge,
    split,
    state,
    update,
    with_batch_constraint,
)

from ._axis_names import NAME_KEYS
from ._repeat_stack import has_layer_axis

__all__ = ["scan_layers"]

Path = tuple[Any, ...]
#: ``step(layer, carry, extras) -> (carry, output)``
Step = Callable[[Module, Any, Any], tuple[Any, Any]]


def _is_node(x: Any) -> bool:
    return isinstance(x, (Module, Variable))


def _raw(leaf: Any) -> Any:
    return leaf.value if isinstance(leaf, Variable) else leaf


def spell(x: Any) -> str:
    """``float32[2,8]`` for an array, the same in brackets for a tuple/list/dict of arrays."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{jnp.dtype(x.dtype).name}[{','.join(map(str, x.shape))}]"
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(spell(v) for v in x) + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {spell(v)}" for k, v in x.items()) + "}"
    return type(x).__name__


class LoopError(ValueError):
    """A mistake found while the loop body is traced; raised again, as a plain ValueError,
    outside ``jax.lax.scan`` (without JAX's note about its filtered frames)."""


def check_carry(before: Any, after: Any) -> None:
    """Raise unless ``after`` has the structure, shapes and dtypes of ``before``."""
    same = jax.tree.structure(before) == jax.tree.structure(after) and all(
        jnp.shape(a) == jnp.shape(b) and jnp.result_type(a) == jnp.result_type(b)
        for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after))
    )
    if not same:
        raise LoopError(
            f"Repeat: the block returns {spell(after)} for an input of {spell(before)}. The "
            "blocks run one after another in a loop (scan), so a block's output must have its "
            "input's shape and dtype: make the block keep the shape (e.g. equal in_features "
            "and out_features), or move the layer that changes it out of the Repeat."
        )


class _Body:
    """The function ``jax.lax.scan`` traces, and what its trace found out.

    Leaf ``i`` of the call's graph (the stack, then the Modules among the other arguments) is
    scanned (``self.stacked``: a block Variable with the block axis) or carried (anything
    else: an argument's state, or a Variable the blocks share, such as an ``Rngs`` given to
    every block's constructor).
    """

    def __init__(self, step: Step, roots: list[Any], extras: tuple[Any, Any], count: int):
        self.step = step
        self.flat, self.treedef = jax.tree_util.tree_flatten(extras, is_leaf=_is_node)
        self.at = [i for i, x in enumerate(self.flat) if _is_node(x)]
        self.graphdef, current = split(roots)
        self.paths = self.graphdef.paths
        leaves = [leaf for _, leaf in current.flat_state()]
        self.values = [_raw(leaf) for leaf in leaves]
        self.stacked = [
            i
            for i, p in enumerate(self.paths)
            if p[0] == 0 and has_layer_axis(self.values[i], count)
        ]
        chosen = set(self.stacked)
        self.carried = [i for i in range(len(self.paths)) if i not in chosen]
        self.named = [
            i
            for i in self.stacked
            if isinstance(leaves[i], Variable)
            and any(leaves[i].get_metadata(key, None) for key in NAME_KEYS)
        ]
        self.index = {p: i for i, p in enumerate(self.paths)}
        # learned while tracing:
        self.out_graphdef = self.graphdef
        self.out_paths: list[Path] = []  # the block Variables that come out stacked
        self.carried_changed: list[int] = []

    def __call__(self, carry: Any, layer: list[Any]) -> Any:
        value, carried = carry
        full = list(self.values)
        for i, v in [*zip(self.stacked, layer), *zip(self.carried, carried)]:
            full[i] = v
        roots = merge(self.graphdef, State.from_flat_state(zip(self.paths, full)))
        renamed = self._strip_names(roots)
        flat = list(self.flat)
        for k, i in enumerate(self.at):
            flat[i] = roots[k + 1]
        # (the activations between blocks split over the batch's mesh axes, when a mesh and a
        # rule for "batch" are in force: XLA then gathers each block's weights, not the batch)
        value = with_batch_constraint(value)
        new_value, output = self.step(roots[0], value, self.treedef.unflatten(flat))
        new_value = with_batch_constraint(new_value)
        for variable, key, names in renamed:
            variable.set_metadata(key, names)
        out_graphdef, out = split(roots)
        out_leaves = [(p, _raw(leaf)) for p, leaf in out.flat_state()]
        carried_out = self._carried(out_leaves, full)
        chosen = set(self.stacked)
        stacked = []
        self.out_paths = []
        for p, v in out_leaves:
            i = self.index.get(p)
            if i is None or (i in chosen and v is not full[i]):
                self.out_paths.append(p)
                stacked.append(v)
        self.out_graphdef = out_graphdef
        return (new_value, carried_out), (output, stacked)

    def _strip_names(self, roots: list[Any]) -> list[tuple[Variable, str, Any]]:
        """Inside the loop a block's Variables name only their own axes (as in flax.nnx)."""
        if not self.named:
            return []
        variables = [leaf for _, leaf in state(roots).flat_state()]
        renamed = []
        for i in self.named:
            variable = variables[i]
            for key in NAME_KEYS:
                names = variable.get_metadata(key, None)
                if names:
                    renamed.append((variable, key, names))
                    variable.set_metadata(key, tuple(names)[1:])
        return renamed

    def _carried(self, out_leaves: list[tuple[Path, Any]], full: list[Any]) -> list[Any]:
        """The carried values after one block; raise if the call's structure shrank or an
        argument's grew."""
        out = dict(out_leaves)
        removed = [p for p in self.paths if p not in out]
        if removed:
            raise LoopError(
                f"Repeat: a block removed {_show(removed)} inside the loop. Remove state "
                "outside the call (e.g. with nnx_core.pop)."
            )
        if any(p[0] != 0 for p in out if p not in self.index):
            raise LoopError(
                "Repeat: a block added Variables to a Module given to the call (e.g. an "
                "Rngs). Inside the loop only the blocks' own state may grow; create that "
                "state before the call."
            )
        carried = [out[self.paths[i]] for i in self.carried]
        self.carried_changed = [
            k for k, (v, i) in enumerate(zip(carried, self.carried)) if v is not full[i]
        ]
        return carried


def _show(paths: list[Path]) -> str:
    shown = [
        (f"block.{format_path(p[1:])}" if p[1:] else "block")
        if p[0] == 0
        else f"argument {format_path(p)}"
        for p in paths[:5]
    ]
    return ", ".join(shown)


def scan_layers(
    block: Module,
    count: int,
    step: Step,
    carry: Any,
    extras: tuple[Any, Any],
    *,
    remat: bool,
    unroll: int,
) -> tuple[Any, Any]:
    """Run ``step`` on each layer of the stack ``block`` in order; ``(carry, stacked outputs)``.

    ``extras`` (the call's other arguments) are the same for every layer; the state of the
    Modules among them is carried from layer to layer.
    """
    roots = [block]
    flat, _ = jax.tree_util.tree_flatten(extras, is_leaf=_is_node)
    roots += [x for x in flat if _is_node(x)]
    body = _Body(step, roots, extras, count)
    xs = [body.values[i] for i in body.stacked]
    init = (carry, [body.values[i] for i in body.carried])
    traced = jax.checkpoint(body, prevent_cse=False) if remat else body
    try:
        (carry, carried), (outputs, stacked) = jax.lax.scan(
            traced, init, xs, length=count, unroll=unroll
        )
    except LoopError as error:
        raise ValueError(*error.args) from None
    changes = list(zip(body.out_paths, stacked))
    changes += [(body.paths[body.carried[k]], carried[k]) for k in body.carried_changed]
    if body.out_graphdef == body.graphdef:
        if changes:
            update(roots, State.from_flat_state(changes))
    else:
        _graft(roots, body, changes)
    return carry, outputs


def _child(node: Any, key: Any) -> Any:
    if isinstance(node, Module):
        return vars(node).get(key)
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list) and isinstance(key, int) and key < len(node):
        return node[key]
    return None


def _set_child(node: Any, key: Any, value: Any) -> None:
    if isinstance(node, Module):
        setattr(node, key, value)
    elif isinstance(node, dict):
        node[key] = value
    elif isinstance(node, list) and key == len(node):
        node.append(value)
    elif isinstance(node, list):
        node[key] = value
    else:
        raise ValueError(
            f"Repeat: a block created a Variable inside a {type(node).__name__}, which cannot "
            "take a new entry. Keep new state in a Module attribute, a list or a dict."
        )


def _attach(root: Any, fresh: Any, path: Path) -> None:
    """Put the node at ``path`` of ``fresh`` into ``root``, at its first missing ancestor."""
    here, there = root, fresh
    for key in path[:-1]:
        there = _child(there, key)
        below = _child(here, key)
        if below is None or type(below) is not type(there):
            _set_child(here, key, there)
            return
        here = below
    _set_child(here, path[-1], _child(there, path[-1]))


def _graft(roots: list[Any], body: _Body, changes: list[tuple[Path, Any]]) -> None:
    """Bring the Variables a block created (stacked) into the caller's objects."""
    new_graphdef = body.out_graphdef
    changed = dict(changes)
    values = [
        changed[p] if p in changed else body.values[body.index[p]] for p in new_graphdef.paths
    ]
    fresh = merge(new_graphdef, State.from_flat_state(zip(new_graphdef.paths, values)))
    old = [(p, v) for p, v in changes if p in body.index]
    if old:
        update(roots, State.from_flat_state(old))
    for p in new_graphdef.paths:
        if p not in body.index:
            _attach(roots, fresh, p)
    if graphdef(roots) != new_graphdef:
        raise ValueError(
            "Repeat: a block changed a static attribute inside the loop (an attribute that is "
            "not a Variable or a submodule). Set such attributes before the call, e.g. with "
            "repeat.set_attributes(...)."
        )

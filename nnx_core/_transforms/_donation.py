"""Donation by default for ``jit``: donate exactly the state buffers a step replaces, when safe.

A train step replaces its parameters, statistics and optimizer state; a JAX user who cares about
speed donates those buffers so that XLA updates them in place. ``jit`` does it unasked:

1. The first call of a structure traces the step once (``jax.jit(...).trace``) with the value of
   every Variable in the donated argument, and learns which values the step replaces.
2. If it replaces all of them with values of the same type (a train step), that traced function
   is the one that runs. Otherwise its program is jitted again with only the replaced values
   donated (an evaluation step donates nothing and returns no state); the user's function is
   not traced a second time.
3. Each call donates a buffer only when nothing but its Variable can read it: the Variable's
   ``_private`` flag says jit wrote the array as a fresh output and nothing has read it since
   (which rules out other Array objects sharing the buffer, e.g. from ``jax.device_put``), and
   its reference count says no other Python object holds it. Any other value is first replaced
   by a private copy (one batched ``device_put``), so the donation mask, and the compiled
   program, never change from call to call.

The safety argument and the cases it covers are in docs/design/transforms.md.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Sequence
from sys import getrefcount
from typing import Any

import jax
from jax.extend.core import jaxpr_as_fun

from .._graph import GraphDef, Plan, write_child
from .._tracing import Tracer
from .._variables import Variable, _set_private_slot, _set_raw_value_slot
from ._inflight import multi_device_cpu, wait_for_previous
from ._lift import OutInfo, apply, run_pure

_raw_value = operator.attrgetter("_raw_value")
_private = operator.attrgetter("_private")
# A Variable's array that nothing else holds is referenced by the Variable's slot, by the list
# jit gathers the values in, and by getrefcount's own argument.
_SOLE_HOLDER_REFS = 3
_CHANGED_DIFFERENTLY = (
    "jit: the function changed the structure of its Module arguments differently for inputs of "
    "different shapes or dtypes. Make structural changes (new attributes, sow) independent of "
    "input shapes, or jit the two cases separately."
)


_GENERAL, _ONE, _NONE = range(3)
_ONE_LEAF = jax.tree_util.tree_structure(0)
_NOTHING = jax.tree_util.tree_structure(None)


def _consume(it: Any) -> None:
    deque(it, maxlen=0)


class Layout:
    """Which leaf positions one compiled step donates, keeps, and gets back (static)."""

    __slots__ = ("donated", "kept", "out", "fresh", "result")

    def __init__(
        self,
        donated: Sequence[int],
        kept: Sequence[int],
        out: Sequence[int] | None,
        fresh: Sequence[bool],
    ):
        self.donated = tuple(donated)  # always Variables
        self.kept = tuple(kept)
        self.out = None if out is None else tuple(out)  # None: the structure changed
        self.fresh = tuple(fresh)  # per out position: a new array, not one of the inputs
        self.result = _GENERAL  # what the user's function returns: see `outputs`

    def learn_result(self, info: OutInfo) -> None:
        if info.out_positions:
            return
        if info.out_treedef == _ONE_LEAF:
            self.result = _ONE
        elif info.out_treedef == _NOTHING:
            self.result = _NONE


class _Gathered:
    """A Layout applied to one Plan: the Variables (or positions) to read and write."""

    __slots__ = ("donated", "kept", "kept_all_variables", "out", "out_all_variables", "multi_cpu")

    def __init__(self, plan: Plan, layout: Layout):
        leaves = plan.leaves
        self.multi_cpu: bool | None = None  # spread over several CPU devices (see _inflight)
        self.donated = [leaves[i] for i in layout.donated]
        self.kept = [leaves[i] for i in layout.kept]
        self.kept_all_variables = all(isinstance(v, Variable) for v in self.kept)
        self.out = [leaves[i] for i in layout.out or ()]
        self.out_all_variables = all(isinstance(v, Variable) for v in self.out)


class Learned:
    """What tracing a step taught: its OutInfo and which leaves it replaced (checked equal for
    every shape the step is traced for)."""

    __slots__ = ("info", "changed", "same_type", "fresh")

    def __init__(self) -> None:
        self.info: OutInfo | None = None
        self.changed: tuple[int, ...] = ()
        self.same_type: frozenset[int] = frozenset()
        self.fresh: dict[int, bool] = {}

    def record(
        self,
        info: OutInfo,
        changed: tuple[int, ...],
        same_type: frozenset[int],
        fresh: dict[int, bool],
    ) -> None:
        if self.info is not None and (self.info, self.changed) != (info, changed):
            raise ValueError(_CHANGED_DIFFERENTLY)
        self.info, self.changed, self.same_type, self.fresh = info, changed, same_type, fresh


def _interleave(
    n: int, first: Sequence[int], a: Sequence[Any], second: Sequence[int], b: Sequence[Any]
) -> list[Any]:
    out: list[Any] = [None] * n
    for i, v in zip(first, a):
        out[i] = v
    for i, v in zip(second, b):
        out[i] = v
    return out


def _same_type(a: Any, b: Any) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    return bool(operator.eq(ta, tb)) and all(jax.typeof(x) == jax.typeof(y) for x, y in zip(la, lb))


def learning_step(
    fun: Callable[..., Any],
    graphdef: GraphDef,
    treedef: Any,
    positions: tuple[int, ...],
    n: int,
    var_pos: tuple[int, ...],
    kept_pos: tuple[int, ...],
    learned: Learned,
) -> Callable[..., Any]:
    """The pure step traced first: every Variable value donated and returned (see module doc)."""

    def step(donated: list[Any], kept: list[Any], others: list[Any]) -> tuple[list[Any], list[Any]]:
        in_values = _interleave(n, var_pos, donated, kept_pos, kept)
        info, values, out_others = run_pure(
            fun, graphdef, in_values, treedef, positions, others, return_all=True
        )
        if not info.same:
            learned.record(info, (), frozenset(), {})
            return values, out_others
        changed = tuple(i for i in range(n) if values[i] is not in_values[i])
        inputs = {id(x) for x in jax.tree_util.tree_leaves((in_values, others))}
        fresh = {
            i: not any(id(x) in inputs for x in jax.tree_util.tree_leaves(values[i]))
            for i in changed
        }
        same_type = frozenset(i for i in var_pos if _same_type(values[i], in_values[i]))
        learned.record(info, changed, same_type, fresh)
        kept_changed = [i for i in kept_pos if i in fresh]
        return [values[i] for i in var_pos] + [values[i] for i in kept_changed], out_others

    step.__name__ = getattr(fun, "__name__", "step")
    return step


def exact_layout(
    learned: Learned, var_pos: tuple[int, ...], kept_pos: tuple[int, ...]
) -> Layout | None:
    """The Layout of the learning step itself when it is right: every Variable replaced by a
    value of the same type (a train step); else None."""
    info = learned.info
    if info is None or not info.same or not learned.same_type.issuperset(var_pos):
        return None
    if not set(learned.changed).issuperset(var_pos):
        return None
    out = var_pos + tuple(i for i in kept_pos if i in learned.fresh)
    return Layout(var_pos, kept_pos, out, [learned.fresh.get(i, False) for i in out])


def refined_layout(learned: Learned, n: int, var_pos: tuple[int, ...]) -> Layout:
    """Donate only the Variables the step replaces with a value of the same type; return only
    the replaced values (nothing is donated when the structure changes)."""
    info = learned.info
    assert info is not None
    if not info.same:
        return Layout((), range(n), None, ())
    changed = set(learned.changed)
    donated = [i for i in var_pos if i in changed and i in learned.same_type]
    kept = [i for i in range(n) if i not in set(donated)]
    out = sorted(changed)
    return Layout(donated, kept, out, [learned.fresh[i] for i in out])


def refined_step(
    traced: Any,
    learning: Callable[..., Any],
    layout: Layout,
    n: int,
    var_pos: tuple[int, ...],
    kept_pos: tuple[int, ...],
    learned: Learned,
) -> Callable[..., Any]:
    """The refined step: the learning step's traced program, with the arguments regrouped by
    ``layout`` (for a new shape or dtype the user's function is traced as usual)."""
    program = jaxpr_as_fun(traced.jaxpr)
    in_avals = list(traced.jaxpr.in_avals)
    in_tree: Any = traced.in_tree.children()[0]  # (args, kwargs) -> args
    out_tree = traced.out_tree

    def step(donated: list[Any], kept: list[Any], others: list[Any]) -> tuple[list[Any], list[Any]]:
        in_values = _interleave(n, layout.donated, donated, layout.kept, kept)
        args = ([in_values[i] for i in var_pos], [in_values[i] for i in kept_pos], others)
        flat, tree = jax.tree_util.tree_flatten(args)
        if tree == in_tree and [jax.typeof(x) for x in flat] == in_avals:
            values, out_others = jax.tree_util.tree_unflatten(out_tree, program(*flat))
        else:
            values, out_others = learning(*args)
        if layout.out is None:
            return values, out_others
        returned = var_pos + tuple(i for i in kept_pos if i in learned.fresh)
        by_position = dict(zip(returned, values))
        return [by_position[i] for i in layout.out], out_others

    step.__name__ = learning.__name__
    return step


# -- per call --------------------------------------------------------------------------------------
def protect(leaves: list[Variable], values: list[Any]) -> list[Any]:
    """``values`` with a private copy in place of every value that something else may read."""
    counts = list(map(getrefcount, values))  # as in `call`: slot, list, argument
    flags = list(map(_private, leaves))
    shared = [
        j
        for j, (flag, count) in enumerate(zip(flags, counts))
        if not flag or count > _SOLE_HOLDER_REFS
    ]
    if not shared:
        return values
    originals = [values[j] for j in shared]
    if any(isinstance(x, Tracer) for x in jax.tree_util.tree_leaves(originals)):
        return values  # inside an outer transform: nothing is donated
    out = list(values)
    for j, copy in zip(shared, _copies(originals)):
        out[j] = copy
    return out


def _copies(arrays: list[Any]) -> list[Any]:
    """A new buffer for each array, in its sharding.

    device_put copies what this process can address; an array spread over several processes'
    devices (which device_put refuses, even to its own sharding) is copied shard by shard.
    """
    spread = [isinstance(x, jax.Array) and not x.is_fully_addressable for x in arrays]
    local = [j for j, s in enumerate(spread) if not s]
    targets = [arrays[j].sharding if isinstance(arrays[j], jax.Array) else None for j in local]
    copied = jax.device_put([arrays[j] for j in local], targets, may_alias=False)
    out = list(arrays)
    for j, copy in zip(local, copied):
        out[j] = copy
    for j in (j for j, spans in enumerate(spread) if spans):
        x = arrays[j]
        shards = [jax.device_put(p.data, p.device, may_alias=False) for p in x.addressable_shards]
        out[j] = jax.make_array_from_single_device_arrays(x.shape, x.sharding, shards)
    return out


def call(
    fn: Callable[..., Any], layout: Layout, info: OutInfo, plan: Plan, others: list[Any]
) -> Any:
    """Run one compiled step: gather, protect, donate, write the results back."""
    gathered = plan.cache.get(layout)
    if gathered is None:
        gathered = plan.cache[layout] = _Gathered(plan, layout)
    d_leaves = gathered.donated
    donated = list(map(_raw_value, d_leaves))
    if donated and (
        not all(map(_private, d_leaves)) or max(map(getrefcount, donated)) > _SOLE_HOLDER_REFS
    ):
        donated = protect(d_leaves, donated)
    if gathered.kept_all_variables:
        kept = list(map(_raw_value, gathered.kept))
    else:
        current = plan.current_leaves()
        kept = [
            v._raw_value if isinstance(v, Variable) else v
            for v in (current[i] for i in layout.kept)
        ]
    multi_cpu = gathered.multi_cpu
    if multi_cpu is None:
        multi_cpu = gathered.multi_cpu = multi_device_cpu(donated + kept) is not None
    if multi_cpu:
        wait_for_previous(donated + kept)
    values, out_others = fn(donated, kept, others)
    if layout.out is None:  # the structure changed: rebuild in place
        return apply(info, plan, values, out_others)
    if gathered.out_all_variables:
        _consume(map(_set_raw_value_slot, gathered.out, values))
        _consume(map(_set_private_slot, gathered.out, layout.fresh))
    else:
        _write_mixed(plan, gathered.out, layout, values)
    result = layout.result
    if result == _ONE:
        return out_others[0]
    if result == _NONE:
        return None
    return outputs(info, plan, out_others)


def _write_mixed(plan: Plan, leaves: list[Any], layout: Layout, values: Sequence[Any]) -> None:
    assert layout.out is not None
    for i, leaf, value, fresh in zip(layout.out, leaves, values, layout.fresh):
        if isinstance(leaf, Variable):
            _set_raw_value_slot(leaf, value)
            _set_private_slot(leaf, fresh)
        else:
            owner, impl, key = plan.owners[i]
            write_child(owner, impl, key, value)
    plan.refresh_snapshots()


def outputs(info: OutInfo, plan: Plan, out_others: Sequence[Any]) -> Any:
    """The user's outputs, with the caller's own objects where the function returned its nodes."""
    if not info.out_positions:
        return jax.tree_util.tree_unflatten(info.out_treedef, out_others)
    leaves_out: list[Any] = list(out_others)
    for pos, (_, idx) in zip(info.out_positions, info.out_nodes):
        leaves_out.insert(pos, plan.objs[idx])
    return jax.tree_util.tree_unflatten(info.out_treedef, leaves_out)

"""The machinery every lifted transform shares.

A call is cut into *graph roots* (Modules, Variables, registered identity nodes found anywhere in
the arguments, jointly flattened into one cached :class:`Plan`) and ordinary pytree leaves. Inside
the JAX transform the roots are rebuilt as fresh objects around the traced values, the user
function runs on them, and what it changed is handed back out: only the values that changed when
the structure is unchanged (the common case), or the whole new structure otherwise.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from .._graph import GraphDef, Plan, _Unflattener, cached_plan, impl_for, unflatten, write_child
from .._variables import Variable, _set_value_slot

tree_flatten = jax.tree_util.tree_flatten


def is_graph_root(x: Any) -> bool:
    """Objects with identity that the graph machinery (not JAX's pytrees) handles."""
    if isinstance(x, Variable):
        return True
    impl = impl_for(type(x))
    return impl is not None and impl.identity


@dataclass
class Call:
    """One call's arguments, cut into graph roots and other leaves."""

    treedef: Any
    positions: tuple[int, ...]
    roots: tuple[Any, ...]
    others: list[Any]


_FAST_TREEDEFS: dict[tuple[int, tuple[int, ...]], Any] = {}


def extract(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    if not kwargs:
        # Fast path for the common call `f(model, optimizer, x, y)`: every argument is a graph
        # root or an array, so the tree structure depends only on which positions are roots.
        positions = []
        for i, a in enumerate(args):
            if is_graph_root(a):
                positions.append(i)
            elif not isinstance(a, jax.Array):
                break
        else:
            key = (len(args), tuple(positions))
            treedef = _FAST_TREEDEFS.get(key)
            if treedef is None:
                treedef = _FAST_TREEDEFS[key] = jax.tree_util.tree_structure(
                    (tuple(0 for _ in args), {})
                )
            roots = tuple(args[i] for i in positions)
            others = [a for i, a in enumerate(args) if i not in key[1]] if positions else list(args)
            return Call(treedef, key[1], roots, others)
    leaves, treedef = tree_flatten((args, kwargs), is_leaf=is_graph_root)
    root_positions: list[int] = []
    root_list: list[Any] = []
    other_list: list[Any] = []
    for i, x in enumerate(leaves):
        if is_graph_root(x):
            root_positions.append(i)
            root_list.append(x)
        else:
            other_list.append(x)
    return Call(treedef, tuple(root_positions), tuple(root_list), other_list)


# One GraphDef object per structure, so jit cache lookups compare by identity, not deeply.
_GRAPHDEFS: dict[GraphDef, GraphDef] = {}


class PlanCache:
    """Plans of the root tuples a transform is called with.

    They are kept on the first root when it is a Module (see ``cached_plan``: freed with the
    model, shared by every jitted function); otherwise here, for the last few root tuples.
    """

    __slots__ = ("plans",)

    def __init__(self) -> None:
        self.plans: dict[tuple[int, ...], Plan] = {}

    def get(self, roots: tuple[Any, ...]) -> Plan:
        plan = cached_plan(roots) if roots else None
        if plan is None:
            plan = self._local(roots)
        graphdef = plan.graphdef
        known = _GRAPHDEFS.get(graphdef)
        if known is None:
            if len(_GRAPHDEFS) > 4096:
                _GRAPHDEFS.clear()
            _GRAPHDEFS[graphdef] = graphdef
        elif known is not graphdef:
            plan.graphdef = known
        return plan

    def _local(self, roots: tuple[Any, ...]) -> Plan:
        key = tuple(map(id, roots))
        plan = self.plans.get(key)
        if plan is not None and plan.valid() and all(a is b for a, b in zip(plan.roots, roots)):
            return plan
        plan = Plan(roots)
        if len(self.plans) >= 8:
            self.plans.pop(next(iter(self.plans)))
        self.plans[key] = plan
        return plan


_get_value = operator.attrgetter("_value")


def input_values(plan: Plan) -> list[Any]:
    if plan.variables_only:
        return list(map(_get_value, plan.leaves))
    return [v._value if isinstance(v, Variable) else v for v in plan.current_leaves()]


def rebuild(
    graphdef: GraphDef,
    values: Sequence[Any],
    treedef: Any,
    positions: tuple[int, ...],
    others: Sequence[Any],
) -> tuple[tuple[Any, ...], dict[str, Any], tuple[Any, ...], dict[int, Any]]:
    """Inside a transform: fresh objects around ``values``, put back into the arguments."""
    u = _Unflattener(values)
    spec = graphdef.spec
    roots: tuple[Any, ...]
    if not positions:
        roots = ()
    elif spec[0] == "multi":
        roots = tuple(u.build(s) for s in spec[1])
    else:
        roots = (u.build(spec),)
    leaves: list[Any] = list(others)
    for pos, root in zip(positions, roots):
        leaves.insert(pos, root)
    args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
    return args, kwargs, roots, u.objs


@dataclass
class OutInfo:
    """What a trace learned about the outputs (static: kept beside the compiled function)."""

    same: bool  # structure of the roots unchanged: only `changed` values come back
    changed: tuple[int, ...]
    graphdef: GraphDef | None  # joint structure of roots + new output nodes when not `same`
    reuse: dict[int, int]  # out ref index -> in ref index, for in-place structural write-back
    out_treedef: Any
    out_positions: tuple[int, ...]
    out_nodes: tuple[tuple[str, int], ...]  # ("in", ref index) or ("new", k)
    n_roots: int


def collect(
    in_graphdef: GraphDef,
    in_values: Sequence[Any],
    roots: tuple[Any, ...],
    in_objs: dict[int, Any],
    out: Any,
    *,
    return_all: bool = False,
    plan_box: list[Plan] | None = None,
) -> tuple[OutInfo, list[Any], list[Any]]:
    """Inside a transform, after the user function: the values to hand out and how to apply them.

    Unchanged values are not returned (no output buffers, no copies) unless ``return_all``
    (needed when the inputs are donated, or when the transform maps or scans the state).
    ``plan_box`` receives the Plan of the roots and new output nodes (for per-Variable specs).
    """
    out_leaves, out_treedef = tree_flatten(out, is_leaf=is_graph_root)
    reverse = {id(obj): i for i, obj in in_objs.items()}
    out_positions: list[int] = []
    out_nodes: list[tuple[str, int]] = []
    new_nodes: list[Any] = []
    out_others: list[Any] = []
    for pos, x in enumerate(out_leaves):
        if is_graph_root(x):
            out_positions.append(pos)
            idx = reverse.get(id(x))
            if idx is not None:
                out_nodes.append(("in", idx))
            else:
                out_nodes.append(("new", len(new_nodes)))
                new_nodes.append(x)
        else:
            out_others.append(x)
    plan = Plan(roots + tuple(new_nodes))
    if plan_box is not None:
        plan_box.append(plan)
    values = [v._value if isinstance(v, Variable) else v for v in plan.current_leaves()]
    # Same structure *and* every object still where it was (a swap of two equal-typed
    # submodules has an equal GraphDef but must move the caller's objects, not their values).
    same = (
        not new_nodes
        and plan.graphdef == in_graphdef
        and all(in_objs.get(i) is obj for i, obj in enumerate(plan.objs))
    )
    if same:
        changed = tuple(
            i for i, (a, b) in enumerate(zip(values, in_values)) if return_all or a is not b
        )
        values = [values[i] for i in changed]
        info = OutInfo(
            True, changed, None, {}, out_treedef, tuple(out_positions), tuple(out_nodes), len(roots)
        )
    else:
        reuse = {j: reverse[id(obj)] for j, obj in enumerate(plan.objs) if id(obj) in reverse}
        info = OutInfo(
            False,
            (),
            plan.graphdef,
            reuse,
            out_treedef,
            tuple(out_positions),
            tuple(out_nodes),
            len(roots),
        )
    return info, values, out_others


def apply(info: OutInfo, plan: Plan, values: Sequence[Any], out_others: Sequence[Any]) -> Any:
    """Outside the transform: write the results into the caller's objects, rebuild outputs."""
    new_roots: tuple[Any, ...] = ()
    if info.same:
        leaves = plan.leaves
        if plan.variables_only:
            for i, value in zip(info.changed, values):
                _set_value_slot(leaves[i], value)
        else:
            for i, value in zip(info.changed, values):
                leaf = leaves[i]
                if isinstance(leaf, Variable):
                    _set_value_slot(leaf, value)
                else:
                    owner, impl, key = plan.owners[i]
                    write_child(owner, impl, key, value)
            plan.refresh_snapshots()
    else:
        assert info.graphdef is not None
        reuse = {j: plan.objs[i] for j, i in info.reuse.items()}
        built = unflatten(info.graphdef, values, reuse)
        built = built if isinstance(built, tuple) and info.graphdef.spec[0] == "multi" else (built,)
        new_roots = built[info.n_roots :]
    if not info.out_positions:
        return jax.tree_util.tree_unflatten(info.out_treedef, out_others)
    leaves_out: list[Any] = list(out_others)
    for pos, (kind, idx) in zip(info.out_positions, info.out_nodes):
        leaves_out.insert(pos, plan.objs[idx] if kind == "in" else new_roots[idx])
    return jax.tree_util.tree_unflatten(info.out_treedef, leaves_out)


def with_placeholders(info: OutInfo, out_others: list[Any]) -> list[Any]:
    """The output leaves with ``None`` where the function returned graph nodes."""
    leaves = list(out_others)
    for pos in info.out_positions:
        leaves.insert(pos, None)
    return leaves


def run_pure(
    fun: Callable[..., Any],
    graphdef: GraphDef,
    in_values: Sequence[Any],
    treedef: Any,
    positions: tuple[int, ...],
    others: Sequence[Any],
    *,
    return_all: bool = False,
) -> tuple[OutInfo, list[Any], list[Any]]:
    """Rebuild, call ``fun``, collect: the body of every lifted transform."""
    args, kwargs, roots, objs = rebuild(graphdef, in_values, treedef, positions, others)
    out = fun(*args, **kwargs)
    return collect(graphdef, in_values, roots, objs, out, return_all=return_all)

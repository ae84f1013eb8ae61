"""The data flow shared by ``vmap``, ``pmap`` and ``shard_map``: one spec per leaf.

A call is cut as in every lift (graph roots vs other leaves). Each leaf gets a spec (an axis or
a PartitionSpec) from the transform's ``in_axes``/``in_specs`` prefix tree; the state of a graph
root gets its spec per Variable (:class:`StateAxes`/:class:`StateSharding`). Inside the JAX
transform the outputs (all state values, then the user's other output leaves) are returned in
one list per distinct spec, because JAX needs the output specs before it traces; which value
went to which group is recorded by the trace and used outside to put them back in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .._graph import Plan
from .._rngs import RngCount, RngKey, RngStream
from .._state import format_path
from .._variables import Variable
from ._axes import PerFilter, is_spec_leaf, leaf_specs, state_specs
from ._lift import OutInfo, apply, collect, is_graph_root, rebuild


def per_arg(name: str, what: str, specs: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``specs`` as one entry per positional argument (a single spec applies to all)."""
    if isinstance(specs, (list, tuple)) and not is_spec_leaf(specs):
        if len(specs) != len(args):
            raise ValueError(
                f"{name}: {what} has {len(specs)} entries but the function got {len(args)} "
                "positional arguments; give one entry per argument (or a single one for all)."
            )
        return tuple(specs)
    return (specs,) * len(args)


def arg_paths(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """``args[0]``, ``args[1]['x']``, ``kwargs['y']``: where each flat leaf came from."""
    flat, _ = jax.tree_util.tree_flatten_with_path((args, kwargs), is_leaf=is_graph_root)
    return [
        ("args" if p[0].idx == 0 else "kwargs") + jax.tree_util.keystr(p[1:])  # type: ignore[attr-defined]
        for p, _ in flat
    ]


class MappedCall:
    """One call's leaves with their specs: graph state per Variable, other leaves per leaf."""

    def __init__(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        in_specs: Any,
        *,
        kwargs_spec: Any,
        check: Callable[[Any, str], None],
        what: str = "in_axes",
    ):
        self.name, self.args, self.kwargs = name, args, kwargs
        specs = leaf_specs(f"{name}: {what}", per_arg(name, what, in_specs, args), args)
        flat, self.treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_graph_root)
        specs += [kwargs_spec] * (len(flat) - len(specs))
        self.positions: list[int] = []
        self.roots: list[Any] = []
        root_specs: list[Any] = []
        self.others: list[Any] = []
        self.other_specs: list[Any] = []
        self.other_positions: list[int] = []
        for pos, (x, spec) in enumerate(zip(flat, specs)):
            if is_graph_root(x):
                self.positions.append(pos)
                self.roots.append(x)
                root_specs.append(spec)
            else:
                self.other_positions.append(pos)
                if isinstance(spec, PerFilter):
                    raise ValueError(
                        f"{name}: {what} gives {spec!r} for {self.where_other(len(self.others))}, "
                        f"a {type(x).__name__}; per-filter specs are for Modules. Use a single "
                        "spec there."
                    )
                check(spec, f"the {what} entry for {self.where_other(len(self.others))}")
                self.others.append(x)
                self.other_specs.append(spec)
        self.plan = Plan(tuple(self.roots))
        self.root_specs = root_specs  # for Variables a function adds to a Module argument
        for r, spec in enumerate(root_specs):
            if not isinstance(spec, PerFilter):
                check(spec, f"the {what} entry for {self.where_root(r)}")
        self.state_specs = state_specs(f"{name}: {what}", self.plan, root_specs, check)
        self.values = [
            v._value if isinstance(v, Variable) else v for v in self.plan.current_leaves()
        ]
        self.restore: list[tuple[int, Any]] = []  # original Rng keys, put back after the call
        self.by_index: list[int] = []  # key leaves each device indexes by axis_index

    # -- where things are, for error messages (computed only when raising) ------------------
    def where_other(self, k: int) -> str:
        return arg_paths(self.args, self.kwargs)[self.other_positions[k]]

    def where_root(self, r: int) -> str:
        return arg_paths(self.args, self.kwargs)[self.positions[r]]

    def where(self, kind: str, i: int) -> str:
        """Where state leaf ``i`` (``kind="state"``) or other leaf ``i`` came from."""
        return self.where_state(i) if kind == "state" else self.where_other(i)

    def where_state(self, i: int) -> str:
        r = next(r for r, (a, b) in enumerate(self.plan.bounds) if a <= i < b)
        return f"{self.where_root(r)}.{format_path(self.plan.graphdef.paths[i])}"

    # -- sizes ------------------------------------------------------------------------------
    def mapped_size(self, axis_size: int | None, size_arg: str = "axis_size") -> int:
        """The size of the mapped axis, checked to agree across every mapped leaf.

        Raises:
            ValueError: a leaf has no such axis, sizes disagree, or nothing is mapped and no
                ``axis_size`` was given.
        """
        sizes: dict[int, list[str]] = {}
        for kind, vals, specs in (
            ("state", self.values, self.state_specs),
            ("other", self.others, self.other_specs),
        ):
            for i, (v, ax) in enumerate(zip(vals, specs)):
                if not isinstance(ax, int):
                    continue
                shape = jnp.shape(v)
                where = self.where(kind, i)
                if not -len(shape) <= ax < len(shape):
                    raise ValueError(
                        f"{self.name}: in_axes maps {where} along axis {ax}, but its shape is "
                        f"{tuple(shape)}. Give it an axis it has, or None to broadcast it"
                        + (
                            " (an Rngs whose keys are one key: split it first with "
                            "rngs.split(n) or nnx_core.split_rngs(splits=n))."
                            if kind == "state"
                            and isinstance(self.plan.leaves[i], (RngKey, RngCount))
                            else "."
                        )
                    )
                sizes.setdefault(shape[ax], []).append(where)
        if axis_size is not None:
            sizes.setdefault(axis_size, []).append(size_arg)
        if len(sizes) > 1:
            listed = "; ".join(f"{n} for {', '.join(w[:3])}" for n, w in sorted(sizes.items()))
            raise ValueError(
                f"{self.name}: the mapped axes have different sizes: {listed}. "
                "Every mapped value needs the same size along its axis."
            )
        if not sizes:
            raise ValueError(
                f"{self.name}: no argument is mapped (no int in in_axes); pass "
                f"{size_arg}= to say how many iterations."
            )
        return next(iter(sizes))

    def _draw_unmapped_rngs(self, size: int) -> list[tuple[int, Any]]:
        """Unmapped Rng streams with one key: ``size`` keys from one draw, by key leaf index.

        Each stream advances once (the caller's count); the original keys are kept by
        :attr:`restore` to put back after the call.
        """
        drawn = []
        plan = self.plan
        index = {id(leaf): i for i, leaf in enumerate(plan.leaves)}
        for obj in plan.objs:
            if not isinstance(obj, RngStream):
                continue
            i = index.get(id(obj.key))
            if i is None or self.state_specs[i] is not None or obj.key.value.shape:
                continue
            key = obj()  # advances the caller's count by one
            ci = index.get(id(obj.count))
            if ci is not None:
                self.values[ci] = obj.count.value
            self.restore.append((i, self.values[i]))
            drawn.append((i, jax.random.split(key, size)))
        return drawn

    def split_unmapped_rngs(self, size: int) -> None:
        """Unmapped Rng streams: each example gets its own key, mapped along axis 0."""
        for i, keys in self._draw_unmapped_rngs(size):
            self.values[i] = keys
            self.state_specs[i] = 0

    def index_unmapped_rngs(self, size: int) -> None:
        """As :meth:`split_unmapped_rngs`, but the keys go in whole (unmapped) and each device
        takes its own by ``axis_index`` (pmap: inputs computed from its replicated outputs
        cannot be mapped again)."""
        for i, keys in self._draw_unmapped_rngs(size):
            self.values[i] = keys
            self.by_index.append(i)


def _roots_changed(info: OutInfo, in_spec: tuple[Any, ...]) -> bool:
    if info.graphdef is None:
        return False
    spec = info.graphdef.spec
    n = info.n_roots
    out_roots = spec[1][:n] if spec[0] == "multi" else ((spec,) if n else ())
    in_roots = in_spec[1] if in_spec[0] == "multi" else (in_spec,)
    return tuple(out_roots) != tuple(in_roots[:n])


class MapBody:
    """The pure function a mapping transform traces, and what its trace learned.

    Holds only what is static for a compiled function (structure and specs), so ``pmap`` can
    keep it beside its compiled function; the values come in as arguments.
    """

    def __init__(
        self,
        name: str,
        f: Callable[..., Any],
        call: MappedCall,
        out_specs: Any,
        *,
        axis_name: Any = None,
    ):
        self.name, self.f, self.out_specs = name, f, out_specs
        self.axis_name, self.by_index = axis_name, tuple(call.by_index)
        self.graphdef, self.in_bounds = call.plan.graphdef, call.plan.bounds
        self.treedef, self.positions = call.treedef, tuple(call.positions)
        self.state_specs = list(call.state_specs)
        self.root_specs = tuple(call.root_specs)
        self.in_to_out: dict[int, int] | None = None  # input -> output state index, if moved
        self.unmapped_new: list[str] = []  # paths of Variables added with axis None
        groups: dict[Any, None] = dict.fromkeys(self.state_specs)
        for spec in self.root_specs:  # Variables added to a Module argument take its axis
            groups.update(dict.fromkeys(spec.specs if isinstance(spec, PerFilter) else [spec]))
        for leaf in jax.tree_util.tree_leaves(out_specs, is_leaf=is_spec_leaf):
            groups.update(dict.fromkeys(leaf.specs if isinstance(leaf, PerFilter) else [leaf]))
        self.groups = tuple(groups)
        self.info: OutInfo | None = None
        self.layout: tuple[Any, ...] = ()
        self.n_state = 0
        self.unmapped_changed: list[int] = []  # state set by the function where its spec is None

    def __call__(self, values: tuple[Any, ...], others: tuple[Any, ...]) -> tuple[list[Any], ...]:
        whole = values
        if self.by_index:
            index = jax.lax.axis_index(self.axis_name)
            values = tuple(v[index] if i in self.by_index else v for i, v in enumerate(values))
        a, kw, roots, objs = rebuild(self.graphdef, values, self.treedef, self.positions, others)
        out = self.f(*a, **kw)
        box: list[Plan] = []
        info, out_values, out_others = collect(
            self.graphdef, values, roots, objs, out, return_all=True, plan_box=box
        )
        for i in self.by_index:  # the keys go out as they came in (and are restored outside)
            out_values[i] = whole[i]
        out_leaf_specs = leaf_specs(f"{self.name}: out_axes", self.out_specs, out)
        if not info.same and _roots_changed(info, self.graphdef.spec):
            if self.by_index:
                raise ValueError(
                    f"{self.name}: the function changed the structure of a Module argument "
                    "(added or removed attributes or Variables) while Rng keys are indexed "
                    "per device; create new state outside, or return new Modules instead."
                )
            layout = self._moved_state_specs(info, box[0])
        else:
            layout = list(self.state_specs)
        if not info.same:
            layout += self._new_state_specs(info, box[0], out_leaf_specs)
        layout += [s for pos, s in enumerate(out_leaf_specs) if pos not in set(info.out_positions)]
        if self.info is not None and (self.info != info or tuple(layout) != self.layout):
            raise ValueError(
                f"{self.name}: the function returned a different structure for "
                "inputs of different shapes; keep outputs independent of shapes."
            )
        self.info, self.layout, self.n_state = info, tuple(layout), len(out_values)
        moved = self.in_to_out
        self.unmapped_changed = [
            i
            for i, s in enumerate(self.state_specs)
            if s is None
            and (j := i if moved is None else moved.get(i)) is not None
            and out_values[j] is not values[i]
        ]
        flat = [*out_values, *out_others]
        return tuple([v for v, s in zip(flat, layout) if s == g] for g in self.groups)

    def _moved_state_specs(self, info: OutInfo, plan: Plan) -> list[Any]:
        """Specs of the state of Module arguments whose structure the function changed (a
        vmapped ``__init__`` fills an empty Module): a Variable still at its path keeps its
        axis, a new one takes its argument's in_axes entry (as flax.nnx's)."""
        in_paths, out_paths = self.graphdef.paths, plan.graphdef.paths
        at = {(r, in_paths[i]): i for r, (a, b) in enumerate(self.in_bounds) for i in range(a, b)}
        specs: list[Any] = []
        self.in_to_out, self.unmapped_new = {}, []
        leaves = plan.current_leaves()
        for r, (a, b) in enumerate(plan.bounds[: info.n_roots]):
            root_spec = self.root_specs[r]
            for j in range(a, b):
                i = at.get((r, out_paths[j]))
                if i is not None:
                    self.in_to_out[i] = j
                    specs.append(self.state_specs[i])
                else:
                    spec = (
                        root_spec.spec_for(out_paths[j], leaves[j], f"{self.name}: in_axes")
                        if isinstance(root_spec, PerFilter)
                        else root_spec
                    )
                    if spec is None:
                        self.unmapped_new.append(f"{format_path(out_paths[j])} (added)")
                    specs.append(spec)
        return specs

    def _new_state_specs(self, info: OutInfo, plan: Plan, out_leaf_specs: list[Any]) -> list[Any]:
        """Specs of the Variables of Modules created by the function, from out_axes."""
        specs: list[Any] = []
        new_positions = [
            pos for pos, (kind, _) in zip(info.out_positions, info.out_nodes) if kind == "new"
        ]
        paths, leaves = plan.graphdef.paths, plan.current_leaves()
        for k, pos in enumerate(new_positions):
            spec = out_leaf_specs[pos]
            start, stop = plan.bounds[info.n_roots + k]
            for i in range(start, stop):
                specs.append(
                    spec.spec_for(paths[i], leaves[i], f"{self.name}: out_axes")
                    if isinstance(spec, PerFilter)
                    else spec
                )
        return specs

    def finish(
        self, plan: Plan, grouped: Sequence[Sequence[Any]], restore: Sequence[tuple[int, Any]]
    ) -> Any:
        """Outside: values back in order, Rng keys restored, results applied to the caller."""
        assert self.info is not None
        iters = {g: iter(vals) for g, vals in zip(self.groups, grouped)}
        flat = [next(iters[s]) for s in self.layout]
        values, out_others = flat[: self.n_state], flat[self.n_state :]
        moved = self.in_to_out
        for i, original in restore:
            j = i if moved is None else moved.get(i)
            if j is not None:
                values[j] = original
        info = self.info
        if info.same:
            info = OutInfo(
                True,
                tuple(range(len(values))),
                None,
                {},
                info.out_treedef,
                info.out_positions,
                info.out_nodes,
                info.n_roots,
            )
        return apply(info, plan, values, out_others)

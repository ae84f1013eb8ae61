"""The traversal: a graph to a hashable GraphDef plus its leaves, and back.

Spec format (nested tuples; equal structures give equal specs):

- ``("node", type, aux, ref, keys, children)``: ``keys`` is the tuple of child keys and
  ``children`` the aligned child specs. A static child is stored as its own value (it is never a
  tuple, since tuples are nodes); every other child spec is a tuple.
- ``("var", type, meta_key, ref)``: a Variable leaf; ``("arr",)``: a raw array leaf;
  ``("ref", ref)``: a second reference to an object seen before (shared or cyclic);
  ``("static", value)``: only for a root that is not a node.
- ``("multi", specs)``: several roots flattened together (shared references across them).

Hashing is deferred to the first ``hash``/``==`` of a GraphDef, and unhashable static values are
wrapped to compare by identity only then, so a ``split`` that nobody hashes pays for neither.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from types import GenericAlias
from typing import Any, ClassVar

import jax

from ._data_attrs import CLASS_MARKS, MARKS_ATTR, ListMarks, data_names, mark_kinds
from ._nodes import (
    _IMPLS,
    ARRAY,
    KINDS,
    LAYOUTS,
    MAYBE_ARRAY,
    NODE,
    TRACE_ATTR,
    VARIABLE,
    NodeImpl,
    bump_epoch,
    impl_for,
    layout,
)
from ._state import State
from ._tracing import current_trace
from ._variables import (
    Variable,
    _ById,
    _set_meta_key_slot,
    _set_meta_slot,
    _set_trace_slot,
    _set_value_slot,
)

Path = tuple[Any, ...]


# -- GraphDef ------------------------------------------------------------------------------------
class GraphDef:
    """The structure of a graph with no arrays: hashable, and equal for equal structures.

    It is a pytree with no leaves, so ``jax.jit`` takes it as an ordinary argument and retraces
    only for a new structure, and ``merge(graphdef, state)`` rebuilds the graph from it.
    """

    __slots__ = ("spec", "_paths", "_hash", "_trie", "_program")

    def __class_getitem__(cls, item: Any) -> GenericAlias:  # GraphDef[Model] in annotations
        return GenericAlias(cls, item)

    def __init__(self, spec: tuple[Any, ...]):
        self.spec = spec
        self._paths: tuple[Path, ...] | None = None  # derived from the spec on first use
        self._hash: int | None = None
        self._trie: dict[Any, Any] | None = None
        self._program: tuple[Any, ...] | None = None

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            try:
                h = hash(self.spec)
            except TypeError:  # an unhashable static value: compare it by identity
                self.spec = _by_identity(self.spec)
                h = hash(self.spec)
            self._hash = h
        return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, GraphDef):
            return False
        return hash(self) == hash(other) and self.spec == other.spec

    def __repr__(self) -> str:
        root = self.spec[1].__name__ if self.spec[0] == "node" else self.spec[0]
        return f"GraphDef({root}, leaves={len(self.paths)})"

    # graphdef.apply(state, *states): an ApplyCaller (flax.nnx's GraphDef.apply), attached by
    # _train_state, which builds on split / merge (this module is below them)
    apply: ClassVar[Callable[..., Any]]

    @property
    def paths(self) -> tuple[Path, ...]:
        """The path of every leaf, in leaf order (derived from the spec on first use)."""
        paths = self._paths
        if paths is None:
            paths = self._paths = leaf_paths(self.spec)
        return paths

    def trie(self) -> dict[Any, Any] | None:
        """The leaf paths as nested dicts (key -> sub-trie, or key -> leaf position), or None
        when a leaf is a root (an empty path)."""
        trie = self._trie
        if trie is None:
            trie = {}
            for i, path in enumerate(self.paths):
                if not path:
                    return None
                node = trie
                for key in path[:-1]:
                    node = node.setdefault(key, {})
                node[path[-1]] = i
            self._trie = trie
        return trie

    def program(self) -> tuple[Any, ...]:
        """The spec prepared for rebuilding (see ``unflatten``), computed once."""
        prog = self._program
        if prog is None:
            spec = self.spec
            prog = ("multi", tuple(map(program, spec[1]))) if spec[0] == "multi" else program(spec)
            self._program = prog
        return prog


# A pytree with no leaves (as in flax.nnx): plain jax.jit and tree functions accept it as is.
jax.tree_util.register_static(GraphDef)


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return _ById(value)
    return value


def _by_identity(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    """``spec`` with unhashable static values wrapped so that they compare by identity."""
    tag = spec[0]
    if tag == "multi":
        return ("multi", tuple(_by_identity(s) for s in spec[1]))
    if tag == "static":
        return ("static", _hashable(spec[1]))
    if tag != "node":
        return spec
    children = tuple(_by_identity(c) if type(c) is tuple else _hashable(c) for c in spec[5])
    return (*spec[:5], children)


# -- flatten -------------------------------------------------------------------------------------
def _getter(keys: tuple[Any, ...]) -> Callable[[dict[Any, Any]], tuple[Any, ...]]:
    if len(keys) >= 2:
        return operator.itemgetter(*keys)
    if keys:
        key = keys[0]
        return lambda d: (d[key],)
    return lambda d: ()


# per hidden-key set: the insertion-ordered keys of a __dict__ -> (sorted child keys, getter)
_ORDERS: dict[frozenset[str], dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]]] = {}
_EMPTY_SPECS: dict[type, tuple[Any, ...]] = {
    t: ("node", t, None, None, (), ()) for t in (list, dict)
}


_new_state = object.__new__
_set_mapping = State._mapping.__set__  # type: ignore[attr-defined]


def new_state(mapping: dict[Any, Any]) -> State:
    """A State around ``mapping`` as it is (its values are already Variables or States)."""
    s = _new_state(State)
    _set_mapping(s, mapping)
    return s


def _order(
    orders: dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]],
    names: tuple[str, ...],
    hidden: frozenset[str],
) -> tuple[tuple[Any, ...], Any]:
    """The sorted child keys (without ``hidden``) of a __dict__ with keys ``names``, and a getter
    of their values; cached in ``orders``."""
    if len(orders) > 4096:
        orders.clear()
    children = tuple(sorted(k for k in names if k not in hidden))
    order = orders[names] = (children, _getter(children))
    return order


class Flattener:
    """One traversal of one or more roots (shared references across roots are kept).

    Besides the spec it collects the leaves in order, the identity-keyed objects, the mutable
    containers (for the Plan's validity checks) and, per root that is a node, the nested
    mapping of its State: the traversal visits children in State order, so a first ``split``
    gets its State without a second pass. Leaf paths and owners are derived from the spec only
    when asked for (``GraphDef.paths``, ``Plan.owners``).
    """

    __slots__ = ("ref", "objs", "leaves", "empty", "containers", "states", "all_variables")

    def __init__(self) -> None:
        self.ref: dict[int, int] = {}
        self.objs: list[Any] = []
        self.leaves: list[Any] = []
        self.empty: list[Any] = []  # empty lists and dicts: checked for staying empty
        self.containers: list[tuple[Any, NodeImpl]] = []  # other mutable nodes: snapshot them
        self.states: list[dict[Any, Any] | None] = []  # per root: its State's mapping
        self.all_variables = True

    def root(self, x: Any) -> tuple[Any, ...]:
        kind = KINDS[type(x)]
        state: dict[Any, Any] | None = None
        spec: tuple[Any, ...] = ("static", x)
        if kind == NODE:
            impl = impl_for(type(x))
            if impl is not None:
                state = {}
                spec = self.node(x, impl, state)
        elif kind == VARIABLE:
            spec = self.variable(x)
        elif kind == ARRAY or (kind == MAYBE_ARRAY and isinstance(x, jax.Array)):
            self.all_variables = False
            self.leaves.append(x)
            spec = ("arr",)
        self.states.append(state)
        return spec

    def variable(self, v: Variable) -> tuple[Any, ...]:
        """The spec of a Variable root."""
        i = self.ref.get(id(v))
        if i is not None:
            return ("ref", i)
        i = self.ref[id(v)] = len(self.objs)
        self.objs.append(v)
        self.leaves.append(v)
        return ("var", type(v), v.meta_key(), i)

    def node(self, x: Any, impl: NodeImpl, out: dict[Any, Any]) -> tuple[Any, ...]:
        """The spec of node ``x``; its leaves (and non-empty child States) go into ``out``.

        The hot loop of a cold ``split``: the common cases (a Module's attributes, a Variable
        child, an empty metadata dict) are inlined rather than called.
        """
        t = type(x)
        i = None
        ref = self.ref
        if impl.identity:
            i = ref.get(id(x))
            if i is not None:
                return ("ref", i)
            i = ref[id(x)] = len(self.objs)
            self.objs.append(x)
        aux = None
        hidden = impl.attributes
        if hidden is not None:  # the sorted children of a __dict__, cached per key order
            d = x.__dict__
            orders = _ORDERS.get(hidden)
            if orders is None:
                orders = _ORDERS[hidden] = {}
            names = tuple(d)
            order = orders.get(names)
            if order is None:
                order = _order(orders, names, hidden)
            keys = order[0]
            values = order[1](d)
        elif t is list or t is dict:
            if not x:
                self.empty.append(x)
                return _EMPTY_SPECS[t]
            self.containers.append((x, impl))
            if t is list:
                keys, values = tuple(range(len(x))), tuple(x)
            else:
                keys, values = tuple(x), tuple(x.values())
        else:
            children, aux = impl.flatten(x)
            if impl.mutable:
                self.containers.append((x, impl))
            keys = tuple(k for k, _ in children)
            values = tuple(c for _, c in children)
        types = tuple(map(type, values))
        found = LAYOUTS.get(types)
        kinds, dynamic = found if found is not None else layout(types)
        if hidden is not None and (CLASS_MARKS or MARKS_ATTR in d):  # nnx.data marks
            marked = data_names(t, d)
            if marked:
                kinds, dynamic = mark_kinds(keys, kinds, marked)
        elif type(aux) is ListMarks and aux.data:  # an nnx.List with items marked nnx.data
            kinds, dynamic = mark_kinds(keys, kinds, aux.data)
        if not dynamic:
            return ("node", t, aux, i, keys, values)
        specs = list(values)
        objs, leaves = self.objs, self.leaves
        for j in dynamic:
            c = values[j]
            kind = kinds[j]
            if kind == VARIABLE:
                k = ref.get(id(c))
                if k is not None:
                    specs[j] = ("ref", k)
                    continue
                k = ref[id(c)] = len(objs)
                objs.append(c)
                leaves.append(c)
                out[keys[j]] = c
                meta_key = c._meta_key
                specs[j] = ("var", types[j], c.meta_key() if meta_key is None else meta_key, k)
            elif kind == NODE:
                t_child = types[j]
                if (t_child is dict or t_child is list) and not c:
                    self.empty.append(c)
                    specs[j] = _EMPTY_SPECS[t_child]
                    continue
                child_impl = _IMPLS.get(t_child)  # filled when its kind was found
                if child_impl is None:
                    child_impl = impl_for(t_child)
                if child_impl is not None:
                    sub: dict[Any, Any] = {}
                    specs[j] = self.node(c, child_impl, sub)
                    if sub:
                        out[keys[j]] = new_state(sub)
            elif kind == ARRAY or isinstance(c, jax.Array):
                self.all_variables = False
                leaves.append(c)
                out[keys[j]] = c
                specs[j] = ("arr",)
        return ("node", t, aux, i, keys, tuple(specs))


def leaf_paths(spec: tuple[Any, ...]) -> tuple[Path, ...]:
    """The path of every leaf of a spec, in leaf order (each root's paths start at ``()``)."""
    out: list[Path] = []

    def walk(spec: tuple[Any, ...], path: Path) -> None:
        for key, c in zip(spec[4], spec[5]):
            if type(c) is tuple:
                tag = c[0]
                if tag == "var" or tag == "arr":
                    out.append((*path, key))
                elif tag == "node":
                    walk(c, (*path, key))

    for root in spec[1] if spec[0] == "multi" else (spec,):
        if root[0] == "node":
            walk(root, ())
        elif root[0] in ("var", "arr"):
            out.append(())
    return tuple(out)


def leaf_owners(spec: tuple[Any, ...], roots: Sequence[Any]) -> list[tuple[Any, Any, Any]]:
    """``(owner, owner's NodeImpl, key)`` of every leaf, in leaf order; ``(None, None, None)``
    for a root that is a leaf. ``roots`` are the objects the spec was taken from."""
    out: list[tuple[Any, Any, Any]] = []

    def walk(spec: tuple[Any, ...], x: Any) -> None:
        impl = impl_for(type(x))
        assert impl is not None
        children = x.__dict__ if impl.attributes is not None else dict(impl.flatten(x)[0])
        for key, c in zip(spec[4], spec[5]):
            if type(c) is tuple:
                tag = c[0]
                if tag == "var" or tag == "arr":
                    out.append((x, impl, key))
                elif tag == "node":
                    walk(c, children[key])

    specs = spec[1] if spec[0] == "multi" else (spec,)
    for root_spec, root in zip(specs, roots):
        if root_spec[0] == "node":
            walk(root_spec, root)
        elif root_spec[0] in ("var", "arr"):
            out.append((None, None, None))
    return out


# -- unflatten -----------------------------------------------------------------------------------
def new_variable(cls: type[Variable], value: Any, meta_key: tuple[Any, ...]) -> Variable:
    v = object.__new__(cls)
    _set_value_slot(v, value)
    _set_meta_slot(v, {k: (m.obj if isinstance(m, _ById) else m) for k, m in meta_key})
    _set_meta_key_slot(v, meta_key)
    _set_trace_slot(v, current_trace())
    return v


# program tags: a node rebuilt by filling its __dict__ (Modules), a node rebuilt by its create
# function (lists, tuples, dicts, registered types), and the children / roots that are not nodes
_ATTRS, _CREATE, _VAR, _REF, _ARR, _STATIC, _EMPTY_DICT, _EMPTY_LIST = range(8)


def program(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    """A spec prepared for rebuilding: per node, its static children as one dict (set with a
    single ``dict.update``), its other children as ``(key, tag, payload, in_state)`` in key
    order (``in_state``: the child holds leaves, so a State of the node has an entry for it),
    and the number of such entries last."""
    tag = spec[0]
    if tag == "node":
        _, t, aux, i, keys, children = spec
        impl = impl_for(t)
        if impl is None:
            raise TypeError(f"{t.__name__} is no longer a registered graph node type.")
        statics: dict[Any, Any] = {}
        dynamic = []
        for k, c in zip(keys, children):
            if type(c) is tuple:
                dynamic.append((k, *_child(c)))
            else:
                statics[k] = c.obj if type(c) is _ById else c
        n_state = sum(entry[3] for entry in dynamic)
        if impl.attributes is not None and impl.fill is not None:
            return (_ATTRS, t, i, statics, tuple(dynamic), impl, n_state)
        return (_CREATE, t, i, statics, tuple(dynamic), impl, aux, keys, n_state)
    if tag == "var":
        return (_VAR, spec[1:])
    if tag == "ref":
        return (_REF, spec[1])
    if tag == "arr":
        return (_ARR, None)
    value = spec[1]
    return (_STATIC, value.obj if type(value) is _ById else value)


def _child(spec: tuple[Any, ...]) -> tuple[int, Any, bool]:
    """(tag, payload, holds leaves) of a child spec; empty lists and dicts get tags of their own."""
    if spec is _EMPTY_SPECS[dict]:
        return _EMPTY_DICT, None, False
    if spec is _EMPTY_SPECS[list]:
        return _EMPTY_LIST, None, False
    prog = program(spec)
    tag = prog[0]
    if tag == _ATTRS or tag == _CREATE:
        return tag, prog, prog[-1] > 0
    return tag, prog[1], tag == _VAR or tag == _ARR


class Unflattener:
    """Rebuilds objects from a spec and the leaves in GraphDef order.

    ``reuse`` maps reference indices to existing objects to update in place instead of creating
    them; with ``keep_variables``, Variable leaves of the recorded kind are used as they are.
    """

    __slots__ = ("next_leaf", "objs", "reuse", "keep_variables", "trace")

    def __init__(
        self,
        leaves: Sequence[Any],
        reuse: dict[int, Any] | None = None,
        keep_variables: bool = False,
    ):
        self.next_leaf = iter(leaves).__next__
        self.objs: dict[int, Any] = {}
        self.reuse = reuse or {}
        self.keep_variables = keep_variables
        self.trace = current_trace()

    def build(self, spec: tuple[Any, ...]) -> Any:
        """Rebuild one root from its spec."""
        return self.run(program(spec))

    def run(self, prog: tuple[Any, ...]) -> Any:
        tag = prog[0]
        if tag == _ATTRS:
            return self.run_attrs(prog)
        if tag == _CREATE:
            return self.run_create(prog)
        return self.child(tag, prog[1])

    def child(self, tag: int, payload: Any) -> Any:
        """Build one child that is not a node with attributes (those are inlined in run_attrs)."""
        if tag == _VAR:
            return self.variable(self.next_leaf(), payload)
        if tag == _ATTRS:
            return self.run_attrs(payload)
        if tag == _CREATE:
            return self.run_create(payload)
        if tag == _REF:
            return self.objs[payload]
        if tag == _ARR:
            leaf = self.next_leaf()
            return leaf._value if isinstance(leaf, Variable) else leaf
        if tag == _EMPTY_DICT:
            return {}
        if tag == _EMPTY_LIST:
            return []
        return payload  # _STATIC

    def variable(self, leaf: Any, payload: tuple[Any, ...]) -> Variable:
        cls, meta_key, i = payload
        if self.keep_variables and type(leaf) is cls:
            self.objs[i] = leaf
            return leaf
        value = leaf._value if isinstance(leaf, Variable) else leaf
        old = self.reuse.get(i) if self.reuse else None
        if old is not None and type(old) is cls:
            old.set_raw_value(value)
            if old.meta_key() != meta_key:
                old.set_metadata(**dict(meta_key))
            v = old
        else:
            v = new_variable(cls, value, meta_key)
        self.objs[i] = v
        return v

    def run_attrs(self, prog: tuple[Any, ...]) -> Any:
        _, t, i, statics, dynamic, impl, _ = prog
        if self.reuse and type(self.reuse.get(i)) is t:
            return self._refill(self.reuse[i], prog)
        obj = object.__new__(t)  # as Module.__new__: records the trace it is created under
        d = obj.__dict__
        d[TRACE_ATTR] = self.trace
        d.update(statics)
        self.objs[i] = obj
        keep, objs, nxt, child = self.keep_variables, self.objs, self.next_leaf, self.child
        for key, tag, payload, _ in dynamic:
            if tag == _VAR:
                leaf = nxt()
                if keep and type(leaf) is payload[0]:
                    objs[payload[2]] = d[key] = leaf
                else:
                    d[key] = self.variable(leaf, payload)
            elif tag == _ATTRS:
                d[key] = self.run_attrs(payload)
            elif tag == _EMPTY_DICT:
                d[key] = {}
            else:
                d[key] = child(tag, payload)
        return obj

    def _refill(self, obj: Any, prog: tuple[Any, ...]) -> Any:
        _, t, i, statics, dynamic, impl, _ = prog
        self.objs[i] = obj
        values = dict(statics)
        for key, tag, payload, _ in dynamic:
            values[key] = self.child(tag, payload)
        impl.fill(obj, sorted(values.items()))
        return obj

    def run_create(self, prog: tuple[Any, ...]) -> Any:
        _, t, i, statics, dynamic, impl, aux, keys, _ = prog
        if impl.create_empty is not None and impl.fill is not None:  # two steps (cycles)
            obj = self.reuse.get(i) if self.reuse else None
            if type(obj) is not t:
                obj = impl.create_empty(t, aux)
            self.objs[i] = obj
            values = dict(statics)
            for key, tag, payload, _ in dynamic:
                values[key] = self.child(tag, payload)
            impl.fill(obj, [(k, values[k]) for k in keys])
            return obj
        values = dict(statics)
        for key, tag, payload, _ in dynamic:
            values[key] = self.child(tag, payload)
        obj = impl.create(t, aux, [(k, values[k]) for k in keys])
        if i is not None:
            self.objs[i] = obj
        return obj


def unflatten(
    graphdef: GraphDef,
    leaves: Sequence[Any],
    reuse: dict[int, Any] | None = None,
    *,
    keep_variables: bool = False,
) -> Any:
    """Rebuild the graph from its GraphDef and leaves in GraphDef order.

    ``reuse`` maps reference indices to existing objects that are updated in place instead of
    being created (how the transforms write structural changes back to the caller's objects).
    With ``keep_variables``, Variable leaves of the recorded kind are used as they are.
    """
    u = Unflattener(leaves, reuse, keep_variables)
    prog = graphdef.program()
    out = tuple(u.run(p) for p in prog[1]) if prog[0] == "multi" else u.run(prog)
    if reuse:
        bump_epoch()
    return out


# -- unflatten from one State ----------------------------------------------------------------------
class Mismatch(Exception):
    """A State that does not have exactly the GraphDef's paths (the caller reports which)."""


_NO_MAPPING: dict[Any, Any] = {}


class StateUnflattener(Unflattener):
    """Rebuilds a graph reading its leaves from one nested State along the program: ``merge``'s
    common case, without first collecting the leaves in order. Variables of the recorded kind are
    used as they are; raises ``Mismatch`` where the State's keys differ from the GraphDef's."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__((), None, keep_variables=True)

    def attrs(self, prog: tuple[Any, ...], m: dict[Any, Any]) -> Any:
        _, t, i, statics, dynamic, impl, n_state = prog
        if len(m) != n_state:
            raise Mismatch
        obj = object.__new__(t)  # as Module.__new__: records the trace it is created under
        d = obj.__dict__
        d[TRACE_ATTR] = self.trace
        d.update(statics)
        objs = self.objs
        objs[i] = obj
        for key, tag, payload, in_state in dynamic:
            if tag == _VAR:
                leaf = m[key]
                if type(leaf) is payload[0]:
                    objs[payload[2]] = d[key] = leaf
                else:
                    d[key] = self.leaf_variable(leaf, payload)
            elif tag == _ATTRS:
                d[key] = self.attrs(payload, self.sub(m, key) if in_state else _NO_MAPPING)
            elif tag == _EMPTY_DICT:
                d[key] = {}
            else:
                d[key] = self.value(m, key, tag, payload, in_state)
        return obj

    def create(self, prog: tuple[Any, ...], m: dict[Any, Any]) -> Any:
        _, t, i, statics, dynamic, impl, aux, keys, n_state = prog
        if len(m) != n_state:
            raise Mismatch
        values = dict(statics)
        if impl.create_empty is not None and impl.fill is not None:  # two steps (cycles)
            obj = self.objs[i] = impl.create_empty(t, aux)
            for key, tag, payload, in_state in dynamic:
                values[key] = self.value(m, key, tag, payload, in_state)
            impl.fill(obj, [(k, values[k]) for k in keys])
            return obj
        for key, tag, payload, in_state in dynamic:
            values[key] = self.value(m, key, tag, payload, in_state)
        obj = impl.create(t, aux, [(k, values[k]) for k in keys])
        if i is not None:
            self.objs[i] = obj
        return obj

    def value(self, m: dict[Any, Any], key: Any, tag: int, payload: Any, in_state: bool) -> Any:
        """One child of a node, its leaves read from ``m`` (the node's mapping)."""
        if tag == _VAR:
            leaf = m[key]
            if type(leaf) is payload[0]:
                self.objs[payload[2]] = leaf
                return leaf
            return self.leaf_variable(leaf, payload)
        if tag == _ATTRS:
            return self.attrs(payload, self.sub(m, key) if in_state else _NO_MAPPING)
        if tag == _CREATE:
            return self.create(payload, self.sub(m, key) if in_state else _NO_MAPPING)
        if tag == _ARR:
            leaf = m[key]
            if type(leaf) is State:
                raise Mismatch
            return leaf._value if isinstance(leaf, Variable) else leaf
        return self.child(tag, payload)  # a second reference, an empty list or dict

    def leaf_variable(self, leaf: Any, payload: tuple[Any, ...]) -> Variable:
        if type(leaf) is State:
            raise Mismatch
        return self.variable(leaf, payload)

    @staticmethod
    def sub(m: dict[Any, Any], key: Any) -> dict[Any, Any]:
        sub = m[key]
        if type(sub) is not State:
            raise Mismatch
        return sub._mapping


def unflatten_state(graphdef: GraphDef, state: State) -> Any:
    """Rebuild the graph from its GraphDef and one State with exactly its paths.

    Raises:
        Mismatch: the State lacks a path of the GraphDef or has one more (or the GraphDef's root
            is not a node); the caller then matches by path, which names the difference.
    """
    prog = graphdef.program()
    u = StateUnflattener()
    try:
        if prog[0] == _ATTRS:
            return u.attrs(prog, state._mapping)
        if prog[0] == _CREATE:
            return u.create(prog, state._mapping)
    except KeyError:
        raise Mismatch from None
    raise Mismatch

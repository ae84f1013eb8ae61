"""Graph-wide helpers flax.nnx code uses: recursive_map, find_duplicates, set_metadata, variables."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ._api import clone, state
from ._filters import All, Filter, to_predicate
from ._graph import impl_for, is_array, write_child
from ._module import Module
from ._rngs import Rngs, RngStream
from ._variables import Variable

Path = tuple[Any, ...]


def recursive_map(f: Callable[[Path, Any], Any], node: Any, /, *, graph: bool | None = None) -> Any:
    """A copy of ``node`` in which every node, Variable and array ``x`` at ``path`` is replaced
    by ``f(path, x)``, children before their parent (as flax.nnx's).

    The copy has new nodes (Modules, lists, dicts) and the original Variables and arrays, so
    ``f`` may change a node's static attributes without touching ``node``; a node shared by
    several paths is mapped once. ``graph`` is flax.nnx's mode flag and changes nothing here.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Block(nnx.Module):
        ...     def __init__(self):
        ...         self.w = nnx.Param(jnp.ones(2)); self.deterministic = False
        >>> block = Block()
        >>> def f(path, x):
        ...     if isinstance(x, Block):
        ...         x.deterministic = True
        ...     return x
        >>> new = nnx.recursive_map(f, block)
        >>> new.deterministic, block.deterministic, new.w is block.w
        (True, False, True)
    """
    copy = clone(node, variables=False)
    done: dict[int, Any] = {}

    def visit(path: Path, x: Any) -> Any:
        if id(x) in done:
            return done[id(x)]
        impl = None if isinstance(x, Variable) or is_array(x) else impl_for(type(x))
        if impl is not None:
            done[id(x)] = x  # a cycle back to this node sees the node itself
            children = list(impl.flatten(x)[0])
            mapped = [(k, c, visit((*path, k), c)) for k, c in children]
            if type(x) is tuple:
                x = tuple(new for _, _, new in mapped)
            else:
                for key, old, new in mapped:
                    if new is not old:
                        write_child(x, impl, key, new)
        out = f(path, x)
        done[id(x)] = out
        return out

    return visit((), copy)


def find_duplicates(node: Any, /, *, only: Filter = ...) -> list[list[Path]]:
    """The paths under which the same node or Variable is reachable, for each shared one.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Tied(nnx.Module):
        ...     def __init__(self):
        ...         self.a = nnx.Param(jnp.ones(2)); self.b = self.a
        >>> nnx.find_duplicates(Tied())
        [[('a',), ('b',)]]
    """
    pred = to_predicate(only)
    paths: dict[int, list[Path]] = {}
    seen: set[int] = set()

    def walk(path: Path, x: Any) -> None:
        impl = None if isinstance(x, Variable) or is_array(x) else impl_for(type(x))
        shareable = isinstance(x, Variable) or (impl is not None and impl.identity)
        if shareable and pred(path, x):
            paths.setdefault(id(x), []).append(path)
        if impl is None or id(x) in seen:
            return
        seen.add(id(x))
        for key, child in impl.flatten(x)[0]:
            walk((*path, key), child)

    walk((), node)
    return [p for p in paths.values() if len(p) > 1]


def set_metadata(node: Any, /, *, only: Filter = Variable, **metadata: Any) -> None:
    """Set ``metadata`` on every Variable of ``node`` that ``only`` selects (in place).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self):
        ...         self.w = nnx.Param(jnp.ones(2)); self.n = nnx.BatchStat(jnp.zeros(2))
        >>> m = M(); nnx.set_metadata(m, only=nnx.Param, lr_scale=0.1)
        >>> m.w.get_metadata(), m.n.get_metadata()
        ({'lr_scale': 0.1}, {})
    """
    for _, leaf in state(node, only).flat_state():
        if isinstance(leaf, Variable):
            leaf.set_metadata(**metadata)


def variables(node: Any, *filters: Filter, graph: bool | None = None) -> Any:
    """The State of ``node``'s Variables (raw arrays left out), one per filter if several.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self):
        ...         self.w = nnx.Param(jnp.ones(2)); self.raw = jnp.zeros(2)
        >>> list(nnx.variables(M())), list(nnx.state(M()))
        (['w'], ['raw', 'w'])
    """
    only = [All(Variable, f) for f in filters] if filters else [Variable]
    return state(node, *only)


def display(*args: Any) -> None:
    """Print each argument's readable form (flax.nnx draws it with treescope; here, its repr).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> nnx.display(nnx.Param(jnp.ones(2)))
        Param(float32[2])
    """
    for x in args:
        print(repr(x))


def iter_modules(node: Any, /, *, graph: bool | None = None) -> Iterator[tuple[Path, Module]]:
    """``(path, module)`` for every Module in ``node``, each once, children before their parent
    and in the order of ``nnx.state`` (as flax.nnx's function; ``Module.iter_modules`` lists the
    root first). Rng streams are state holders, not layers, and are left out as in flax.nnx.

    Example:
        >>> import nnx_core as nnx
        >>> class Leaf(nnx.Module): pass
        >>> class Tree(nnx.Module):
        ...     def __init__(self): self.b, self.a = Leaf(), [Leaf()]
        >>> [p for p, _ in nnx.iter_modules(Tree())]
        [('a', 0), ('b',), ()]
    """
    seen: set[int] = set()

    def walk(path: Path, x: Any) -> Iterator[tuple[Path, Module]]:
        impl = None if isinstance(x, Variable) or is_array(x) else impl_for(type(x))
        if impl is None or isinstance(x, (Rngs, RngStream)) or id(x) in seen:
            return
        if impl.identity:
            seen.add(id(x))
        for key, child in impl.flatten(x)[0]:
            yield from walk((*path, key), child)
        if isinstance(x, Module):
            yield path, x

    return walk((), node)


def iter_children(node: Any, /, *, graph: bool | None = None) -> Iterator[tuple[Any, Module]]:
    """``(name, module)`` for the Modules (and Rngs) held directly by ``node``, as flax.nnx's.

    Example:
        >>> import nnx_core as nnx
        >>> class Leaf(nnx.Module): pass
        >>> class Tree(nnx.Module):
        ...     def __init__(self): self.b, self.a, self.rngs = Leaf(), Leaf(), nnx.Rngs(0)
        >>> [name for name, _ in nnx.iter_children(Tree())]
        ['a', 'b', 'rngs']
    """
    impl = impl_for(type(node))
    for key, child in impl.flatten(node)[0] if impl is not None else ():
        if isinstance(child, Module):
            yield key, child

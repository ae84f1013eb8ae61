"""Python cost of split / state / merge / update: ours vs flax.nnx (graph mode), same model.

Run: python benchmarks/graph_overhead.py [--depths 5 20 100] [--number 200] [--rounds 5]
     python benchmarks/graph_overhead.py --first-touch [--number 160]
The model is the MLP of flax's own graph-overhead benchmark (Linear + BatchNorm blocks,
width 32; 6 Variables per block plus a counter). Four regimes:

- repeated: the same model called again and again (our structure cache is warm);
- cold: the first call on a newly built model (a fresh copy per call, made beforehand), which
  is what a call right after building or changing a model costs;
- first split, seen classes: ``split`` of a model just built by its constructor, from classes
  already split before (fresh Variables, nothing cached on them);
- first split, new classes: the same for a model whose classes (the MLP, its Block and its
  counter Variable kind) were never split before: one new set of classes per model, as in
  every user's first call.

Every figure is the best of ``--rounds`` rounds, ours and flax.nnx taking turns in each round;
the garbage collector is off while a figure is timed.

Last, the first split of the tree of flax's own ``benchmarks/nnx_state_traversal.py`` (341
Modules of one class, each holding one Variable and 4 children: width 4, depth 4), the class
defined anew just before each model is built; CPU time (``time.process_time``) per split, the
median over ``--number`` / 4 models per round, ours and flax.nnx alternating model by model;
beside them `minimal_walk`, the least a Python traversal of that tree does, for reference.

With ``--first-touch``, only where that first split's time goes: the same tree with its
Variables holding numpy arrays or jax arrays (``jnp.ones``, as flax's benchmark builds it),
split (ours, flax.nnx) or walked bare (`bare_walk`: keys sorted, nothing built), the median
thread CPU µs of ``--number`` / 4 trees per column: the first pass over a tree just built; the
first pass over a tree just built right after the same work on the tree built before it (which
warms the processor's caches for the code and the shared objects, but not this tree's objects);
the second pass over the same objects, which is what the Python work costs.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _models  # noqa: E402

OPS = ("split", "state", "merge", "update")


def timed(fn: Callable[[object], object], objs: list) -> float:
    """µs per call of ``fn`` over ``objs`` (one call each), with the garbage collector off as
    timeit does (the fresh copies made for the cold calls would otherwise make every
    collection pass walk them)."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for o in objs:
            fn(o)
        return (time.perf_counter() - t0) / len(objs) * 1e6
    finally:
        gc.enable()


class Side:
    """One library's model, its split, and the calls to time."""

    def __init__(self, lib, model, n: int):
        self.lib, self.model, self.n = lib, model, n
        self.g, self.s = lib.split(model)

    def fresh(self) -> list:
        # copies made by the library itself: newly built objects, nothing cached on them
        return [self.lib.clone(self.model) for _ in range(self.n)]

    def built(self, new_classes) -> list:
        """Models built by their constructor: by ``new_classes()`` (new classes each), or from
        the classes of ``self.model``."""
        if new_classes is not None:
            return [new_classes() for _ in range(self.n)]
        depth = len(self.model.intermediates) + 2
        return [type(self.model)(depth, rngs=self.lib.Rngs(0)) for _ in range(self.n)]

    def first_splits(self, new_classes) -> dict[str, float]:
        """The first split of newly built models, from seen and from never-seen classes."""
        seen, new = self.built(None), self.built(new_classes)
        return {
            "first split, seen classes": timed(self.lib.split, seen),
            "first split, new classes": timed(self.lib.split, new),
        }

    def round(self) -> dict[str, float]:
        lib, m, g, s, same = self.lib, self.model, self.g, self.s, [self.model] * self.n
        new_split, new_state, new_update = self.fresh(), self.fresh(), self.fresh()
        return {
            "split": timed(lambda o: lib.split(o), same),
            "state": timed(lambda o: lib.state(o), same),
            "merge": timed(lambda o: lib.merge(g, s), same),
            "update": timed(lambda o: lib.update(m, s), same),
            "split cold": timed(lambda o: lib.split(o), new_split),
            "state cold": timed(lambda o: lib.state(o), new_state),
            "update cold": timed(lambda o: lib.update(o, s), new_update),
        }


def measure(depth: int, number: int, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    from flax import nnx as fnnx

    import nnx_core as nnx

    n = max(number // max(depth // 5, 1), 10)
    sides = [Side(nnx, _models.nnx_model(depth), n), Side(fnnx, _models.flax_model(depth), n)]
    builders = [lambda: _models.nnx_model(depth), lambda: _models.flax_model(depth)]
    for side in sides:
        side.round()  # warm up
    best: list[dict[str, float]] = [{}, {}]
    for r in range(rounds):
        order = [0, 1] if r % 2 == 0 else [1, 0]  # (the first timed after building pays more)
        for i in order:
            for k, v in [*sides[i].round().items(), *sides[i].first_splits(builders[i]).items()]:
                best[i][k] = min(best[i].get(k, v), v)
    return best[0], best[1]


def nested_class(lib):
    """A new class of the tree of flax's benchmarks/nnx_state_traversal.py."""
    import jax.numpy as jnp

    class NestedClass(lib.Module):
        def __init__(self, width, depth):
            self.x = lib.Variable(jnp.ones((depth + 1,)))
            if depth > 0:
                for i in range(width):
                    setattr(self, f"child{i}", NestedClass(width, depth - 1))

    return NestedClass


def minimal_walk(node, ref: dict, out: dict) -> tuple:
    """A reference for the first split: the least a Python traversal of the tree does (each
    node's keys sorted, one spec tuple and one dict of its leaves per node), nothing cached."""
    import nnx_core as nnx

    ref[id(node)] = len(ref)
    d = node.__dict__
    keys = tuple(sorted(d))
    specs = []
    for key in keys:
        child = d[key]
        if isinstance(child, nnx.Variable):
            ref[id(child)] = len(ref)
            out[key] = child
            specs.append(("var", type(child), len(ref)))
        elif isinstance(child, nnx.Module):
            sub: dict = {}
            specs.append(minimal_walk(child, ref, sub))
            out[key] = sub
        else:
            specs.append(child)
    return ("node", type(node), keys, tuple(specs))


def bare_walk(node, out: list) -> None:
    """Every Variable of the tree in key order, and nothing else done (`first_touch`)."""
    d = node.__dict__
    for key in sorted(d):
        child = d[key]
        if type(child).__name__ == "Variable":
            out.append(child)
        elif hasattr(child, "__dict__"):
            bare_walk(child, out)


def first_touch(number: int) -> list[tuple[str, str, float, float, float]]:
    """(arrays, what, first µs, first after another tree's µs, second µs) for the 341-Module tree (see the module's doc)."""
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx as fnnx

    import nnx_core as nnx

    def tree(lib, ones):
        class NestedClass(lib.Module):
            def __init__(self, width, depth):
                self.x = lib.Variable(ones((depth + 1,)))
                if depth > 0:
                    for i in range(width):
                        setattr(self, f"child{i}", NestedClass(width, depth - 1))

        return NestedClass(4, 4)

    rows = []
    for arrays, ones in (("numpy", np.ones), ("jax", jnp.ones)):
        for what, lib, run in (
            ("ours: split", nnx, nnx.split),
            ("flax.nnx: split", fnnx, fnnx.split),
            ("a bare walk", nnx, lambda model: bare_walk(model, [])),
        ):
            first, warmed, second = [], [], []
            previous = tree(lib, ones)
            for k in range(2 * number):
                model = tree(lib, ones)
                gc.collect()
                time.sleep(0.02)  # (jax's dispatch of the arrays settles)
                gc.disable()
                if k % 2:  # the same work on an older tree first: warms all but this tree
                    run(previous)
                for times in (warmed if k % 2 else first, second):
                    t0 = time.thread_time()
                    run(model)
                    times.append((time.thread_time() - t0) * 1e6)
                gc.enable()
                previous = model
            medians = (statistics.median(t) for t in (first, warmed, second))
            rows.append((arrays, what, *medians))
    return rows


def nested_first_splits(number: int, rounds: int) -> list[tuple[float, float, float]]:
    """Per round: the median CPU µs of the first split of a newly built 341-Module tree, for
    ours, for flax.nnx (a new class per model, the two alternating) and for `minimal_walk`
    over ours."""
    from flax import nnx as fnnx

    import nnx_core as nnx

    variants = (
        (nnx, nnx.split),
        (fnnx, fnnx.split),
        (nnx, lambda model: minimal_walk(model, {}, {})),
    )
    out = []
    for _ in range(rounds):
        times: list[list[float]] = [[], [], []]
        for _ in range(number):
            for i, (lib, split) in enumerate(variants):
                model = nested_class(lib)(4, 4)
                gc.collect()
                gc.disable()
                t0 = time.process_time()
                split(model)
                times[i].append((time.process_time() - t0) * 1e6)
                gc.enable()
        out.append(tuple(statistics.median(t) for t in times))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depths", type=int, nargs="+", default=[5, 20, 100])
    p.add_argument("--number", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--first-touch", action="store_true", help="only the first split's parts")
    a = p.parse_args(argv)
    if a.first_touch:
        print(f"load average {os.getloadavg()[0]:.2f}")
        print(
            "| Variables hold | what | first pass µs"
            " | first pass, right after the same work on another tree µs | second pass µs |"
        )
        print("|---|---|---|---|---|")
        for arrays, what, first, warmed, second in first_touch(a.number // 4):
            print(f"| {arrays} arrays | {what} | {first:.0f} | {warmed:.0f} | {second:.0f} |")
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        return
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(
        "| depth | Variables | op | ours µs | flax.nnx µs | flax / ours | ours cold µs | "
        "flax.nnx cold µs | flax cold / ours cold |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    firsts = {}
    for depth in a.depths:
        o, f = measure(depth, a.number, a.rounds)
        firsts[depth] = (o, f)
        nvars = 6 * depth + 1
        for op in OPS:
            cold = f"{op} cold"
            row = f"| {depth} | {nvars} | {op} | {o[op]:.0f} | {f[op]:.0f} | {f[op] / o[op]:.1f}x |"
            if cold in o:
                row += f" {o[cold]:.0f} | {f[cold]:.0f} | {f[cold] / o[cold]:.1f}x |"
            else:
                row += " - | - | - |"
            print(row)
    print("\n| depth | first split of a newly built model | ours µs | flax.nnx µs | flax / ours |")
    print("|---|---|---|---|---|")
    for depth, (o, f) in firsts.items():
        for key in ("first split, seen classes", "first split, new classes"):
            print(
                f"| {depth} | {key[13:]} | {o[key]:.0f} | {f[key]:.0f} | {f[key] / o[key]:.1f}x |"
            )
    print(
        "\n| round | first split of a new 341-Module tree: ours CPU µs | flax.nnx | flax / ours "
        "| a minimal Python walk µs | walk / ours |"
    )
    print("|---|---|---|---|---|---|")
    for r, (o, f, w) in enumerate(nested_first_splits(a.number // 4, a.rounds), 1):
        print(f"| {r} | {o:.0f} | {f:.0f} | {f / o:.1f}x | {w:.0f} | {w / o:.2f} |")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

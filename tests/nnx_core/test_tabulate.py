"""tabulate: per-call paths, types, input/output shapes and per-kind counts equal to flax.nnx's for
the same model; computed abstractly (nothing allocated, the model unchanged); depth, methods,
keyword inputs, subclasses calling super(), and the errors."""

from __future__ import annotations

import importlib
import re
import warnings

import jax
import jax.numpy as jnp
import pytest

import nnx_core as nnx
import nnx_layers
from nnx_core._tabulate import collect_rows


def _foo(lib, relu):
    class Block(lib.Module):
        def __init__(self, din, dout, rngs):
            self.linear = lib.Linear(din, dout, rngs=rngs)
            self.bn = lib.BatchNorm(dout, rngs=rngs)
            self.dropout = lib.Dropout(0.2, rngs=rngs)

        def __call__(self, x):
            return relu(self.dropout(self.bn(self.linear(x))))

    class Foo(lib.Module):
        def __init__(self, rngs):
            self.block1 = Block(3, 4, rngs=rngs)
            self.block2 = Block(4, 2, rngs=rngs)

        def __call__(self, x):
            return self.block2(self.block1(x))

    return Foo(lib.Rngs(0))


class Lib:
    Module, Rngs = nnx.Module, nnx.Rngs
    Linear, BatchNorm, Dropout = nnx_layers.Linear, nnx_layers.BatchNorm, nnx_layers.Dropout


def _flax_rows():
    """flax.nnx's table for the same model, parsed: (path, type, inputs, outputs, counts)."""
    flax_nnx = importlib.import_module("flax.nnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        text = flax_nnx.tabulate(
            _foo(flax_nnx, flax_nnx.relu),
            jnp.ones((1, 3)),
            console_kwargs={"force_terminal": False, "width": 250},
        )
    lines = text.splitlines()
    header = next(line for line in lines if "path" in line and "type" in line)
    names = [c.strip() for c in header.split("┃")[1:-1]]
    blocks, block = [], []
    for line in lines:
        if line.startswith("│"):
            block.append([c.strip() for c in line.split("│")[1:-1]])
        elif block:
            blocks.append(block)
            block = []
    rows = []
    for block in blocks[:-1]:  # the last block is the Total line
        first = dict(zip(names, block[0]))
        counts = {}
        for kind in ("BatchStat", "Param"):
            cells = [line[names.index(kind)] for line in block if line[names.index(kind)]]
            if cells:
                counts[kind] = int(re.match(r"([\d,]+) \(", cells[-1]).group(1).replace(",", ""))
        path = tuple(first["path"].split("/")) if first["path"] else ()
        rows.append((path, first["type"], first["inputs"], first["outputs"], counts))
    return rows


def test_rows_match_flax():
    rows = collect_rows(_foo(Lib, nnx_layers.relu), (jnp.ones((1, 3)),), {}, method="__call__")
    ours = [
        (
            r.path,
            r.type_name,
            r.inputs,
            r.outputs,
            {k: n for k, (n, _) in r.stats.items() if k in ("BatchStat", "Param")},
        )
        for r in rows
    ]
    assert ours == _flax_rows()


def test_table_text_totals_and_depth():
    model = _foo(Lib, nnx_layers.relu)
    text = nnx.tabulate(model, jnp.ones((1, 3)), depth=1)
    lines = text.splitlines()
    assert lines[0] == "Foo summary"
    assert lines[1].split() == [
        "path",
        "type",
        "inputs",
        "outputs",
        "BatchStat",
        "Param",
        "RngCount",
        "RngKey",
    ]
    assert [line.split()[0] for line in lines[3:5]] == ["block1", "block2"]
    assert lines[5].split()[:3] == ["Total", "12", "(48"] and "38 (152 B)" in lines[5]
    # 12 + 38 + a key and a count for each Dropout's own stream (flax.nnx: 54, 224 B too)
    assert lines[-1] == "Total: 54 elements (224 B)"


def test_nothing_is_allocated_and_the_model_is_unchanged():
    model = _foo(Lib, nnx_layers.relu)
    before = jax.tree.map(lambda x: x, nnx.state(model))
    counts = int(model.block1.dropout.rngs.count.value)
    nnx.tabulate(model, jax.ShapeDtypeStruct((1000, 3), jnp.float32))  # a shape, no array
    assert int(model.block1.dropout.rngs.count.value) == counts
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(nnx.state(model))):
        assert a is b


class Base(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.ones((2, 2)))

    def __call__(self, x):
        return x @ self.w.value


class Child(Base):
    def __call__(self, x, *, scale=1.0):
        return super().__call__(x) * scale  # recorded once, not once per class


class Top(nnx.Module):
    def __init__(self):
        self.child = Child()
        self.base = Base()

    def encode(self, x, *, scale):
        return {"a": self.child(x, scale=scale), "b": (self.base(x),)}


def test_methods_keyword_inputs_structured_outputs_and_super_calls():
    rows = collect_rows(Top(), (jnp.ones((3, 2)),), {"scale": 2.0}, method="encode")
    assert [(r.path, r.type_name, r.inputs, r.outputs) for r in rows] == [
        ((), "Top", "float32[3,2], scale=2.0", "{a: float32[3,2], b: (float32[3,2],)}"),
        (("child",), "Child", "float32[3,2], scale=2.0", "float32[3,2]"),
        (("base",), "Base", "float32[3,2]", "float32[3,2]"),
    ]
    assert Child.__call__ is not Base.__call__ and "__call__" in vars(Child)  # restored
    assert "encode" not in vars(Child)


@pytest.mark.parametrize(
    "action, error, match",
    [
        (
            lambda: nnx.tabulate([Base()], jnp.ones(2)),
            TypeError,
            r"tabulate expects a Module, got list",
        ),
        (
            lambda: nnx.tabulate(Base(), jnp.ones(2), method="missing"),
            AttributeError,
            r"tabulate: Base has no method 'missing' to call",
        ),
    ],
)
def test_errors(action, error, match):
    with pytest.raises(error, match=match):
        action()

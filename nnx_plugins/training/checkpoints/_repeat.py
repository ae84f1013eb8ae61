"""Naming the conversion when a checkpoint holds blocks stacked where the model has them
unrolled (a `Repeat`), or the other way around.

A `Repeat` keeps its blocks in one Module whose Variables have a leading block axis
(``model.blocks.block.fc.kernel`` of shape ``(N, ...)``), an unrolled model one Module per
block (``model.blocks[3].fc.kernel``). Loading one into the other fails path by path; these
helpers recognise the pattern and say which conversion fits (``Repeat.from_layers`` /
``repeat.unstack()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import nnx_core
from nnx_layers import Repeat

from ..._text import format_path
from .._placement import is_key

__all__ = ["conversion_hints"]

Path = tuple[Any, ...]


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(getattr(value, "shape", ()))


def _ckpt_shapes(manifest: Mapping[str, Any], prefix: str) -> dict[Path, tuple[int, ...]]:
    return {
        tuple(info["path"]): tuple(info["shape"])
        for key, info in manifest["entries"].items()
        if key.startswith(prefix + "/")
    }


def _block_shapes(repeat: Repeat) -> dict[Path, tuple[int, ...]]:
    """The block's Variables (relative paths) with the block axis, and their per-block shapes."""
    shapes = {}
    for path, variable in nnx_core.state(repeat.block).flat_state():
        shape = _shape(variable.value)
        if shape[:1] == (repeat.count,) and not is_key(variable.value):
            shapes[tuple(path)] = shape[1:]
    return shapes


def _copies(
    block: dict[Path, tuple[int, ...]], stored: dict[Path, tuple[int, ...]], lead: tuple[int, ...]
) -> list[Path]:
    """The prefixes ``Q`` such that ``Q + r`` is stored with shape ``lead + shape`` for every
    ``(r, shape)`` of ``block``."""
    if not block:
        return []
    first, first_shape = next(iter(block.items()))
    found = []
    for path, shape in stored.items():
        if path[len(path) - len(first) :] != first or shape != lead + first_shape:
            continue
        q = path[: len(path) - len(first)]
        if all(stored.get(q + r) == lead + s for r, s in block.items()):
            found.append(q)
    return sorted(found, key=lambda q: [(0, k) if isinstance(k, int) else (1, str(k)) for k in q])


def _listed(prefix: str, paths: list[Path]) -> str:
    shown = [format_path((prefix, *p)) for p in paths[:3]]
    return ", ".join(shown) + (f" ... ({len(paths)} in all)" if len(paths) > 3 else "")


def _from_layers(prefix: str, copies: list[Path]) -> str:
    """``Repeat.from_layers(model.layers[1].layers)`` when the copies are one list's items."""
    parent = copies[0][:-1]
    if all(q[:-1] == parent and isinstance(q[-1], int) for q in copies):
        return f"Repeat.from_layers({format_path((prefix, *parent))})"
    return "Repeat.from_layers([...])"


def conversion_hints(model: Any, manifest: Mapping[str, Any], prefix: str = "model") -> list[str]:
    """Problems that name the conversion between stacked and unrolled blocks, if any fits."""
    if not isinstance(model, nnx_core.Module):
        return []
    stored = _ckpt_shapes(manifest, prefix)
    current = {tuple(p): _shape(v.value) for p, v in nnx_core.state(model).flat_state()}
    hints = []
    for path, module in model.iter_modules():
        if not isinstance(module, Repeat):
            continue
        block = _block_shapes(module)
        here = (*path, "block")
        if all(here + r in stored for r in block):
            continue  # stored stacked, as the model has it
        unrolled = _copies(block, stored, ())
        if unrolled:
            hints.append(
                f"{format_path((prefix, *path))} is a Repeat of {module.count} blocks stacked on "
                f"a leading axis, but the checkpoint holds {len(unrolled)} unrolled blocks "
                f"({_listed(prefix, unrolled)}): it was saved from an unrolled model. Load it "
                f"into the unrolled model, then convert its blocks with "
                f"{_from_layers(prefix, unrolled)}, or build this model unrolled."
            )
    hints += _stacked_hints(current, stored, prefix)
    return hints


def _stacked_hints(
    current: dict[Path, tuple[int, ...]], stored: dict[Path, tuple[int, ...]], prefix: str
) -> list[str]:
    """The checkpoint holds a Repeat (``.../block/...`` with a leading axis) that the model has
    unrolled."""
    hints = []
    blocks: dict[Path, dict[Path, tuple[int, ...]]] = {}
    for path, shape in stored.items():
        if path in current or "block" not in path or not shape:
            continue
        at = len(path) - 1 - path[::-1].index("block")
        blocks.setdefault(path[: at + 1], {})[path[at + 1 :]] = shape
    for where, inside in blocks.items():
        counts = {shape[0] for shape in inside.values()}
        if len(counts) != 1:
            continue
        count = counts.pop()
        per_block = {r: shape[1:] for r, shape in inside.items()}
        unrolled = _copies(per_block, current, ())
        if unrolled:
            hints.append(
                f"the checkpoint holds {format_path((prefix, *where[:-1]))} as a Repeat of "
                f"{count} blocks stacked on a leading axis, and the model has them unrolled "
                f"({_listed(prefix, unrolled)}). Load it into the model with the Repeat, then "
                "convert with repeat.unstack(), or build this model with the Repeat."
            )
    return hints

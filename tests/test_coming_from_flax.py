"""docs/coming-from-flax.md stays true: it names every public flax.nnx name, and every name it
says exists here does."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "coming-from-flax.md"
PACKAGES = ("nnx_core", "nnx_layers", "nnx_plugins")


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 2:
            rows.append((cells[0], cells[1]))
    return rows


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


NAMES = Path(__file__).with_name("flax_nnx_names.txt")


def _snapshot() -> tuple[str, set[str]]:
    """``(flax version, its public flax.nnx names)`` as recorded in tests/flax_nnx_names.txt."""
    lines = NAMES.read_text().splitlines()
    version = re.search(r"flax\.nnx (\S+)", lines[0]).group(1)
    return version, {line for line in lines if line and not line.startswith("#")}


def test_every_public_flax_name_is_listed():
    _, names = _snapshot()
    quoted = set(re.findall(r"`([A-Za-z_]\w*)`", DOC.read_text()))
    assert len(names) > 200 and sorted(names - quoted) == []


def test_the_recorded_names_are_those_of_that_flax():
    """The list is flax.nnx's own for its version. With another flax installed (CI takes the
    newest), the names that one added wait for the list's refresh, but the list must still
    describe it: nearly all its names still there."""
    import flax

    version, names = _snapshot()
    public = {n for n in dir(importlib.import_module("flax.nnx")) if not n.startswith("_")}
    if flax.__version__ == version:
        assert public == names
    else:
        assert len(names & public) >= 0.9 * len(names), sorted(names - public)


def test_every_name_said_to_exist_here_exists():
    checked = 0
    for flax_cell, here in _rows():
        for dotted in re.findall(r"`((?:nnx_core|nnx_layers|nnx_plugins)(?:\.\w+)+)", here):
            _resolve(dotted)
            checked += 1
        for target in re.findall(r"`((?:nnx_core|nnx_layers|nnx_plugins)(?:\.\w+)*)\.\*`", here):
            for name in re.findall(r"`(\w+)`", flax_cell):
                _resolve(f"{target}.{name}")
                checked += 1
    assert checked > 50  # the table was parsed (94 names when written)

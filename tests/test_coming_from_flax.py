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


def test_every_public_flax_name_is_listed():
    flax_nnx = importlib.import_module("flax.nnx")
    quoted = set(re.findall(r"`([A-Za-z_]\w*)`", DOC.read_text()))
    missing = [n for n in dir(flax_nnx) if not n.startswith("_") and n not in quoted]
    assert missing == []


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

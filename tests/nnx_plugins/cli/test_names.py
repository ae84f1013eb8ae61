"""``nnx layers list`` / ``nnx variables list``: the Status column says something true."""

import subprocess
import sys

from nnx_plugins import Settings
from nnx_plugins.cli._main import main

from ..conftest import COLLIDING


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def rows(out):
    """Table rows as lists of stripped cells (rich's box-drawing ``│`` separators)."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if "│" in line]


def test_a_fresh_listing_shows_available_not_an_unconditional_not_loaded():
    script = "from nnx_plugins.cli._main import main; main(['layers', 'list', 'acme.*'])"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert rows(out)[0] == [
        "acme.GatedDense",
        "acme-layers 0.1.0",
        "acme_layers.dense:GatedDense",
        "available",
    ]


def test_collisions_and_disabled_packs_show_in_the_status(capsys, with_fakes):
    with with_fakes(COLLIDING):
        code, out, _ = run(capsys, "layers", "list", "acme.Gated*")
    assert code == 0
    assert [r[1:] for r in rows(out)] == [
        [
            "acme-layers 0.1.0",
            "acme_layers.dense:GatedDense",
            "collision: choose one with NNX_PREFER",
        ],
        ["other-layers 2.0", "fakepack:OtherGatedDense", "collision: choose one with NNX_PREFER"],
    ]
    with with_fakes(settings=Settings(allowlist=frozenset())):
        code, out, _ = run(capsys, "variables", "list")
    assert [
        "acme.LoRAParam",
        "acme-layers 0.1.0",
        "acme_layers.variables:LoRAParam",
        "disabled: not in NNX_PLUGINS",
    ] in rows(out)


def test_what_this_process_loaded_shows_as_loaded(capsys, nnx_registry):
    nnx_registry.get("layer", "Linear")
    _, out, _ = run(capsys, "layers", "list", "Linear")
    found = {row[0]: row for row in rows(out)}
    assert found["Linear"] == ["Linear", "nnx-jax 0.1.0", "nnx_layers:Linear", "loaded"]
    assert {row[3] for name, row in found.items() if name != "Linear"} <= {"available"}

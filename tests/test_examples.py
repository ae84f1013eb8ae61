"""The examples run."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_loss_falls(capsys):
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step")]
    losses = [float(ln.split()[-1]) for ln in lines]
    assert len(losses) == 7 and losses[-1] < losses[0] / 5

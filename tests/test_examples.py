"""The examples run."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from nnx_plugins.cli._main import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_loss_falls(capsys):
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step")]
    losses = [float(ln.split()[-1]) for ln in lines]
    assert len(losses) == 7 and losses[-1] < losses[0] / 5


@pytest.mark.parametrize(
    "name", ["digits_mlp", "digits_cnn", "digits_resnet", "digits_vit", "digits_rnn"]
)
def test_example_configs_learn_in_a_short_run(name, tmp_path, capsys):
    """Two epochs of each bundled config, by the README's command: well above chance (10%).

    The full runs (docs/training.md) reach 97-99%; this checks that each family builds from
    its config, trains and evaluates, in a few seconds.
    """
    config = EXAMPLES / f"{name}.yaml"
    args = ["train", str(config), "train.epochs=2", "--run-dir", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "trained 44 steps in" in out
    accuracy = float(re.search(r"test accuracy: ([\d.]+)%", out).group(1))
    assert accuracy > 60, out

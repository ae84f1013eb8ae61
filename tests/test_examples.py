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
    """44 steps (two epochs) of each bundled config, by the README's command: well above chance
    (10%).

    The full runs (docs/training.md) reach 97-99%; this checks that each family builds from
    its config, trains and evaluates, in a few seconds.
    """
    config = EXAMPLES / f"{name}.yaml"
    args = ["train", str(config), "train.steps=44", "--run-dir", str(tmp_path), "--no-progress"]
    if "warmup_steps" in config.read_text():  # (the schedule follows train.steps: warm up less)
        args.append("optimizer.learning_rate.warmup_steps=10")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "trained 44 steps in" in out
    accuracy = float(re.search(r"test accuracy: ([\d.]+)%", out).group(1))
    assert accuracy > 60, out


def test_the_regression_example_learns_in_a_short_run(tmp_path, capsys):
    """220 steps (twenty epochs) of examples/diabetes_mlp.yaml by the README's command: R² well
    above 0 (the full run reaches 0.44-0.45, docs/training.md)."""
    config = EXAMPLES / "diabetes_mlp.yaml"
    args = ["train", str(config), "train.steps=220", "--run-dir", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "trained 220 steps in" in out
    r2 = float(re.search(r"test loss [\d.]+, mse [\d.]+, mae [\d.]+, r2 (-?[\d.]+)", out).group(1))
    assert r2 > 0.2, out


@pytest.mark.parametrize(("name", "blocks"), [("text_gpt", 4), ("digits_vit", 2)])
def test_the_transformer_examples_stack_their_blocks_in_a_repeat(name, blocks, capsys):
    """The GPT and the ViT write their blocks once, in a Repeat (compiled once, issue 22)."""
    assert main(["build", str(EXAMPLES / f"{name}.yaml"), "--summary"]) == 0
    out = capsys.readouterr().out
    assert "│ Repeat " in out and f"{blocks} blocks of Sequential" in out, out


def test_the_gpt_example_trains_and_generates_by_the_readme_commands(tmp_path, capsys):
    """A short run of examples/text_gpt.yaml (the full run: docs/training.md), then
    ``nnx generate`` from its checkpoint: the loss falls well below a uniform guess (8 bits per
    byte) and the prompt is continued."""
    config = str(EXAMPLES / "text_gpt.yaml")
    short = ["train.steps=40", "train.eval_interval=40", "data.seq_len=64", "train.batch_size=8"]
    short.append("optimizer.learning_rate.warmup_steps=10")  # (within the 40 steps)
    args = ["train", config, *short, "--run-dir", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "trained 40 steps in" in out
    bits = float(
        re.search(
            r"test: ([\d.]+) bits per byte, perplexity [\d.]+, next-byte accuracy", out
        ).group(1)
    )
    assert bits < 6, out
    checkpoint = str(tmp_path / "checkpoints")
    argv = [
        "generate",
        config,
        "--checkpoint",
        checkpoint,
        "--prompt",
        "    def ",
        "data.seq_len=64",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("    def ") and len(text.encode()) >= 64


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_schedule_follows_train_steps(path):
    """``train.steps=300`` left a 500-step schedule: the examples interpolate its length."""
    from nnx_plugins import load_config

    for steps in (None, 300):
        overrides = [] if steps is None else [f"train.steps={steps}"]
        config = load_config(path, overrides=overrides).to_dict()
        schedule = config["optimizer"]["learning_rate"]
        assert isinstance(schedule, dict), schedule
        assert (
            schedule["decay_steps"]
            == config["train"]["steps"]
            == (steps or schedule["decay_steps"])
        )

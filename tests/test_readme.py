"""The README's tour runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import jax.numpy as jnp

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_tour_python_and_config(tmp_path, monkeypatch):
    python, config = _blocks("python"), _blocks("yaml")
    ns: dict = {}
    exec(python[0], ns)  # the model, the optimizer and the jitted train step
    loss = ns["train_step"](
        ns["model"], ns["optimizer"], jnp.ones((8, 64)), jnp.zeros(8, jnp.int32)
    )
    assert loss.shape == () and int(ns["optimizer"].step.value) == 1
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.yaml").write_text(config[0])
    alone: dict = {}
    exec(python[1], alone)  # load, build and round-trip the config: it imports what it uses
    assert type(alone["model"]).__name__ == "Sequential"

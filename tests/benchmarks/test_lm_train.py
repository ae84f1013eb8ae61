"""benchmarks/lm_train.py runs: on a tiny GPT the two loops agree and the table prints (no timing)."""

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import lm_train  # noqa: E402

from ..nnx_plugins.generation.gpt import gpt_config  # noqa: E402


@pytest.fixture
def tiny(tmp_path):
    (tmp_path / "text.txt").write_text("a tiny text to model, " * 100, encoding="utf-8")
    config = {
        "model": gpt_config(vocab=256, length=8, blocks=1),
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": "text.txt", "seq_len": 8},
        "optimizer": {"type": "adamw", "learning_rate": 0.001},
        "train": {"batch_size": 4},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_both_loops_run_agree_and_report(tiny, capsys):
    lm_train.main(["--config", tiny, "--windows", "1", "--log-interval", "2", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "first two losses" in out and "medians over 1 window of 2 steps" in out
    assert "| nnx train (language_model task) |" in out and "| 1.000 |" in out


def test_a_plain_step_that_differs_stops_the_benchmark(tiny, monkeypatch):
    config = lm_train.configured(tiny, [], 6, 2)
    real = lm_train.plain_step

    def shifted(config):
        step, state = real(config)

        def wrong(state, batch):
            state, loss = step(state, batch)
            return state, loss + 1.0

        return wrong, state

    monkeypatch.setattr(lm_train, "plain_step", shifted)
    with pytest.raises(AssertionError, match="the two steps disagree"):
        lm_train.check_same_losses(config, lm_train.assemble(config).data)

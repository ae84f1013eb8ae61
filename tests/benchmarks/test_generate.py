"""benchmarks/generate.py runs: on a tiny GPT both paths agree and the table prints (no timing)."""

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import generate  # noqa: E402

from ..nnx_plugins.generation.gpt import gpt_config  # noqa: E402


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({"model": gpt_config(length=6, blocks=1)}))
    return str(path)


def test_widens_the_position_table_and_both_paths_agree(tiny, capsys):
    model = generate.make_model(tiny, 10, [])
    assert model.layers[1].max_length == 10
    result = generate.measure(model, batch=2, prompt=3, new=7, rounds=1)
    assert set(result["steady"]) == set(generate.PATHS)
    generate.report([result])
    table = capsys.readouterr().out
    assert "greedy tokens of both paths {'default': 'equal'}" in table
    assert "| 2 | 7 (10) |" in table and "| 10x |" in table


def test_tokens_that_differ_are_reported_with_the_first_difference_and_rechecked(
    tiny, monkeypatch, capsys
):
    model = generate.make_model(tiny, 10, [])
    wrong = {**generate.PATHS}
    wrong["full recomputation"] = lambda *a, **k: generate.decode(*a, **k).at[0, -1].add(1)
    monkeypatch.setattr(generate, "PATHS", wrong)
    generate.measure(model, batch=1, prompt=2, new=3, rounds=1)
    out = capsys.readouterr().out
    difference = "differ first at sequence 0, position 2 (1 tokens)"
    assert f"'default': '{difference}', 'highest': '{difference}'" in out

"""benchmarks/generate.py runs: on tiny GPTs every path agrees with the recomputation, the plain
decoder included, and the table prints (no timing)."""

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import generate  # noqa: E402

from ..nnx_plugins.generation.gpt import block, gpt_config  # noqa: E402

VOCAB = 13


@pytest.fixture(params=["unrolled", "Repeat"])
def tiny(tmp_path, request):
    config = gpt_config(length=6, blocks=2 if request.param == "unrolled" else 0)
    if request.param == "Repeat":
        config["layers"].insert(2, {"type": "Repeat", "count": 2, "block": block()})
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({"model": config}))
    return str(path)


def test_widens_the_position_table_and_every_path_agrees(tiny, capsys):
    model = generate.make_model(tiny, 10, [])
    assert model.layers[1].max_length == 10
    decoders = generate.paths(model, scan_blocks=True)
    assert list(decoders) == [generate.CACHED, generate.SCANNED, generate.PLAIN, generate.FULL]
    result = generate.measure(decoders, VOCAB, batch=2, prompt=3, new=7, rounds=1)
    assert set(result["steady"]) == set(decoders)
    generate.report([result])
    table = capsys.readouterr().out
    assert "greedy tokens of both paths {'default': 'equal'}" in table
    assert f"| 2 | 7 (10) | {generate.PLAIN} |" in table and "| 10x | 1.00x |" in table


def test_a_model_of_another_layout_has_no_plain_path(tmp_path, capsys):
    config = gpt_config(length=6, blocks=1)
    del config["layers"][-2]  # no final LayerNorm
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump({"model": config}))
    decoders = generate.paths(generate.make_model(str(path), 10, []), scan_blocks=False)
    assert list(decoders) == [generate.CACHED, generate.FULL]
    assert "no plain decoder for this model's layout" in capsys.readouterr().out


def test_tokens_that_differ_are_reported_with_the_first_difference_and_rechecked(tiny, capsys):
    model = generate.make_model(tiny, 10, [])
    decoders = generate.paths(model, scan_blocks=False)
    cached = decoders[generate.CACHED]
    decoders[generate.CACHED] = lambda ids, new: cached(ids, new).at[0, -1].add(1)
    generate.measure(decoders, VOCAB, batch=1, prompt=2, new=3, rounds=1)
    out = capsys.readouterr().out
    difference = f"{generate.CACHED}: first at sequence 0, position 2"
    assert f"'default': '{difference}', 'highest': '{difference}'" in out

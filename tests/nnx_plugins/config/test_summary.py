"""Abstract summaries."""

import pytest

from nnx_plugins import ConfigError
from nnx_plugins.config._summary import summarize

from ..corpus import NESTED


def test_summary_per_layer_and_kind(nnx_registry):
    summary = summarize({"model": NESTED})
    rows = {row.path: row for row in summary.layers}
    assert rows["model.layers[0]"].type == "Conv"
    assert [(v.name, v.shape) for v in rows["model.layers[0]"].variables] == [
        ("bias", (4,)),
        ("kernel", (3, 3, 1, 4)),
    ]
    gated = rows["model.layers[4].block"]
    assert gated.type == "acme.GatedDense" and gated.count == 2 * (256 * 256 + 256)
    assert summary.by_kind["BatchStat"] == (8, 32)
    assert summary.by_kind["RngKey"][1] == 8
    assert summary.total_count == sum(r.count for r in summary.layers)
    assert summary.total_bytes == sum(r.nbytes for r in summary.layers)


def test_summary_of_bad_config(nnx_registry):
    with pytest.raises(ConfigError, match="Unknown layer 'Nope'"):
        summarize({"model": {"type": "Nope"}})


def test_a_repeat_shows_as_its_blocks(nnx_registry):
    block = {"type": "Linear", "in_features": 4, "out_features": 4}
    inner = {"type": "Repeat", "count": 2, "block": block}
    outer = {"type": "Repeat", "count": 3, "block": inner}
    summary = summarize({"model": {"type": "Sequential", "layers": [outer]}})
    rows = [(r.path, r.type, r.blocks, r.note, r.count) for r in summary.layers]
    assert rows == [
        (
            "model.layers[0]",
            "Repeat",
            1,
            "3 blocks of Repeat, stacked on a leading axis of 3 (rows below)",
            6 * 20,
        ),
        (
            "model.layers[0].block",
            "Repeat",
            3,
            "2 blocks of Linear, stacked on a leading axis of 2 (rows below)",
            6 * 20,
        ),
        ("model.layers[0].block.block", "Linear", 6, "", 6 * 20),
    ]
    assert summary.total_count == 6 * 20


def test_rows_with_outputs_follow_the_forward_pass_sublayers_after_their_layer(nnx_registry):
    import jax

    from nnx_plugins.config._shapes import DataSpec, check_model
    from nnx_plugins.config._summary import spell_output, with_outputs

    block = {"type": "Linear", "in_features": 4, "out_features": 4}
    model = {
        "type": "Sequential",
        "layers": [
            {
                "type": "Residual",
                "block": {"type": "Sequential", "layers": [block, {"type": "gelu"}]},
            },
            {"type": "Repeat", "count": 2, "block": block},
            {"type": "tanh"},
            {"type": "Linear", "in_features": 4, "out_features": 3, "use_bias": False},
        ],
    }
    config = {"model": model}
    check = check_model(config, data=DataSpec(jax.ShapeDtypeStruct((5, 4), "float32"), "x"))
    rows = [
        (r.path, r.type, spell_output(r.output) if r.output is not None else None, r.count)
        for r in with_outputs(summarize(config), check.outputs)
    ]
    assert rows == [
        ("model.layers[0]", "Residual", "(None, 5, 4) float32", 0),
        ("model.layers[0].block.layers[0]", "Linear", None, 20),
        ("model.layers[1]", "Repeat", "(None, 5, 4) float32", 40),
        ("model.layers[1].block", "Linear", None, 40),
        ("model.layers[2]", "tanh", "(None, 5, 4) float32", 0),
        ("model.layers[3]", "Linear", "(None, 5, 3) float32", 12),
    ]
    assert spell_output(None) == "?" and spell_output(
        {"a": jax.ShapeDtypeStruct((7,), "int32")}
    ) == ("{a: (7,) int32}")

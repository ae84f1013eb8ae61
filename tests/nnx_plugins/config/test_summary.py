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

"""benchmarks/hf_generate.py runs its nnx side on the tiny Llama of the fixtures, and its
comparison and table work (the transformers side needs torch: a stand-in here; no timing
asserted)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import hf_generate  # noqa: E402

from nnx_plugins import import_hf  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "fixtures" / "hf" / "llama"


class StandIn:
    """A transformers worker that answers with given tokens (``generate(batch, prompt, new)``)."""

    def __init__(self, tokens):
        self.tokens = tokens

    def generate(self, batch, prompt, new):
        return 0.5, self.tokens


def test_the_nnx_side_decodes_and_the_table_compares(tmp_path, capsys):
    imported = import_hf(FIXTURE, tmp_path / "tiny")
    ours = hf_generate.nnx_side(imported.directory)
    seconds, tokens = ours(2, 4, 3)
    assert seconds > 0 and tokens.shape == (2, 3) and tokens.dtype == np.int32
    same = hf_generate.measure(ours, StandIn(tokens), batch=2, prompt=4, new=3, rounds=2)
    assert same["tokens"] == "equal" and set(same["steady"]) == {"nnx", "transformers"}
    other = tokens.copy()
    other[1, 2] += 1
    differ = hf_generate.measure(ours, StandIn(other), batch=2, prompt=4, new=3, rounds=1)
    assert differ["tokens"] == "leading tokens equal per row: [3, 2]"
    hf_generate.report([same], prompt=4)
    table = capsys.readouterr().out
    assert "| 2 | 4 + 3 |" in table and "| 12 | " in table  # (transformers: 6 tokens in 0.5 s)

"""Short texts between processes. With one process they come straight back; the multi-process
behaviour is exercised by the runs in test_processes.py (saving agrees through these)."""

import pytest

from nnx_plugins.training import _collectives
from nnx_plugins.training._collectives import broadcast_text, gather_text, process_label, sync


@pytest.mark.parametrize("text", ["", "ok", "é" * 10, "x" * 5000])
def test_texts_survive_the_wire_format(text):
    wire = _collectives._encode(text, _collectives.TEXT_BYTES)
    assert wire.shape == (_collectives.TEXT_BYTES + 2,)
    got = _collectives._decode(wire)
    assert got == text[: _collectives.TEXT_BYTES]


def test_a_cut_in_the_middle_of_a_character_does_not_fail():
    wire = _collectives._encode("aé", 2)  # 'a' and half of 'é'
    assert _collectives._decode(wire) == "a\N{REPLACEMENT CHARACTER}"


def test_one_process_gets_its_own_texts():
    assert broadcast_text("step_00000010.tmp-ab12") == "step_00000010.tmp-ab12"
    assert gather_text("!disk full") == ["!disk full"]
    sync("nothing to wait for")
    assert process_label() == "process 0 of 1" and process_label(3) == "process 3 of 1"

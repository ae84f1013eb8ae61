"""Lookups on the default registry."""

import pytest

from nnx_core import variable_type
from nnx_plugins import UnknownNameError, get_layer, get_variable_type, load_variable_types


def test_get_layer_and_variable_type(nnx_registry):
    assert get_layer("acme.GatedDense").__name__ == "GatedDense"
    assert get_variable_type("acme.LoRAParam") is variable_type("acme.LoRAParam")
    with pytest.raises(UnknownNameError, match="Unknown layer 'Nope'"):
        get_layer("Nope")


def test_load_variable_types_feeds_the_core_table(nnx_registry):
    kinds = load_variable_types()
    assert {"Param", "BatchStat", "acme.LoRAParam"} <= set(kinds)
    assert all(variable_type(name) is cls for name, cls in kinds.items())

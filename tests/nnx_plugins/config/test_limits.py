"""ConfigLimits and the Budget every read draws from: each limit named, with how to raise it."""

import pytest

from nnx_plugins import ConfigError, ConfigLimits
from nnx_plugins.config._limits import Budget
from nnx_plugins.config._source import read_source


def test_environment_limits(monkeypatch):
    monkeypatch.setenv("NNX_CONFIG_MAX_DEPTH", "3")
    with pytest.raises(ConfigError, match=r"nested deeper than max_depth=3 .*NNX_CONFIG_MAX_DEPTH"):
        read_source("a: {b: {c: {d: 1}}}\n", name="m")
    monkeypatch.setenv("NNX_CONFIG_MAX_DEPTH", "lots")
    with pytest.raises(
        ConfigError, match=r"environment: <root>: NNX_CONFIG_MAX_DEPTH='lots' is not a positive"
    ):
        read_source("a: 1\n", name="m")


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_limits_must_be_positive_integers(value):
    with pytest.raises(
        ValueError, match=r"ConfigLimits\(max_nodes=...\) must be a positive integer"
    ):
        ConfigLimits(max_nodes=value)


@pytest.mark.parametrize(
    ("spend", "message"),
    [
        (
            lambda b: b.add_bytes(11, "f.yaml"),
            r"f.yaml: <root>: the config is larger than max_bytes=10 bytes \(11 bytes with its "
            r"includes and overrides\); nothing was parsed. Raise the limit with "
            r"NNX_CONFIG_MAX_BYTES=N or load_config\(..., limits=ConfigLimits\(max_bytes=N\)\)\.",
        ),
        (
            lambda b: b.add_text(11, ("a",), "f.yaml", (2, 3)),
            r"f.yaml:2:3: a: string interpolation produces more than max_bytes=10 characters",
        ),
        (
            lambda b: [b.add_file("f.yaml") for _ in range(3)],
            r"f.yaml: <root>: the config reads more than max_files=2 files \(itself and its "
            r"includes\). Raise the limit with NNX_CONFIG_MAX_FILES=N",
        ),
        (
            lambda b: b.check_depth(4, ("a", 0, "b", 1, "c"), "f.yaml", (1, 9)),
            r"f.yaml:1:9: <root>: the config is nested deeper than max_depth=3 levels \(here "
            r"inside a\[0\].b\[1\] ...\); mappings, lists and chains of interpolations count",
        ),
        (
            lambda b: b.add_nodes(6, ("a",), None, (4, 1)),
            r"test:4:1: a: the config holds more than max_nodes=5 values",
        ),
    ],
)
def test_each_limit_names_itself_and_how_to_raise_it(spend, message):
    budget = Budget(ConfigLimits(max_bytes=10, max_depth=3, max_nodes=5, max_files=2), "test")
    with pytest.raises(ConfigError, match=message):
        spend(budget)


def test_a_budget_counts_across_calls():
    budget = Budget(ConfigLimits(max_nodes=5), "test")
    budget.add_nodes(5, ())
    budget.check_depth(3, ())
    assert budget.nodes == 5
    with pytest.raises(ConfigError, match="max_nodes=5"):
        budget.add_nodes(1, ())

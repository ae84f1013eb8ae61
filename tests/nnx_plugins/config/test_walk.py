"""Property tests: malformed configs always yield a located ConfigError, never a crash or a model."""

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnx_plugins import Config, ConfigError, build, load_config
from nnx_plugins.config._source import read_source

from ..corpus import ARGUMENTS, NESTED

MODELS = [NESTED] + [{"type": name, **args} for name, args in sorted(ARGUMENTS.items())]
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
NOT_A_NUMBER = st.one_of(
    st.text(alphabet="xyz", min_size=1, max_size=4),
    st.lists(st.none(), min_size=1),
    st.dictionaries(st.just("k"), st.none(), min_size=1),
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def layer_nodes(node, path=()):
    """Paths of every layer node (mappings with a 'type') in a config tree."""
    found = [path] if isinstance(node, dict) and "type" in node else []
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    keys = (
        list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
    )
    for key, child in zip(keys, children):
        found += layer_nodes(child, (*path, key))
    return found


def at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


@st.composite
def malformed(draw):
    """A valid model with 1-3 mutations, each of which alone makes it invalid."""
    model = copy.deepcopy(draw(st.sampled_from(MODELS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = layer_nodes(model)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        node = at(model, path)
        if not isinstance(node, dict):
            break
        how = draw(st.sampled_from(["extra", "drop", "type", "scalar", "number", "dtype"]))
        ints = [k for k, v in node.items() if isinstance(v, int) and not isinstance(v, bool)]
        if how == "extra":
            node["zz_" + draw(st.text(alphabet="abc", max_size=4))] = draw(JUNK)
        elif (
            how == "drop"
            and node["type"] in ARGUMENTS
            and any(k in node for k in ("in_features", "num_features", "rate", "num_embeddings"))
        ):
            node.pop(
                next(
                    k
                    for k in ("in_features", "num_features", "rate", "num_embeddings")
                    if k in node
                )
            )
        elif how == "type":
            node["type"] = "no.such." + draw(st.text(alphabet="ABC", min_size=1, max_size=4))
        elif how == "scalar" and path:
            at(model, path[:-1])[path[-1]] = draw(st.one_of(st.integers(), st.text(max_size=4)))
        elif how == "number" and ints:
            node[draw(st.sampled_from(ints))] = draw(NOT_A_NUMBER)
        else:
            node["param_dtype" if "param_dtype" in node else "zz_dtype"] = "float33"
    return model


@SETTINGS
@given(malformed())
def test_malformed_configs_raise_located_config_errors(model):
    text = yaml.safe_dump({"model": model})
    source = read_source(text, name="gen.yaml")
    with pytest.raises(ConfigError) as info:
        build(source)
    for problem in info.value.problems:
        assert (
            problem.source == "gen.yaml" and problem.line is not None and problem.column is not None
        )
        assert str(problem).startswith(f"gen.yaml:{problem.line}:{problem.column}: ")
        assert problem.path == () or problem.path[0] == "model"


TREES = st.recursive(
    st.one_of(JUNK, st.sampled_from(["relu", "Linear", "Sequential", "type", "layers"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "layers",
                    "in_features",
                    "out_features",
                    "block",
                    "branches",
                    "model",
                    "zz",
                ]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@SETTINGS
@given(TREES)
def test_arbitrary_data_never_crashes(tree):
    text = yaml.safe_dump({"model": tree})
    try:
        result = load_config(read_source(text, name="any.yaml"))
    except ConfigError as error:
        assert all(p.line is not None for p in error.problems)
    else:
        assert isinstance(result, Config)

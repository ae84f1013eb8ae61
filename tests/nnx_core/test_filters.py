"""Filters: every form, the combinators, and the errors of split / state / filter."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import _filters


class Kind(nnx.Param, kind="tests.filters.Kind"):
    pass


class Model(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(np.ones(2, np.float32))
        self.stat = nnx.BatchStat(np.zeros(2, np.float32))
        self.cache = nnx.Cache(np.zeros(1, np.float32))
        self.raw = np.arange(3)
        self.sub = {"k": Kind(np.ones(1, np.float32)), "n": nnx.Variable(np.zeros(1))}
        self.layers = [nnx.Param(np.ones(1, np.float32))]


ALL = ["cache", "layers[0]", "raw", "stat", "sub.k", "sub.n", "w"]


def paths(state):
    return [nnx.format_path(p) for p, _ in state.flat_state()]


@pytest.mark.parametrize(
    "filter_, expected",
    [
        (nnx.Param, ["layers[0]", "sub.k", "w"]),
        (Kind, ["sub.k"]),
        (nnx.Variable, ["cache", "layers[0]", "stat", "sub.k", "sub.n", "w"]),
        (np.ndarray, ["raw"]),
        (..., ALL),
        (True, ALL),
        (None, []),
        (False, []),
        (lambda path, value: "sub" in path, ["sub.k", "sub.n"]),
        (
            lambda path, value: getattr(value, "shape", None) == (1,),
            ["cache", "layers[0]", "sub.k", "sub.n"],
        ),
        ((nnx.BatchStat, nnx.Cache), ["cache", "stat"]),
        ([nnx.BatchStat, "tests.filters.Kind"], ["stat", "sub.k"]),
        ((), []),
        ("Param", ["layers[0]", "sub.k", "w"]),
        ("BatchStat", ["stat"]),
        ("tests.filters.Kind", ["sub.k"]),
        (nnx.OfType(nnx.Cache), ["cache"]),
        (nnx.PathContains("sub"), ["sub.k", "sub.n"]),
        (nnx.PathContains(0), ["layers[0]"]),
        (nnx.All(nnx.Param, nnx.PathContains("sub")), ["sub.k"]),
        (nnx.All(), ALL),
        (nnx.Any(nnx.Cache, "BatchStat", nnx.PathContains("w")), ["cache", "stat", "w"]),
        (nnx.Any(), []),
        (nnx.Not(nnx.Variable), ["raw"]),
        (nnx.Not(nnx.Any(nnx.Param, ...)), []),
        (nnx.Everything, ALL),
        (nnx.Nothing, []),
        (nnx.Everything(), ALL),
        (nnx.Nothing(), []),
        (nnx.PathContains("su", exact=False), ["sub.k", "sub.n"]),
        (nnx.PathContains("su"), []),
        (nnx.PathContains(0, exact=False), ["layers[0]"]),
        (
            nnx.All(nnx.Variable, nnx.Not(nnx.Param), nnx.Not(nnx.BatchStat), nnx.Not(nnx.Cache)),
            ["sub.n"],
        ),
    ],
)
def test_filter_forms_select_the_expected_paths(filter_, expected):
    assert paths(nnx.state(Model(), filter_)) == expected
    assert paths(nnx.state(Model()).filter(filter_)) == expected


def test_a_predicate_receives_the_path_and_the_value():
    seen = []
    m = Model()
    nnx.state(m, lambda path, value: seen.append((path, value)) or False)
    assert sorted(p for p, _ in seen) == sorted(p for p, _ in nnx.state(m).flat_state())
    assert dict(seen)[("w",)] is m.w and dict(seen)[("raw",)] is m.raw


def test_to_predicate_forms():
    p = nnx.to_predicate
    v = nnx.Param(np.zeros(1))
    assert p(...) is nnx.Everything and p(True) is nnx.Everything
    assert p(None) is nnx.Nothing and p(False) is nnx.Nothing
    assert p(nnx.Param) == nnx.OfType(nnx.Param) == p("Param")
    assert p((nnx.Param,)) == nnx.Any(nnx.Param) == p([nnx.Param])
    fn = lambda path, value: True  # noqa: E731
    assert p(fn) is fn
    assert p(nnx.Param)((), v) and not p(nnx.BatchStat)((), v)


@pytest.mark.parametrize(
    "filter_, expected",
    [
        (nnx.OfType(nnx.Param), "OfType(Param)"),
        (nnx.PathContains("encoder"), "PathContains(key='encoder')"),
        (nnx.All(nnx.Param, nnx.Not("Cache"), ...), "All(Param, Not('Cache'), ...)"),
        (nnx.Any(nnx.BatchStat, nnx.PathContains(0)), "Any(BatchStat, PathContains(key=0))"),
        (nnx.Not(nnx.Everything), "Not(Everything)"),
        (nnx.Nothing, "Nothing"),
    ],
)
def test_filter_reprs(filter_, expected):
    assert repr(filter_) == expected


def test_combinators_are_hashable_and_compare_by_structure():
    assert nnx.All(nnx.Param, "Cache") == nnx.All(nnx.Param, nnx.Cache)
    assert hash(nnx.All(nnx.Param)) == hash(nnx.All(nnx.Param))
    assert nnx.Any(nnx.Param) != nnx.All(nnx.Param)
    assert nnx.Not(nnx.Param) == nnx.Not("Param") and hash(nnx.Not(nnx.Param)) == hash(
        nnx.Not(nnx.Param)
    )
    assert nnx.Not(nnx.Param) != nnx.Not(nnx.Cache)
    assert nnx.PathContains("a") == nnx.PathContains("a")
    assert len({nnx.OfType(nnx.Param), nnx.OfType(nnx.Param)}) == 1


def test_split_partitions_by_the_first_matching_filter():
    _, params, stats, rest = nnx.split(Model(), nnx.Param, (nnx.BatchStat, nnx.Param), ...)
    assert paths(params) == ["layers[0]", "sub.k", "w"]
    assert paths(stats) == ["stat"]
    assert paths(rest) == ["cache", "raw", "sub.n"]


def test_state_with_several_filters_drops_the_unmatched():
    params, stats = nnx.state(Model(), nnx.Param, nnx.BatchStat)
    assert paths(params) == ["layers[0]", "sub.k", "w"] and paths(stats) == ["stat"]


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda m, *f: nnx.split(m, *f),
        lambda m, *f: nnx.state(m).split(*f),
    ],
    ids=["nnx.split", "State.split"],
)
def test_non_exhaustive_split_names_the_unmatched_paths(call):
    with pytest.raises(
        ValueError,
        match=r"Non-exhaustive filters, got a non-empty remainder: split filters \('Param', 'BatchStat'\) leave 3 value\(s\) unmatched: "
        r"cache \(Cache\), raw \(ndarray\), sub.n \(Variable\)\. Add a filter for them or end "
        r"the filters with `...`",
    ):
        call(Model(), nnx.Param, nnx.BatchStat)


def test_many_unmatched_paths_are_elided():
    many = {f"v{i:02d}": nnx.Cache(np.zeros(1)) for i in range(13)}
    with pytest.raises(
        ValueError,
        match=r"leave 13 value\(s\) unmatched: v00 \(Cache\), .*"
        r"v09 \(Cache\) and 3 more\.",
    ):
        nnx.split(many, nnx.Param)


@pytest.mark.parametrize(
    "call",
    [
        lambda m, *f: nnx.split(m, *f),
        lambda m, *f: nnx.state(m, *f),
        lambda m, *f: nnx.pop(m, *f),
        lambda m, *f: nnx.state(m).split(*f),
        lambda m, *f: nnx.state(m).filter(*f),
    ],
    ids=["split", "state", "pop", "State.split", "State.filter"],
)
@pytest.mark.parametrize(
    "filters, match",
    [
        (
            (..., nnx.Param),
            r"`\.\.\.` or `True` can only be used as the last filters: `...` \(everything\) may "
            r"only be the last filter, but it is filter 0 "
            r"of 2: \('...', 'Param'\)\. Move it to the end\.",
        ),
        ((nnx.Param, True, nnx.Cache), r"it is filter 1 of 3: \('Param', 'True', 'Cache'\)"),
    ],
)
def test_everything_must_be_the_last_filter(call, filters, match):
    with pytest.raises(ValueError, match=match):
        call(Model(), *filters)


@pytest.mark.parametrize(
    "filter_, match",
    [
        (
            3,
            r"Invalid filter 3 of type int\. A filter is a Variable type, a registered kind "
            r"name, \.\.\., True, None, False, a tuple of filters, or a callable",
        ),
        (1.5, "Invalid filter 1.5 of type float"),
        ((nnx.Param, {"a": 1}), r"Invalid filter \{'a': 1\} of type dict"),
        ((nnx.Param, (nnx.Cache, b"x")), r"Invalid filter b'x' of type bytes"),
    ],
)
def test_an_invalid_filter_is_a_type_error_showing_it(filter_, match):
    with pytest.raises(TypeError, match=match):
        nnx.state(Model(), filter_)


def test_combinators_reject_invalid_filters_when_built():
    with pytest.raises(TypeError, match="Invalid filter 7 of type int"):
        nnx.Not(7)
    with pytest.raises(TypeError, match="Invalid filter 7 of type int"):
        nnx.Any(nnx.Param, 7)


@pytest.mark.parametrize(
    "make",
    [
        lambda: nnx.to_predicate("tests.filters.NoSuchKind"),
        lambda: nnx.state(Model(), "tests.filters.NoSuchKind"),
        lambda: nnx.All(nnx.Param, "tests.filters.NoSuchKind"),
    ],
)
def test_an_unknown_kind_name_raises(make):
    with pytest.raises(
        KeyError,
        match=r"No Variable kind is registered as "
        r"'tests.filters.NoSuchKind'\. Registered kinds: .*Param",
    ):
        make()


def test_check_filters_and_is_variable_helpers():
    assert _filters.check_filters(()) == ()
    assert _filters.check_filters((nnx.Param, ...))[1] is nnx.Everything
    assert _filters.is_variable(nnx.Param(np.zeros(1))) and not _filters.is_variable(np.zeros(1))


def test_cached_partitions_follow_a_change_of_raw_array_type():
    m = Model()
    assert paths(nnx.state(m, np.ndarray)) == ["raw"]
    m.raw = jax.numpy.arange(3)
    assert paths(nnx.state(m, np.ndarray)) == [] and paths(nnx.state(m, jax.Array)) == ["raw"]


def test_everything_and_nothing_are_the_same_object_bare_or_called():
    assert nnx.Everything() is nnx.Everything and nnx.Nothing() is nnx.Nothing
    assert nnx.Everything((), None) is True and nnx.Nothing(("a",), 1) is False
    assert nnx.to_predicate(nnx.Everything()) is nnx.Everything


@pytest.mark.parametrize("constant", [nnx.Everything, nnx.Nothing])
def test_constant_filters_take_no_or_two_arguments(constant):
    with pytest.raises(
        TypeError,
        match=rf"{constant!r} is a filter: use it as {constant!r} or "
        rf"{constant!r}\(\).*got 1 argument",
    ):
        constant(("path",))


@pytest.mark.parametrize(
    "filter_, expected",
    [
        (nnx.PathContains("a", exact=False), "PathContains(key='a', exact=False)"),
        (nnx.Everything(), "Everything"),
    ],
)
def test_new_filter_reprs(filter_, expected):
    assert repr(filter_) == expected


def test_a_string_that_names_no_kind_is_a_tag_as_in_flax():
    rngs = nnx.Rngs(params=0, dropout=1)
    _, counts, dropout, params = nnx.split(rngs, nnx.RngCount, "dropout", "params")
    assert [nnx.format_path(p) for p, _ in dropout.flat_state()] == ["dropout.key"]
    assert [nnx.format_path(p) for p, _ in params.flat_state()] == ["params.key"]
    assert len(counts.flat_state()) == 2
    assert nnx.to_predicate("dropout") == nnx.WithTag("dropout")
    assert isinstance(nnx.to_predicate("Param"), nnx.OfType)

"""The Variable kind name <-> type table: built-in names, automatic and explicit names,
redefinitions and collisions."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import nnx_core as nnx
from nnx_core import _kinds


@pytest.mark.parametrize(
    "name, cls",
    [
        ("Variable", nnx.Variable),
        ("Param", nnx.Param),
        ("BatchStat", nnx.BatchStat),
        ("Cache", nnx.Cache),
        ("Intermediate", nnx.Intermediate),
        ("RngKey", nnx.RngKey),
        ("RngCount", nnx.RngCount),
        ("OptState", nnx.OptState),
    ],
)
def test_builtin_kind_names(name, cls):
    assert nnx.variable_name(cls) == name
    assert nnx.variable_type(name) is cls
    assert nnx.registered_variable_types()[name] is cls


def test_a_subclass_is_a_new_kind_with_an_automatic_name():
    class AutoKind(nnx.Param):
        pass

    name = f"{__name__}.test_a_subclass_is_a_new_kind_with_an_automatic_name.<locals>.AutoKind"
    assert nnx.variable_name(AutoKind) == name
    assert nnx.variable_type(name) is AutoKind
    v = AutoKind(jnp.ones(1))
    assert isinstance(v, nnx.Param) and nnx.OfType(nnx.Param)((), v)


def test_kind_class_keyword_gives_an_explicit_name():
    class Lora(nnx.Param, kind="tests.variables.Lora"):
        pass

    assert nnx.variable_name(Lora) == "tests.variables.Lora"
    assert nnx.variable_type("tests.variables.Lora") is Lora
    assert nnx.register_variable_type(Lora, "tests.variables.Lora") is Lora  # same pair: no-op


def test_explicit_registration_replaces_the_automatic_name():
    class Later(nnx.Variable):
        pass

    auto = nnx.variable_name(Later)
    assert nnx.register_variable_type(Later, "tests.variables.Later") is Later
    assert nnx.variable_name(Later) == "tests.variables.Later"
    with pytest.raises(KeyError, match="No Variable kind is registered as"):
        nnx.variable_type(auto)


def test_an_explicit_name_may_take_another_class_s_automatic_name():
    class Holder(nnx.Variable):
        pass

    class Taker(nnx.Variable):
        pass

    auto = nnx.variable_name(Holder)
    nnx.register_variable_type(Taker, auto)
    assert nnx.variable_type(auto) is Taker
    with pytest.raises(KeyError, match="is not a registered Variable kind"):
        nnx.variable_name(Holder)


def test_redefining_a_class_moves_its_automatic_name_to_the_new_class():
    def define():
        class Redefined(nnx.Variable):
            pass

        return Redefined

    old, new = define(), define()
    assert nnx.variable_type(nnx.variable_name(new)) is new
    with pytest.raises(KeyError, match="Redefined'> is not a registered Variable kind"):
        nnx.variable_name(old)


def test_automatic_names_are_not_listed_as_known_kinds():
    class Unlisted(nnx.Variable):
        pass

    with pytest.raises(KeyError) as info:
        nnx.variable_type("tests.variables.nothing")
    assert "Param" in str(info.value) and "Unlisted" not in str(info.value)


class _Taken(nnx.Variable, kind="tests.variables.Taken"):
    pass


class _Other(nnx.Variable):
    pass


@pytest.mark.parametrize(
    "register, error, match",
    [
        (
            lambda: nnx.register_variable_type(_Other, "tests.variables.Taken"),
            ValueError,
            r"'tests.variables.Taken' is already registered to .*_Taken; cannot also register "
            r".*_Other",
        ),
        (
            lambda: nnx.register_variable_type(_Taken, "tests.variables.Renamed"),
            ValueError,
            r"_Taken is already registered as 'tests.variables.Taken'; it cannot also be "
            r"registered as 'tests.variables.Renamed'",
        ),
        (
            lambda: nnx.register_variable_type(nnx.Param, "Weight"),
            ValueError,
            "already registered as 'Param'",
        ),
        (
            lambda: nnx.register_variable_type(_Other, "Param"),
            ValueError,
            "'Param' is already registered to nnx_core._variables.Param",
        ),
        (
            lambda: nnx.variable_type("tests.variables.Unknown"),
            KeyError,
            r"No Variable kind is registered as 'tests.variables.Unknown'. Registered kinds: "
            r"BatchStat, Cache, .*Param",
        ),
        (lambda: nnx.variable_name(int), KeyError, "<class 'int'> is not a registered"),
    ],
)
def test_kind_table_errors(register, error, match):
    with pytest.raises(error, match=match):
        register()


def test_kind_keyword_collision_fails_the_class_definition():
    with pytest.raises(ValueError, match="'tests.variables.Taken' is already registered to"):

        class Clash(nnx.Variable, kind="tests.variables.Taken"):
            pass

    assert nnx.variable_type("tests.variables.Taken") is _Taken


def test_a_kind_class_defined_again_takes_its_name_over():
    def define():
        class Reloaded(nnx.Variable, kind="tests.variables.Reloaded"):
            pass

        return Reloaded

    old, new = define(), define()  # e.g. a reloaded module or a re-run notebook cell
    assert nnx.variable_type("tests.variables.Reloaded") is new
    assert nnx.variable_name(new) == "tests.variables.Reloaded"
    with pytest.raises(KeyError, match="Reloaded'> is not a registered Variable kind"):
        nnx.variable_name(old)


def test_display_name_is_the_explicit_name_or_the_class_name():
    class Plain(nnx.Variable):
        pass

    assert _kinds.display_name(Plain) == "Plain"
    assert _kinds.display_name(_Taken) == "tests.variables.Taken"
    assert _kinds.display_name(nnx.Param) == "Param"


# -- the kind resolver hook (nnx_plugins installs one for entry-point names) ----------------------
@pytest.fixture
def asked():
    """Install a resolver that records what it is asked and names ``_Resolved`` on demand."""
    calls = []

    def resolver(key):
        calls.append(key)
        if key in ("tests.resolved", _Resolved):
            nnx.register_variable_type(_Resolved, "tests.resolved")
        if key == "tests.raises":
            raise LookupError("resolver failed for tests.raises")

    previous = nnx.set_variable_kind_resolver(resolver)
    yield calls
    nnx.set_variable_kind_resolver(previous)


class _Resolved(nnx.Variable):
    pass


class _Unnamed(nnx.Variable):
    pass


def test_resolver_names_a_kind_by_name_or_by_class(asked):
    assert nnx.variable_name(nnx.Param) == "Param"  # explicit names never ask
    assert nnx.variable_type("Param") is nnx.Param
    assert asked == []
    auto = nnx.variable_name(_Unnamed)  # an automatic name asks, and stays if nothing is known
    assert auto.endswith("._Unnamed") and asked == [_Unnamed]
    assert nnx.variable_type("tests.resolved") is _Resolved
    assert nnx.variable_name(_Resolved) == "tests.resolved"
    assert asked == [_Unnamed, "tests.resolved"]


def test_resolver_errors_propagate_and_unknown_names_still_raise_key_error(asked):
    with pytest.raises(LookupError, match="resolver failed for tests.raises"):
        nnx.variable_type("tests.raises")
    with pytest.raises(KeyError, match="No Variable kind is registered as 'tests.nothing'"):
        nnx.variable_type("tests.nothing")
    assert asked == ["tests.raises", "tests.nothing"]


def test_setting_none_removes_the_resolver(asked):
    nnx.set_variable_kind_resolver(None)
    with pytest.raises(KeyError, match="'tests.still.nothing'"):
        nnx.variable_type("tests.still.nothing")
    nnx.variable_name(_Unnamed)
    assert asked == []

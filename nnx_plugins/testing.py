"""A conformance kit for plugin authors: an isolated registry and `check_layer`.

Use it from a pack's tests::

    # conftest.py
    pytest_plugins = ["nnx_plugins.testing"]

    # test_pack.py
    from nnx_plugins.testing import check_layer

    def test_gated_dense(nnx_registry):
        check_layer("acme.GatedDense", {"in_features": 4, "out_features": 3}, input_shape=(2, 4))

Example:
    >>> from nnx_plugins.testing import check_layer
    >>> report = check_layer("Linear", {"in_features": 2, "out_features": 3}, input_shape=(5, 2))
    >>> report.output_shape
    (5, 3)
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib.metadata import EntryPoint
from typing import Any, TypeVar

import jax
import pytest

import nnx_core

from .config._build import build, to_config
from .config._fields import LayerSpec, layer_spec
from .config._load import load_config
from .config._schema import config_schema
from .registry._discovery import Settings, check_name
from .registry._registry import Registry, default_registry, set_default_registry

T = TypeVar("T")

__all__ = [
    "FakeDistribution",
    "LayerCheckError",
    "LayerReport",
    "check_layer",
    "check_variable_type",
    "fake_distribution",
    "isolated_registry",
    "nnx_registry",
]


@dataclasses.dataclass
class FakeDistribution:
    """Stands in for an installed distribution (its metadata only) in tests."""

    metadata: dict[str, str]
    version: str
    entry_points: list[EntryPoint]


def fake_distribution(
    name: str, version: str = "0.1.0", *, entry_points: Mapping[str, Mapping[str, str]]
) -> FakeDistribution:
    """A distribution declaring ``entry_points`` (``{group: {name: "module:attr"}}``).

    Example:
        >>> from nnx_plugins.testing import fake_distribution
        >>> d = fake_distribution("other", entry_points={"nnx.layers": {"other.X": "m:X"}})
        >>> d.entry_points[0].group, d.entry_points[0].name
        ('nnx.layers', 'other.X')
    """
    points = [
        EntryPoint(entry, value, group)
        for group, entries in entry_points.items()
        for entry, value in entries.items()
    ]
    return FakeDistribution({"Name": name}, version, points)


@contextlib.contextmanager
def isolated_registry(
    *, distributions: Iterable[Any] | None = None, settings: Settings | None = None
) -> Iterator[Registry]:
    """Make a fresh `Registry` the default inside the block; restore the previous one after.

    Args:
        distributions: the distributions to read (e.g. the installed ones plus
            `fake_distribution` objects); all installed ones when omitted.
        settings: the switches; read from the environment when omitted.

    Example:
        >>> from nnx_plugins import default_registry
        >>> from nnx_plugins.testing import isolated_registry
        >>> with isolated_registry() as registry:
        ...     default_registry() is registry
        True
    """
    registry = Registry(settings=settings, distributions=distributions)
    previous = set_default_registry(registry)
    try:
        yield registry
    finally:
        set_default_registry(previous)


@pytest.fixture
def nnx_registry() -> Iterator[Registry]:
    """A fresh registry from the installed metadata, the default for the test's duration."""
    with isolated_registry() as registry:
        yield registry


class LayerCheckError(AssertionError):
    """`check_layer` found problems; the message lists every one."""


@dataclasses.dataclass(frozen=True)
class LayerReport:
    """What `check_layer` verified."""

    name: str
    spec: LayerSpec
    config: dict[str, Any]
    output_shape: Any = None


def _diff(left: Any, right: Any, path: str = "") -> list[str]:
    if isinstance(left, dict) and isinstance(right, dict):
        found = []
        for key in sorted(set(left) | set(right), key=str):
            found += _diff(left.get(key), right.get(key), f"{path}.{key}" if path else str(key))
        return found
    return [] if left == right else [f"{path or '<root>'}: {left!r} != {right!r}"]


def _check_name(registry: Registry, kind: str, name: str) -> list[str]:
    problems = []
    for provider in registry.providers(kind, name):
        problem = check_name(kind, name, provider.plugin)
        if problem:
            problems.append(problem)
    return problems


def _attempt(problems: list[str], what: str, call: Callable[[], T]) -> T | None:
    """``call()``, or ``None`` with the failure added to ``problems`` as ``what`` failed."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - a check reports whatever the layer raises
        text = str(error).strip().replace("\n", "\n    ")
        problems.append(f"{what} failed: {type(error).__name__}: {text}")
        return None


def _round_trip(module: Any, normalized: Any, registry: Registry) -> list[str]:
    """What differs between ``module`` and ``build(to_config(module))``."""
    problems: list[str] = []
    back = _attempt(problems, "to_config(layer)", lambda: to_config(module, registry=registry))
    if back is None:
        return problems
    problems += [f"round trip differs at {d}" for d in _diff(back, normalized)]
    rebuilt = _attempt(problems, "build(to_config(layer))", lambda: build(back, registry=registry))
    if rebuilt is not None:
        shapes = [jax.tree.map(jax.numpy.shape, nnx_core.state(m)) for m in (module, rebuilt)]
        if jax.tree.structure(shapes[0]) != jax.tree.structure(shapes[1]) or jax.tree.leaves(
            shapes[0]
        ) != jax.tree.leaves(shapes[1]):
            problems.append("build(to_config(m)) has a different state structure than m")
    return problems


def _schema_problems(name: str, node: Mapping[str, Any], registry: Registry) -> list[str]:
    problems: list[str] = []
    schema = _attempt(problems, "config_schema()", lambda: config_schema(registry=registry))
    if schema is None:
        return problems
    definition = schema["$defs"].get(name)
    if definition is None:
        return [f"config_schema() has no definition for {name!r}"]
    unknown = set(node) - set(definition.get("properties", {}))
    return [f"config keys {sorted(unknown)} are missing from the schema"] if unknown else []


def check_layer(
    name: str,
    config: Mapping[str, Any] | None = None,
    *,
    input_shape: tuple[int, ...] | None = None,
    registry: Registry | None = None,
) -> LayerReport:
    """Check that the layer registered as ``name`` works with configs end to end.

    Checks: the name follows the rules; a config model derives from ``__init__``; ``config``
    (the layer's arguments, without ``type``) validates and builds; ``to_config`` of the built
    layer equals the normalized config and rebuilds to the same state shapes; the JSON Schema
    describes it; and, given ``input_shape``, a forward pass runs (abstractly). Every check
    runs that can (what depends on a failed one is skipped), and every failure is collected,
    the exceptions of the layer's own code (``__init__``, ``to_config``, the forward pass)
    included.

    Raises:
        LayerCheckError: listing every failed check.

    Example:
        >>> from nnx_plugins.testing import LayerCheckError, check_layer
        >>> try:
        ...     check_layer("Linear", {"in_features": 2, "out_features": 0}, input_shape=(5, 3))
        ... except LayerCheckError as error:
        ...     print(str(error).splitlines()[1][:60])
          validating the config failed: ConfigError: 1 problem in <d
    """
    registry = registry or default_registry()
    problems = _check_name(registry, "layer", name)
    obj = _attempt(problems, f"looking up {name!r}", lambda: registry.get("layer", name))
    spec = None
    if obj is not None:
        spec = _attempt(
            problems, "deriving its config model", lambda: layer_spec(name, obj, registry=registry)
        )
    node = {"type": name, **(config or {})}
    normalized = module = output_shape = None
    if spec is not None:
        normalized = _attempt(
            problems,
            "validating the config",
            lambda: load_config({"model": node}, registry=registry).model,
        )
    if normalized is not None:
        module = _attempt(problems, "building the layer", lambda: build(node, registry=registry))
    if module is not None and spec is not None and not spec.is_activation:
        problems += _round_trip(module, normalized, registry)
    if obj is not None:
        problems += _schema_problems(name, node, registry)
    if module is not None and input_shape is not None:
        x = jax.ShapeDtypeStruct(tuple(input_shape), jax.numpy.float32)
        output_shape = _attempt(
            problems,
            f"the forward pass on {tuple(input_shape)}",
            lambda: jax.eval_shape(module, x).shape,
        )
    if problems:
        raise LayerCheckError(f"check_layer({name!r}) failed:\n  " + "\n  ".join(problems))
    return LayerReport(name, spec, normalized, output_shape)  # type: ignore[arg-type]


def check_variable_type(name: str, *, registry: Registry | None = None) -> type:
    """Check that the Variable kind ``name`` loads, subclasses Variable and is in the core table.

    Example:
        >>> from nnx_plugins.testing import check_variable_type
        >>> check_variable_type("Param").__name__
        'Param'

    Raises:
        LayerCheckError: listing every failed check.
    """

    registry = registry or default_registry()
    problems = _check_name(registry, "variable", name)
    cls = registry.get("variable", name)
    if nnx_core.variable_type(name) is not cls:
        problems.append(f"nnx_core.variable_type({name!r}) is not {cls!r}")
    if nnx_core.variable_name(cls) != name:
        problems.append(f"nnx_core.variable_name({cls.__qualname__}) is not {name!r}")
    if problems:
        raise LayerCheckError(f"check_variable_type({name!r}) failed:\n  " + "\n  ".join(problems))
    return cls

"""A conformance kit for plugin authors: an isolated registry, `check_layer`, and the checks of
run parts (`check_dataset`, `check_task`, `check_metric`, `check_logger`, `check_callback`).

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
    "PartCheckError",
    "check_dataset",
    "check_task",
    "check_metric",
    "check_logger",
    "check_callback",
    "check_converter",
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


# -- run parts --------------------------------------------------------------------------------
class PartCheckError(AssertionError):
    """A run-part check found problems; the message lists every one."""


def _part(
    kind: str, name: str, config: Mapping[str, Any] | None, registry: Registry | None
) -> tuple[Any, list[str]]:
    """The validated `Part` (config round trip, schema, naming rules) and the problems found."""
    from .training._problems import Problems
    from .training._sections import Part, _check_part, part_schemas  # (here: they import jax)

    registry = registry or default_registry()
    problems = _check_name(registry, kind, name)
    found = Problems()
    part = _check_part(kind, {"type": name, **(config or {})}, (), found, None)
    if part is None:
        details = "; ".join(str(item["type"].message_template) for item in found.items)
        raise PartCheckError(
            f"the {kind} {name!r} refused its config {dict(config or {})}: {details}"
        )
    again = Problems()
    back = _check_part(kind, part.dump(), (), again, None)
    if not isinstance(back, Part) or back.dump() != part.dump():
        problems.append(
            f"its config does not round-trip: {part.dump()} -> {getattr(back, 'arguments', None)}"
        )
    if not any(schema.get("title") == name for schema in part_schemas(kind)):
        problems.append(f"the JSON Schema of {kind}s has no definition for {name!r}")
    return part, problems


def _raise(what: str, problems: list[str]) -> None:
    if problems:
        raise PartCheckError(f"{what} failed:\n  " + "\n  ".join(problems))


def _batch_problems(batch: Any, info: Any, rows: int, where: str) -> list[str]:
    if not isinstance(batch, Mapping) or not {"inputs", "targets"} <= set(batch):
        return [f"{where} is not a dict with 'inputs' and 'targets': {type(batch).__name__}"]
    problems = []
    for key, struct in (("inputs", info.inputs), ("targets", info.targets)):
        array = batch[key]
        shape, dtype = tuple(getattr(array, "shape", ())), getattr(array, "dtype", None)
        if (
            shape[1:] != tuple(struct.shape)
            or dtype != struct.dtype
            or (rows and shape[:1] != (rows,))
        ):
            problems.append(
                f"{where}[{key!r}] is {dtype}{shape} but describe() says {struct.dtype}{tuple(struct.shape)} per example"
            )
    return problems


def check_dataset(
    name: str,
    config: Mapping[str, Any] | None = None,
    *,
    batch_size: int = 4,
    steps: int = 3,
    max_test_batches: int = 100_000,
    registry: Registry | None = None,
) -> Any:
    """Check that the dataset registered as ``name`` works in a run, end to end.

    Checks: the name follows the rules; ``config`` (its arguments, without ``type``)
    validates, round-trips and is in the JSON Schema; ``describe()`` gives a `DataInfo`;
    the batches of the first ``steps`` steps hold what it describes and are a pure function
    of ``(seed, step)``; the test batches end (within ``max_test_batches``) and hold what it
    describes; ``state()`` is JSON and ``check_state(state())`` accepts it.

    Returns:
        The dataset instance.

    Raises:
        PartCheckError: listing every failed check.

    Example:
        >>> from nnx_plugins.testing import check_dataset
        >>> check_dataset("digits", {"layout": "flat"}).describe().inputs.shape
        (64,)
    """
    import json

    import numpy as np

    from .training.data._base import DataInfo

    part, problems = _part("dataset", name, config, registry)
    data = part.make()
    info = data.describe()
    if not isinstance(info, DataInfo):
        _raise(f"check_dataset({name!r})", [*problems, f"describe() gave {info!r}, not a DataInfo"])
    for step in range(steps):
        batch = data.batch(step, batch_size, 0)
        problems += _batch_problems(batch, info, batch_size, f"batch({step}, {batch_size}, seed=0)")
        again = data.batch(step, batch_size, 0)
        if not problems and not all(np.array_equal(batch[k], again[k]) for k in batch):
            problems.append(
                f"batch({step}, ...) differs between two calls: it must be a pure function of (seed, step)"
            )
    count = 0
    for count, batch in enumerate(data.test_batches(batch_size), 1):
        if count > max_test_batches:
            problems.append(
                f"test_batches() gave more than {max_test_batches} batches: it must end"
            )
            break
        problems += _batch_problems(batch, info, 0, f"test batch {count}")[:1]
    if count == 0:
        problems.append("test_batches() gave no batch")
    state = data.state()
    try:
        json.dumps(state)
    except (TypeError, ValueError) as error:
        problems.append(f"state() is not JSON: {error}")
    if data.check_state(state) is not None:
        problems.append(f"check_state(state()) refused its own state: {data.check_state(state)}")
    _raise(f"check_dataset({name!r})", problems)
    return data


def check_task(
    name: str,
    config: Mapping[str, Any] | None = None,
    *,
    data: str | Mapping[str, Any] = "digits",
    output_shape: tuple[int, ...] | None = None,
    registry: Registry | None = None,
) -> Any:
    """Check that the task registered as ``name`` works in a run with the dataset ``data``.

    Checks: the name and config (round trip, schema) as for every part; ``loss`` of a batch
    of outputs of ``output_shape`` (one example's shape; the run's model would give it) runs
    under ``jax.eval_shape`` and gives a scalar float loss and every value the task ``gives``;
    ``check_output`` accepts that output; every default metric is registered and fed.

    Returns:
        The task instance.

    Raises:
        PartCheckError: listing every failed check.

    Example:
        >>> from nnx_plugins.testing import check_task
        >>> check_task("regression", {"loss": "huber"}, data="diabetes", output_shape=(1,)).kind
        'huber'
    """
    from .training.metrics._base import missing_values

    part, problems = _part("task", name, config, registry)
    task = part.make()
    spec = {"type": data} if isinstance(data, str) else dict(data)
    dataset, _ = _part(
        "dataset", spec["type"], {k: v for k, v in spec.items() if k != "type"}, registry
    )
    info = dataset.make().describe()
    shape = tuple(output_shape) if output_shape is not None else (info.classes or 1,)
    output = jax.ShapeDtypeStruct((2, *shape), jax.numpy.float32)
    batch = {
        "inputs": jax.ShapeDtypeStruct((2, *info.inputs.shape), info.inputs.dtype),
        "targets": jax.ShapeDtypeStruct((2, *info.targets.shape), info.targets.dtype),
    }
    if info.masked:
        batch["mask"] = jax.ShapeDtypeStruct((2, *info.targets.shape), jax.numpy.int32)
    try:
        loss, values = jax.eval_shape(task.loss, output, batch)
    except Exception as error:  # noqa: BLE001 - any failure of loss is the finding
        _raise(
            f"check_task({name!r})", [*problems, f"loss() raised {type(error).__name__}: {error}"]
        )
    if getattr(loss, "shape", None) != () or not jax.numpy.issubdtype(
        loss.dtype, jax.numpy.floating
    ):
        problems.append(f"loss() gave {loss} as the loss; it must be a float scalar")
    gives = tuple(getattr(task, "gives", ()))
    problems += [
        f"loss() does not give {key!r}, listed in gives" for key in gives if key not in values
    ]
    verdict = (
        task.check_output(output, info) if callable(getattr(task, "check_output", None)) else None
    )
    if verdict is not None:
        problems.append(f"check_output refused the output {output}: {verdict}")
    reg = registry or default_registry()
    for metric in (*getattr(task, "metrics", ()), *getattr(task, "train_metrics", ())):
        try:
            missing = missing_values(reg.get("metric", metric), gives)
        except Exception as error:  # noqa: BLE001 - unknown or broken: report it
            problems.append(f"its metric {metric!r} cannot be loaded: {error}")
            continue
        if missing:
            problems.append(f"its metric {metric!r} reads {missing}, which it does not give")
    _raise(f"check_task({name!r})", problems)
    return task


def check_metric(
    name: str,
    config: Mapping[str, Any] | None = None,
    *,
    values: Mapping[str, Any],
    registry: Registry | None = None,
) -> Any:
    """Check that the metric registered as ``name`` updates from a task's ``values`` (the
    dict a task's ``loss`` gives), computes a scalar, and that ``reset`` forgets.

    Returns:
        The computed value.

    Raises:
        PartCheckError: listing every failed check.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_plugins.testing import check_metric
        >>> float(check_metric("mae", values={"predictions": jnp.array([1.0, 3.0]),
        ...                                   "targets": jnp.array([2.0, 2.0])}))
        1.0
    """
    import numpy as np

    part, problems = _part("metric", name, config, registry)
    metric = part.make()
    missing = [key for key in getattr(metric, "requires", ()) if key not in values]
    if missing:
        _raise(f"check_metric({name!r})", [*problems, f"values lack {missing}, which it requires"])
    metric.update(**values)
    first = metric.compute()
    if np.shape(first) != ():
        problems.append(f"compute() gave shape {np.shape(first)}; it must be a scalar")
    metric.reset()
    metric.update(**values)
    if not np.allclose(metric.compute(), first, equal_nan=True):
        problems.append("after reset() and the same update, compute() differs: reset must forget")
    _raise(f"check_metric({name!r})", problems)
    return first


def check_logger(
    name: str,
    config: Mapping[str, Any] | None = None,
    *,
    run_dir: Any,
    registry: Registry | None = None,
) -> list[str]:
    """Check that the logger registered as ``name`` logs a run and its resume into ``run_dir``
    (a new empty folder) and writes nowhere else.

    Returns:
        The names of the files it wrote in ``run_dir``.

    Raises:
        PartCheckError: listing every failed check.

    Example:
        >>> import pathlib, tempfile
        >>> from nnx_plugins.testing import check_logger
        >>> check_logger("csv", run_dir=pathlib.Path(tempfile.mkdtemp()) / "run")
        ['metrics.csv']
    """
    import pathlib

    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    around = sorted(p.name for p in run_dir.parent.iterdir())
    part, problems = _part("logger", name, config, registry)
    records = [
        {"step": 10, "split": "train", "loss": 0.5, "examples_per_second": 100.0},
        {"step": 10, "split": "test", "loss": 0.25, "accuracy": 0.75},
    ]
    for start in (0, 5):  # (a run, then a resume at step 5 that drops step 10)
        logger = part.make()
        getattr(logger, "open", lambda *a: None)(run_dir, start)
        for record in records:
            logger.write(dict(record))
        getattr(logger, "close", lambda: None)()
    written = sorted(p.name for p in run_dir.iterdir())
    if not written:
        problems.append("it wrote nothing in the run directory")
    if sorted(p.name for p in run_dir.parent.iterdir()) != around:
        problems.append("it wrote outside the run directory")
    _raise(f"check_logger({name!r})", problems)
    return written


def check_callback(
    name: str, config: Mapping[str, Any] | None = None, *, registry: Registry | None = None
) -> Any:
    """Check that the callback registered as ``name`` builds from ``config``, that its state
    is JSON and restores, and that what it watches is spelled ``split.key``.

    Returns:
        The callback instance.

    Raises:
        PartCheckError: listing every failed check.

    Example:
        >>> from nnx_plugins.testing import check_callback
        >>> check_callback("early_stopping", {"patience": 2}).patience
        2
    """
    import json

    part, problems = _part("callback", name, config, registry)
    callback = part.make()
    state = getattr(callback, "state", dict)()
    try:
        json.dumps(state)
    except (TypeError, ValueError) as error:
        problems.append(f"state() is not JSON: {error}")
    getattr(callback, "restore", lambda s: None)(json.loads(json.dumps(state, default=str)))
    for argument, value in getattr(callback, "watches", dict)().items():
        if not isinstance(value, str) or "." not in value:
            problems.append(
                f"it watches {value!r} (argument {argument!r}): expected split.key such as test.loss"
            )
    _raise(f"check_callback({name!r})", problems)
    return callback


def check_converter(
    name: str, config_json: Mapping[str, Any], *, registry: Registry | None = None
) -> dict[str, tuple[int, ...]]:
    """Check the converter registered as ``name`` on a ``config.json`` (a dict) of its family.

    Its name must follow the naming rules (a pack's is ``namespace.Architecture``), its config
    must validate and build from registered layers, its table must fill every parameter of
    that model exactly once, and exporting random parameters through the table then importing
    them back must return them unchanged.

    Returns:
        The transformers tensors (name -> shape) the converter expects for ``config_json``.

    Raises:
        PartCheckError: listing every problem found.

    Example:
        >>> from nnx_plugins.testing import check_converter
        >>> tensors = check_converter("GPT2LMHeadModel", {"n_embd": 8, "n_head": 2, "n_layer": 1,
        ...                           "vocab_size": 11, "n_positions": 16})
        >>> tensors["transformer.h.0.attn.c_attn.weight"]
        (8, 24)
    """
    from .pretrained._check import converter_problems  # (here: it imports jax)

    registry = registry or default_registry()
    problems = _check_name(registry, "converter", name)
    converter = registry.get("converter", name)
    tensors, found = converter_problems(converter, config_json)
    _raise(f"check_converter({name!r})", problems + found)
    return tensors

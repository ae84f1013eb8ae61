"""Making a run's parts from its config, each failure located in the config file.

`assemble` turns the validated sections into objects: the dataset (described, its validation
split chosen), the task, the metrics (each checked against what the task gives, each reported
under a key of its own), the loggers (the files they write checked: `_run_files`) and the
callbacks (the values they watch checked against what the run reports). `Parts` then calls
them for the run, naming the part that fails (`_part_calls`).

Example:
    >>> from nnx_plugins.training._assembly import assemble
    >>> from nnx_plugins.training._config import load_train_config
    >>> parts = assemble(load_train_config({
    ...     "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...     "data": {"type": "digits", "layout": "flat"},
    ...     "metrics": [{"type": "top_k_accuracy", "k": 3}, {"type": "top_k_accuracy", "k": 5}]}))
    >>> sorted(parts.metrics), [type(logger).__name__ for logger in parts.loggers]
    (['accuracy', 'top_3_accuracy', 'top_5_accuracy'], ['JsonlLogger'])
    >>> parts.validation, parts.splits(final=False), parts.splits(final=True)
    (True, ['val'], ['val', 'test'])
    >>> [value for value in parts.reported() if value.startswith("val.")]
    ['val.loss', 'val.accuracy', 'val.top_3_accuracy', 'val.top_5_accuracy']
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Iterator
from typing import Any

import jax

from nnx_core import Module
from nnx_core.metrics import MultiMetric

from .._errors import NnxError
from .._text import format_path, suggest
from ..config._build import located
from ..config._errors import ConfigError, Problem
from ..registry._errors import PluginError
from ..registry._registry import default_registry
from ._part_calls import PartLabel, check_batch, guarded_batches
from ._run_files import check_logger_files
from ._tokenizer import tokenizer_path
from .data._base import DataError, DataInfo
from .metrics._base import Loss, metric_key, missing_values

__all__ = [
    "Parts",
    "MetricSpec",
    "SelectionWarning",
    "assemble",
    "located_data_error",
    "config_error",
]


class SelectionWarning(UserWarning):
    """A callback or ``checkpoint.keep_best`` watches the test split: the model is then chosen
    on the data that measures it, and the final test figures are biased upwards."""


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """A test metric of the run: its registered name, class and arguments, and its label."""

    name: str
    cls: Any
    arguments: dict[str, Any]
    label: PartLabel

    def make(self, info: DataInfo) -> Any:
        """A fresh instance, set up for the data."""
        with self.label.calling("__init__"):
            metric = self.cls(**self.arguments)
        if callable(getattr(metric, "setup", None)):
            with self.label.calling("setup(info)"):
                metric.setup(info)
        return metric


@dataclasses.dataclass
class Parts:
    """The objects a run is made of besides its model and optimizer."""

    task: Any
    data: Any
    info: DataInfo
    metrics: dict[str, MetricSpec]  # report key -> the metric (``loss`` is always reported)
    train_metrics: dict[str, Any]  # registered name -> class
    loggers: list[Any]
    callbacks: list[Any]
    callback_names: list[str] = dataclasses.field(default_factory=list)
    validation: bool = False  # whether the data gives a validation split
    watches_test: bool = False  # whether a callback or keep_best watches a test split
    labels: dict[int, PartLabel] = dataclasses.field(default_factory=dict)

    def label(self, part: Any) -> PartLabel:
        """Which part ``part`` is (for messages)."""
        return self.labels.get(id(part)) or PartLabel("callback", type(part).__name__, ())

    def call(self, part: Any, method: str, *args: Any) -> Any:
        """``part.method(*args)`` if it has it (else ``None``); what it raises is named."""
        hook = getattr(part, method, None)
        if not callable(hook):
            return None
        try:  # (no context manager: this runs after every step)
            return hook(*args)
        except NnxError:
            raise
        except Exception as error:  # noqa: BLE001 - whatever a pack's part raises is named
            shown = ", ".join(_shown(a) for a in args)
            raise self.label(part).failed(f"{method}({shown})", error) from error

    def metric_objects(self) -> dict[str, Any]:
        """A fresh instance of every test metric (``loss`` first), by report key."""
        made: dict[str, Any] = {"loss": Loss()}
        for key, spec in self.metrics.items():
            made[key] = spec.make(self.info)
        return made

    def extra(self, method: str) -> dict[str, Any]:
        """The callbacks' extra models, by the name the run gives them: ``evaluated()`` (more
        models to evaluate) or ``nodes()`` (Modules to checkpoint). A name that several
        callbacks give (two ``ema``) gets each one's position in ``callbacks:`` (``ema_0``,
        ``ema_1``)."""
        return {name: node for _, name, node in self._claims(method)}

    def models(self, method: str) -> dict[str, Any]:
        """`extra`, each checked to be a Module (once the callbacks have started).

        Raises:
            RunPartError: a callback gave something else, named with its distribution.
        """
        for index, name, node in self._claims(method):
            if not isinstance(node, Module):
                raise self.label(self.callbacks[index]).error(
                    f"gave {type(node).__name__} as the model {name!r} of {method}(); a "
                    "callback's models must be nnx Modules (e.g. a clone of run.model)."
                )
        return self.extra(method)

    def _claims(self, method: str) -> list[tuple[int, str, Any]]:
        claims = []
        for index, callback in enumerate(self.callbacks):
            given = self.call(callback, method) or {}
            with self.label(callback).calling(f"{method}()"):
                claims += [(index, str(name), node) for name, node in dict(given).items()]
        names = [name for _, name, _ in claims]
        found: list[tuple[int, str, Any]] = []
        for index, name, node in claims:
            unique = name if names.count(name) == 1 else f"{name}_{index}"
            while unique in {f for _, f, _ in found}:
                unique = f"{unique}_{index}"
            found.append((index, unique, node))
        return found

    def stops(self, callback: Any, run: Any, results: dict[str, dict[str, float]]) -> bool:
        """Whether ``callback.after_eval`` asks to stop (its answer read as a truth value)."""
        answer = self.call(callback, "after_eval", run, run.step, results)
        with self.label(callback).calling("after_eval(...): its answer"):
            return bool(answer)

    def splits(self, *, final: bool) -> list[str]:
        """The splits an evaluation reports: ``val`` during training (``test`` too when it is
        watched, or when the data has no validation split), ``val`` and ``test`` at the end;
        each also ``<split>_<name>`` for each model a callback adds."""
        bases = ["val"] if self.validation else []
        if final or self.watches_test or not self.validation:
            bases.append("test")
        extra = list(self.extra("evaluated"))
        return [base + suffix for base in bases for suffix in ["", *(f"_{n}" for n in extra)]]

    def reported(self) -> list[str]:
        """Every value an evaluation may report, as ``split.key``."""
        keys = ["loss", *self.metrics]
        bases = (["val"] if self.validation else []) + ["test"]
        extra = list(self.extra("evaluated"))
        splits = [base + suffix for base in bases for suffix in ["", *(f"_{n}" for n in extra)]]
        return [f"{split}.{key}" for split in splits for key in keys]

    def batches(self, split: str, batch_size: int) -> Iterator[dict[str, Any]]:
        """The checked batches of the evaluated split ``split`` (``val...`` or ``test...``)."""
        method = "val_batches" if split.startswith("val") else "test_batches"
        return guarded_batches(self.label(self.data), self.data, method, self.info, batch_size)

    def train_batch(self, step: int, rows: int, seed: int) -> dict[str, Any]:
        """The checked training batch of ``step`` (0-based)."""
        label = self.label(self.data)
        with label.calling(f"batch({step}, {rows}, {seed})"):
            batch = self.data.batch(step, rows, seed)
        return check_batch(label, batch, self.info, rows=rows, what=f"the batch of step {step + 1}")


def _shown(value: Any) -> str:
    if isinstance(value, (int, float, str)) and len(repr(value)) < 40:
        return repr(value)
    return type(value).__name__.lower()


def config_error(config: Any, path: tuple[Any, ...], message: str) -> ConfigError:
    """A one-problem `ConfigError` at ``path`` of ``config``, with its ``file:line:col``."""
    return ConfigError([located(config).problem(path, message)])


def located_data_error(config: Any, error: DataError) -> DataError:
    """``error`` again, its message led by the place in the config of the data argument (of
    the tokenizer's file, for a `TokenizerError`)."""
    if isinstance(getattr(error, "problem", None), Problem):
        return error  # (located already)
    path = ("data", error.key) if error.key else ("data",)
    if error.key == "tokenizer":  # (a TokenizerError: the file the config names)
        path = tokenizer_path(config)
    problem = located(config).problem(path, error.message)
    return DataError(str(problem), key=error.key, problem=problem)


def _data(config: Any, label: PartLabel) -> tuple[Any, DataInfo, bool]:
    """The dataset, its description, and whether it has a validation split."""
    try:
        data = config.sections["data"].make()
        with label.calling("describe()"):
            info = data.describe()
        if not isinstance(info, DataInfo) or not all(
            isinstance(getattr(info, k, None), jax.ShapeDtypeStruct) for k in ("inputs", "targets")
        ):
            raise label.error(
                f"gave {repr(info)[:200]} from describe(): it must be a DataInfo whose inputs "
                "and targets are jax.ShapeDtypeStruct (the shape and dtype of one example)."
            )
        for what in ("inputs", "targets"):
            _check_real(getattr(info, what), f"{label}: its {what}")
        return data, info, _validation(config, data, label)
    except DataError as error:
        raise located_data_error(config, error) from None
    except PluginError as error:
        raise config_error(config, ("data",), str(error)) from None


def _check_real(struct: Any, what: str) -> None:
    kind = getattr(getattr(struct, "dtype", None), "kind", "f")
    if kind == "c":
        raise DataError(
            f"{what} are complex ({struct.dtype}); inputs and targets must be real numbers (a "
            "model would silently use the real part only)."
        )


def _validation(config: Any, data: Any, label: PartLabel) -> bool:
    """Ask the data for its validation split (``data.validation``); whether there is one."""
    fraction = config.sections["data"].validation
    seed = config.sections["train"].seed
    hold = getattr(data, "hold_out", None)
    if callable(hold):
        with label.calling(f"hold_out({fraction}, seed={seed})"):
            return bool(hold(fraction, seed=seed))
    gives = callable(getattr(data, "val_batches", None))
    if fraction is None or (fraction == 0 and not gives):
        return gives
    if fraction == 0:
        return False
    if gives:
        raise DataError(
            f"{label} gives a validation split of its own (val_batches); remove "
            "data.validation to use it, or set it to 0 to train without one.",
            key="validation",
        )
    raise DataError(
        f"{label} cannot hold examples out (it has no hold_out()) and gives no validation "
        "split of its own (no val_batches()); remove data.validation, or see docs/datasets.md "
        "for how a dataset gives one.",
        key="validation",
    )


def _metrics(config: Any, task: Any) -> dict[str, MetricSpec]:
    registry, found = default_registry(), {}
    gives = tuple(getattr(task, "gives", ()))
    listed = [(name, {}, None) for name in getattr(task, "metrics", ())]
    listed += [(p.type, p.arguments, i) for i, p in enumerate(config.sections["metrics"].parts)]
    for name, arguments, index in listed:
        where = ("metrics", index) if index is not None else ("task", "type")
        try:
            cls = registry.get("metric", name)
        except PluginError as error:
            raise config_error(config, where, str(error)) from None
        missing = missing_values(cls, gives)
        if missing:
            raise config_error(
                config,
                where,
                f"metric {name!r} reads {', '.join(missing)}, which the task "
                f"{config.sections['task'].type!r} does not give (it gives {', '.join(gives)}).",
            )
        label = PartLabel("metric", name, where)
        spec = MetricSpec(name, cls, dict(arguments), label)
        try:
            with label.calling("__init__"):
                key = metric_key(cls(**arguments), name)
        except PluginError as error:
            raise config_error(config, where, str(error)) from None
        _check_key(config, where, spec, key, found)
        found.setdefault(key, spec)
    return found


def _check_key(
    config: Any, where: tuple[Any, ...], spec: MetricSpec, key: str, found: dict[str, MetricSpec]
) -> None:
    """Refuse a metric reported under ``loss`` or under the key of another metric (the same
    metric listed twice is reported once)."""
    if not key.strip() or key != key.strip() or hasattr(MultiMetric, key):
        raise config_error(
            config,
            where,
            f"metric {spec.name!r} reports its value as {key!r}, which cannot be a report key "
            "(a key is a name, not blank and not one of reset, update, compute, split); fix "
            "the metric's key.",
        )
    if key == "loss":
        raise config_error(
            config,
            where,
            f"metric {spec.name!r} reports its value as 'loss', the name of the run's own loss; "
            "give it another key.",
        )
    other = found.get(key)
    if other is not None and (other.name, _filled(other)) != (spec.name, _filled(spec)):
        raise config_error(
            config,
            where,
            f"metric {spec.name!r} {spec.arguments or ''} reports its value as {key!r}, as "
            f"metric {other.name!r} {other.arguments or ''} does already: each value needs a "
            "key of its own. Remove one, or change its arguments.",
        )


def _filled(spec: MetricSpec) -> dict[str, Any]:
    """A metric's arguments with its ``__init__``'s defaults filled in."""
    try:
        parameters = inspect.signature(spec.cls).parameters.values()
    except (TypeError, ValueError):
        return dict(spec.arguments)
    defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
    return {**defaults, **spec.arguments}


def _check_watches(config: Any, parts: Parts) -> None:
    reported = parts.reported()
    watched = []
    for index, callback in enumerate(parts.callbacks):
        given = parts.call(callback, "watches") or {}
        with parts.label(callback).calling("watches()"):
            pairs = list(dict(given).items())
        watched += [(("callbacks", index, argument), value) for argument, value in pairs]
    best = config.sections["checkpoint"].keep_best
    if best is not None:
        watched.append((("checkpoint", "keep_best", "metric"), best.metric))
    for path, value in watched:
        if value not in reported:
            note = ""
            if not parts.validation and str(value).startswith("val"):
                note = (
                    f" (the data has no validation split: give it one, data.validation, or "
                    f"watch {'test' + str(value)[3:]})"
                )
            raise config_error(
                config,
                path,
                f"{value!r} is not a value this run reports.{suggest(str(value), reported)} "
                f"Reported at each evaluation: {', '.join(reported)}{note}.",
            )
        if str(value).startswith("test"):
            parts.watches_test = True
            _warn_selection(config, path, str(value), parts.validation)


def _warn_selection(config: Any, path: tuple[Any, ...], value: str, validation: bool) -> None:
    problem = located(config).problem(path, "")
    other = f"; watch {'val' + value[4:]} instead" if validation else ""
    warnings.warn_explicit(
        f"{format_path(path)} watches {value}: the test split is then used to choose the "
        f"model, and its final figures are biased upwards{other}.",
        SelectionWarning,
        problem.source,
        problem.line or 0,
    )


def assemble(config: Any) -> Parts:
    """The `Parts` of a loaded training config.

    Raises:
        DataError: the data cannot be read or described (located at its ``data`` argument),
            or has no validation split that ``data.validation`` asks for.
        ConfigError: a metric the task cannot feed, two metrics reporting under one key, a
            value watched by a callback or ``checkpoint.keep_best`` that the run does not
            report, a logger writing a file the run or another logger owns, or a dataset that
            failed when described (naming it and its distribution).

    Warns:
        SelectionWarning: a callback or ``keep_best`` watches the test split.
    """
    sections = config.sections
    data_label = PartLabel("dataset", sections["data"].type, ("data",))
    data, info, validation = _data(config, data_label)
    task = sections["task"].make()
    registry = default_registry()
    metrics = _metrics(config, task)
    train_metrics = {
        name: registry.get("metric", name) for name in getattr(task, "train_metrics", ())
    }
    loggers, callbacks = sections["loggers"].make(), sections["callbacks"].make()
    logger_parts, callback_parts = sections["loggers"].parts, sections["callbacks"].parts
    labels = {id(data): data_label, id(task): PartLabel("task", sections["task"].type, ("task",))}
    for kind, objects, listed in (
        ("logger", loggers, logger_parts),
        ("callback", callbacks, callback_parts),
    ):
        for index, (obj, part) in enumerate(zip(objects, listed)):
            labels[id(obj)] = PartLabel(kind, part.type, (f"{kind}s", index))
    parts = Parts(
        task,
        data,
        info,
        metrics,
        train_metrics,
        loggers,
        callbacks,
        [part.type for part in callback_parts],
        validation=validation,
        labels=labels,
    )
    check_logger_files(config, parts)
    try:
        _check_watches(config, parts)
    except PluginError as error:
        raise config_error(config, ("callbacks",), str(error)) from None
    return parts

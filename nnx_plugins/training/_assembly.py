"""Making a run's parts from its config, each failure located in the config file.

`assemble` turns the validated sections into objects: the dataset (described), the task (the
data checked against it), the metrics (each checked against what the task gives), the loggers
and the callbacks (the values they watch checked against what the run reports).

Example:
    >>> from nnx_plugins.training._assembly import assemble
    >>> from nnx_plugins.training._config import load_train_config
    >>> parts = assemble(load_train_config({
    ...     "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...     "data": {"type": "digits", "layout": "flat"},
    ...     "metrics": [{"type": "top_k_accuracy", "k": 3}]}))
    >>> sorted(parts.metrics), [type(logger).__name__ for logger in parts.loggers]
    (['accuracy', 'top_k_accuracy'], ['JsonlLogger'])
    >>> sorted(parts.reported())
    ['test.accuracy', 'test.loss', 'test.top_3_accuracy']
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._text import suggest
from ..config._build import located
from ..config._errors import ConfigError
from ..registry._errors import PluginError
from ..registry._registry import default_registry
from .data._base import DataError, DataInfo
from .metrics._base import metric_key, missing_values

__all__ = ["Parts", "assemble", "located_data_error", "config_error"]


@dataclasses.dataclass
class Parts:
    """The objects a run is made of besides its model and optimizer."""

    task: Any
    data: Any
    info: DataInfo
    metrics: dict[str, Any]  # registered name -> (class, arguments)
    train_metrics: dict[str, Any]  # registered name -> class
    loggers: list[Any]
    callbacks: list[Any]
    callback_names: list[str] = dataclasses.field(default_factory=list)

    def metric_objects(self) -> dict[str, Any]:
        """A fresh instance of every test metric (``loss`` first), by report key."""
        from .metrics._base import Loss

        made: dict[str, Any] = {"loss": Loss()}
        for name, (cls, arguments) in self.metrics.items():
            metric = cls(**arguments)
            if callable(getattr(metric, "setup", None)):
                metric.setup(self.info)
            made[metric_key(metric, name)] = metric
        return made

    def splits(self) -> list[str]:
        """The evaluated splits: ``test`` and ``test_<name>`` for each model a callback adds."""
        extra = [name for callback in self.callbacks for name in _evaluated(callback)]
        return ["test", *(f"test_{name}" for name in extra)]

    def reported(self) -> list[str]:
        """Every value an evaluation reports, as ``split.key``."""
        keys = list(self.metric_objects())
        return [f"{split}.{key}" for split in self.splits() for key in keys]


def _evaluated(callback: Any) -> list[str]:
    method = getattr(callback, "evaluated", None)
    return list(method()) if callable(method) else []


def config_error(config: Any, path: tuple[Any, ...], message: str) -> ConfigError:
    """A one-problem `ConfigError` at ``path`` of ``config``, with its ``file:line:col``."""
    return ConfigError([located(config).problem(path, message)])


def located_data_error(config: Any, error: DataError) -> DataError:
    """``error`` again, its message led by the place in the config of the data argument."""
    path = ("data", error.key) if error.key else ("data",)
    problem = located(config).problem(path, error.message)
    return DataError(str(problem), key=error.key)


def _data(config: Any) -> tuple[Any, DataInfo]:
    try:
        data = config.sections["data"].make()
        return data, data.describe()
    except DataError as error:
        raise located_data_error(config, error) from None


def _metrics(config: Any, task: Any) -> dict[str, Any]:
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
        found[name] = (cls, dict(arguments))
    return found


def _check_watches(config: Any, parts: Parts) -> None:
    reported = parts.reported()
    watched = []
    for index, callback in enumerate(parts.callbacks):
        method = getattr(callback, "watches", None)
        for argument, value in (method() if callable(method) else {}).items():
            watched.append((("callbacks", index, argument), value))
    best = config.sections["checkpoint"].keep_best
    if best is not None:
        watched.append((("checkpoint", "keep_best", "metric"), best.metric))
    for path, value in watched:
        if value not in reported:
            raise config_error(
                config,
                path,
                f"{value!r} is not a value this run reports.{suggest(value, reported)} "
                f"Reported at each evaluation: {', '.join(reported)}.",
            )


def assemble(config: Any) -> Parts:
    """The `Parts` of a loaded training config.

    Raises:
        DataError: the data cannot be read or described (located at its ``data`` argument).
        ConfigError: a metric the task cannot feed, or a value watched by a callback or
            ``checkpoint.keep_best`` that the run does not report.
    """
    sections = config.sections
    data, info = _data(config)
    task = sections["task"].make()
    registry = default_registry()
    metrics = _metrics(config, task)
    train_metrics = {
        name: registry.get("metric", name) for name in getattr(task, "train_metrics", ())
    }
    parts = Parts(
        task,
        data,
        info,
        metrics,
        train_metrics,
        sections["loggers"].make(),
        sections["callbacks"].make(),
        [part.type for part in sections["callbacks"].parts],
    )
    _check_watches(config, parts)
    return parts

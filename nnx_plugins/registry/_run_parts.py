"""Registering and finding run parts: tasks, datasets, metrics, loggers and callbacks.

Each kind works as layers do (docs/design/runs.md): an entry-point group (``nnx.tasks``, ...),
a pluggy hook (``nnx_register_run_parts``), and these decorators for notebooks and scripts,
under the same rules (namespaced names, checked classes, no silent collisions; a mistake raises
at once). A config names a part by its ``type``; its other keys are the class's ``__init__``
arguments.

Example:
    >>> from nnx_plugins import register_logger
    >>> from nnx_plugins.registry._run_parts import get_run_part
    >>> @register_logger("docs.quiet")
    ... class Quiet:
    ...     def write(self, record):
    ...         pass
    >>> get_run_part("logger", "docs.quiet") is Quiet
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._registry import Registry, default_registry

__all__ = [
    "register_task",
    "register_dataset",
    "register_metric",
    "register_logger",
    "register_callback",
    "register_tokenizer",
    "register_converter",
    "get_run_part",
]

T = TypeVar("T")


def _registering(kind: str, name: str, registry: Registry | None) -> Callable[[T], T]:
    def decorate(obj: T) -> T:
        result: T = (registry or default_registry()).add(kind, name, obj)
        return result

    return decorate


def register_task(name: str, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Decorator: register a task class (see `nnx_plugins.training.Task`) as ``name``.

    Args:
        name: a namespaced name, ``'my.task'``: unqualified names belong to the built-ins.
        registry: where to register; the default registry when omitted.

    Returns:
        A decorator that registers its argument and returns it unchanged.

    Raises:
        PluginNameError: ``name`` is not namespaced.
        NameCollisionError: an installed distribution (or an earlier registration of another
            class) already provides ``name``.
        PluginLoadError: the object is not a class with a ``loss`` method.

    Example:
        >>> from nnx_plugins import register_task
        >>> from nnx_plugins import Task
        >>> @register_task("docs.always_zero")
        ... class AlwaysZero(Task):
        ...     def loss(self, outputs, batch):
        ...         return outputs.sum() * 0.0, {}
        >>> AlwaysZero.__name__
        'AlwaysZero'
    """
    return _registering("task", name, registry)


def register_dataset(name: str, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Decorator: register a dataset class (``describe``, ``batch``, ``test_batches``) as
    ``name``; see `register_task` for the rules and errors.

    Example:
        >>> import numpy as np
        >>> from nnx_plugins import register_dataset
        >>> from nnx_plugins import ArrayDataset
        >>> @register_dataset("docs.ramp")
        ... class Ramp(ArrayDataset):
        ...     def __init__(self, size: int = 10):
        ...         x = np.arange(size, dtype=np.float32)[:, None]
        ...         super().__init__(x, 2 * x, x, 2 * x, name="ramp")
        >>> Ramp().describe().inputs
        ShapeDtypeStruct(shape=(1,), dtype=float32)
    """
    return _registering("dataset", name, registry)


def register_metric(name: str, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Decorator: register a `nnx_core.metrics.Metric` subclass as ``name``; see
    `register_task` for the rules and errors.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core.metrics import Average
        >>> from nnx_plugins import register_metric
        >>> @register_metric("docs.max_error")
        ... class MaxError(Average):
        ...     requires = ("predictions", "targets")
        ...     def update(self, *, predictions, targets, **_):
        ...         super().update(values=jnp.abs(predictions - targets).max()[None])
        >>> MaxError.requires
        ('predictions', 'targets')
    """
    return _registering("metric", name, registry)


def register_logger(name: str, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Decorator: register a logger class (``write(record)``; optional ``open`` and ``close``)
    as ``name``; see `register_task` for the rules and errors."""
    return _registering("logger", name, registry)


def register_callback(name: str, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Decorator: register a callback class (see `nnx_plugins.training.Callback`) as ``name``;
    see `register_task` for the rules and errors."""
    return _registering("callback", name, registry)


def register_tokenizer(name: str, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Decorator: register a tokenizer class (``encode``, ``decode``, ``vocab_size``; see
    `nnx_plugins.Tokenizer`) as ``name``; see `register_task` for the rules and errors."""
    return _registering("tokenizer", name, registry)


def register_converter(name: str, converter: T, *, registry: Registry | None = None) -> T:
    """Register a checkpoint converter (an `nnx_plugins.Converter`) as ``name``
    (``namespace.Architecture``: ``nnx import hf`` finds it by the architecture after the
    namespace); return it. See `register_task` for the rules and errors.

    Example:
        >>> from nnx_plugins import Converter, Rule, register_converter
        >>> tiny = Converter(config=lambda c: {"model": {"type": "Linear", "in_features": 2,
        ...                  "out_features": 2}}, table=lambda c: [Rule("w", "kernel", "transpose"),
        ...                  Rule("b", "bias")], layers=lambda c: 1)
        >>> register_converter("docs.TinyLinear", tiny) is tiny
        True
    """
    result: T = (registry or default_registry()).add("converter", name, converter)
    return result


def get_run_part(kind: str, name: str, *, registry: Registry | None = None) -> Any:
    """The class registered as the ``kind`` (``"task"``, ``"dataset"``, ...) ``name``.

    Raises:
        UnknownNameError: nothing provides ``name`` (with a did-you-mean).
        NameCollisionError: several distributions provide it (see ``NNX_PREFER``).
        PluginLoadError: its plugin failed to load.
    """
    return (registry or default_registry()).get(kind, name)

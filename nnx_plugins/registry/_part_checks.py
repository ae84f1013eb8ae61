"""What a pack must provide for each run part (task, dataset, metric, logger, callback).

The registry cannot import the training package (which defines the base classes), so a part is
checked by what it is: a class, with the methods the run calls on it (docs/design/runs.md);
a metric is a `nnx_core.metrics.Metric` subclass.

Example:
    >>> from nnx_plugins.registry._part_checks import run_part_problem
    >>> class Quiet:
    ...     def write(self, record): pass
    >>> run_part_problem("logger", "acme.quiet", Quiet)
    ''
    >>> run_part_problem("task", "acme.bad", Quiet)
    "provides task 'acme.bad' as the class Quiet, which has no method 'loss' (a task needs loss)."
"""

from __future__ import annotations

from typing import Any

__all__ = ["REQUIRED_METHODS", "CONVERTER_PARTS", "run_part_problem", "converter_problem"]

#: the methods the run calls on each kind of part (the base classes define the optional ones)
REQUIRED_METHODS = {
    "task": ("loss",),
    "dataset": ("describe", "batch", "test_batches"),
    "metric": ("reset", "update", "compute"),
    "logger": ("write",),
    "callback": (),
    "tokenizer": ("encode", "decode"),
}
#: what a checkpoint converter provides (``nnx_plugins.pretrained._convert.Converter``)
CONVERTER_PARTS = ("config", "table", "layers")


def run_part_problem(kind: str, name: str, obj: Any) -> str:
    """Why ``obj`` cannot be the ``kind`` named ``name`` (``""`` if it can)."""
    if not isinstance(obj, type):
        return (
            f"provides {kind} {name!r} as {obj!r}, which is not a class (a {kind} is a class "
            "whose __init__ arguments are its config)."
        )
    if kind == "metric":
        from nnx_core.metrics import Metric  # (here: listing names must not import jax)

        if not issubclass(obj, Metric):
            return (
                f"provides metric {name!r} as the class {obj.__qualname__}, which is not a "
                "subclass of nnx_core.metrics.Metric."
            )
    needed = REQUIRED_METHODS[kind]
    missing = [method for method in needed if not callable(getattr(obj, method, None))]
    if missing:
        return (
            f"provides {kind} {name!r} as the class {obj.__qualname__}, which has no method "
            f"{missing[0]!r} (a {kind} needs {', '.join(needed)})."
        )
    return ""


def converter_problem(name: str, obj: Any) -> str:
    """Why ``obj`` cannot be the converter of the architecture ``name`` (``""`` if it can).

    Example:
        >>> from nnx_plugins.registry._part_checks import converter_problem
        >>> converter_problem("acme.TinyLM", object())
        "provides converter 'acme.TinyLM' as an object with no 'config' (a converter has config, table and layers: an nnx_plugins.pretrained Converter)."
    """
    missing = [part for part in CONVERTER_PARTS if not callable(getattr(obj, part, None))]
    if missing:
        return (
            f"provides converter {name!r} as an object with no {missing[0]!r} (a converter has "
            f"{', '.join(CONVERTER_PARTS[:-1])} and {CONVERTER_PARTS[-1]}: an "
            "nnx_plugins.pretrained Converter)."
        )
    return ""

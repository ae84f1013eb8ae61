"""Checks before a run allocates anything: the data against the task, the model against both,
the run against memory.

The model runs abstractly (`check_model`) on a batch of the data's inputs; the task says
whether the output fits (logits for the classes, one output per regression target, token
logits) and whether the data fits it (integer labels within the model's classes, the first bad
one named). Nothing is allocated and nothing is written.

Example:
    >>> from nnx_plugins.training._preflight import data_spec
    >>> from nnx_plugins.training.data._bundled import Digits
    >>> from nnx_plugins.training.tasks._classification import Classification
    >>> spec = data_spec(Digits(layout="flat").describe(), Classification())
    >>> spec.example, spec.origin
    (ShapeDtypeStruct(shape=(64,), dtype=float32), 'data (digits, layout flat)')
    >>> import jax
    >>> spec.check_output(jax.ShapeDtypeStruct((2, 5), "float32"))
    'the model returns float32[2,5] but the 10 classes of digits need logits of shape (batch, 10): end the model with a layer of 10 outputs.'
"""

from __future__ import annotations

from typing import Any

from ..config._shapes import DataSpec, ModelCheck, check_model
from ..registry._errors import PluginError
from ..registry._registry import default_registry
from ._memory import check_memory, estimate_memory, trainable_kinds
from ._part_calls import PartLabel
from .data._base import DataInfo

__all__ = ["data_spec", "preflight"]


def data_spec(info: DataInfo, task: Any) -> DataSpec:
    """The `DataSpec` of data described by ``info`` for ``task``: its inputs, and the task's
    check of the model's output (what it raises named with the task: `RunPartError`)."""
    check = getattr(task, "check_output", None)

    def checked(output: Any) -> Any:
        with _label(task).calling("check_output(output, info)"):
            return check(output, info)

    return DataSpec(info.inputs, info.origin, checked if callable(check) else None, info.hint)


def _label(task: Any) -> PartLabel:
    try:
        name = default_registry().name_of(type(task), "task")
    except PluginError:
        name = type(task).__name__
    return PartLabel("task", name, ("task",))


def preflight(config: Any, info: DataInfo, task: Any, *, allow_large: bool) -> ModelCheck:
    """Before a run builds its model: check the model abstractly on the data (every problem at
    its layer's position, the output against the task) and its memory against what is free.

    Raises:
        ConfigError: a layer cannot be built or cannot take its input, the output does not fit
            the task, or the run needs more memory than is free.
    """
    check = check_model(config, data=data_spec(info, task))
    optimizer = config.sections["optimizer"]
    kinds = trainable_kinds(optimizer.trainable)
    estimate = estimate_memory(check.state, optimizer.make(), kinds)
    check_memory(estimate, config, allow_large=allow_large)
    return check

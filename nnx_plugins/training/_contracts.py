"""What the run checks of its parts before training, without allocating: the model against the
task (a next-token model must not see ahead: the task's ``check_model``), the data against the
task and the model (labels, token ids), and the task's loss and each metric run abstractly.

`nnx train` and `nnx config validate` both call `check_parts`, so both report the same
located messages. The task's ``loss`` runs under `jax.eval_shape` on a batch of the data's
shapes and the model's abstract output: it must give one number (the mean loss) and a dict of
values; each metric then updates from those values and must ``compute()`` one number. Token
ids (integer inputs) must fit the model's first ``Embed``: an id outside it would make the
embedding NaN and the loss with it, blamed on the learning rate.

Example:
    >>> import jax
    >>> from nnx_plugins.training._assembly import assemble
    >>> from nnx_plugins.training._config import load_train_config
    >>> from nnx_plugins.training._contracts import check_parts
    >>> config = load_train_config({
    ...     "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...     "data": {"type": "digits", "layout": "flat"}})
    >>> check_parts(config, assemble(config), jax.ShapeDtypeStruct((2, 10), "float32"))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._text import format_path
from ..config._build import located
from ..config._errors import ConfigError
from ..config._shapes import BATCH, spell
from ._assembly import Parts, located_data_error
from ._part_calls import RunPartError
from .data._base import DataError, first_outside

__all__ = ["check_parts", "first_embedding"]


def check_parts(config: Any, parts: Parts, output: Any) -> None:
    """The run's parts against each other before training (see the module docstring);
    ``output`` is the model's abstract output for a batch of `BATCH` examples (``None``:
    unknown, only the data is checked).

    Raises:
        DataError: the data does not fit the task or the model (a label or token id out of
            range: the first named with its place in the data), located at ``data``.
        ConfigError: the task refuses the model (at the layer it names: e.g. attention
            without ``is_causal`` for next-token training); the task's loss or a metric fails
            abstractly or gives more than one number, named with its distribution, at its
            place in the config.
    """
    try:
        _check_model(config, parts)
        with parts.label(parts.task).calling("check_data(data, info, output)"):
            parts.task.check_data(parts.data, parts.info, output)
        _check_token_ids(config, parts)
        if output is not None:
            values = _check_loss(parts, output)
            if values is not None:
                _check_metrics(parts, values)
    except DataError as error:
        raise located_data_error(config, error) from None
    except RunPartError as error:
        raise ConfigError([located(config).problem(error.path or ("task",), str(error))]) from None


def _check_model(config: Any, parts: Parts) -> None:
    """The task's ``check_model(config, data)`` (optional): a model that cannot learn it (a
    next-token model that sees ahead) refused at the layer it names."""
    check = getattr(parts.task, "check_model", None)
    if not callable(check):
        return
    label = parts.label(parts.task)
    with label.calling("check_model(config, data)"):
        found = check(config, parts.data)
    if found is None:
        return
    shaped = isinstance(found, tuple) and len(found) == 2
    if not (shaped and isinstance(found[0], (tuple, list)) and isinstance(found[1], str)):
        raise label.error(
            f"returned {spell(found)} from check_model(config, data); it must return None (the "
            "model fits) or (the layer's path in the config, the reason)."
        )
    path, why = found
    raise ConfigError([located(config).problem(tuple(path), why)])


def _abstract_batch(parts: Parts) -> dict[str, Any]:
    info = parts.info
    batch = {
        "inputs": jax.ShapeDtypeStruct((BATCH, *info.inputs.shape), info.inputs.dtype),
        "targets": jax.ShapeDtypeStruct((BATCH, *info.targets.shape), info.targets.dtype),
    }
    if info.masked:
        batch["mask"] = jax.ShapeDtypeStruct((BATCH, *info.targets.shape), jnp.int32)
    return batch


def _check_loss(parts: Parts, output: Any) -> Any:
    """The task's values for the metrics, from its loss run abstractly."""
    label = parts.label(parts.task)
    with label.calling("loss(outputs, batch)"):
        result = jax.eval_shape(parts.task.loss, output, _abstract_batch(parts))
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise label.error(
            f"returned {spell(result)} from loss(outputs, batch); it must return "
            "(mean loss, dict of values for the metrics)."
        )
    loss, values = result
    shape, dtype = getattr(loss, "shape", None), getattr(loss, "dtype", None)
    if shape != () or dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise label.error(
            f"returned a loss of {spell(loss)} from loss(outputs, batch); the loss must be one "
            "float number, the mean over the batch (per-example losses go among its values, "
            "as 'loss')."
        )
    if not isinstance(values, Mapping):
        raise label.error(
            f"returned {spell(values)} as the values of loss(outputs, batch); they must be a "
            "dict of arrays by name (logits, labels, loss, ...)."
        )
    return dict(values)


def _check_metrics(parts: Parts, values: dict[str, Any]) -> None:
    for key, spec in parts.metrics.items():

        def computed(given: dict[str, Any], spec: Any = spec) -> Any:
            metric = spec.make(parts.info)
            metric.update(**given)
            return metric.compute()

        with spec.label.calling("update(**values) and compute()"):
            value = jax.eval_shape(computed, values)
        if getattr(value, "shape", None) != () or not jnp.issubdtype(
            getattr(value, "dtype", np.dtype(object)), jnp.number
        ):
            raise spec.label.error(
                f"gives {spell(value)} from compute() for {key!r}; a metric reports one "
                "number (e.g. the mean over the split), not one per example or class."
            )


def first_embedding(model: Any) -> tuple[tuple[Any, ...], int] | None:
    """``(path, num_embeddings)`` of the first ``Embed`` in a model config, or ``None``.

    Example:
        >>> from nnx_plugins.training._contracts import first_embedding
        >>> first_embedding({"type": "Sequential", "layers": [
        ...     {"type": "Embed", "num_embeddings": 64, "features": 8}]})
        (('model', 'layers', 0), 64)
    """
    pending: list[tuple[tuple[Any, ...], Any]] = [(("model",), model)]
    while pending:
        path, node = pending.pop(0)
        if isinstance(node, Mapping):
            rows = node.get("num_embeddings")
            if node.get("type") == "Embed" and isinstance(rows, int):
                return path, rows
            pending += [((*path, k), v) for k, v in node.items() if k != "type"]
        elif isinstance(node, (list, tuple)):
            pending += [((*path, i), v) for i, v in enumerate(node)]
    return None


def _check_token_ids(config: Any, parts: Parts) -> None:
    """Integer inputs within the rows of the model's first ``Embed`` (the first bad id named)."""
    if not jnp.issubdtype(parts.info.inputs.dtype, jnp.integer):
        return
    embedding = first_embedding(config.model)
    arrays = getattr(parts.data, "input_arrays", None)
    if embedding is None or not callable(arrays):
        return
    path, rows = embedding
    with parts.label(parts.data).calling("input_arrays()"):
        held = tuple(arrays())
    found = first_outside(held, rows)
    if found is not None:
        name, where, value = found
        raise DataError(
            f"{parts.info.name}: token id {name}[{where}] is {value}, outside the {rows} rows "
            f"of the model's Embed at {format_path(path)} (ids 0 to {rows - 1}). Fix the "
            "data, or give the Embed more rows (num_embeddings)."
        )

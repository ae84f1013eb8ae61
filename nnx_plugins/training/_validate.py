"""`check_config`: what ``nnx config validate`` checks, which is what ``nnx train`` checks before
it touches a run directory, by the same functions and with the same located messages.

A config with training sections (``task``, ``data``, ``metrics``, ``loggers``, ``callbacks``,
``optimizer``, ``train``, ``checkpoint``) is checked as a run: every section, the data path,
the dataset (described; its validation split), the task against each metric, every watched
value (with a did-you-mean), the files the loggers write, the batch size against the data, the
model abstractly on the data, the data against the task and the model (labels, token ids),
the optimizer's ``trainable`` kinds against the model's Variables, and the task's loss and
each metric abstractly. The model's shapes are checked against the data only when the config
has a ``data`` section (or ``--input-shape``): without one, ``nnx train`` would use the
default ``digits``, which a model config with an ``optimizer`` section alone was seldom
written for. A config with a ``model`` only is checked as a model. Nothing is
allocated and nothing is written.

Example:
    >>> from nnx_plugins import ConfigError
    >>> from nnx_plugins.training._validate import check_config
    >>> config = {"model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...           "data": {"type": "digits", "layout": "flat"},
    ...           "callbacks": [{"type": "early_stopping", "metric": "val.acuracy"}]}
    >>> try:
    ...     check_config(config)
    ... except ConfigError as error:
    ...     print(error.problems[0])
    <dict>: callbacks[0].metric: 'val.acuracy' is not a value this run reports. Did you mean 'val.accuracy'? ...
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from ..config._errors import ConfigError, Problem
from ..config._load import load_config
from ..config._shapes import DataSpec, ModelCheck, check_model
from ._assembly import assemble
from ._config import SECTIONS, check_data_path, load_train_config
from ._contracts import check_parts
from ._optimizer import check_trainable
from ._part_calls import RunPartError
from ._plan import make_plan
from ._precision import model_config
from ._preflight import data_spec
from .data._base import DataError

__all__ = ["check_config"]


def check_config(config: Any, *, data: DataSpec | None = None) -> ModelCheck:
    """Check ``config`` as ``nnx train`` would before starting (see the module docstring).

    Args:
        config: what `load_config` takes.
        data: the model's input instead of the data section's (``--input-shape``).

    Returns:
        The `ModelCheck` of the model (its abstract output when the input is known).

    Raises:
        ConfigError: every problem found, each at its place in the config (data problems
            included).

    Warns:
        SelectionWarning: a callback or ``checkpoint.keep_best`` watches the test split.
    """
    loaded = load_config(config)
    if not any(name in loaded.sections for name in SECTIONS):
        return check_model(loaded, data=data)
    train_config = load_train_config(loaded)
    try:
        check_data_path(train_config)
        parts = assemble(train_config)
        make_plan(train_config, parts, pathlib.Path("."))  # (in the order train checks)
        model = model_config(train_config)
        spec = data
        if spec is None and "data" in loaded.sections:
            spec = data_spec(parts.info, parts.task)
        elif spec is None:  # (no data section: not the default digits either)
            sections = {k: v for k, v in model.sections.items() if k != "data"}
            model = dataclasses.replace(model, sections=sections)
        check = check_model(model, data=spec)
        check_trainable(train_config, check.state)
        check_parts(train_config, parts, check.output)
    except DataError as error:
        raise ConfigError([_problem(train_config, error)]) from None
    except RunPartError as error:
        raise ConfigError([train_config.problem(error.path or ("data",), str(error))]) from None
    return check


def _problem(config: Any, error: DataError) -> Problem:
    if isinstance(error.problem, Problem):
        return error.problem
    return config.problem(("data", error.key) if error.key else ("data",), error.message)

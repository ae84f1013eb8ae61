"""`check_config`: what ``nnx config validate`` checks, which is what ``nnx train`` checks before
it touches a run directory, by the same functions and with the same located messages.

A config with training sections (``task``, ``data``, ``metrics``, ``loggers``, ``callbacks``,
``optimizer``, ``train``, ``checkpoint``) is checked as a run: every section, the data path,
the dataset (described; its validation split), the task against each metric, every watched
value (with a did-you-mean), the files the loggers write, the batch size against the data,
``checkpoint.init_from`` (read into the model built abstractly, its data record against the
data: `check_init_from`, as the run starts from it), the model abstractly on the data, the data
against the task and the model (labels, token ids), the optimizer's ``trainable`` kinds
against the model's Variables, the special tokens of the ``tokenizer`` section, and the
task's loss and each metric abstractly. The model's shapes are checked against the data only
when the config has a ``data`` section (or ``--input-shape``): without one, ``nnx train`` would
use the default ``digits``, which a model config with an ``optimizer`` section alone was
seldom written for. A config with a ``model`` only is checked as a model. Nothing is written,
and nothing allocated but the values of ``init_from``'s checkpoint while they are checked.

Text read with a tokenizer is encoded only as far as the checks need (`checks_only`): its
token counts from a prefix that proves them, its token ids from the tokenizer's vocabulary when
the model takes every id of it; a check that fails on a prefix is made on the whole text.

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
from ._contracts import check_parts, first_embedding
from ._init_from import check_init_from
from ._optimizer import check_trainable
from ._part_calls import RunPartError
from ._plan import make_plan
from ._precision import model_config
from ._preflight import data_spec
from ._sharded import constructor
from .data._base import DataError
from .data._text import checks_only
from .data._tokenizers import check_special_tokens, make_tokenizer

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
        CheckpointError: ``checkpoint.init_from`` names no checkpoint, or one the run cannot
            start from (as `initialize` says: its first problem locates the field).

    Warns:
        SelectionWarning: a callback or ``checkpoint.keep_best`` watches the test split.
    """
    loaded = load_config(config)
    if not any(name in loaded.sections for name in SECTIONS):
        return check_model(loaded, data=data)
    train_config = load_train_config(loaded)
    try:
        check_data_path(train_config)
        with checks_only() as text:
            parts = assemble(train_config)
            make_plan(train_config, parts, pathlib.Path("."))  # (in the order train checks)
            check_init_from(train_config, parts, constructor(train_config))
            model = model_config(train_config)
            spec = data
            if spec is None and "data" in loaded.sections:
                spec = data_spec(parts.info, parts.task)
            elif spec is None:  # (no data section: not the default digits either)
                sections = {k: v for k, v in model.sections.items() if k != "data"}
                model = dataclasses.replace(model, sections=sections)
            check = check_model(model, data=spec)
            check_trainable(train_config, check.state)
            text.ids_below = _ids_below(train_config, check.output)
            check_parts(train_config, parts, check.output)
        _check_tokenizer(train_config)
    except DataError as error:
        raise ConfigError([_problem(train_config, error)]) from None
    except RunPartError as error:
        raise ConfigError([train_config.problem(error.path or ("data",), str(error))]) from None
    return check


def _ids_below(config: Any, output: Any) -> int:
    """The token ids the model takes: the rows of its first ``Embed`` and its logits (a
    language model's last axis), whichever are fewer (2**63: it has neither)."""
    embedding = first_embedding(config.model)
    shape = tuple(getattr(output, "shape", ()))
    sizes = ([embedding[1]] if embedding else []) + ([shape[-1]] if len(shape) == 3 else [])
    return min(sizes, default=2**63)


def _check_tokenizer(config: Any) -> None:
    """The ``tokenizer`` section's special tokens (`check_special_tokens`), which generation
    reads, also when the data does not read the section."""
    section = config.sections.get("tokenizer")
    if section is None or section.type == section.default_type:
        return
    try:
        check_special_tokens(make_tokenizer(section.part.dump()))
    except DataError as error:
        where = ("tokenizer", "path") if error.key == "tokenizer" else ("tokenizer",)
        raise ConfigError([config.problem(where, error.message)]) from None


def _problem(config: Any, error: DataError) -> Problem:
    if isinstance(error.problem, Problem):
        return error.problem
    return config.problem(("data", error.key) if error.key else ("data",), error.message)

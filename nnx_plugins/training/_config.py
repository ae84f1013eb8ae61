"""The ``train`` and ``checkpoint`` sections, and `load_train_config` (every training section).

The section models are published in the ``nnx.config_sections`` entry-point group
(pyproject.toml) with those of ``optimizer`` (`_optimizer`) and the run parts ``task``,
``data``, ``metrics``, ``loggers`` and ``callbacks`` (`_sections`), so `load_config` finds and
validates them with the same error quality as the ``model`` section.

Example:
    >>> from nnx_plugins.training._config import load_train_config
    >>> config = load_train_config({
    ...     "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...     "optimizer": {"type": "adamw", "learning_rate": 0.01, "weight_decay": 0.001},
    ...     "data": {"type": "digits", "layout": "flat"},
    ...     "train": {"steps": 20, "batch_size": 32, "precision": "bfloat16"}})
    >>> config.sections["task"].type, config.sections["data"].arguments
    ('classification', {'layout': 'flat'})
    >>> config.sections["train"].precision, config.sections["checkpoint"].keep
    ('bfloat16', 3)
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Collection
from typing import Annotated, Any, Literal

import pydantic
from pydantic_core import PydanticCustomError

from ..config._errors import ConfigError, Problem
from ..config._load import load_config
from ._optimizer import OptimizerSection, PositiveInt
from ._sections import (
    CallbacksSection,
    DataSection,
    LoggersSection,
    MetricsSection,
    TaskSection,
)
from ._tokenizer import tokenized
from .data._base import DataError

__all__ = [
    "TrainSection",
    "CheckpointSection",
    "KeepBest",
    "SECTIONS",
    "load_train_config",
    "check_data_path",
    "config_problem",
]


class TrainSection(pydantic.BaseModel):
    """``train:`` how long (``steps`` or ``epochs``), ``batch_size``, ``seed``, intervals.

    ``eval_interval`` and ``log_interval`` count steps; evaluation defaults to once per epoch.
    With neither ``steps`` nor ``epochs``, training runs 10 epochs. ``precision: bfloat16``
    computes every layer that has a ``dtype`` in bfloat16 (parameters and optimizer state stay
    float32).
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    steps: PositiveInt | None = None
    epochs: PositiveInt | None = None
    batch_size: PositiveInt = 64
    seed: Annotated[int, pydantic.Field(ge=0, le=2**63 - 1, strict=True)] = 0
    eval_interval: PositiveInt | None = None
    log_interval: PositiveInt = 10
    precision: Literal["float32", "bfloat16"] = "float32"

    @pydantic.model_validator(mode="after")
    def _steps_or_epochs(self) -> TrainSection:
        if self.steps is not None and self.epochs is not None:
            raise ValueError(
                f"give either 'steps' ({self.steps}) or 'epochs' ({self.epochs}), not both"
            )
        return self


class KeepBest(pydantic.BaseModel):
    """``checkpoint.keep_best``: the reported value (``split.key``, e.g. ``val.loss``) whose
    best checkpoint is kept beside the newest ones, and whether ``min`` or ``max`` is best.
    Every evaluation counts, the run's last included."""

    model_config = pydantic.ConfigDict(extra="forbid")

    metric: str = "val.loss"
    mode: Literal["min", "max"] = "min"


class CheckpointSection(pydantic.BaseModel):
    """``checkpoint:`` where (``dir``, relative to the run directory), how often, how many kept,
    and the checkpoint a run starts from.

    ``interval`` counts steps; without it a checkpoint is written at the end of training only.
    ``keep_best`` also writes a checkpoint at each evaluation that improves its metric, and
    keeps the best one beside the newest ``keep``. ``init_from`` names a checkpoint (a
    directory, or a directory of ``step_N`` checkpoints: the newest), relative to the config
    file, whose model weights the run starts from instead of fresh ones (fine-tuning, e.g. an
    imported model); only `LoRAParam` adapters may be missing from it (they start fresh). A
    resumed run starts from its own checkpoint instead.
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    dir: str = "checkpoints"
    interval: PositiveInt | None = None
    keep: PositiveInt = 3
    keep_best: KeepBest | None = None
    init_from: str | None = None

    @pydantic.field_validator("init_from")
    @classmethod
    def _names_a_path(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\0" in value):
            raise PydanticCustomError(
                "nnx_init_from",
                "must name a checkpoint directory (relative to the config file), e.g. 'checkpoint'",
            )
        return value

    def with_paths_resolved(
        self, folder: str, overridden: Collection[str] = ()
    ) -> CheckpointSection:
        """This section with a relative ``init_from`` made absolute, relative to ``folder``
        (to the current directory when ``overridden`` names it)."""
        if self.init_from is None or os.path.isabs(self.init_from):
            return self
        base = os.getcwd() if "init_from" in overridden else folder
        return self.model_copy(update={"init_from": os.path.join(base, self.init_from)})

    @pydantic.field_validator("dir")
    @classmethod
    def _inside_the_run_directory(cls, value: str) -> str:
        parts = pathlib.PurePath(value).parts
        if not value.strip() or pathlib.PurePath(value).is_absolute() or ".." in parts:
            raise PydanticCustomError(
                "nnx_checkpoint_dir",
                "must be a relative path inside the run directory, without '..'; choose "
                "where a run goes with --run-dir (run_dir=...) instead",
            )
        return value


SECTIONS: dict[str, type[pydantic.BaseModel]] = {
    "task": TaskSection,
    "data": DataSection,
    "metrics": MetricsSection,
    "loggers": LoggersSection,
    "callbacks": CallbacksSection,
    "optimizer": OptimizerSection,
    "train": TrainSection,
    "checkpoint": CheckpointSection,
}


def load_train_config(config: Any) -> Any:
    """`load_config` for training: every training section validated, defaults filled in.

    Returns a `Config` whose ``sections`` always hold the sections of `SECTIONS`; the data's
    path arguments (``data.path``) and ``checkpoint.init_from`` are made absolute, relative
    to the config file (one given as a ``KEY=VALUE`` override: to the current directory).

    Raises:
        ConfigError: every problem of every section with its location.

    Example:
        >>> from nnx_plugins import ConfigError
        >>> from nnx_plugins.training._config import load_train_config
        >>> try:
        ...     load_train_config({"model": {"type": "Linear", "in_features": 2, "out_features": 2},
        ...                        "optimizer": {"type": "adamw", "learning_rate": 0.1, "weight_decy": 0.1}})
        ... except ConfigError as error:
        ...     print(error.problems[0])
        <dict>: optimizer.weight_decy: unknown argument 'weight_decy' for optax.adamw. Did you mean 'weight_decay'? ...
    """

    loaded = load_config(config)
    sections = dict(loaded.sections)
    for name, model in SECTIONS.items():
        if sections.get(name) is None:
            sections[name] = (
                model.model_validate(model.default_value())
                if hasattr(model, "default_value")
                else model()
            )
    source = loaded.source
    if source not in ("<dict>", "<to_config>") and os.path.exists(source):
        folder = os.path.dirname(os.path.abspath(source))
        for name in ("data", "checkpoint", "tokenizer"):  # (the tokenizer's: _tokenizer.py)
            if sections.get(name) is not None:
                sections[name] = sections[name].with_paths_resolved(
                    folder, _overridden(loaded, name, sections[name])
                )
    sections["data"] = tokenized(sections["data"], sections.get("tokenizer"))
    return dataclasses.replace(loaded, sections=sections)


def _overridden(loaded: Any, name: str, section: Any) -> frozenset[str]:
    """The keys of section ``name`` given as ``KEY=VALUE`` overrides (a relative path typed
    on the command line is relative to the current directory, as the shell completes it)."""
    part = getattr(section, "part", None)
    keys = part.arguments if part is not None else {"init_from": None}
    return frozenset(key for key in keys if loaded.from_override((name, key)))


def check_data_path(config: Any) -> None:
    """Refuse a data ``path`` that names no file, located where it is written (``file:line:col``)
    before a run starts; `load_train_config` alone does not need the file (``nnx build``). A
    glob or a ``stdlib:`` path of the text dataset is left to the dataset.

    Raises:
        DataError: no file (nor anything else) is at ``data.path``.
    """
    path = config.sections["data"].arguments.get("path")
    if not isinstance(path, str) or os.path.lexists(path) or _named_otherwise(path):
        return
    relative = (
        " (a relative path given as an override is relative to the current directory)"
        if config.from_override(("data", "path"))
        else " (a relative path is relative to the config)"
        if config.files
        else ""
    )
    problem = config.problem(("data", "path"), f"no such file {path!r}{relative}.")
    raise DataError(str(problem), key="path", problem=problem)


def _named_otherwise(path: str) -> bool:
    return path.startswith("stdlib:") or bool(set("*?[") & set(path))


def config_problem(config: Any, path: tuple[Any, ...], message: str) -> ConfigError:
    """A one-problem `ConfigError` for a check that needs more than the config (e.g. a file),
    located where ``path`` is written when the config knows it."""
    if hasattr(config, "problem"):
        return ConfigError([config.problem(path, message)])
    return ConfigError([Problem(path, message, getattr(config, "source", "<dict>"))])

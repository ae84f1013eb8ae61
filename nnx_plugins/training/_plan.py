"""The plan of a run: how many steps, when to evaluate and checkpoint; the model and optimizer
it builds; its jitted steps.

Example:
    >>> import pathlib
    >>> from nnx_plugins.training._assembly import assemble
    >>> from nnx_plugins.training._config import load_train_config
    >>> from nnx_plugins.training._plan import make_plan
    >>> config = load_train_config({
    ...     "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...     "data": {"type": "digits", "layout": "flat"},
    ...     "optimizer": {"type": "adam", "learning_rate": 0.01, "accumulate_steps": 2},
    ...     "train": {"epochs": 3, "batch_size": 32}})
    >>> plan = make_plan(config, assemble(config), pathlib.Path("runs/x"))
    >>> plan.rows, plan.total, plan.eval_every
    (64, 66, 22)
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import nnx_core as nnx

from ..config._build import build
from ._assembly import Parts, config_error, located_data_error
from ._init_from import initialize
from ._memory import trainable_kinds
from ._mesh import replicate_unplaced, shard_over
from ._precision import model_config
from ._steps import make_steps
from .data._base import DataError

__all__ = ["Plan", "make_plan", "setup", "steps_of", "call"]


@dataclasses.dataclass
class Plan:
    """What a run does when; ``steps`` and ``mesh`` are set before it starts."""

    config: Any
    parts: Parts
    total: int
    eval_every: int
    ckpt_every: int | None
    ckpt_dir: pathlib.Path
    run_dir: pathlib.Path
    rows: int  # rows per update: batch_size * accumulate_steps
    steps: Any = None
    mesh: Any = None


def make_plan(config: Any, parts: Parts, run_dir: pathlib.Path) -> Plan:
    section = config.sections["train"]
    rows = section.batch_size * config.sections["optimizer"].accumulate_steps
    try:
        per_epoch = parts.data.steps_per_epoch(rows)
    except NotImplementedError as error:
        if section.steps is None:
            raise config_error(config, ("train",), f"{error}") from None
        per_epoch = section.steps
    except DataError as error:
        raise located_data_error(config, error) from None
    total = section.steps or per_epoch * (section.epochs or 10)
    ckpt = config.sections["checkpoint"]
    return Plan(
        config,
        parts,
        total,
        section.eval_interval or per_epoch,
        ckpt.interval,
        run_dir / ckpt.dir,
        run_dir,
        rows,
    )


def setup(plan: Plan, mesh: Any) -> tuple[Any, Any]:
    sections = plan.config.sections
    model = build(model_config(plan.config), rngs=nnx.Rngs(sections["train"].seed))
    if mesh is not None:
        shard_over(model, mesh)
    initialize(plan, model)  # (checkpoint.init_from: before the optimizer, which starts from it)
    kinds = trainable_kinds(sections["optimizer"].trainable)
    optimizer = nnx.Optimizer(model, sections["optimizer"].make(), wrt=kinds)
    if mesh is not None:
        replicate_unplaced(optimizer, mesh)
    return model, optimizer


def steps_of(plan: Plan) -> Any:
    sections = plan.config.sections
    key = (
        repr(sections["task"].model_dump()),
        tuple(plan.parts.train_metrics),
        sections["optimizer"].accumulate_steps,
        repr(plan.parts.info),
    )
    return make_steps(
        plan.parts.task,
        plan.parts.train_metrics,
        plan.parts.info,
        accumulate=sections["optimizer"].accumulate_steps,
        key=key,
    )


def call(part: Any, method: str, *args: Any) -> Any:
    hook = getattr(part, method, None)
    return hook(*args) if callable(hook) else None

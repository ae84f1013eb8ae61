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
    >>> plan.rows, plan.total, plan.eval_every  # (1294 images after the validation split)
    (64, 60, 20)
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from typing import Any

import numpy as np
from jax.sharding import NamedSharding

from .._errors import NnxError
from ._assembly import Parts, config_error, located_data_error
from ._device_memory import DeviceMemory
from ._init_from import start_from
from ._layout import Layout
from ._preflight import batch_struct, compile_step, measure_step, plan_layout
from ._sharded import constructor, create_local, create_sharded
from ._steps import make_steps
from .data._base import DataError

__all__ = ["Plan", "make_plan", "maker", "setup", "measure_layout", "steps_of"]


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
    make: Any = None  # builds (model, optimizer); one per run: its optimizer is in the graph
    layout: Any = None  # where the arrays live over a mesh (None: one device)

    def stepping(self) -> Any:
        """The context the train step is traced and called in (`Layout.activations`)."""
        return contextlib.nullcontext() if self.layout is None else self.layout.activations()


def maker(plan: Plan) -> Any:
    """The run's constructor of ``(model, optimizer)``, made once (`constructor`): the abstract
    layout, the compiled step and the model then share one optimizer transformation, so the
    step compiled for the layout is the step the run calls."""
    if plan.make is None:
        plan.make = constructor(plan.config)
    return plan.make


def _steps_per_epoch(parts: Parts, rows: int) -> int:
    """The data's ``steps_per_epoch(rows)``; what it raises besides `NotImplementedError`
    (no epochs) and the project's own errors is named with the dataset."""
    label = parts.label(parts.data)
    try:
        steps = parts.data.steps_per_epoch(rows)
    except (NotImplementedError, NnxError):
        raise
    except Exception as error:  # noqa: BLE001 - a pack's dataset: named
        raise label.failed(f"steps_per_epoch({rows})", error) from error
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise label.error(
            f"gave {steps!r} from steps_per_epoch({rows}); it must be a whole number of at least "
            "1 (a dataset without epochs raises NotImplementedError: train.steps counts then)."
        )
    return int(steps)


def _accumulation_error(config: Any, parts: Parts, error: DataError) -> Any:
    """``error`` located at ``optimizer.accumulate_steps`` when a single micro-batch fits the
    data but ``accumulate_steps`` of them do not (``None`` otherwise)."""
    batch = config.sections["train"].batch_size
    wanted = config.sections["optimizer"].accumulate_steps
    fits = lambda k: _fits(parts, batch * k)  # noqa: E731
    if wanted < 2 or not fits(1):
        return None
    low, high = 1, wanted  # (fits(low), not fits(high))
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return config_error(
        config,
        ("optimizer", "accumulate_steps"),
        f"accumulate_steps {wanted} makes each update read {wanted} micro-batches of "
        f"train.batch_size {batch} ({batch * wanted:,} rows), more than the training data "
        f"gives in an epoch ({error.message.rstrip('.')}); at most {low} micro-batches of "
        f"{batch} fit: lower accumulate_steps to {low} or less.",
    )


def _fits(parts: Parts, rows: int) -> bool:
    try:
        _steps_per_epoch(parts, rows)
    except DataError:
        return False
    return True


def make_plan(config: Any, parts: Parts, run_dir: pathlib.Path) -> Plan:
    section = config.sections["train"]
    rows = section.batch_size * config.sections["optimizer"].accumulate_steps
    try:
        per_epoch = _steps_per_epoch(parts, rows)
    except NotImplementedError as error:
        if section.steps is None:
            raise config_error(config, ("train",), f"{error}") from None
        per_epoch = section.steps
    except DataError as error:
        accumulation = _accumulation_error(config, parts, error)
        raise (accumulation or located_data_error(config, error)) from None
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


# A model of at most this many Variables is built by one compiled program on one device: fewer
# programs to compile, and to load from the compile cache in a second run. A larger one is
# built eagerly: the one program's compile grows with every layer (48 unrolled blocks took
# 21 s against 3.8 s eagerly on CPU), while eager programs are shared by layers of one shape.
ONE_PROGRAM_VARIABLES = 48


def setup(plan: Plan, layout: Layout | None, *, variables: int | None = None) -> tuple[Any, Any]:
    """The run's model and optimizer: on one device, built by one program (`create_local`)
    when the model holds at most `ONE_PROGRAM_VARIABLES` Variables (``variables``, counted by
    the preflight's abstract build), else eagerly; over a mesh, created directly sharded as
    ``layout`` says (`create_sharded`); then filled from ``checkpoint.init_from`` when the
    config names one (`start_from`)."""
    make = maker(plan)
    if layout is not None:
        model, optimizer = create_sharded(make, layout)
    elif variables is not None and variables <= ONE_PROGRAM_VARIABLES:
        model, optimizer = create_local(make)
    else:
        model, optimizer = make()
    optimizer = start_from(plan, model, optimizer)
    return model, optimizer


def measure_layout(plan: Plan, layout: Layout, *, allow_large: bool) -> DeviceMemory:
    """Before a run over a mesh allocates anything: lay its model and optimizer out abstractly,
    compile its train step for that layout, and refuse it if a device cannot hold its share
    (`plan_layout`, `measure_step`).

    Raises:
        ConfigError: a Variable cannot be laid out, or the run does not fit (unless
            ``allow_large``).
    """
    abstract, memory = plan_layout(plan.config, layout, maker(plan), allow_large=allow_large)
    section = plan.config.sections["train"]
    batch = plan.parts.data.batch(0, plan.rows, section.seed)
    sharding = NamedSharding(layout.mesh, layout.batch_spec())
    with layout.activations():
        compiled = compile_step(plan.steps, *abstract, batch_struct(batch, sharding))
    return measure_step(plan.config, memory, compiled, allow_large=allow_large)


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

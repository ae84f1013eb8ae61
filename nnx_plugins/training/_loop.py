"""Training from a config: the run of docs/design/runs.md.

`train` builds the model from the config's ``model`` section (with ``train.precision``), the
optax optimizer from ``optimizer``, the task, dataset, metrics, loggers and callbacks from their
sections, and runs ``train.steps`` (or ``train.epochs``) steps. The batch of step ``s`` is a
pure function of ``(train.seed, s)`` and every piece of state (parameters, BatchNorm
statistics, Rng counts, optimizer moments, the callbacks' state and Modules) is checkpointed,
so ``resume=True`` continues to exactly the parameters an uninterrupted run reaches. A loss
that is not finite stops the run (`TrainingDivergedError`) naming the step and the last
checkpoint, which is always finite. The run directory receives ``config.yaml`` (the resolved
config), what the loggers write (``metrics.jsonl`` by default), ``metrics.png`` and
``checkpoints/step_N``.

With several processes (`jax.distributed`, e.g. inside a `ProcessGroup`), every process calls
`train` with the same arguments: the mesh spans every process's devices, each process feeds its
devices' rows of each global batch, process 0 holds the run directory and reports, and every
process writes its part of each checkpoint.

Example:
    >>> import tempfile
    >>> from nnx_plugins import train
    >>> result = train({
    ...     "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...     "optimizer": {"type": "adam", "learning_rate": 0.05},
    ...     "data": {"type": "digits", "layout": "flat"},
    ...     "train": {"steps": 30, "batch_size": 64}}, run_dir=tempfile.mkdtemp(), progress=False)
    >>> result.step, result.test_accuracy > 0.8
    (30, True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

import nnx_core as nnx

from .._errors import NnxError
from .._text import os_problem
from ..config._build import build
from ._assembly import Parts, assemble, config_error, located_data_error
from ._collectives import sync
from ._config import check_data_path, load_train_config
from ._evaluation import eval_batch_size, evaluate_model, evaluation_line
from ._memory import trainable_kinds
from ._mesh import batch_placer, make_mesh, replicate_unplaced, shard_over
from ._plot import plot_metrics
from ._precision import model_config
from ._preflight import preflight
from ._progress import Progress
from ._run import Run
from ._run_dir import RunError, RunLock, check_new_run, choose_run_dir
from ._steps import all_finite, make_steps
from .checkpoints._best import improves, read_best, write_best
from .checkpoints._load import load
from .checkpoints._manifest import read_manifest
from .checkpoints._save import CheckpointError, latest_checkpoint, rotate, save, step_directory
from .data._base import DataError
from .loggers._jsonl import FILE as JSONL_FILE
from .loggers._jsonl import read_records

__all__ = ["TrainResult", "TrainingDivergedError", "train", "evaluate", "build_model"]


class TrainingDivergedError(NnxError):
    """The loss (or the state to checkpoint) became NaN or infinite; ``.step`` is the first
    step where it did and ``.checkpoint`` the last (finite) checkpoint, if any."""

    def __init__(self, message: str, *, step: int, checkpoint: pathlib.Path | None):
        super().__init__(message)
        self.step, self.checkpoint = step, checkpoint


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a training run produced.

    Attributes:
        step: the step the model is at (the last step trained, or the step it resumed at).
        steps_trained: how many steps this call trained (fewer than ``step`` after a resume,
            0 when the run had already reached its end).
        metrics: every test metric after the last step (``loss``, the task's, the config's).
        test_loss, test_accuracy: ``metrics["loss"]`` and ``metrics.get("accuracy")``.
        run_dir: where the logs, ``metrics.png`` and ``checkpoints/`` are.
        checkpoint: the last checkpoint written (``None`` if none).
        seconds: wall time of the run, compilation included.
        stopped_by: the callback that stopped the run early, if one did.
        model, optimizer: the trained objects.
    """

    step: int
    steps_trained: int
    metrics: dict[str, float]
    run_dir: pathlib.Path
    checkpoint: pathlib.Path | None
    seconds: float
    model: Any = dataclasses.field(repr=False)
    optimizer: Any = dataclasses.field(repr=False)
    stopped_by: str | None = None

    @property
    def test_loss(self) -> float:
        return self.metrics["loss"]

    @property
    def test_accuracy(self) -> float | None:
        return self.metrics.get("accuracy")


def build_model(config: Any, *, seed: int = 0) -> Any:
    """The model a run of ``config`` trains (``train.precision`` applied), freshly built."""
    return build(model_config(load_train_config(config)), rngs=nnx.Rngs(seed))


# -- the plan ------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Plan:
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


def _plan(config: Any, parts: Parts, run_dir: pathlib.Path) -> _Plan:
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
    return _Plan(
        config,
        parts,
        total,
        section.eval_interval or per_epoch,
        ckpt.interval,
        run_dir / ckpt.dir,
        run_dir,
        rows,
    )


def _setup(plan: _Plan, mesh: Any) -> tuple[Any, Any]:
    sections = plan.config.sections
    model = build(model_config(plan.config), rngs=nnx.Rngs(sections["train"].seed))
    if mesh is not None:
        shard_over(model, mesh)
    kinds = trainable_kinds(sections["optimizer"].trainable)
    optimizer = nnx.Optimizer(model, sections["optimizer"].make(), wrt=kinds)
    if mesh is not None:
        replicate_unplaced(optimizer, mesh)
    return model, optimizer


def _steps(plan: _Plan) -> Any:
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


# -- resuming ------------------------------------------------------------------------------------
def _resume(plan: _Plan, run: Run, bar: Progress) -> int:
    latest = latest_checkpoint(plan.ckpt_dir)
    if latest is None:
        bar.print(f"no checkpoint in {plan.ckpt_dir}: starting from step 0")
        return 0
    manifest = read_manifest(latest)
    facts = manifest.get("run") or {}
    if "data" in facts:
        problem = getattr(plan.parts.data, "check_state", lambda saved: None)(facts["data"])
        if problem:
            raise CheckpointError(latest, [f"data: {problem}"])
    nodes = {name: node for cb in plan.parts.callbacks for name, node in _nodes(cb).items()}
    held = {name for name in nodes if any(k.startswith(name + "/") for k in manifest["entries"])}
    for name in sorted(set(nodes) - held):
        bar.print(f"note: {latest} has no {name} state; it starts from the current weights.")
    load(latest, into=run.model, optimizer=run.optimizer, extra={n: nodes[n] for n in held})
    _restore_callbacks(plan.parts, facts.get("callbacks"))
    step = int(manifest["step"] or 0)
    run.stopped_by = facts.get("stopped_by")
    bar.print(f"resumed from {latest} (step {step})")
    saved, now = manifest.get("config") or {}, plan.config.to_dict()
    changed = [
        k for k in ("model", "optimizer", "data", "task") if k in saved and saved[k] != now.get(k)
    ]
    if changed:
        bar.print(
            f"note: the {', '.join(changed)} section(s) differ from the checkpoint's config; "
            "the run continues with the new ones and will not match an uninterrupted run."
        )
    return step


def _nodes(callback: Any) -> dict[str, Any]:
    method = getattr(callback, "nodes", None)
    return dict(method()) if callable(method) else {}


def _callback_states(parts: Parts) -> list[dict[str, Any]]:
    return [
        {"type": name, "state": _call(callback, "state") or {}}
        for callback, name in zip(parts.callbacks, parts.callback_names)
    ]


def _restore_callbacks(parts: Parts, saved: Any) -> None:
    """Each callback's saved state, matched by position and registered name."""
    records = saved if isinstance(saved, list) else []
    for callback, name, record in zip(parts.callbacks, parts.callback_names, records):
        if isinstance(record, dict) and record.get("type") == name:
            _call(callback, "restore", record.get("state") or {})


# -- checkpoints -------------------------------------------------------------------------------
def _diverged(plan: _Plan, step: int, what: str) -> TrainingDivergedError:
    last = latest_checkpoint(plan.ckpt_dir)
    where = (
        f"the last checkpoint, {last}, is finite: continue from it with --resume"
        if last
        else "no checkpoint was written"
    )
    return TrainingDivergedError(
        f"training stopped: {what} at step {step}; {where} after lowering the learning rate "
        "(optimizer.learning_rate), adding clip_grad_norm, or fixing the data.",
        step=step,
        checkpoint=last,
    )


def _check_bad_step(plan: _Plan, bad: Any) -> None:
    step = int(bad)  # (a host sync: only where the loop syncs anyway)
    if step:
        raise _diverged(plan, step, "the loss became NaN or infinite")


def _save(plan: _Plan, run: Run, metrics: dict[str, Any] | None = None) -> pathlib.Path:
    step = run.step
    if not all_finite(run.model, run.optimizer):
        raise _diverged(plan, step, "the weights or optimizer state hold NaN or infinite values")
    directory = step_directory(plan.ckpt_dir, step)
    facts = {
        "data": getattr(plan.parts.data, "state", dict)(),
        "callbacks": _callback_states(plan.parts),
        "stopped_by": run.stopped_by,
        "metrics": metrics or {},
    }
    extra = {name: node for cb in plan.parts.callbacks for name, node in _nodes(cb).items()}
    # (every process writes its part; process 0 commits, then rotates)
    save(
        run.model,
        directory,
        optimizer=run.optimizer,
        config=plan.config,
        step=step,
        extra=extra,
        run=facts,
    )
    if run.is_main:
        best = read_best(plan.ckpt_dir)
        protect = [plan.ckpt_dir / best["directory"]] if best else []
        rotate(plan.ckpt_dir, plan.config.sections["checkpoint"].keep, protect=protect)
    return directory


def _keep_best(plan: _Plan, run: Run, results: dict[str, dict[str, float]]) -> pathlib.Path | None:
    rule = plan.config.sections["checkpoint"].keep_best
    if rule is None:
        return None
    split, _, key = rule.metric.partition(".")
    value = results[split][key]
    best = read_best(plan.ckpt_dir) if run.is_main else None
    if run.is_main and not improves(value, best["value"] if best else None, rule.mode):
        value = float("nan")  # (not better: no checkpoint)
    value = float(_shared(value))
    if value != value:
        return None
    directory = _save(plan, run, {split: results[split]})
    if run.is_main:
        write_best(plan.ckpt_dir, step=run.step, metric=rule.metric, mode=rule.mode, value=value)
        rotate(plan.ckpt_dir, plan.config.sections["checkpoint"].keep, protect=[directory])
    return directory


def _shared(value: float) -> float:
    """Process 0's ``value`` in every process."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils  # (here: one process never needs it)

    return float(multihost_utils.broadcast_one_to_all(np.float64(value)))


# -- the run -------------------------------------------------------------------------------------
def train(
    config: Any,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    mesh: Any = None,
    progress: bool = True,
    console: Any = None,
    stop_at: int | None = None,
    allow_large: bool = False,
) -> TrainResult:
    """Train the model a config describes; see the module docstring.

    Args:
        config: a config file path, mapping or `Config` with a ``model`` section and optional
            ``task``, ``data``, ``metrics``, ``optimizer``, ``train``, ``checkpoint``,
            ``loggers`` and ``callbacks`` sections.
        run_dir: where logs, the plot and checkpoints go (default ``runs/<config name>``, or
            ``runs/<config name>-N`` when that already holds another run's checkpoints).
        resume: continue from the newest checkpoint in the run's checkpoint directory.
        mesh: a `jax.sharding.Mesh` with a ``data`` axis (and optionally ``model``), or a
            mapping such as ``{"data": 8}``; the batch is sharded over ``data`` and each Variable
            by its ``sharding_names`` where they name a mesh axis. With several processes the
            default is ``{"data": jax.device_count()}``.
        progress: show a progress bar (process 0 only).
        console: a `rich.console.Console` for the evaluation and resume lines; by default
            stdout while the progress bar is shown, and nowhere when ``progress=False``.
        stop_at: stop after this step (as a preempted job would), checkpointing it.
        allow_large: train even when the memory estimate (Variables, gradients and optimizer
            state, from an abstract build) exceeds the memory available.

    Returns:
        A `TrainResult`.

    Raises:
        ConfigError: the config is invalid; a layer cannot take its input or the output does
            not fit the task (reported at the layer); a metric the task cannot feed; a value
            a callback watches that the run does not report; or the run needs more memory
            than is available and ``allow_large`` is False.
        DataError: the data cannot be read or does not fit the task (located at ``data``).
        CheckpointError: ``resume`` found a checkpoint that does not fit (the model, or the
            data: e.g. another character vocabulary).
        TrainingDivergedError: the loss became NaN or infinite (the step and the last
            checkpoint named).
        RunError: ``run_dir`` is a file, holds checkpoints but ``resume`` is False, is used by
            another run, cannot be written (a full disk, no permission); or the ``mesh`` does
            not fit the devices (of every process) or the batch.
    """
    started = time.perf_counter()
    config = load_train_config(config)
    check_data_path(config)
    parts = assemble(config)
    plan = _plan(config, parts, choose_run_dir(config, run_dir, resume))
    if mesh is None and jax.process_count() > 1:  # (several processes: one data-parallel mesh)
        mesh = {"data": jax.device_count()}
    if isinstance(mesh, Mapping):
        mesh = make_mesh(mesh)
    place = batch_placer(mesh, plan.rows)
    plan.mesh = mesh
    main = jax.process_index() == 0
    if not main:  # (process 0 reports for all)
        progress, console = False, None
    check = preflight(model_config(config), parts.info, parts.task, allow_large=allow_large)
    try:
        parts.task.check_data(parts.data, parts.info, check.output)
    except DataError as error:
        raise located_data_error(config, error) from None
    plan.steps = _steps(plan)
    with RunLock(plan.run_dir) if main else contextlib.nullcontext():
        sync("nnx-run-directory")  # (the others wait until process 0 holds the directory)
        check_new_run(plan.run_dir, plan.ckpt_dir, resume)
        _save_resolved_config(config, plan.run_dir, main)
        model, optimizer = _setup(plan, mesh)
        run = Run(
            config,
            plan.run_dir,
            model,
            optimizer,
            parts.task,
            parts.data,
            parts.info,
            plan.total,
            is_main=main,
        )
        for callback in parts.callbacks:
            _call(callback, "start", run)
        with Progress(progress, plan.total, 0, console) as bar:
            start = _resume(plan, run, bar) if resume else 0
            run.step = start
            # (a checkpoint past stop_at or the total, or a run a callback ended: nothing left)
            end = max(plan.total if stop_at is None else min(stop_at, plan.total), start)
            if run.stopped_by is not None:
                end = start
            checkpoint, metrics = _session(plan, run, (start, end), place, bar)
    return TrainResult(
        run.step,
        run.step - start,
        metrics,
        plan.run_dir,
        checkpoint,
        time.perf_counter() - started,
        model,
        optimizer,
        run.stopped_by,
    )


def _session(
    plan: _Plan, run: Run, span: tuple[int, int], place: Any, bar: Progress
) -> tuple[Any, dict[str, float]]:
    """Open the loggers, run the steps of ``span``, end the run; the last checkpoint and the
    final test metrics."""
    loggers = plan.parts.loggers if run.is_main else []
    run.records = read_records(plan.run_dir / JSONL_FILE, start=span[0]) if run.is_main else []
    for logger in loggers:
        _call(logger, "open", plan.run_dir, span[0])
    try:
        bar.update(span[0], float("nan"), 0.0)
        checkpoint = _loop(plan, run, span, place, (loggers, bar))
        run.finished = run.stopped_by is not None or run.step == plan.total
        for callback in plan.parts.callbacks:
            _call(callback, "end", run)
        metrics = _final(plan, run, span, loggers)
        if run.step > span[0]:  # (the final checkpoint: after the callbacks' end)
            checkpoint = _save(plan, run, {"test": metrics})
        if run.is_main:
            main_metric = next((k for k in plan.parts.metric_objects() if k != "loss"), None)
            plot_metrics(run.records, plan.run_dir / "metrics.png", metric=main_metric)
    finally:
        for logger in loggers:
            _call(logger, "close")
    return checkpoint, metrics


def _final(plan: _Plan, run: Run, span: tuple[int, int], loggers: list[Any]) -> dict[str, float]:
    """The final test metrics; logged when the run reached its end and they are not yet."""
    rows = eval_batch_size(plan.parts.info, plan.config.sections["train"].batch_size)
    metrics = evaluate_model(run.model, plan.parts, plan.steps, rows, mesh=plan.mesh)
    logged = any(r.get("step") == run.step and r.get("split") == "test" for r in run.records)
    if run.finished and not logged:  # (a stopped run's log is an uninterrupted run's)
        _log(run, loggers, {"step": run.step, "split": "test", **metrics})
    return metrics


def _call(part: Any, method: str, *args: Any) -> Any:
    hook = getattr(part, method, None)
    return hook(*args) if callable(hook) else None


def _log(run: Run, loggers: list[Any], record: dict[str, Any]) -> None:
    run.records.append(record)
    for logger in loggers:
        logger.write(record)


def _save_resolved_config(config: Any, run_dir: pathlib.Path, main: bool) -> None:
    """``config.yaml`` in the run directory: the resolved config (includes, overrides and
    interpolations applied, defaults filled in); ``nnx train config.yaml`` reproduces the run."""
    if main:
        temporary = run_dir / ".config.yaml.tmp"
        try:
            temporary.write_text(config.to_yaml(), encoding="utf-8")
            os.replace(temporary, run_dir / "config.yaml")
        except OSError as error:
            raise RunError(
                f"cannot write {run_dir / 'config.yaml'}: {os_problem(error)}. Free space or "
                "fix permissions, or choose another --run-dir."
            ) from error


@dataclasses.dataclass
class _Window:
    """What a log line averages: the steps since the last one."""

    losses: list[Any] = dataclasses.field(default_factory=list)
    values: list[Any] = dataclasses.field(default_factory=list)
    started: float = dataclasses.field(default_factory=time.perf_counter)
    feeding: float = 0.0

    def record(self, step: int, rows: int) -> dict[str, Any]:
        losses, values = jax.device_get((self.losses, self.values))  # (one host sync)
        now = time.perf_counter()
        elapsed = max(now - self.started, 1e-9)
        record: dict[str, Any] = {"step": step, "split": "train", "loss": float(np.mean(losses))}
        for key in values[0] if values else ():
            record[key] = float(np.mean([v[key] for v in values]))
        record["examples_per_second"] = len(losses) * rows / elapsed
        record["data_share"] = self.feeding / elapsed
        self.losses, self.values, self.started, self.feeding = [], [], now, 0.0
        return record


def _loop(
    plan: _Plan, run: Run, span: tuple[int, int], place: Any, out: tuple[list[Any], Progress]
) -> pathlib.Path | None:
    loggers, bar = out
    section = plan.config.sections["train"]
    checkpoint = latest_checkpoint(plan.ckpt_dir)
    window, bad = _Window(), jax.numpy.int32(0)
    run.model.train()
    for step in range(span[0] + 1, span[1] + 1):
        fed = time.perf_counter()
        batch = place(plan.parts.data.batch(step - 1, plan.rows, section.seed))
        window.feeding += time.perf_counter() - fed
        loss, values, bad = plan.steps.train(run.model, run.optimizer, batch, bad, np.int32(step))
        run.step = step
        window.losses.append(loss)
        window.values.append(values)
        for callback in plan.parts.callbacks:
            _call(callback, "after_step", run, step)
        if step % section.log_interval == 0 or step == plan.total:
            _check_bad_step(plan, bad)
            record = window.record(step, plan.rows)
            _log(run, loggers, record)
            bar.update(step, record["loss"], record["examples_per_second"])
        if step % plan.eval_every == 0 and step != plan.total:  # (the last: by _final)
            _check_bad_step(plan, bad)
            evaluating = time.perf_counter()
            if _evaluate_during(plan, run, loggers, bar):
                return _stop_early(plan, run)
            window.started += time.perf_counter() - evaluating  # (the rate counts steps only)
            run.model.train()
        saved = run.saved == step  # (keep_best wrote this step's checkpoint already)
        if plan.ckpt_every and step % plan.ckpt_every == 0 and step != span[1] and not saved:
            _check_bad_step(plan, bad)
            checkpoint = _save(plan, run)
    _check_bad_step(plan, bad)
    return checkpoint


def _evaluate_during(plan: _Plan, run: Run, loggers: list[Any], bar: Progress) -> bool:
    """Evaluate every model, log it, ask the callbacks; whether one stops the run."""
    rows = eval_batch_size(plan.parts.info, plan.config.sections["train"].batch_size)
    models = {"test": run.model}
    for callback in plan.parts.callbacks:
        models.update({f"test_{n}": m for n, m in (_call(callback, "evaluated") or {}).items()})
    results = {}
    for split, model in models.items():
        results[split] = evaluate_model(model, plan.parts, plan.steps, rows, mesh=plan.mesh)
        _log(run, loggers, {"step": run.step, "split": split, **results[split]})
        bar.print(evaluation_line(run.step, plan.total, split, results[split]))
    if _keep_best(plan, run, results) is not None:
        run.saved = run.step
    stop = False
    for callback, name in zip(plan.parts.callbacks, plan.parts.callback_names):
        if _call(callback, "after_eval", run, run.step, results) and not stop:
            stop, run.stopped_by = True, name
    return stop


def _stop_early(plan: _Plan, run: Run) -> pathlib.Path | None:
    """The run ends here: a callback stopped it (its final checkpoint is written by the run)."""
    return latest_checkpoint(plan.ckpt_dir)


def evaluate(config: Any, checkpoint: str | os.PathLike[str]) -> dict[str, Any]:
    """The test metrics of a checkpoint on the config's data.

    The model is built from the config's ``model`` section and filled from ``checkpoint`` (a
    checkpoint directory, or a directory of ``step_N`` checkpoints: the newest is used).

    Returns:
        ``{"step": ..., "loss": ..., <the task's metrics>..., "checkpoint": ...}``.

    Raises:
        CheckpointError: the checkpoint is missing, corrupt, or does not fit the model or the
            data (e.g. another character vocabulary).
        DataError: the data cannot be read.
    """
    config = load_train_config(config)
    check_data_path(config)
    parts = assemble(config)
    manifest = read_manifest(checkpoint)
    facts = manifest.get("run") or {}
    if "data" in facts:
        problem = getattr(parts.data, "check_state", lambda saved: None)(facts["data"])
        if problem:
            raise CheckpointError(manifest["directory"], [f"data: {problem}"])
    model = build(model_config(config), rngs=nnx.Rngs(0))
    load(manifest["directory"], into=model)
    plan = _Plan(config, parts, 0, 1, None, pathlib.Path(), pathlib.Path(), 1)
    rows = eval_batch_size(parts.info, config.sections["train"].batch_size)
    metrics = evaluate_model(model, parts, _steps(plan), rows)
    return {"step": manifest.get("step"), **metrics, "checkpoint": manifest["directory"]}

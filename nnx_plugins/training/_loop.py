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
``checkpoints/step_N``. Each evaluation (every ``train.eval_interval`` steps and at the last
step) reports the validation split, which callbacks and ``checkpoint.keep_best`` watch; the
test split is evaluated at the end.

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
import sys
import time
from typing import Any

import jax
import numpy as np

import nnx_core as nnx

from .._stopping import check as check_stop
from .._text import os_problem
from ..config._build import build
from ._assembly import assemble
from ._collectives import sync
from ._compile_cache import with_compile_cache
from ._config import check_data_path, load_train_config
from ._contracts import check_parts
from ._device_memory import memory_line
from ._evaluation import eval_batch_size, evaluate_model, evaluation_line
from ._mesh import batch_placer, first_bad_step, run_layout
from ._optimizer import check_trainable
from ._plan import Plan, make_plan, measure_layout, setup, steps_of
from ._plot import plot_metrics
from ._precision import model_config
from ._preflight import check_on_data, preflight
from ._progress import Progress
from ._run import Run
from ._run_dir import RunError, RunLock, check_new_run, choose_run_dir, remove_unstarted
from ._run_state import check_bad_step, keep_best, save_checkpoint
from ._run_state import resume as resume_run
from ._safe_io import write_whole
from ._seed import seed_key
from .checkpoints._load import load
from .checkpoints._manifest import read_manifest
from .checkpoints._save import CheckpointError, latest_checkpoint
from .loggers._jsonl import FILE as JSONL_FILE
from .loggers._jsonl import read_records

__all__ = ["TrainResult", "train", "evaluate", "build_model"]


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a training run produced.

    Attributes:
        step: the step the model is at (the last step trained, or the step it resumed at).
        steps_trained: how many steps this call trained (fewer than ``step`` after a resume,
            0 when the run had already reached its end).
        metrics: every test metric of the final model (``loss``, the task's, the config's):
            after the last step, or of the weights a callback restored (``early_stopping``'s
            ``restore_best``). The model is chosen on the validation split; the test split is
            evaluated at the end.
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
    return build(model_config(load_train_config(config)), rngs=nnx.Rngs(seed_key(seed)))


def trained_model(config: Any, directory: str | os.PathLike[str]) -> Any:
    """The model a run of ``config`` trains, filled from the checkpoint in ``directory``.

    It is built abstractly (`nnx_core.eval_shape`): the checkpoint gives every value, so no
    initializer runs, nor compiles (``nnx eval``, ``nnx predict``, ``nnx generate`` and the
    exports start from it).

    Raises:
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
    """
    model = nnx.eval_shape(lambda: build_model(config))
    load(directory, into=model)
    return model


# -- the run -------------------------------------------------------------------------------------
@with_compile_cache
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
    compile_cache: bool = True,
) -> TrainResult:
    """Train the model a config describes; see the module docstring.

    Args:
        config: a config file path, mapping or `Config` with a ``model`` section and optional
            ``task``, ``data``, ``metrics``, ``optimizer``, ``train``, ``checkpoint``,
            ``loggers`` and ``callbacks`` sections.
        run_dir: where logs, the plot and checkpoints go (default ``runs/<config name>``, or
            ``runs/<config name>-N`` when that already holds another run's checkpoints).
        resume: continue from the newest checkpoint in the run's checkpoint directory.
        mesh: the axis sizes, e.g. ``{"fsdp": 8}`` or ``{"data": 2, "fsdp": 2, "model": 2}``
            (the axes ``data``, ``fsdp``, ``model``), or a `jax.sharding.Mesh`; default: the
            config's ``mesh`` section, else one device (several processes: ``data`` over all
            devices). The batch is split over ``data`` and ``fsdp``, every Variable as its
            logical axis names and the config's ``sharding_rules`` say (docs/multi-device.md);
            the model and optimizer are created directly sharded, and what each device holds
            is printed, and checked against its memory, before the first step.
        progress: show a progress bar (process 0 only).
        console: a `rich.console.Console` for the evaluation and resume lines; by default
            stdout while the progress bar is shown, and nowhere when ``progress=False``.
        stop_at: stop after this step (as a preempted job would), checkpointing it.
        allow_large: train even when the memory estimate (Variables, gradients and optimizer
            state, from an abstract build; over a mesh, each device's share and the compiled
            step's peak) exceeds the memory available.
        compile_cache: keep the compiled programs on disk and load those a run compiled
            before (``NNX_CACHE_DIR``; see `nnx_plugins.training._compile_cache`).

    Returns:
        A `TrainResult`.

    Raises:
        ConfigError: the config is invalid; a layer cannot take its input or the output does
            not fit the task (reported at the layer); a metric the task cannot feed; a value
            a callback watches that the run does not report; a parameter the sharding rules
            cannot split (its path, shape and the mesh axis named) or rules that conflict; or
            the run needs more memory than is available and ``allow_large`` is False.
        DataError: the data cannot be read or does not fit the task (located at ``data``).
        CheckpointError: ``resume`` found a checkpoint that does not fit (the model, or the
            data: e.g. another character vocabulary).
        TrainingDivergedError: the loss became NaN or infinite (the step and the last
            checkpoint named).
        RunError: ``run_dir`` is a file, holds checkpoints but ``resume`` is False, is used by
            another run, cannot be written (a full disk, no permission); or the ``mesh`` names
            an unknown axis, does not fit the devices (of every process) or the batch.
    """
    started = time.perf_counter()
    config = load_train_config(config)
    check_data_path(config)
    parts = assemble(config)
    plan = make_plan(config, parts, choose_run_dir(config, run_dir, resume))
    layout = run_layout(config, mesh)
    plan.mesh, plan.layout = (None, None) if layout is None else (layout.mesh, layout)
    place = batch_placer(plan.mesh, plan.rows)
    main = jax.process_index() == 0
    if not main:  # (process 0 reports for all)
        progress, console = False, None
    if layout is None:
        check = preflight(model_config(config), parts.info, parts.task, allow_large=allow_large)
    else:  # (the memory: each device's share, by measure_layout below)
        check = check_on_data(model_config(config), parts.info, parts.task)
    check_parts(config, parts, check.output)
    check_trainable(config, check.state)  # (before the run directory is touched)
    plan.steps = steps_of(plan)
    if layout is not None:  # (each device's share, the step's peak: before anything is allocated)
        memory = measure_layout(plan, layout, allow_large=allow_large)
    created = main and not os.path.lexists(plan.run_dir)
    with RunLock(plan.run_dir) if main else contextlib.nullcontext():
        sync("nnx-run-directory")  # (the others wait until process 0 holds the directory)
        check_new_run(plan.run_dir, plan.ckpt_dir, resume)
        try:
            if not resume:  # (a resumed run's, once its checkpoint is found to fit)
                _save_resolved_config(config, plan.run_dir, main)
            model, optimizer = setup(plan, layout, variables=len(list(check.state.flat_state())))
        except BaseException:  # (refused before a step, e.g. by checkpoint.init_from)
            if created:
                remove_unstarted(plan.run_dir)
            raise
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
            parts.call(callback, "start", run)
        with Progress(progress, plan.total, 0, console) as bar:
            run.printer = bar.print
            if layout is not None:
                bar.print(memory_line(memory))
            start = resume_run(plan, run, bar) if resume else 0
            if resume:
                _save_resolved_config(config, plan.run_dir, main)
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
    plan: Plan, run: Run, span: tuple[int, int], place: Any, bar: Progress
) -> tuple[Any, dict[str, float]]:
    """Open the loggers, run the steps of ``span``, end the run; the last checkpoint and the
    final test metrics."""
    loggers = plan.parts.loggers if run.is_main else []
    run.records = read_records(plan.run_dir / JSONL_FILE, start=span[0]) if run.is_main else []
    opened: list[Any] = []
    try:
        for logger in loggers:
            plan.parts.call(logger, "open", plan.run_dir, span[0])
            opened.append(logger)
        bar.update(span[0], float("nan"), 0.0)
        checkpoint = _loop(plan, run, span, place, (loggers, bar))
        run.finished = run.stopped_by is not None or run.step == plan.total
        metrics = _final(plan, run, span, loggers, bar)
        if run.step > span[0]:  # (the final checkpoint: after the callbacks' end)
            checkpoint = _final_checkpoint(plan, run, bar) or checkpoint
        if run.is_main:
            main_metric = next(iter(plan.parts.metrics), None)
            plot_metrics(run.records, plan.run_dir / "metrics.png", metric=main_metric)
    finally:
        _close(plan, opened, failing=sys.exc_info()[0] is not None)
    return checkpoint, metrics


def _close(plan: Plan, loggers: list[Any], *, failing: bool) -> None:
    """Close every logger; while the run is failing already, a logger that fails to close
    does not hide why."""
    for logger in loggers:
        try:
            plan.parts.call(logger, "close")
        except Exception:
            if not failing:
                raise


def _final(
    plan: Plan, run: Run, span: tuple[int, int], loggers: list[Any], bar: Progress
) -> dict[str, float]:
    """End the run (the callbacks' ``end``) and give its final test metrics.

    When this call trained the run to its end (the last step, or a callback stopped it), the
    test splits the last evaluation lacked are evaluated and logged, and so is the model's
    again when a callback restored an earlier step's weights (the record says which:
    ``restored_step``). Otherwise (``stop_at``, or nothing left to train) the test metrics are
    computed for the result only: the log stays that of an uninterrupted run.
    """
    parts = plan.parts
    results = dict(run.results) if run.results_step == run.step else {}
    if run.step > span[0]:  # (a run resumed with nothing left ended in its first session)
        for callback in parts.callbacks:
            parts.call(callback, "end", run)
    if not (run.finished and run.step > span[0]):
        if "test" in results and run.restored_step is None:
            return results["test"]
        return _evaluated(plan, run.model, "test")
    extra, restored = parts.models("evaluated"), run.restored_step
    for split in [s for s in parts.splits(final=True) if s.startswith("test")]:
        again = split == "test" and restored is not None
        if split in results and not again:
            continue
        name = split.partition("_")[2]
        results[split] = _evaluated(plan, extra[name] if name else run.model, "test")
        marked = {"restored_step": restored} if again else {}
        _log(plan, run, loggers, {"step": run.step, "split": split, **marked, **results[split]})
        shown = restored if again else None
        bar.print(evaluation_line(run.step, plan.total, split, results[split], weights_of=shown))
    run.results, run.results_step = results, run.step
    return results["test"]


def _evaluated(plan: Plan, model: Any, split: str) -> dict[str, float]:
    rows = eval_batch_size(plan.parts.info, plan.config.sections["train"].batch_size)
    return evaluate_model(model, plan.parts, plan.steps, rows, mesh=plan.mesh, split=split)


def _final_checkpoint(plan: Plan, run: Run, bar: Progress) -> pathlib.Path | None:
    """The checkpoint of the run's last step (with the callbacks' state after ``end``); not
    written over the best checkpoint of that step when a callback restored other weights."""
    if run.restored_step is not None and run.saved == run.step:
        bar.print(
            f"note: step {run.step}'s checkpoint is the best by checkpoint.keep_best and keeps "
            f"that step's weights; the weights of step {run.restored_step}, restored at the end, "
            "are the returned model's."
        )
        return None
    return save_checkpoint(plan, run, run.results if run.results_step == run.step else {})


def _log(plan: Plan, run: Run, loggers: list[Any], record: dict[str, Any]) -> None:
    run.records.append(record)
    for logger in loggers:
        plan.parts.call(logger, "write", record)


def _save_resolved_config(config: Any, run_dir: pathlib.Path, main: bool) -> None:
    """``config.yaml`` in the run directory: the resolved config (includes, overrides and
    interpolations applied, defaults filled in); ``nnx train config.yaml`` reproduces the run."""
    if main:
        try:
            write_whole(run_dir / "config.yaml", config.to_yaml().encode("utf-8"))
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
    plan: Plan, run: Run, span: tuple[int, int], place: Any, out: tuple[list[Any], Progress]
) -> pathlib.Path | None:
    loggers, bar = out
    section = plan.config.sections["train"]
    checkpoint = latest_checkpoint(plan.ckpt_dir)
    window, bad = _Window(), first_bad_step(plan.mesh)
    run.model.train()
    for step in range(span[0] + 1, span[1] + 1):
        check_stop()  # (a SIGTERM or Ctrl-C whose own raise was lost: see nnx_plugins._stopping)
        fed = time.perf_counter()
        batch = place(plan.parts.train_batch(step - 1, plan.rows, section.seed))
        window.feeding += time.perf_counter() - fed
        with plan.stepping():
            loss, values, bad = plan.steps.train(
                run.model, run.optimizer, batch, bad, np.int32(step)
            )
        run.step = step
        window.losses.append(loss)
        window.values.append(values)
        for callback in plan.parts.callbacks:
            plan.parts.call(callback, "after_step", run, step)
        if step % section.log_interval == 0 or step == plan.total:
            check_bad_step(plan, bad)
            record = window.record(step, plan.rows)
            _log(plan, run, loggers, record)
            bar.update(step, record["loss"], record["examples_per_second"])
        if step % plan.eval_every == 0 or step == plan.total:  # (the last step's: the final)
            check_bad_step(plan, bad)
            evaluating = time.perf_counter()
            if _evaluate_during(plan, run, loggers, bar, final=step == plan.total):
                return _stop_early(plan, run)
            window.started += time.perf_counter() - evaluating  # (the rate counts steps only)
            run.model.train()
        saved = run.saved == step  # (keep_best wrote this step's checkpoint already)
        if plan.ckpt_every and step % plan.ckpt_every == 0 and step != span[1] and not saved:
            check_bad_step(plan, bad)
            checkpoint = save_checkpoint(plan, run)
    check_bad_step(plan, bad)
    return checkpoint


def _evaluate_during(
    plan: Plan, run: Run, loggers: list[Any], bar: Progress, *, final: bool
) -> bool:
    """Evaluate every model on the splits of this evaluation (`Parts.splits`), log it, keep
    the best checkpoint, ask the callbacks; whether one stops the run."""
    extra = plan.parts.models("evaluated")
    results = {}
    for split in plan.parts.splits(final=final):
        base, _, name = split.partition("_")
        results[split] = _evaluated(plan, extra[name] if name else run.model, base)
        _log(plan, run, loggers, {"step": run.step, "split": split, **results[split]})
        bar.print(evaluation_line(run.step, plan.total, split, results[split]))
    run.results, run.results_step = results, run.step
    if keep_best(plan, run, results) is not None:
        run.saved = run.step
    stop = False
    for callback, name in zip(plan.parts.callbacks, plan.parts.callback_names):
        if plan.parts.stops(callback, run, results) and not stop:
            stop, run.stopped_by = True, name
    return stop


def _stop_early(plan: Plan, run: Run) -> pathlib.Path | None:
    """The run ends here: a callback stopped it (its final checkpoint is written by the run)."""
    return latest_checkpoint(plan.ckpt_dir)


@with_compile_cache
def evaluate(
    config: Any, checkpoint: str | os.PathLike[str], *, compile_cache: bool = True
) -> dict[str, Any]:
    """The test metrics of a checkpoint on the config's data.

    The model is built from the config's ``model`` section and filled from ``checkpoint`` (a
    checkpoint directory, or a directory of ``step_N`` checkpoints: the newest is used);
    ``compile_cache`` as for `train`.

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
        problem = parts.call(parts.data, "check_state", facts["data"])
        if problem:
            raise CheckpointError(manifest["directory"], [f"data: {problem}"])
    model = trained_model(config, manifest["directory"])
    plan = Plan(config, parts, 0, 1, None, pathlib.Path(), pathlib.Path(), 1)
    rows = eval_batch_size(parts.info, config.sections["train"].batch_size)
    metrics = evaluate_model(model, parts, steps_of(plan), rows)
    return {"step": manifest.get("step"), **metrics, "checkpoint": manifest["directory"]}

"""Training from a config: one jitted train step, periodic evaluation, checkpoints and logs.

`train` builds the model from the config's ``model`` section, the optax optimizer from
``optimizer``, reads ``data``, and runs ``train.steps`` (or ``train.epochs``) steps of
softmax cross-entropy classification. The batch of step ``s`` is a pure function of
``(train.seed, s)`` and every piece of state (parameters, BatchNorm statistics, Rng counts,
optimizer moments) is checkpointed, so ``resume=True`` continues to exactly the parameters an
uninterrupted run reaches. The run directory receives ``config.yaml`` (the resolved config),
``metrics.jsonl``, ``metrics.png`` and ``checkpoints/step_N``.

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
import jax.numpy as jnp
import numpy as np
import optax

import nnx_core as nnx

from .._text import os_problem
from ..config._build import build
from ._checkpoint import latest_checkpoint, rotate, save, step_directory
from ._checkpoint_load import load
from ._checkpoint_manifest import read_manifest
from ._collectives import sync
from ._config import check_data_path, load_train_config
from ._data import Dataset, load_dataset
from ._memory import trainable_kinds
from ._mesh import batch_placer, make_mesh, replicate_unplaced, shard_over
from ._metrics import MetricsLog, Progress, plot_metrics
from ._preflight import preflight
from ._run_dir import RunError, RunLock, check_new_run, choose_run_dir

__all__ = ["TrainResult", "train", "evaluate", "evaluate_model"]

_EVAL_CHUNK = 1024


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a training run produced.

    Attributes:
        step: the step the model is at (the last step trained, or the step it resumed at).
        steps_trained: how many steps this call trained (fewer than ``step`` after a resume,
            0 when the run had already reached its end).
        test_accuracy, test_loss: metrics on the test split after the last step.
        run_dir: where ``metrics.jsonl``, ``metrics.png`` and ``checkpoints/`` are.
        checkpoint: the last checkpoint written (``None`` if none).
        seconds: wall time of the run, compilation included.
        model, optimizer: the trained objects.
    """

    step: int
    steps_trained: int
    test_accuracy: float
    test_loss: float
    run_dir: pathlib.Path
    checkpoint: pathlib.Path | None
    seconds: float
    model: Any = dataclasses.field(repr=False)
    optimizer: Any = dataclasses.field(repr=False)


# -- the jitted steps --------------------------------------------------------------------------
def _steps() -> tuple[Any, Any]:

    def loss_fn(model: Any, x: Any, y: Any) -> Any:
        logits = model(x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

    @nnx.jit
    def train_step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
        grad_fn = nnx.value_and_grad(loss_fn, has_aux=True, wrt=optimizer.wrt)
        (loss, logits), grads = grad_fn(model, x, y)
        optimizer.update(model, grads)
        return loss, jnp.mean(jnp.argmax(logits, -1) == y)

    @nnx.jit
    def eval_step(model: Any, x: Any, y: Any) -> Any:
        logits = model(x)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        return losses.sum(), jnp.sum(jnp.argmax(logits, -1) == y)

    return train_step, eval_step


_STEPS: tuple[Any, Any] | None = None


def _jitted() -> tuple[Any, Any]:
    global _STEPS
    if _STEPS is None:
        _STEPS = _steps()
    return _STEPS


def evaluate_model(model: Any, data: Dataset) -> dict[str, float]:
    """Test loss and accuracy of ``model`` (in eval mode) on ``data``'s test split."""
    _, eval_step = _jitted()
    model.eval()
    total_loss, correct = 0.0, 0
    for start in range(0, len(data.x_test), _EVAL_CHUNK):
        x = data.x_test[start : start + _EVAL_CHUNK]
        y = data.y_test[start : start + _EVAL_CHUNK]
        loss, hits = eval_step(model, x, y)
        total_loss += float(loss)
        correct += int(hits)
    count = max(len(data.x_test), 1)
    return {"loss": total_loss / count, "accuracy": correct / count}


# -- the run ---------------------------------------------------------------------------------
@dataclasses.dataclass
class _Plan:
    config: Any
    data: Dataset
    total: int
    eval_every: int
    ckpt_every: int | None
    ckpt_dir: pathlib.Path
    run_dir: pathlib.Path


def _plan(config: Any, run_dir: pathlib.Path) -> _Plan:
    sections = config.sections
    data = load_dataset(sections["data"])
    per_epoch = data.steps_per_epoch(sections["train"].batch_size)
    train_section = sections["train"]
    total = train_section.steps or per_epoch * (train_section.epochs or 10)
    ckpt_dir = run_dir / sections["checkpoint"].dir
    return _Plan(
        config,
        data,
        total,
        train_section.eval_interval or per_epoch,
        sections["checkpoint"].interval,
        ckpt_dir,
        run_dir,
    )


def _setup(plan: _Plan, mesh: Any) -> tuple[Any, Any]:

    sections = plan.config.sections
    model = build(plan.config, rngs=nnx.Rngs(sections["train"].seed))
    if mesh is not None:
        shard_over(model, mesh)
    optimizer = nnx.Optimizer(
        model, sections["optimizer"].make(), wrt=trainable_kinds(sections["optimizer"].trainable)
    )
    if mesh is not None:
        replicate_unplaced(optimizer, mesh)
    return model, optimizer


def _resume(plan: _Plan, model: Any, optimizer: Any, progress: Progress) -> int:
    latest = latest_checkpoint(plan.ckpt_dir)
    if latest is None:
        progress.print(f"no checkpoint in {plan.ckpt_dir}: starting from step 0")
        return 0
    load(latest, into=model, optimizer=optimizer)
    manifest = read_manifest(latest)
    step = int(manifest["step"] or 0)
    progress.print(f"resumed from {latest} (step {step})")
    saved = manifest.get("config") or {}
    now = plan.config.to_dict()
    changed = [k for k in ("model", "optimizer", "data") if k in saved and saved[k] != now.get(k)]
    if changed:
        progress.print(
            f"note: the {', '.join(changed)} section(s) differ from the checkpoint's config; "
            "the run continues with the new ones and will not match an uninterrupted run."
        )
    return step


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
            ``optimizer``, ``data``, ``train`` and ``checkpoint`` sections.
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
        ConfigError: the config is invalid, a layer cannot take its input or the output is not
            logits for the data's classes (reported at the layer), or the run needs more
            memory than is available and ``allow_large`` is False.
        DataError: a data file cannot be read.
        CheckpointError: ``resume`` found a checkpoint that does not fit.
        RunError: ``run_dir`` is a file, holds checkpoints but ``resume`` is False, is used by
            another run, cannot be written (a full disk, no permission); or the ``mesh`` does
            not fit the devices (of every process) or the batch.
    """
    started = time.perf_counter()
    config = load_train_config(config)
    check_data_path(config)
    plan = _plan(config, choose_run_dir(config, run_dir, resume))
    if mesh is None and jax.process_count() > 1:  # (several processes: one data-parallel mesh)
        mesh = {"data": jax.device_count()}
    if isinstance(mesh, Mapping):
        mesh = make_mesh(mesh)
    place = batch_placer(mesh, config.sections["train"].batch_size)
    if not _is_main_process():  # (process 0 reports for all)
        progress, console = False, None
    preflight(config, plan.data, allow_large=allow_large)  # (before anything is written)
    with RunLock(plan.run_dir) if _is_main_process() else contextlib.nullcontext():
        sync("nnx-run-directory")  # (the others wait until process 0 holds the directory)
        check_new_run(plan.run_dir, plan.ckpt_dir, resume)
        _save_resolved_config(config, plan.run_dir)
        model, optimizer = _setup(plan, mesh)
        with Progress(progress, plan.total, 0, console) as bar:
            start = _resume(plan, model, optimizer, bar) if resume else 0
            # (a checkpoint past stop_at or the total: nothing left to train)
            end = max(plan.total if stop_at is None else min(stop_at, plan.total), start)
            log = MetricsLog(plan.run_dir / "metrics.jsonl", start, writes=_is_main_process())
            bar.update(start, float("nan"), 0.0)
            checkpoint = _loop(plan, (model, optimizer), (start, end), place, log, bar)
            metrics = evaluate_model(model, plan.data)
        logged = any(r["step"] == end and r.get("split") == "test" for r in log.records)
        if end == plan.total and not logged:  # (a stopped run's log is an uninterrupted run's)
            log.write({"step": end, "split": "test", **metrics})
        if _is_main_process():
            plot_metrics(log.records, plan.run_dir / "metrics.png")
    return TrainResult(
        end,
        end - start,
        metrics["accuracy"],
        metrics["loss"],
        plan.run_dir,
        checkpoint,
        time.perf_counter() - started,
        model,
        optimizer,
    )


def _save_resolved_config(config: Any, run_dir: pathlib.Path) -> None:
    """``config.yaml`` in the run directory: the resolved config (includes, overrides and
    interpolations applied, defaults filled in); ``nnx train config.yaml`` reproduces the run."""
    if _is_main_process():
        temporary = run_dir / ".config.yaml.tmp"
        try:
            temporary.write_text(config.to_yaml(), encoding="utf-8")
            os.replace(temporary, run_dir / "config.yaml")
        except OSError as error:
            raise RunError(
                f"cannot write {run_dir / 'config.yaml'}: {os_problem(error)}. Free space or "
                "fix permissions, or choose another --run-dir."
            ) from error


def _loop(
    plan: _Plan,
    objects: tuple[Any, Any],
    span: tuple[int, int],
    place: Any,
    log: MetricsLog,
    bar: Progress,
) -> pathlib.Path | None:
    model, optimizer = objects
    train_step, _ = _jitted()
    section = plan.config.sections["train"]
    keep = plan.config.sections["checkpoint"].keep
    losses, accuracies = [], []
    window_start, checkpoint = time.perf_counter(), latest_checkpoint(plan.ckpt_dir)
    model.train()
    for step in range(span[0] + 1, span[1] + 1):
        x, y = place(*plan.data.batch(step - 1, section.batch_size, section.seed))
        loss, accuracy = train_step(model, optimizer, x, y)
        losses.append(loss)
        accuracies.append(accuracy)
        if step % section.log_interval == 0 or step == plan.total:
            now = time.perf_counter()
            mean_loss = float(np.mean([float(v) for v in losses]))
            rate = len(losses) * section.batch_size / max(now - window_start, 1e-9)
            log.write(
                {
                    "step": step,
                    "split": "train",
                    "loss": mean_loss,
                    "accuracy": float(np.mean([float(v) for v in accuracies])),
                    "examples_per_second": rate,
                }
            )
            bar.update(step, mean_loss, rate)
            losses, accuracies, window_start = [], [], now
        if step % plan.eval_every == 0 and step != plan.total:  # (the last: by train())
            metrics = evaluate_model(model, plan.data)
            model.train()
            log.write({"step": step, "split": "test", **metrics})
            bar.print(
                f"step {step:>6}/{plan.total}  test loss {metrics['loss']:.4f}  "
                f"accuracy {metrics['accuracy']:.2%}"
            )
        if (plan.ckpt_every and step % plan.ckpt_every == 0) or step == span[1]:
            checkpoint = step_directory(plan.ckpt_dir, step)
            # (every process writes its part; process 0 commits, then rotates)
            save(model, checkpoint, optimizer=optimizer, config=plan.config, step=step)
            if _is_main_process():
                rotate(plan.ckpt_dir, keep)
    return checkpoint


def _is_main_process() -> bool:

    return jax.process_index() == 0


def evaluate(config: Any, checkpoint: str | os.PathLike[str]) -> dict[str, Any]:
    """Test loss and accuracy of a checkpoint on the config's data.

    The model is built from the config's ``model`` section and filled from ``checkpoint`` (a
    checkpoint directory, or a directory of ``step_N`` checkpoints: the newest is used).

    Returns:
        ``{"step": ..., "loss": ..., "accuracy": ..., "checkpoint": ...}``.

    Raises:
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
    """

    config = load_train_config(config)
    check_data_path(config)
    data = load_dataset(config.sections["data"])
    manifest = read_manifest(checkpoint)
    model = build(config, rngs=nnx.Rngs(0))
    load(manifest["directory"], into=model)
    metrics = evaluate_model(model, data)
    return {"step": manifest.get("step"), **metrics, "checkpoint": manifest["directory"]}

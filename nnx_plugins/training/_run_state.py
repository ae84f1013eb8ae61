"""What a run keeps across a stop: resuming from a checkpoint (model, optimizer, the callbacks'
Modules and state, the data's state checked), writing checkpoints (never a non-finite state),
the best checkpoint, and the error of a run whose loss stopped being finite.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import numpy as np

from .._errors import NnxError
from ._assembly import Parts
from ._plan import Plan
from ._progress import Progress
from ._run import Run
from ._steps import all_finite
from .checkpoints._best import BEST_FILE, improves, read_best, write_best
from .checkpoints._load import load
from .checkpoints._manifest import read_manifest
from .checkpoints._save import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    rotate,
    save,
    step_directory,
)

__all__ = ["TrainingDivergedError", "resume", "save_checkpoint", "keep_best", "check_bad_step"]


class TrainingDivergedError(NnxError):
    """The loss (or the state to checkpoint) became NaN or infinite; ``.step`` is the first
    step where it did and ``.checkpoint`` the last (finite) checkpoint, if any."""

    def __init__(self, message: str, *, step: int, checkpoint: pathlib.Path | None):
        super().__init__(message)
        self.step, self.checkpoint = step, checkpoint


def resume(plan: Plan, run: Run, bar: Progress) -> int:
    latest = latest_checkpoint(plan.ckpt_dir)
    if latest is None:
        bar.print(f"no checkpoint in {plan.ckpt_dir}: starting from step 0")
        return 0
    try:
        manifest = read_manifest(latest)
    except CheckpointError as error:
        raise _with_way_back(error, plan, latest) from None
    facts = manifest.get("run") or {}
    if "data" in facts:
        problem = plan.parts.call(plan.parts.data, "check_state", facts["data"])
        if problem:
            raise CheckpointError(latest, [f"data: {problem}"])
    nodes = plan.parts.models("nodes")
    held = {name for name in nodes if any(k.startswith(name + "/") for k in manifest["entries"])}
    for name in sorted(set(nodes) - held):
        bar.print(f"note: {latest} has no {name} state; it starts from the current weights.")
    saved, now = manifest.get("config") or {}, plan.config.to_dict()
    saved = saved if isinstance(saved, dict) else {}
    changed = [
        k for k in ("model", "optimizer", "data", "task") if k in saved and saved[k] != now.get(k)
    ]
    try:
        load(latest, into=run.model, optimizer=run.optimizer, extra={n: nodes[n] for n in held})
    except CheckpointError as error:
        if changed:  # (not a damaged checkpoint: another config)
            raise _under_another_config(error, saved, now, changed) from None
        raise _with_way_back(error, plan, latest) from None
    _restore_callbacks(plan.parts, facts.get("callbacks"))
    step = int(manifest["step"] or 0)
    stopped = facts.get("stopped_by")
    run.stopped_by = stopped if isinstance(stopped, str) else None
    bar.print(f"resumed from {latest} (step {step})")
    _note_another_best(plan, bar)
    if changed:
        bar.print(
            f"note: the {', '.join(changed)} section(s) differ from the checkpoint's config; "
            "the run continues with the new ones and will not match an uninterrupted run."
        )
    return step


SHOWN_PROBLEMS = 5
"""The problems of a checkpoint written under another config shown (the rest counted)."""


def _under_another_config(
    error: CheckpointError, saved: dict[str, Any], now: dict[str, Any], changed: list[str]
) -> CheckpointError:
    """``error`` of a checkpoint that does not fit because the config changed: the first
    change named first, the problems it caused cut to `SHOWN_PROBLEMS`."""
    section = changed[0]
    path, before, after = _first_change(saved[section], now.get(section), section)
    rest = len(error.problems) - SHOWN_PROBLEMS
    return CheckpointError(
        error.directory,
        [
            f"this config's {', '.join(changed)} section(s) differ from the config the run's "
            f"checkpoints were written with ({path}: {before!r} in the run's, {after!r} in "
            "this one), and the checkpoint does not fit the new ones. A run resumes under its "
            "own config: put the run's values back (its config.yaml has them), or train into a "
            "new --run-dir (checkpoint.init_from starts one from this checkpoint's weights).",
            *error.problems[:SHOWN_PROBLEMS],
            *([f"... and {rest} more"] if rest > 0 else []),
        ],
    )


def _first_change(saved: Any, now: Any, path: str) -> tuple[str, Any, Any]:
    """The dotted path of the first value that differs between ``saved`` and ``now`` (both
    at ``path``), and the two values there."""
    while isinstance(saved, dict) and isinstance(now, dict):
        keys = [k for k in dict.fromkeys([*saved, *now]) if saved.get(k) != now.get(k)]
        if not keys:
            break
        path, saved, now = f"{path}.{keys[0]}", saved.get(keys[0]), now.get(keys[0])
    return path, saved, now


def _with_way_back(error: CheckpointError, plan: Plan, latest: pathlib.Path) -> CheckpointError:
    """``error`` of the newest checkpoint, with how to resume from the one before it (a run
    resumes from the newest: "load an earlier one" alone cannot be followed)."""
    earlier = [found for found in list_checkpoints(plan.ckpt_dir) if found != latest]
    if not earlier:
        return error
    return CheckpointError(
        error.directory,
        [
            *error.problems,
            f"--resume continues from the newest checkpoint. If this one is damaged, rename "
            f"it (mv {latest} {latest}.damaged: a step_N name only is taken) and run again "
            f"with --resume: it continues from {earlier[-1].name}.",
        ],
    )


def _note_another_best(plan: Plan, bar: Progress) -> None:
    """Say so when ``best.json`` was chosen by another metric or mode than this run's."""
    rule = plan.config.sections["checkpoint"].keep_best
    if rule is None:
        return
    found = read_best(plan.ckpt_dir)
    if found is not None and (found.get("metric"), found.get("mode")) != (rule.metric, rule.mode):
        bar.print(
            f"note: {plan.ckpt_dir / BEST_FILE} chose step {found['step']} by "
            f"{found.get('metric')} ({found.get('mode')}); this run keeps the best by "
            f"{rule.metric} ({rule.mode}), chosen anew from its next evaluations."
        )


def _callback_states(parts: Parts) -> list[dict[str, Any]]:
    return [
        {"type": name, "state": _json(parts, callback, parts.call(callback, "state"))}
        for callback, name in zip(parts.callbacks, parts.callback_names)
    ]


def _json(parts: Parts, part: Any, state: Any) -> Any:
    """A part's ``state()`` (``{}`` for ``None``) if JSON can hold it, as a checkpoint must."""
    state = {} if state is None else state
    try:
        json.dumps(state)
    except (TypeError, ValueError, RecursionError) as error:
        raise parts.label(part).error(
            f"gave a state() that JSON cannot hold ({type(error).__name__}: {error}); state() "
            "returns plain numbers, strings, lists and dicts."
        ) from None
    return state


def _restore_callbacks(parts: Parts, saved: Any) -> None:
    """Each callback's saved state, matched by position and registered name."""
    records = saved if isinstance(saved, list) else []
    for callback, name, record in zip(parts.callbacks, parts.callback_names, records):
        if isinstance(record, dict) and record.get("type") == name:
            state = record.get("state")
            parts.call(callback, "restore", state if isinstance(state, dict) else {})


def _diverged(plan: Plan, step: int, what: str) -> TrainingDivergedError:
    last = latest_checkpoint(plan.ckpt_dir)
    where = (
        f"the last checkpoint, {last}, is finite: continue from it with --resume"
        if last
        else "no checkpoint was written before it: train again"
    )
    return TrainingDivergedError(
        f"training stopped: {what} at step {step}; {where} after lowering the learning rate "
        "(optimizer.learning_rate), adding clip_grad_norm, or fixing the data.",
        step=step,
        checkpoint=last,
    )


def check_bad_step(plan: Plan, bad: Any) -> None:
    step = int(bad)  # (a host sync: only where the loop syncs anyway)
    if step:
        raise _diverged(plan, step, "the loss became NaN or infinite")


def save_checkpoint(plan: Plan, run: Run, metrics: dict[str, Any] | None = None) -> pathlib.Path:
    step = run.step
    if not all_finite(run.model, run.optimizer):
        raise _diverged(plan, step, "the weights or optimizer state hold NaN or infinite values")
    directory = step_directory(plan.ckpt_dir, step)
    facts = {
        "data": _json(plan.parts, plan.parts.data, plan.parts.call(plan.parts.data, "state")),
        "callbacks": _callback_states(plan.parts),
        "stopped_by": run.stopped_by,
        "metrics": metrics or {},
    }
    extra = plan.parts.models("nodes")
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


def keep_best(plan: Plan, run: Run, results: dict[str, dict[str, float]]) -> pathlib.Path | None:
    rule = plan.config.sections["checkpoint"].keep_best
    if rule is None:
        return None
    split, _, key = rule.metric.partition(".")
    if key not in results.get(split, {}):
        return None
    value = results[split][key]
    best = read_best(plan.ckpt_dir, metric=rule.metric, mode=rule.mode) if run.is_main else None
    if run.is_main and not improves(value, best["value"] if best else None, rule.mode):
        value = float("nan")  # (not better: no checkpoint)
    value = float(_shared(value))
    if value != value:
        return None
    directory = save_checkpoint(plan, run, {split: results[split]})
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

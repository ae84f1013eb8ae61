"""``checkpoint.init_from``: a run that starts from the weights of a checkpoint (fine-tuning).

The freshly built model is filled from the checkpoint before its optimizer is made, so the
optimizer starts from those weights. Every Variable of the model must be in the checkpoint
with its shape, dtype and kind, except `LoRAParam` adapters (new adapters on pretrained
weights start as built: ``lora_b`` zeros, so they change nothing at step 0); an entry the model
does not have is an error too. A run that resumes starts from its own checkpoint instead.

Example:
    >>> import pathlib, tempfile
    >>> import numpy as np
    >>> import nnx_plugins
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> base = {"type": "Linear", "in_features": 64, "out_features": 10}
    >>> pretrained = nnx_plugins.save(nnx_plugins.build(base), folder / "pretrained")
    >>> result = nnx_plugins.train({
    ...     "model": {**base, "type": "LoRALinear", "lora_rank": 2},
    ...     "data": {"type": "digits", "layout": "flat"},
    ...     "optimizer": {"type": "adam", "learning_rate": 0.01, "trainable": ["LoRAParam"]},
    ...     "train": {"steps": 5, "batch_size": 32},
    ...     "checkpoint": {"init_from": str(pretrained)}}, run_dir=folder / "run", progress=False)
    >>> kernel = nnx_plugins.load(pretrained).kernel.value
    >>> bool(np.array_equal(result.model.kernel.value, kernel))  # only the adapters trained
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

import nnx_core as nnx
from nnx_layers import LoRAParam

from .checkpoints._load import load
from .checkpoints._manifest import read_manifest
from .checkpoints._save import CheckpointError, latest_checkpoint

__all__ = ["initialize", "start_from", "check_init_from"]


def start_from(plan: Any, model: Any, optimizer: Any) -> Any:
    """Fill ``model`` from ``checkpoint.init_from`` (`initialize`) and return the optimizer
    made anew from those weights (an optimizer's state may start from them), each array where
    ``optimizer``'s was (a run over a mesh keeps its layout); ``optimizer`` itself otherwise."""
    if not initialize(plan, model):
        return optimizer
    if plan.layout is None:
        return nnx.Optimizer(model, optimizer.tx, wrt=optimizer.wrt)
    graphdef, state = nnx.split(optimizer)
    shardings = jax.tree.map(lambda x: x.sharding, state)
    model_graph, model_state = nnx.split(model)

    def fresh(weights: Any) -> Any:
        again = nnx.Optimizer(nnx.merge(model_graph, weights), optimizer.tx, wrt=optimizer.wrt)
        return nnx.split(again)[1]

    return nnx.merge(graphdef, jax.jit(fresh, out_shardings=shardings)(model_state))


def initialize(plan: Any, model: Any) -> bool:
    """Fill ``model`` from the run's ``checkpoint.init_from``, if it names one and the run has
    no checkpoint of its own yet (then it resumes from that); whether it did.

    Raises:
        CheckpointError: the checkpoint is missing or corrupt, lacks a Variable of the model
            other than a `LoRAParam`, holds one the model does not have, or one of another
            shape, dtype or kind; the first line locates ``checkpoint.init_from`` in the
            config.
    """
    init_from = plan.config.sections["checkpoint"].init_from
    if init_from is None or latest_checkpoint(plan.ckpt_dir) is not None:
        return False
    _fill(plan.config, plan.parts, model)
    return True


def check_init_from(config: Any, parts: Any, make: Callable[[], Any]) -> None:
    """What `initialize` checks of ``config``'s ``checkpoint.init_from``, for ``nnx config
    validate``: the model ``make`` builds (``(model, optimizer)``, as the run's constructor),
    built abstractly, is filled from the checkpoint, whose tensors are read and checked (their
    checksums) as the run reads them, then dropped. Nothing when it names none.

    Raises:
        CheckpointError: as `initialize`.
    """
    if config.sections["checkpoint"].init_from is not None:
        _fill(config, parts, nnx.eval_shape(make)[0])


def _fill(config: Any, parts: Any, model: Any) -> None:
    """Fill ``model`` from ``checkpoint.init_from`` (see `initialize`)."""
    init_from = config.sections["checkpoint"].init_from
    where = _located(config, ("checkpoint", "init_from"))
    try:
        _check_data(parts, read_manifest(init_from), where)
        load(init_from, into=model, allow_missing=LoRAParam)
    except _DataDiffers as differs:
        raise CheckpointError(differs.directory, differs.problems, action="start from") from None
    except CheckpointError as error:
        first = (
            f"{where}the run starts from this checkpoint's weights: it must hold every "
            "Variable of the model but LoRAParam adapters (they start fresh)."
        )
        raise CheckpointError(
            error.directory, [first, *error.problems], action="start from"
        ) from None


class _DataDiffers(CheckpointError):
    """`_check_data`'s refusal (located already)."""


def _check_data(parts: Any, manifest: dict[str, Any], where: str) -> None:
    """Refuse a checkpoint trained on token ids that mean other tokens than this run's data
    gives (another tokenizer, or none: the data's ``check_state`` of the checkpoint's record),
    as a resume does."""
    saved = (manifest.get("run") or {}).get("data")
    if not isinstance(saved, dict):
        return
    problem = parts.call(parts.data, "check_state", saved)
    if problem:
        raise _DataDiffers(
            manifest["directory"],
            [f"{where}the run starts from this checkpoint's weights, but {problem}"],
        )


def _located(config: Any, path: tuple[str, ...]) -> str:
    """``config.yaml:12:3: checkpoint.init_from: `` (the prefix of a `Problem`'s line)."""
    problem = str(config.problem(path, "|"))
    return problem[: -len("|")] if problem.endswith("|") else ""

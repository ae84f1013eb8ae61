"""The `Callback` interface: what happens around the steps of a run.

A callback is a class whose ``__init__`` arguments are its config (``callbacks: [{type: NAME,
...}]``). Every hook has a default, so a callback defines only those it needs:

- ``start(run)`` before the first step (after the model and optimizer exist, before a resume
  loads them: a callback's `nodes` must exist by then);
- ``after_step(run, step)`` after each step, on the host: it must not wait for the device
  (dispatch jitted work, never read a value);
- ``after_eval(run, step, results) -> bool`` after each evaluation, the run's last included
  (``results`` maps each split evaluated, ``val`` and ``val_<model>``, and ``test`` and
  ``test_<model>`` at the end or when a test value is watched, to its values); ``True`` stops
  the run;
- ``end(run)`` after the last step trained (``run.finished``: for good), before the final
  checkpoint; a callback that puts an earlier step's weights back sets ``run.restored_step``;
- ``state()`` / ``restore(state)``: JSON-able state saved in each checkpoint;
- ``nodes()``: Modules saved in each checkpoint beside the model (``{"ema": averaged}``);
- ``evaluated()``: more models evaluated at each evaluation, by name (splits ``val_<name>``,
  ``test_<name>``);
- ``watches()``: the reported values it reads, by argument name (``{"metric": "val.loss"}``),
  checked against what the run reports before training.

``run`` is the run's `Run` (docs/callbacks.md lists what it holds and what may be changed).

Example:
    >>> from nnx_plugins.training.callbacks._base import Callback
    >>> class StopAtOnce(Callback):
    ...     def after_eval(self, run, step, results):
    ...         return True
    >>> StopAtOnce().after_eval(None, 10, {}), StopAtOnce().nodes()
    (True, {})
"""

from __future__ import annotations

from typing import Any

__all__ = ["Callback"]


class Callback:
    """Base class of callbacks; every hook does nothing by default."""

    def start(self, run: Any) -> None:
        """Before the first step."""

    def after_step(self, run: Any, step: int) -> None:
        """After each step (host side, without waiting for the device)."""

    def after_eval(self, run: Any, step: int, results: dict[str, dict[str, float]]) -> bool:
        """After each evaluation; return ``True`` to stop the run."""
        return False

    def end(self, run: Any) -> None:
        """After the last step, before the final checkpoint."""

    def state(self) -> dict[str, Any]:
        """JSON-able state saved with each checkpoint."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        """Take back what `state` returned (on a resume)."""

    def nodes(self) -> dict[str, Any]:
        """Modules saved with each checkpoint, by name."""
        return {}

    def evaluated(self) -> dict[str, Any]:
        """More models evaluated at each evaluation, by name."""
        return {}

    def watches(self) -> dict[str, str]:
        """The reported values (``split.key``) it reads, by the argument that names them."""
        return {}

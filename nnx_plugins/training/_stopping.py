"""A stop that a signal asked for, kept until the training loop's next step.

A signal handler raises in whatever the main thread runs at that moment. Inside a garbage
collector callback (jax registers one) or a ``__del__``, Python prints the exception as
"ignored" and goes on, so a run told to stop by SIGTERM would train on to its end (1 stop in
12 under load, before this module). A handler therefore also records the stop here with
`request`, and the loop raises it at its next step with `raise_requested`.

Example:
    >>> from nnx_plugins.training import _stopping
    >>> _stopping.request(KeyboardInterrupt("SIGTERM"))
    >>> try:
    ...     _stopping.raise_requested()
    ... except KeyboardInterrupt as stop:
    ...     print("stopped:", stop)
    stopped: SIGTERM
    >>> _stopping.raise_requested()  # (once: nothing is pending now)
"""

from __future__ import annotations

__all__ = ["request", "raise_requested", "is_requested", "clear"]

_requested: list[BaseException] = []


def request(stop: BaseException) -> None:
    """Record ``stop`` (from a signal handler, in the main thread) for the loop to raise."""
    _requested[:] = [stop]


def raise_requested() -> None:
    """Raise the recorded stop, once; nothing when none is recorded."""
    if _requested:
        raise _requested.pop()


def is_requested(stop: BaseException) -> bool:
    """Whether ``stop`` is the recorded one, not raised yet (a raise Python reports as lost)."""
    return any(stop is pending for pending in _requested)


def clear() -> None:
    """Forget a recorded stop (the handler's own raise reached the run, or the run ended)."""
    _requested.clear()

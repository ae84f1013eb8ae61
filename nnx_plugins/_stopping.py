"""Ctrl-C and SIGTERM in the commands that write (``nnx train``, ``nnx import hf``, ``nnx
export``): a run stopped with its checkpoints intact, an output whole or absent, one line said,
exit 130 or 143.

`stop_on_signals` (the commands wrap their work in it) makes SIGTERM raise `Terminated` as
Ctrl-C raises `KeyboardInterrupt`, so that a command stopped by either cleans up on the way out
(SIGTERM's default ended the process at once, leaving a ``.DST.tmp-*`` folder beside ``DST``).
Inside it:

- A stop is also recorded. Raised inside a garbage-collector callback (jax registers one) or a
  ``__del__``, Python prints the exception as "ignored" and goes on: a run trained on to its
  end (1 SIGTERM in 12 under load), an import or export exited 0 after a traceback. Such a lost
  stop (or one whose handler runs as the unraisable hook begins to report another exception)
  is not printed; it is raised again in the main thread a moment later
  (`_thread.interrupt_main`), and `check` (the training loop calls it at each step, an import
  between tensors and before its output is published) raises it if it is still pending.
- `shielded` steps (creating a temporary output, publishing it, removing it) are not broken by
  a stop: one that arrives meanwhile is raised when the step ends, so a rename and the
  bookkeeping of what it made happen together and a second Ctrl-C cannot leave a temporary
  output half removed. The import and export commands import jax shielded too: a stop raised
  inside jaxlib's native start aborted the process (SIGABRT or SIGSEGV, no word said).
- `published` records an output put in place, so that a command says whether its output is
  complete (a stop that came after it was put in place) or absent.

Outside `stop_on_signals` (the Python API), `check` and `shielded` do nothing: Ctrl-C raises
`KeyboardInterrupt` wherever it lands, as usual.

Example:
    >>> from nnx_plugins._stopping import check, shielded, stop_message
    >>> with shielded():
    ...     check()                    # (outside the commands: nothing pending, nothing done)
    >>> stop_message(KeyboardInterrupt(), "import", "tiny", complete=False)
    ('nnx: interrupted: nothing was written (tiny is as it was; the import writes its output whole or not at all). Run the same command again to import.', 130)
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = [
    "Terminated",
    "stop_on_signals",
    "check",
    "shielded",
    "published",
    "was_published",
    "pending",
    "stop_message",
    "stopped_how",
]

_REDELIVER_SECONDS = 0.05
_REDELIVER_TIMES = 20


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised in the main thread as Ctrl-C's `KeyboardInterrupt` is."""


class _State:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.active = False
        self.pending: KeyboardInterrupt | None = None  # the first stop asked for
        self.signum: int = signal.SIGINT
        self.deferred = False  # a stop arrived inside a shielded step
        self.depth = 0  # how many shielded steps are running
        self.quiet = False  # the stop is being reported: more signals change nothing
        self.raised: list[BaseException] = []  # the stops the handler raised
        self.lost = False  # a raise was lost and nothing raised the stop since
        self.redelivered = 0
        self.published: set[str] = set()


_state = _State()


def _handler(signum: int, frame: Any) -> None:
    stop = Terminated("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()
    if _state.pending is None:
        _state.pending, _state.signum = stop, signum
    if _state.quiet:
        return
    if _state.depth or (frame is not None and frame.f_code is _SHIELD_ENTRY):
        _state.deferred = True
        return
    if frame is not None and frame.f_code is _HOOK_CODE:
        # (raised in the hook itself, as it reports another unraisable exception, the stop
        # was printed as "Exception ignored in sys.unraisablehook" and lost with no word)
        _lose()
        return
    _state.raised.append(stop)
    _state.lost = False
    raise stop


def _lose() -> None:
    """The stop's raise was lost: raise it again in the main thread a moment later."""
    if _state.redelivered < _REDELIVER_TIMES and not _state.quiet:
        _state.lost = True
        _state.redelivered += 1
        timer = threading.Timer(_REDELIVER_SECONDS, _redeliver, (_state.signum,))
        timer.daemon = True
        timer.start()


def _unraisable(previous: Any) -> Any:
    """A `sys.unraisablehook` that keeps quiet about a stop lost in a garbage-collector
    callback or a ``__del__``, and raises it again a moment later, outside that callback."""

    def hook(unraisable: Any) -> None:
        if not any(unraisable.exc_value is stop for stop in _state.raised):
            previous(unraisable)
            return
        _lose()

    return hook


_HOOK_CODE = _unraisable(None).__code__


def _redeliver(signum: int) -> None:
    # (not when `check` raised the stop meanwhile: the command is unwinding, its clean-up
    # must not be broken by a second one)
    if _state.active and _state.lost and not _state.quiet:
        _thread.interrupt_main(signal.Signals(signum))


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside the block, SIGTERM raises `Terminated` and Ctrl-C `KeyboardInterrupt` (each only
    where Python's default is in place: an ignored SIGINT, as a background job has it, stays
    ignored), recorded for `check`; handlers restored after. Only in the main thread."""
    if threading.current_thread() is not threading.main_thread() or _state.active:
        yield
        return
    _state.reset()
    taken = {}
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        taken[signal.SIGTERM] = signal.signal(signal.SIGTERM, _handler)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        taken[signal.SIGINT] = signal.signal(signal.SIGINT, _handler)
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(hook)
    _state.active = bool(taken)
    try:
        yield
    finally:
        _state.quiet = True
        for signum, previous in taken.items():
            signal.signal(signum, previous)
        sys.unraisablehook = hook
        _state.reset()


def check() -> None:
    """Raise the stop a signal asked for, if one is pending (its own raise was lost)."""
    if _state.active and _state.pending is not None and not _state.quiet:
        _state.lost = False
        raise _state.pending


class shielded:  # noqa: N801 - used as a function: ``with shielded():``
    """A step no stop breaks: one asked for meanwhile is raised when the step ends.

    The step begins as the object is made, not when the ``with`` enters it: a stop handled
    between the two (at the end of the call that made it), or at the start of ``__init__``
    itself, before the count of running steps goes up (`_handler` checks the frame), would
    otherwise be raised outside the step. As a `contextlib.contextmanager`, a second Ctrl-C
    raised in contextlib's own helper, before the step began, skipped a ``finally:``'s
    removal of a temporary output (5 runs in 100 of Ctrl-C then SIGTERM). Use it only as
    ``with shielded():``.
    """

    __slots__ = ()

    def __init__(self) -> None:
        _state.depth += 1  # (first: nothing before it can run a signal handler)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *error: object) -> None:
        _state.depth -= 1
        if not _state.depth and _state.deferred and not _state.quiet:
            _state.deferred = False
            assert _state.pending is not None
            _state.raised.append(_state.pending)
            raise _state.pending


_SHIELD_ENTRY = shielded.__init__.__code__
"""The code of `shielded.__init__`: a stop handled at its start is inside the step."""


def published(path: str | os.PathLike[str]) -> None:
    """Record that ``path`` was put in place whole (for `stop_message`)."""
    _state.published.add(os.path.abspath(path))


def was_published(path: str | os.PathLike[str]) -> bool:
    return os.path.abspath(path) in _state.published


def stop_message(
    stop: BaseException, what: str, out: Any, *, complete: bool, noun: str | None = None
) -> tuple[str, int]:
    """The line a stopped ``what`` (``import``, ``export``, ``predict``: ``noun`` when the
    verb is not one, as ``prediction``) says, and its exit status (130 for Ctrl-C, 143 for
    SIGTERM); from now on more signals change nothing."""
    _state.quiet = True
    how, status = stopped_how(stop)
    if complete:
        text = f"nnx: {how} after {out} was written whole; it is complete."
    else:
        text = (
            f"nnx: {how}: nothing was written ({out} is as it was; the {noun or what} writes its "
            f"output whole or not at all). Run the same command again to {what}."
        )
    return text, status


def stopped_how(stop: BaseException) -> tuple[str, int]:
    """How a command says ``stop`` ended it, and its exit status: ``("interrupted", 130)`` for
    Ctrl-C, ``("stopped by SIGTERM", 143)`` for `Terminated` (as a shell reports the signals).

    Example:
        >>> from nnx_plugins._stopping import Terminated, stopped_how
        >>> stopped_how(KeyboardInterrupt()), stopped_how(Terminated())
        (('interrupted', 130), ('stopped by SIGTERM', 143))
    """
    if isinstance(stop, Terminated):
        return "stopped by SIGTERM", 128 + signal.SIGTERM
    return "interrupted", 130


def pending() -> KeyboardInterrupt | None:
    """The stop a signal asked for inside `stop_on_signals`, if any (an error that followed
    it, e.g. a library's wrapping of the interrupt, is reported as the stop)."""
    return _state.pending if _state.active else None

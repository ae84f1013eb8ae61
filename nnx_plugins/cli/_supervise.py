"""A process of a multi-process run, watched by a small parent that reports how it ended.

In a multi-process run, JAX's runtime may end a process natively, with no Python code left to
run: when another process dies in the middle of a collective, gloo (JAX's CPU collectives) can
read the dead process's last bytes as the next operation's and abort the survivor
(``gloo::EnforceNotMet ... op.preamble.length <= op.nbytes``, SIGABRT); the out-of-memory killer
ends a process with SIGKILL. The user would see a C++ message and a shell's ``Aborted``.

`supervise` forks before JAX starts (nothing of JAX's runtime exists yet, so the fork is safe):
the child runs the command as it would have run; the parent only waits and forwards the signals
it is sent (SIGINT, SIGTERM, SIGHUP) to the child. When the child ends by a signal, the parent
names the process, the signal and what to do, and exits with status 1 (or 128 + the signal's
number when it is one the command was sent: then nothing went wrong in JAX). The child dies with its
parent (``PR_SET_PDEATHSIG`` on Linux, a watcher thread elsewhere), so killing the command kills
the run, as before.

Example:
    >>> import signal
    >>> from nnx_plugins.cli._supervise import explain_signal
    >>> explain_signal(signal.SIGABRT)[:40]
    "JAX's runtime ended it with SIGABRT (its"
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TextIO

__all__ = ["supervise", "explain_signal"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # (linux/prctl.h)
_RESUME = (
    "Every checkpoint is committed only after all processes wrote their part, so the newest one "
    "is complete: start all processes again with --resume."
)


def supervise(work: Callable[[], int], label: str, *, stream: TextIO | None = None) -> int:
    """Run ``work`` in a forked child and return its exit status (1, explained, after a signal).

    Where ``os.fork`` does not exist, ``work`` runs in this process. Call it before JAX starts
    a backend, from a process with one thread.

    Args:
        work: the command; returns the exit status.
        label: how messages name this process (``"process 1 of 2"``).
        stream: where the explanation of a native end goes (default stderr).
    """
    if not hasattr(os, "fork"):  # pragma: no cover - Windows
        return work()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child (its coverage is not collected)
        _run_child(work, parent)
    return _wait(child, label, stream or sys.stderr)


def _run_child(work: Callable[[], int], parent: int) -> None:
    """Run ``work`` and leave the interpreter with its status, never returning to the caller."""
    code = 1
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # (a terminal's Ctrl-C reaches the parent, which forwards it once)
        _die_with(parent)
        code = work()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - the command reports its own errors; this is a bug
        traceback.print_exc()
    finally:
        try:  # (no atexit handlers: the command leaves JAX's runtime itself, as the watcher does)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _die_with(parent: int) -> None:
    """End this process when ``parent`` ends (killed, even by SIGKILL)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent:  # (it ended before the request was made)
                os._exit(1)
            return
    except (OSError, AttributeError):  # not Linux: watch the parent instead
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="nnx-parent", daemon=True).start()


def _wait(child: int, label: str, stream: TextIO) -> int:
    """Wait for ``child``, forwarding signals; its exit status, or 1 with the reason."""

    forwarded: set[int] = set()

    def forward(signum: int, frame: object) -> None:
        forwarded.add(signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    previous = {signum: signal.signal(signum, forward) for signum in _FORWARDED}
    try:
        _, status = os.waitpid(child, 0)  # (retried after a forwarded signal: PEP 475)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    signum = os.WTERMSIG(status)
    if signum in forwarded:  # (the command itself was sent it: not JAX's doing)
        name = signal.Signals(signum).name
        print(f"nnx: {label}: stopped by {name}, sent to this command. {_RESUME}", file=stream)
        return 128 + signum
    print(f"nnx: error: {label}: {explain_signal(signum)} {_RESUME}", file=stream)
    return 1


def explain_signal(signum: int) -> str:
    """Why a process ended by ``signum``, in words.

    Example:
        >>> import signal
        >>> from nnx_plugins.cli._supervise import explain_signal
        >>> explain_signal(signal.SIGKILL)
        'it was killed (SIGKILL: out of memory, or ended by a user or a scheduler).'
    """
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else signum
    if signum == signal.SIGKILL:
        return f"it was killed ({name}: out of memory, or ended by a user or a scheduler)."
    return (
        f"JAX's runtime ended it with {name} (its own message, if any, is above). In a "
        "multi-process run this follows the end of another process in the middle of a "
        "collective, or a network failure; the other processes say which."
    )

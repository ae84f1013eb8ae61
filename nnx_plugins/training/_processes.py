"""Several processes, one run: joining them with `jax.distributed`, and stopping them all when
one of them fails.

JAX's multi-process runtime is the engine. `ProcessGroup` calls `jax.distributed.initialize`
(with the collectives that work across processes on CPU, gloo) and then watches the others
through JAX's coordination service, the one that `initialize` starts in process 0:

- a process that raises publishes its error there before it leaves; every other process prints
  it, naming the failed process, and exits at once (they would otherwise wait forever in the
  next collective);
- a process that vanishes (killed, out of memory, crashed) stops sending heartbeats; after
  ``heartbeat_timeout`` seconds the others name it and exit the same way;
- at the end, every process waits for the others before disconnecting, so that process 0 (which
  hosts the coordination service) leaves last.

The watcher is a daemon thread polling the service every ``poll_seconds``; nothing else about the
run changes. Checkpoints need nothing more: a checkpoint is committed only after every process
wrote its part, so the newest one is complete whenever a run stops.

Example:
    >>> from nnx_plugins.training._processes import ProcessGroup
    >>> group = ProcessGroup(coordinator="10.0.0.1:1234", num_processes=2, process_id=1)
    >>> group.label()
    'process 1 of 2'
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, TextIO

import jax
from jax._src import distributed as _jax_distributed  # (the coordination service's client)

from ._address import address_problem, resolve_problem, split_address
from ._run_dir import RunError

__all__ = ["ProcessGroup", "HEARTBEAT_TIMEOUT"]

HEARTBEAT_TIMEOUT = 100
"""Seconds without a heartbeat after which a process counts as dead (JAX's default)."""

_FAILED = "nnx/failed/"  # + process index: that process's error
_FINISHED = "nnx/finished/"  # + process index: that process completed its run
_STOPPED = "stopped by "  # a published failure that was a stop (Ctrl-C, SIGTERM), not an error
_FINISH_TIMEOUT = 600  # seconds a finished process waits for the others to finish
_LEAVE_TIMEOUT = 30  # seconds process 0 waits for the others to disconnect
_SHUTDOWN_TIMEOUT = 120  # seconds to leave the run when every process finished
_FAILED_SHUTDOWN_TIMEOUT = 10  # seconds to leave the run when a process failed


class ProcessGroup:
    """This process's membership in a multi-process run (a context manager).

    ``with ProcessGroup(...)`` joins the run (`jax.distributed.initialize`) and watches the other
    processes until the block ends; use it before anything touches a JAX device. Arguments left
    ``None`` are read by JAX from the environment (``JAX_COORDINATOR_ADDRESS``, Slurm, Open MPI,
    Kubernetes, Cloud TPU).

    Args:
        coordinator: ``HOST:PORT`` of process 0 (where JAX's coordination service listens).
        num_processes: how many processes take part.
        process_id: this process's index, ``0 <= process_id < num_processes``.
        heartbeat_timeout: seconds of silence after which a process counts as dead.
        poll_seconds: how often the other processes' state is read.
        stream: where a failure of another process is reported (default stderr).

    Raises:
        RunError: joining failed (the arguments are missing or inconsistent, or the coordinator
            cannot be reached), or the others did not finish within 10 minutes of this one.
    """

    def __init__(
        self,
        *,
        coordinator: str | None = None,
        num_processes: int | None = None,
        process_id: int | None = None,
        heartbeat_timeout: int = HEARTBEAT_TIMEOUT,
        poll_seconds: float = 0.25,
        stream: TextIO | None = None,
    ):
        self.coordinator = coordinator
        self.num_processes = num_processes
        self.process_id = process_id
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_seconds = poll_seconds
        self.stream = stream
        self._client: Any = None
        self._lock = threading.Lock()
        self._closing = False
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def label(self) -> str:
        """``"process I of N"``: how messages name this process."""
        return f"process {self.process_id} of {self.num_processes}"

    @property
    def joined(self) -> bool:
        """Whether this process has joined the run (``with`` entered successfully)."""
        return self._client is not None

    # -- joining ---------------------------------------------------------------------------
    def __enter__(self) -> ProcessGroup:
        self._check_coordinator()
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # (without it JAX aborts every process when one dies, with no word from nnx)
        jax.config.update("jax_enable_recoverability", True)
        # (its preemption notifier takes SIGTERM for itself: a run would train on to the end)
        jax.config.update("jax_enable_preemption_service", False)
        on_sigterm = signal.getsignal(signal.SIGTERM)
        try:
            jax.distributed.initialize(
                coordinator_address=self.coordinator,
                num_processes=self.num_processes,
                process_id=self.process_id,
                heartbeat_timeout_seconds=self.heartbeat_timeout,
            )
        except (ValueError, TypeError, RuntimeError) as error:
            raise RunError(self._join_problem(error)) from None
        finally:
            _take_back(signal.SIGTERM, on_sigterm)
        self.num_processes, self.process_id = jax.process_count(), jax.process_index()
        self._client = _jax_distributed.global_state.client
        self._watcher = threading.Thread(target=self._watch, name="nnx-processes", daemon=True)
        self._watcher.start()
        return self

    def _check_coordinator(self) -> None:
        """Refuse a coordinator address JAX would crash or hang on, before JAX sees it."""
        given = self.coordinator
        where = "--coordinator"
        if given is None:
            given, where = os.environ.get("JAX_COORDINATOR_ADDRESS"), "JAX_COORDINATOR_ADDRESS"
        if given is None:
            return
        problem = address_problem(given)
        if problem is None:
            problem = resolve_problem(*split_address(given))
        if problem is not None:
            raise RunError(
                f"cannot join a multi-process run: {where} {given[:80]!r} is not process 0's "
                f"HOST:PORT: {problem}."
            )

    def _join_problem(self, error: BaseException) -> str:
        given = (
            f"--coordinator {self.coordinator}, --num-processes {self.num_processes}, "
            f"--process-id {self.process_id}"
        )
        lines = str(error).strip().splitlines()
        text = lines[0].rstrip(".") if lines else type(error).__name__
        if isinstance(error, ValueError) and "defined" in str(error):
            return (
                f"cannot join a multi-process run ({given}): {text}. JAX found none in the "
                "environment either (JAX_COORDINATOR_ADDRESS, Slurm, Open MPI, Kubernetes, Cloud "
                "TPU). Give all three: --coordinator HOST:PORT --num-processes N --process-id I."
            )
        return (
            f"cannot join a multi-process run ({given}): {text}. Start every process with the "
            "same --coordinator (process 0's host and a free port) and --num-processes, each with "
            "its own --process-id, before anything else uses JAX."
        )

    # -- leaving -----------------------------------------------------------------------------
    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        if self._client is None:
            return
        if error is None:
            self._finish()
        else:
            self._fail(error)
        if self._stopping.is_set():  # another process failed: the watcher ends this one
            threading.Event().wait()

    def _finish(self) -> None:
        """Wait for every process to finish, then disconnect (process 0 last)."""
        self._client.key_value_set(f"{_FINISHED}{self.process_id}", "1")
        try:
            self._client.wait_at_barrier("nnx/finished", _FINISH_TIMEOUT * 1000)
        except Exception as error:  # noqa: BLE001 - a JaxRuntimeError from the service
            self._close()
            raise RunError(
                f"{self.label()} finished, but the others did not within {_FINISH_TIMEOUT} s "
                f"({str(error).splitlines()[0]}). Its checkpoints are complete; check the "
                "other processes' logs."
            ) from None
        self._close()

    def _fail(self, error: BaseException) -> None:
        """Tell the others why this process stops, then disconnect.

        If another process failed first, this error is most likely a consequence (a collective
        cut short): the first failure is reported instead, as the watcher would.
        """
        first = self._other_failure()
        if first is not None:
            self._stop(first)
            return
        with self._lock:
            if self._closing:
                return
            self._closing = True
        if isinstance(error, KeyboardInterrupt):  # (Ctrl-C, or SIGTERM: see the command)
            reason = f"{_STOPPED}{error or 'SIGINT'}"
        else:
            reason = f"{type(error).__name__}: {error}"[:4000]
        try:
            self._client.key_value_set(f"{_FAILED}{self.process_id}", reason)
        except Exception:  # noqa: BLE001 - the service is gone: the others notice by themselves
            pass
        self._disconnect(patience=_FAILED_SHUTDOWN_TIMEOUT)

    def _close(self) -> None:
        with self._lock:
            self._closing = True
        self._disconnect()

    def _disconnect(self, *, patience: float = _SHUTDOWN_TIMEOUT) -> None:
        """Leave the run; process 0 hosts the service, so it waits for the others to leave.

        The watcher ends first: a thread still inside a call to the service when the
        interpreter exits aborts the process (Python ends such threads in the middle of the C++
        call), so nothing may be left calling the service once this returns.
        """
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=_LEAVE_TIMEOUT)  # (it sees _closing after one poll)
        if self.process_id == 0:
            others = set(range(1, self.num_processes))
            deadline = time.monotonic() + _LEAVE_TIMEOUT
            while others and time.monotonic() < deadline:
                try:
                    others &= set(self._client.get_live_nodes(list(range(self.num_processes))))
                except Exception:  # noqa: BLE001 - nobody left to wait for
                    break
                time.sleep(0.05)
        leaving = threading.Thread(target=jax.distributed.shutdown, daemon=True)
        leaving.start()
        leaving.join(timeout=patience)  # (a thread: it may hang when another process died)

    # -- watching the others -----------------------------------------------------------------
    def _watch(self) -> None:
        while not self._closing:
            time.sleep(self.poll_seconds)
            first = self._other_failure()
            if first is not None:
                self._stop(first)
                return

    def _other_failure(self) -> str | None:
        """What went wrong in another process, or None while all of them are fine."""
        everyone = list(range(self.num_processes))
        try:
            live = set(self._client.get_live_nodes(everyone))
            failed = self._published(_FAILED)
            if set(everyone) - live:  # (read again: it may have said why just before leaving)
                failed = self._published(_FAILED)
            finished = self._published(_FINISHED)
        except Exception as error:  # noqa: BLE001 - the coordination service is unreachable
            return (
                f"process 0 of {self.num_processes} (the coordinator, {self.coordinator}) "
                f"cannot be reached: it stopped or the network failed "
                f"({str(error).strip().splitlines()[0]})"
            )
        failed.pop(self.process_id, None)
        gone = [p for p in everyone if p not in live and p not in finished]
        if failed:
            first = min(failed)
            if failed[first].startswith(_STOPPED):
                how = failed[first][len(_STOPPED) :]
                return f"process {first} of {self.num_processes} was stopped ({how})"
            return f"process {first} of {self.num_processes} failed: {failed[first]}"
        if gone:
            names = ", ".join(f"process {p}" for p in gone)
            return (
                f"{names} of {self.num_processes} stopped without a word (killed, out of "
                f"memory or crashed: no heartbeat for {self.heartbeat_timeout} s)"
            )
        return None

    def _published(self, prefix: str) -> dict[int, str]:
        return {
            int(key.rsplit("/", 1)[1]): value
            for key, value in self._client.key_value_dir_get(prefix)
        }

    def _stop(self, reason: str) -> None:
        """Another process failed: say so, leave the run and end this process."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._stopping.set()
        error = RunError(
            f"{reason}\nnnx: stopping {self.label()} as well. Every checkpoint is committed only "
            "after all processes wrote their part, so the newest one is complete: start all "
            "processes again with --resume."
        )
        stream = self.stream or sys.stderr
        print(f"nnx: error: {error}", file=stream, flush=True)
        self._disconnect(patience=_FAILED_SHUTDOWN_TIMEOUT)
        sys.stdout.flush()
        os._exit(1)


def _take_back(signum: int, handler: Any) -> None:
    """Install ``handler`` for ``signum`` again, over whatever native code installed since
    (Python's record of the handler does not see a handler set outside Python)."""
    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signum, handler)

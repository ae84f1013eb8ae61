"""At most one step in flight for programs that run over several CPU devices.

XLA:CPU runs a program over N host devices (``--xla_force_host_platform_device_count``) as N
tasks that meet in an in-process rendezvous at each collective (the all-reduce of a gradient
over a data-parallel mesh) and abort the process if one of them has not arrived within 40
seconds. ``jit`` dispatches asynchronously, so a training loop whose Python side is faster than
the step queues step after step; on a busy machine with few cores the queued tasks of many
steps compete for the same threads, and a participant starved for 40 s aborts the run ("Expected
8 threads to join the rendezvous, but only 7 of them arrived on time"). A plain ``jax.jit``
loop with donated buffers aborts the same way (6 of 9 runs of flax's data-parallel toy example,
written in plain JAX, under three concurrent copies on 2 cores); flax.nnx's default ``jit`` does
not only because its per-call Python cost keeps the queue short.

So before it dispatches a step over several CPU devices, ``jit`` waits until the previous step's
outputs (this step's inputs) are ready: one step runs while Python prepares the next, and the
queue never grows. Accelerators and single-device programs are left alone: no wait at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax


def multi_device_cpu(values: Sequence[Any]) -> Any:
    """The first array of ``values`` spread over several CPU devices, or None."""
    for x in values:
        if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
            devices = x.sharding.device_set
            if len(devices) > 1 and getattr(next(iter(devices)), "platform", None) == "cpu":
                return x
    return None


def wait_for_previous(values: Sequence[Any]) -> None:
    """Block until the multi-device CPU array among ``values`` (a previous step's output) is
    ready; nothing to wait for elsewhere."""
    x = multi_device_cpu(values)
    if x is not None and not x.is_deleted():
        x.block_until_ready()

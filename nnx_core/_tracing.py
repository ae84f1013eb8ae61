"""Which JAX trace an object was created under, for tracer-leak checks.

JAX does not expose the current trace publicly; this is the one place that reads it, so a
change in JAX's internals is a one-file fix.
"""

from __future__ import annotations

from typing import Any

from jax import core as _core

try:  # jax >= 0.4.36
    from jax._src.core import trace_ctx as _trace_ctx

    def current_trace() -> Any:
        """Return a token identifying the innermost active JAX trace (comparable with ``==``)."""
        return _trace_ctx.trace._weakref

except ImportError:  # pragma: no cover - older jax

    def current_trace() -> Any:
        return None


Tracer = _core.Tracer


class TraceContextError(RuntimeError):
    """A Variable or Module was changed from a JAX trace other than the one that owns it.

    This is what a leaked tracer looks like: e.g. a Module captured by closure inside ``jax.jit``
    instead of being passed as an argument, or an intermediate value stored on an object that
    outlives the transform.
    """


def is_tracer(value: Any) -> bool:
    return isinstance(value, Tracer)

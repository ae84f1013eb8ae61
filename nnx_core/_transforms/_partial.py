"""``cached_partial`` and ``jit_partial``: flax.nnx's opt-in fast paths, for code written
against flax. Here the default ``jit`` already caches the flattening of its Module arguments
(while their structure is unchanged), so both are thin: a partial application, and a ``jit``
plus a partial application.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ._jit import jit


def cached_partial(f: Callable[..., Any], *cached_args: Any) -> Callable[..., Any]:
    """``f`` with its first positional arguments fixed to ``cached_args``.

    In flax.nnx this caches the graph traversal of the Modules in ``cached_args``. Every
    ``nnx_core.jit`` call already reuses that traversal while their structure is unchanged,
    and notices when it changes, so this is ``functools.partial``: the arguments stay live
    objects (state changes and structural changes are seen by every call).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Counter(nnx.Module):
        ...     def __init__(self): self.n = nnx.BatchStat(jnp.array(0))
        >>> @nnx.jit
        ... def step(c, k):
        ...     c.n.value = c.n.value + k
        ...     return c.n.value
        >>> c = Counter(); bumped = nnx.cached_partial(step, c)
        >>> int(bumped(2)), int(bumped(3)), int(c.n.value)
        (2, 5, 5)
    """
    return functools.partial(f, *cached_args)


def jit_partial(
    fun: Callable[..., Any],
    *partial_args: Any,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    **jit_kwargs: Any,
) -> Callable[..., Any]:
    """``jit(fun, ...)`` with its first positional arguments fixed to ``partial_args``.

    The options are those of :func:`jit` and count positions in the full argument list
    (``partial_args`` first), as in flax.nnx. State changes reach the objects in
    ``partial_args``.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> import nnx_core as nnx
        >>> from nnx_layers import Linear
        >>> model = Linear(2, 1, rngs=nnx.Rngs(0))
        >>> opt = nnx.Optimizer(model, optax.sgd(0.1))
        >>> def train_step(model, opt, x, y):
        ...     loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        ...     opt.update(model, grads)
        ...     return loss
        >>> step = nnx.jit_partial(train_step, model, opt, donate_argnums=(0, 1))
        >>> x, y = jnp.ones((4, 2)), jnp.zeros((4, 1))
        >>> first = float(step(x, y))
        >>> for _ in range(20):
        ...     loss = step(x, y)
        >>> bool(loss < first), int(opt.step.value)
        (True, 21)
    """
    jitted = jit(
        fun,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        **jit_kwargs,
    )
    return cached_partial(jitted, *partial_args)

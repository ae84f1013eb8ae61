"""Creating a run's model and optimizer directly sharded: nothing is ever whole on one device.

The constructor runs once abstractly (`nnx_core.eval_shape`: shapes, dtypes and logical axis
names, nothing allocated), the `Layout` gives every Variable its sharding, and the constructor
runs again under ``jax.jit`` with those output shardings, so each device computes only its own
blocks of every parameter and optimizer moment (with several processes, each process only its
own devices' blocks). The values are those of an eager build up to rounding (see
`create_local`): JAX's random numbers do not depend on how an array is split.

Example:
    >>> import optax
    >>> import nnx_core as nnx
    >>> from nnx_layers import Linear
    >>> from nnx_plugins.training._layout import Layout
    >>> from nnx_plugins.training._mesh import make_mesh
    >>> from nnx_plugins.training._sharded import create_sharded
    >>> def make():
    ...     model = Linear(4, 8, rngs=nnx.Rngs(0))
    ...     return model, nnx.Optimizer(model, optax.adam(1e-3))
    >>> model, optimizer = create_sharded(make, Layout.of(make_mesh({"data": 1}), {}))
    >>> tuple(model.kernel.value.sharding.spec), model.kernel.value.shape
    ((), (4, 8))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

import nnx_core as nnx

from ..config._build import build
from ._layout import Layout
from ._memory import trainable_kinds
from ._precision import model_config
from ._seed import seed_key

__all__ = ["constructor", "create_sharded", "create_local", "abstract_sharded"]


def constructor(config: Any) -> Callable[[], tuple[Any, Any]]:
    """The function building a run's ``(model, optimizer)`` from its config (``train.seed``,
    ``train.precision``, the ``optimizer`` section and what it trains)."""
    sections = config.sections
    kinds = trainable_kinds(sections["optimizer"].trainable)
    tx = sections["optimizer"].make()
    model_section = model_config(config)
    seed = sections["train"].seed

    def make() -> tuple[Any, Any]:
        model = build(model_section, rngs=nnx.Rngs(seed_key(seed)))
        return model, nnx.Optimizer(model, tx, wrt=kinds)

    return make


def abstract_sharded(make: Callable[[], Any], layout: Layout) -> tuple[Any, Any]:
    """``(abstract, shardings)``: what ``make`` builds, run abstractly (Modules holding
    ``jax.ShapeDtypeStruct`` values that carry their sharding), and the State of shardings.

    Raises:
        LayoutError: a Variable cannot be laid out (see `Layout.specs`).
    """
    abstract = nnx.eval_shape(make)
    graphdef, state = nnx.split(abstract)
    shardings = layout.shardings(state)
    placed = jax.tree.map(
        lambda struct, sharding: jax.ShapeDtypeStruct(
            struct.shape, struct.dtype, sharding=sharding
        ),
        state,
        shardings,
    )
    return nnx.merge(graphdef, placed), shardings


def create_sharded(make: Callable[[], Any], layout: Layout) -> Any:
    """What ``make`` returns (Modules, e.g. ``(model, optimizer)``), each array created on the
    devices ``layout`` gives it.

    Raises:
        LayoutError: a Variable cannot be laid out (see `Layout.specs`).
    """
    graphdef, state = nnx.split(nnx.eval_shape(make))
    shardings = layout.shardings(state)

    def build_state() -> Any:
        return nnx.split(make())[1]

    return nnx.merge(graphdef, jax.jit(build_state, out_shardings=shardings)())


def create_local(make: Callable[[], Any]) -> Any:
    """What ``make`` returns, built on the default device by one compiled program.

    An eager build runs each initializer as programs of its own (a random key, a truncated
    normal, a scale: 20-30 small programs for a small CNN), each traced, compiled and, in a
    second run, looked up in the compile cache; one program does this once. The values are an
    eager build's.

    Example:
        >>> import nnx_core as nnx
        >>> from nnx_layers import Linear
        >>> from nnx_plugins.training._sharded import create_local
        >>> model = create_local(lambda: Linear(4, 8, rngs=nnx.Rngs(0)))
        >>> bool((model.kernel.value == Linear(4, 8, rngs=nnx.Rngs(0)).kernel.value).all())
        True
    """
    graphdefs = []

    def build_state() -> Any:
        graphdef, state = nnx.split(make())
        graphdefs.append(graphdef)  # (static: kept from the one trace, not built again)
        return state

    state = jax.jit(build_state)()
    return nnx.merge(graphdefs[-1], state)

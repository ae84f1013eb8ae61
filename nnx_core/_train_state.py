"""TrainState: an immutable pytree of (graphdef, params, optimizer state, step) for plain jax.jit.

For code written in the functional style (``jax.jit`` over states, no Module objects crossing
the boundary). A subclass adds fields by annotation, as a dataclass; a field declared with
``dataclasses.field(metadata={"static": True})`` is static (part of the tree structure).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import optax

from ._api import merge, split
from ._graph import GraphDef
from ._module import M
from ._state import State

TS = TypeVar("TS", bound="TrainState[Any]")


class ApplyCaller:
    """What ``TrainState.apply`` returns: call it (or one of its methods) on a rebuilt model.

    ``caller(*args)`` rebuilds the model from the states, calls it and returns
    ``(output, (graphdef, new_state))``; ``caller.method(*args)`` calls ``model.method``.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Scale(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array(3.0))
        ...     def __call__(self, x): return x * self.w.value
        ...     def double(self, x): return 2 * self(x)
        >>> graphdef, params = nnx.split(Scale())
        >>> out, (_, new_state) = nnx.ApplyCaller(graphdef, (params,)).double(1.0)
        >>> float(out), list(new_state)
        (6.0, ['w'])
    """

    def __init__(self, graphdef: GraphDef, states: tuple[State, ...], names: tuple[str, ...] = ()):
        self._graphdef = graphdef
        self._states = states
        self._names = names

    def __getattr__(self, name: str) -> ApplyCaller:
        if name.startswith("__"):
            raise AttributeError(name)
        return ApplyCaller(self._graphdef, self._states, (*self._names, name))

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, tuple[GraphDef, State]]:
        # copies of the Variables, so the call does not change the (immutable) TrainState
        model = merge(self._graphdef, *(jax.tree_util.tree_map(_same, s) for s in self._states))
        fn: Callable[..., Any] = model
        for name in self._names:
            fn = getattr(fn, name)
        out = fn(*args, **kwargs)
        graphdef, new_state = split(model)
        return out, (graphdef, new_state)


def _same(x: Any) -> Any:
    return x


def _graphdef_apply(self: GraphDef, state: Any, /, *states: Any) -> ApplyCaller:
    """``graphdef.apply(state, *states)``: an :class:`ApplyCaller` over them (as flax.nnx's
    ``GraphDef.apply``); ``graphdef.apply(state)(x)`` returns ``(y, (graphdef, new_state))``."""
    return ApplyCaller(self, (state, *states))


GraphDef.apply = _graphdef_apply


def _register(cls: type) -> None:
    dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    static = [f.name for f in fields if f.name == "tx" or f.metadata.get("static")]
    data = [f.name for f in fields if f.name not in static]
    jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=static)


class TrainState(Generic[M]):
    """The functional training state: ``graphdef``, ``params``, ``opt_state``, ``step``, ``tx``.

    Example:
        >>> import jax, jax.numpy as jnp, optax
        >>> import nnx_core as nnx
        >>> class Model(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array([1.0, 2.0]))
        ...     def __call__(self, x): return x * self.w
        >>> graphdef, params = nnx.split(Model())
        >>> state = nnx.TrainState.create(graphdef, params=params, tx=optax.sgd(0.5))
        >>> @jax.jit
        ... def train_step(state, x):
        ...     def loss_fn(params):
        ...         y, _ = state.apply(params)(x)
        ...         return (y ** 2).sum()
        ...     return state.apply_gradients(jax.grad(loss_fn)(state.params))
        >>> state = train_step(state, jnp.ones(2))
        >>> int(state.step), state.params["w"].value.tolist()
        (1, [0.0, 0.0])
    """

    graphdef: GraphDef
    params: State
    opt_state: Any
    step: jax.Array
    tx: optax.GradientTransformation

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)

    @classmethod
    def create(
        cls: type[TS],
        graphdef: GraphDef,
        *,
        params: State,
        tx: optax.GradientTransformation,
        step: int = 0,
        **kwargs: Any,
    ) -> TS:
        """A TrainState at ``step`` with ``tx.init(params)`` as optimizer state.

        ``kwargs`` fill the fields a subclass adds (e.g. ``batch_stats=...``).
        """
        return cls(  # type: ignore[call-arg]
            graphdef=graphdef,
            params=params,
            opt_state=tx.init(params),
            step=jnp.asarray(step),
            tx=tx,
            **kwargs,
        )

    def replace(self: TS, **updates: Any) -> TS:
        """A copy with some fields replaced."""
        return dataclasses.replace(self, **updates)  # type: ignore[type-var]

    def apply(self, state: State | str, *states: State | str) -> ApplyCaller:
        """A caller on the model rebuilt from ``graphdef`` and the given states.

        A string names a State field of this TrainState (``"params"`` or one a subclass adds).

        Raises:
            TypeError: a named field does not hold a State.
        """
        resolved: list[State] = []
        for s in (state, *states):
            if isinstance(s, str):
                value = getattr(self, s)
                if not isinstance(value, State):
                    raise TypeError(
                        f"{type(self).__name__}.apply({s!r}): the field {s!r} holds a "
                        f"{type(value).__name__}, not a State. Pass States or the names of "
                        "State fields."
                    )
                s = value
            resolved.append(s)
        return ApplyCaller(self.graphdef, tuple(resolved))

    def apply_gradients(self: TS, grads: State, **kwargs: Any) -> TS:
        """One optimizer step on ``params``; ``kwargs`` replace other fields at the same time.

        Example:
            >>> import jax, jax.numpy as jnp, optax
            >>> import nnx_core as nnx
            >>> graphdef, params = nnx.split({"w": nnx.Param(jnp.array([1.0]))})
            >>> state = nnx.TrainState.create(graphdef, params=params, tx=optax.sgd(1.0))
            >>> new = state.apply_gradients(jax.tree.map(lambda p: p * 0 + 0.25, params))
            >>> new.params["w"].value.tolist(), int(new.step), int(state.step)
            ([0.75], 1, 0)
        """
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        return self.replace(params=params, opt_state=opt_state, step=self.step + 1, **kwargs)


_register(TrainState)

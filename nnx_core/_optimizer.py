"""Optimizer: an optax transformation whose state lives in Variables."""

from __future__ import annotations

from types import GenericAlias
from typing import Any

import jax
import jax.numpy as jnp
import optax

from ._api import state, update
from ._filters import Filter
from ._module import Module
from ._state import State, format_path
from ._state_functions import from_flat_state
from ._variables import Param, Variable


def _arrays(tree: Any) -> Any:
    """``tree`` with each Variable replaced by its value: what optax is handed (as flax.nnx
    hands it ``nnx.as_pure`` states), so its tree maps see arrays only."""
    return jax.tree_util.tree_map(
        lambda x: x.value if isinstance(x, Variable) else x,
        tree,
        is_leaf=lambda x: isinstance(x, Variable),
    )


class OptState(Variable, kind="OptState"):
    """A leaf of an optimizer's state (moments, counts, ...).

    A leaf that mirrors a parameter (Adam's moments) carries that parameter's logical axis
    names (``sharding_names``), so it is laid out on a mesh like the parameter.
    """


#: the metadata entries that name a Variable's axes (``out_sharding`` is flax.nnx's spelling)
_NAME_KEYS = ("sharding_names", "out_sharding")


def _leaf_names(tree: Any, params: State) -> list[dict[str, Any]]:
    """For each leaf of an optimizer state: the axis names of the parameter it mirrors.

    ``tx.init`` maps over the parameters' arrays (`_arrays`), so a per-parameter leaf sits at
    the parameter's path under the state's own (``mu['kernel']``); it gets the parameter's
    names where it has the parameter's shape (not a factored moment's rows and columns).
    """
    is_variable = lambda x: isinstance(x, Variable)  # noqa: E731
    flatten = jax.tree_util.tree_flatten_with_path
    found = {path: v for path, v in flatten(params, is_leaf=is_variable)[0]}
    out: list[dict[str, Any]] = []
    for path, leaf in flatten(tree)[0]:
        mirrored = next((found[path[i:]] for i in range(len(path)) if path[i:] in found), None)
        meta = {}
        if mirrored is not None and jnp.shape(mirrored.value) == jnp.shape(leaf):
            meta = {key: names for key in _NAME_KEYS if (names := mirrored.get_metadata(key, None))}
        out.append(meta)
    return out


class Optimizer(Module):
    """Holds an optax transformation's state for the ``wrt`` Variables of a model.

    The state is a list of ``OptState`` Variables plus a ``step`` count, so the optimizer is
    split, jitted and checkpointed like any other Module. Any optax transformation works,
    including those whose ``update`` needs extra arguments (pass them to :meth:`update`).

    Example:
        >>> import jax.numpy as jnp, optax
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array([1.0, 2.0]))
        >>> m = M(); opt = nnx.Optimizer(m, optax.sgd(0.5))
        >>> grads = nnx.grad(lambda m: (m.w.value ** 2).sum())(m)
        >>> opt.update(m, grads); m.w.value.tolist(), int(opt.step.value)
        ([0.0, 0.0], 1)
    """

    def __class_getitem__(cls, item: Any) -> GenericAlias:  # Optimizer[Model] in annotations
        return GenericAlias(cls, item)

    def __init__(self, model: Module, tx: optax.GradientTransformation, *, wrt: Filter = Param):
        if not hasattr(tx, "init") or not hasattr(tx, "update"):
            raise TypeError(
                f"Optimizer expects an optax GradientTransformation (e.g. optax.adam(1e-3)), "
                f"got {type(tx).__name__}."
            )
        self.tx = tx
        self.wrt = wrt
        self.step = OptState(jnp.zeros((), jnp.uint32))
        params = state(model, wrt)
        initial = tx.init(_arrays(params))
        leaves, treedef = jax.tree_util.tree_flatten(initial)
        self.opt_state = [
            OptState(x, **meta) for x, meta in zip(leaves, _leaf_names(initial, params))
        ]
        self.opt_treedef = treedef

    def update(self, model: Module, grads: State, /, **kwargs: Any) -> None:
        """Apply one step: ``params <- params + tx.update(grads, opt_state, params)``.

        optax is handed arrays: the parameters, gradients and ``kwargs`` with each Variable
        replaced by its value (as flax.nnx does), so e.g. the ``value_fn`` of
        ``optax.lbfgs`` receives a State of arrays. Gradients of more than the ``wrt`` state (e.g. of every Param while the optimizer
        trains only the ``LoRAParam`` ones) are narrowed to the ``wrt`` paths, as in flax.nnx.

        Raises:
            ValueError: ``grads`` lacks a path of ``nnx.state(model, wrt)``.
        """
        params = state(model, self.wrt)
        if not isinstance(grads, State):
            grads = State(grads)
        flat = grads.flat_state()
        got = {p for p, _ in flat}
        want = {p for p, _ in params.flat_state()}
        if got > want:  # more than the optimizer trains: keep the wrt paths
            grads = from_flat_state([(p, g) for p, g in flat if p in want])
            got = want
        if got != want:
            missing = sorted(map(format_path, want - got))[:5]
            extra = sorted(map(format_path, got - want))[:5]
            raise ValueError(
                "Optimizer.update: the gradients do not match the model's "
                f"{self.wrt!r} state. Missing: {missing}; unexpected: {extra}. Compute them "
                "with nnx_core.grad(loss_fn, wrt=...) using the same filter as the Optimizer."
            )
        opt_state = jax.tree_util.tree_unflatten(
            self.opt_treedef, [v.value for v in self.opt_state]
        )
        params = _arrays(params)  # (optax sees arrays only: no Variable to flatten and rebuild)
        updates, new_opt_state = self.tx.update(
            _arrays(grads), opt_state, params, **_arrays(kwargs)
        )
        update(model, optax.apply_updates(params, updates))
        for var, value in zip(self.opt_state, jax.tree_util.tree_leaves(new_opt_state)):
            var.value = value
        self.step.value = self.step.value + 1

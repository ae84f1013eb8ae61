"""`Repeat`: ``count`` blocks of one structure, stacked on a leading axis and applied with scan.

A deep model that repeats one block unrolls it into its program once per block, so its first
call (trace and compile) grows with the depth. `Repeat` keeps one block Module whose Variables
have a leading axis of size ``count`` (the layout of a stack that ``nnx_core.vmap`` builds,
and flax.nnx's ``split_rngs`` + ``vmap`` stacks) and applies the blocks in order with
``jax.lax.scan``: the block is traced and compiled once, whatever the count.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp

from nnx_core import Module, Rngs, split_rngs, vmap

from ._axis_names import LAYERS
from ._checks import check_positive_int, check_sequence_shape
from ._constraints import Size
from ._repeat_scan import check_carry, scan_layers
from ._repeat_stack import add_layer_axis, first_difference, stack_layers, unstack_layers

__all__ = ["Repeat"]


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Repeat {name} must be True or False, got {value!r}.")
    return value


def _check_name(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(
            f"Repeat sharding_name must be a logical axis name (a str) or None, got {value!r}. "
            "Pass e.g. sharding_name='layers'."
        )
    return value


class Repeat(Module):
    """``count`` blocks of one structure, applied one after another and compiled once.

    The blocks live in one Module, ``self.block``, whose Variables have a leading axis of size
    ``count`` (block ``i`` is entry ``i``); the call runs them in order with ``jax.lax.scan``,
    so the program holds one block whatever the count. Each block is built from its own keys:
    ``rngs``'s streams are split ``count`` ways for the construction (as flax.nnx's
    ``split_rngs(splits=count)`` + ``vmap`` does, with the same values).

    Everything that changes inside a block comes back stacked: BatchNorm statistics per block,
    Rng counts (so Dropout draws other masks per block and per step), Variables the blocks
    create (``sow``, ``init_cache``; create them for every block with `each`). The call's
    first argument is passed from block to block, so a block must return it with the same
    shape and dtype; the other arguments reach every block unchanged, except that an ``Rngs``
    among them advances from block to block, as through an unrolled stack.

    Args:
        block: builds one block from an `Rngs`, e.g. ``lambda rngs: Block(rngs=rngs)``; in a
            config, a layer spec (``block: {type: ..., ...}``).
        count: the number of blocks.
        rngs: the keys the blocks are built from.
        remat: recompute each block's activations in the backward pass instead of keeping them
            for all blocks (``jax.checkpoint``), trading compute for memory.
        unroll: how many blocks one iteration of the compiled loop runs.
        sharding_name: the logical name of the block axis (``"layers"``), put in front of the
            axis names (``sharding_names``) of the Variables that have them; ``None`` leaves that
            axis unnamed. The default sharding rules keep it whole on every device (the scan
            takes one block at a time).

    Raises:
        ValueError: ``count`` or ``unroll`` is not a positive integer; at call time, a block
            returns another shape or dtype than it was given.
        TypeError: ``block`` is not a function that builds a Module (e.g. a built layer).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear, Repeat
        >>> stack = Repeat(lambda rngs: Linear(8, 8, rngs=rngs), 4, rngs=Rngs(0))
        >>> stack.block.kernel.shape
        (4, 8, 8)
        >>> stack(jnp.ones((2, 8))).shape
        (2, 8)
        >>> [layer.kernel.shape for layer in stack.unstack()][:2]
        [(8, 8), (8, 8)]
    """

    def __init__(
        self,
        block: Callable[[Rngs], Module],
        count: Size,
        *,
        rngs: Rngs,
        remat: bool = False,
        unroll: Size = 1,
        sharding_name: str | None = LAYERS,
    ):
        count = check_positive_int("Repeat", "count", count)
        if isinstance(block, Module) or not callable(block):
            raise TypeError(
                f"Repeat builds each block by calling block(rngs), got a {type(block).__name__}. "
                "Pass a function, e.g. Repeat(lambda rngs: Linear(8, 8, rngs=rngs), 4, "
                "rngs=rngs); to stack layers already built, use Repeat.from_layers([...])."
            )
        if not isinstance(rngs, Rngs):
            raise TypeError(
                f"Repeat needs rngs=Rngs(...) to build its blocks, got {type(rngs).__name__}."
            )
        with split_rngs(rngs, splits=count):
            stacked = vmap(_builder(block), in_axes=0, out_axes=0)(rngs)
        self._setup(stacked, count, remat, unroll, sharding_name)
        add_layer_axis(stacked, self.sharding_name)

    def _setup(
        self, block: Module, count: int, remat: Any, unroll: Any, sharding_name: Any
    ) -> None:
        self.block = block
        self.count = count
        self.remat = _check_flag("remat", remat)
        self.unroll = check_positive_int("Repeat", "unroll", unroll)
        self.sharding_name = _check_name(sharding_name)

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        """Apply the blocks in order: ``x`` goes through block 0, its output through block 1...

        ``args``/``kwargs`` are passed to every block.
        """

        def step(layer: Module, value: Any, extras: Any) -> tuple[Any, None]:
            out = layer(value, *extras[0], **extras[1])
            check_carry(value, out)
            return out, None

        out, _ = scan_layers(
            self.block, self.count, step, x, (args, kwargs), remat=self.remat, unroll=self.unroll
        )
        return out

    def each(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(block, *args, **kwargs)`` on every block; return the outputs stacked.

        What ``fn`` changes or creates in a block comes back stacked on the block axis, e.g.
        ``repeat.each(lambda b: b.attn.init_cache(shape))`` gives every block its own cache.

        Example:
            >>> import jax.numpy as jnp
            >>> from nnx_core import Rngs
            >>> from nnx_layers import Linear, Repeat
            >>> stack = Repeat(lambda rngs: Linear(3, 3, rngs=rngs), 5, rngs=Rngs(0))
            >>> stack.each(lambda layer: layer.kernel.value.shape[0] + jnp.zeros(())).tolist()
            [3.0, 3.0, 3.0, 3.0, 3.0]
        """

        def step(layer: Module, value: None, extras: Any) -> tuple[None, Any]:
            return None, fn(layer, *extras[0], **extras[1])

        _, outputs = scan_layers(
            self.block, self.count, step, None, (args, kwargs), remat=False, unroll=self.unroll
        )
        return outputs

    def init_cache(self, input_shape: Sequence[int], dtype: Any = jnp.float32) -> None:
        """Give every block its own decoding caches, stacked on the block axis.

        In each block, every layer with an ``init_cache`` method (outermost first, as
        ``nnx generate`` starts a model) is called with ``(batch..., length, width)``: its own
        ``in_features`` or ``features`` when it has one, else the last entry of
        ``input_shape``.

        Args:
            input_shape: the shape of a whole sequence, ``(batch..., max_length, features)``.
            dtype: dtype of the cached keys and values.

        Raises:
            ValueError: ``input_shape`` is not ``(batch..., length, features)`` with positive
                sizes, or no layer of the block decodes from a cache.

        Example:
            >>> import jax.numpy as jnp
            >>> from nnx_core import Rngs
            >>> from nnx_layers import MultiHeadAttention, Repeat
            >>> stack = Repeat(
            ...     lambda rngs: MultiHeadAttention(2, 8, decode=True, rngs=rngs), 3, rngs=Rngs(0))
            >>> stack.init_cache((1, 5, 8))
            >>> stack.block.cached_key.value.shape, stack.block.cache_index.value.tolist()
            ((3, 1, 5, 2, 4), [0, 0, 0])
            >>> stack(jnp.ones((1, 1, 8))).shape, stack.block.cache_index.value.tolist()
            ((1, 1, 8), [1, 1, 1])
        """
        shape = check_sequence_shape("Repeat", input_shape, "(batch, max_length, features)")
        found: list[int] = []  # the block is traced once, whatever the count
        self.each(lambda block: found.append(_start_caches(block, shape, dtype)))
        if not found[0]:
            raise ValueError(
                f"Repeat.init_cache: no layer of the block ({type(self.block).__name__}) has "
                "an init_cache method, so there is no cache to start. Decode with a block "
                "that holds e.g. a MultiHeadAttention(..., decode=True)."
            )

    def unstack(self) -> list[Module]:
        """The blocks as ``count`` independent Modules (copies of each block's values).

        The inverse of `from_layers`: ``Repeat.from_layers(r.unstack())`` holds ``r``'s values.
        """
        return unstack_layers(self.block, self.count)

    @classmethod
    def from_layers(
        cls,
        layers: Sequence[Module],
        *,
        remat: bool = False,
        unroll: int = 1,
        sharding_name: str | None = LAYERS,
    ) -> "Repeat":
        """A `Repeat` of ``layers`` (built Modules of one structure), their values stacked.

        This converts an unrolled stack (e.g. one loaded from a checkpoint) to a `Repeat`;
        `unstack` converts back. Variables shared between layers are copied.

        Raises:
            ValueError: ``layers`` is empty, or a layer differs in structure from the first
                (the first difference is named: a path, and what each layer has there).
            TypeError: an entry is not a Module.

        Example:
            >>> from nnx_core import Rngs
            >>> from nnx_layers import Linear, Repeat
            >>> layers = [Linear(4, 4, rngs=Rngs(i)) for i in range(3)]
            >>> Repeat.from_layers(layers).block.kernel.shape
            (3, 4, 4)
            >>> Repeat.from_layers([Linear(4, 4, rngs=Rngs(0)), Linear(4, 2, rngs=Rngs(0))])
            Traceback (most recent call last):
              ...
            ValueError: Repeat.from_layers: layers[1] differs from layers[0]: out_features is 4 in layers[0] and 2 in layers[1]. Stack layers of one structure only.
        """
        layers = list(layers)
        if not layers:
            raise ValueError("Repeat.from_layers needs at least one layer, got none.")
        for i, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(
                    f"Repeat.from_layers takes Modules, got a {type(layer).__name__} at "
                    f"layers[{i}]."
                )
        for i, layer in enumerate(layers[1:], 1):
            found = first_difference(layers[0], layer, ("layers[0]", f"layers[{i}]"))
            if found is not None:
                raise ValueError(
                    f"Repeat.from_layers: layers[{i}] differs from layers[0]: {found}. Stack "
                    "layers of one structure only."
                )
        repeat = cls.__new__(cls)
        stacked = stack_layers(layers)
        repeat._setup(stacked, len(layers), remat, unroll, sharding_name)
        add_layer_axis(stacked, repeat.sharding_name)
        return repeat


def _builder(block: Callable[[Rngs], Module]) -> Callable[[Rngs], Module]:
    def build(rngs: Rngs) -> Module:
        built = block(rngs)
        if not isinstance(built, Module):
            raise TypeError(
                f"Repeat: block(rngs) returned a {type(built).__name__}; it must build a Module, "
                "e.g. lambda rngs: Linear(8, 8, rngs=rngs)."
            )
        return built

    return build


def _start_caches(block: Module, shape: tuple[int, ...], dtype: Any) -> int:
    """`Repeat.init_cache` in one block; how many layers it started."""
    started: list[tuple[Any, ...]] = []
    for path, module in block.iter_modules():
        init = getattr(module, "init_cache", None)
        if not callable(init) or any(path[: len(done)] == done for done in started):
            continue
        widths = [getattr(module, name, None) for name in ("in_features", "features")]
        width = next((w for w in widths if isinstance(w, int)), shape[-1])
        init((*shape[:-1], width), dtype)
        started.append(tuple(path))
    return len(started)

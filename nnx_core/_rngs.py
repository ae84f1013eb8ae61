"""Rngs: named streams of PRNG keys whose counters are state."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from ._filters import Filter, to_predicate
from ._module import Module
from ._variables import Variable

Shape = int | tuple[int, ...]


class RngState(Variable, kind="RngState"):
    """The state of an Rng stream: its key (:class:`RngKey`) and count (:class:`RngCount`).

    Example:
        >>> import nnx_core as nnx
        >>> len(nnx.state(nnx.Rngs(0), nnx.RngState))
        1
    """


class RngKey(RngState, kind="RngKey"):
    """The base key of an Rng stream."""


class RngCount(RngState, kind="RngCount"):
    """How many keys an Rng stream has handed out (advances through transforms)."""


def _as_key(seed: Any, name: str) -> Any:
    if isinstance(seed, RngStream):
        return seed.key.value
    if isinstance(seed, (int, jnp.integer)) and not isinstance(seed, bool):
        return jax.random.key(int(seed))
    if isinstance(seed, jax.Array):
        if jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
            return seed
        if seed.dtype == jnp.uint32 and seed.shape[-1:] == (2,):
            return jax.random.wrap_key_data(seed)
        if seed.shape == () and jnp.issubdtype(seed.dtype, jnp.integer):
            return jax.random.key(seed)
    shown = f"{type(seed).__name__}"
    if hasattr(seed, "dtype") and hasattr(seed, "shape"):
        shown += f" {seed.dtype}{list(seed.shape)}"
    raise TypeError(
        f"Rng stream {name!r} needs an int seed or a PRNG key, got {shown}. "
        f"Use e.g. Rngs({name}=0)."
    )


def as_shape(splits: Any, where: str) -> tuple[int, ...]:
    """``splits`` (an int or a tuple of ints, all >= 1) as a shape tuple."""
    shape = (splits,) if isinstance(splits, int) and not isinstance(splits, bool) else splits
    if not (
        isinstance(shape, tuple)
        and shape
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape)
    ):
        raise TypeError(
            f"{where}: the number of splits must be a positive int or a tuple of positive ints "
            f"(a shape), got {splits!r}."
        )
    return shape


# jax.random functions and jax.nn.initializers offered as methods of a stream (and of Rngs, for
# its default stream), as in flax.nnx: ``rngs.params.normal((2, 3))`` draws a key and calls
# ``jax.random.normal(key, (2, 3))``; ``rngs.params.lecun_uniform()`` is an initializer without
# a key argument (``init(shape, dtype)``) that draws a key on each call.
RANDOM_FUNCTIONS = (
    "bits", "uniform", "randint", "permutation", "choice", "normal", "multivariate_normal",
    "truncated_normal", "bernoulli", "beta", "cauchy", "dirichlet", "exponential", "gamma",
    "loggamma", "poisson", "gumbel", "categorical", "laplace", "logistic", "pareto", "t",
    "chisquare", "f", "rademacher", "maxwell", "double_sided_maxwell", "weibull_min",
    "orthogonal", "generalized_normal", "ball", "rayleigh", "wald", "geometric", "triangular",
    "lognormal", "binomial", "multinomial",
)  # fmt: skip
INITIALIZERS = (
    "delta_orthogonal", "glorot_normal", "glorot_uniform", "he_normal", "he_uniform",
    "kaiming_normal", "kaiming_uniform", "lecun_normal", "lecun_uniform", "variance_scaling",
    "xavier_normal", "xavier_uniform",
)  # fmt: skip


def _random_method(name: str) -> Callable[..., jax.Array]:
    fn = getattr(jax.random, name)

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> jax.Array:
        return fn(self(), *args, **kwargs)

    method.__doc__ = f"``jax.random.{name}`` with a new key of this stream."
    return method


def _initializer_method(name: str) -> Callable[..., Callable[..., jax.Array]]:
    make = getattr(jax.nn.initializers, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Callable[..., jax.Array]:
        init = make(*args, **kwargs)
        return lambda *a, **k: init(self(), *a, **k)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``jax.nn.initializers.{name}(...)`` drawing its key from this stream."
    return method


def add_random_methods(cls: type) -> type:
    """Give ``cls`` (whose instances are called for a key) the random and initializer methods."""
    for name in RANDOM_FUNCTIONS:
        setattr(cls, name, _random_method(name))
    for name in INITIALIZERS:
        setattr(cls, name, _initializer_method(name))
    return cls


@add_random_methods
class RngStream(Module):
    """One named stream: each call returns a new key ``fold_in(key, count)`` and counts up.

    The count has the shape of the key, so a stream holding a batch of keys (after
    :meth:`split`) is mapped over by ``vmap``/``scan`` like any other state.

    Example:
        >>> import jax
        >>> from nnx_core import RngStream
        >>> s = RngStream(0, tag="params")
        >>> bool((jax.random.key_data(s()) != jax.random.key_data(s())).any()), int(s.count.value)
        (True, 2)
        >>> s.split(4).key.shape, s.fork().key.shape, int(s.count.value)
        ((4,), (), 4)

    Raises:
        TypeError: the seed is not an int or a key; the stream is called with arguments.
        ValueError: a key is drawn from a stream that holds a batch of keys.
    """

    def __init__(self, seed: Any, *, tag: str):
        key = _as_key(seed, tag)
        self.key = RngKey(key, tag=tag)
        self.count = RngCount(jnp.zeros(key.shape, jnp.uint32), tag=tag)
        self.tag = tag

    def __call__(self, *args: Any, **kwargs: Any) -> jax.Array:
        if args or kwargs:
            raise TypeError(
                f"Rng stream {self.tag!r} takes no arguments: calling it returns a new key. "
                f"For random values use a method, e.g. rngs.{self.tag}.normal(shape), or pass "
                f"the key to jax.random: jax.random.normal(rngs.{self.tag}(), shape)."
            )
        key = self.key.value
        if key.shape:
            raise ValueError(
                f"Rng stream {self.tag!r} holds a batch of keys of shape {key.shape}, so it "
                "cannot hand out one key. Draw from it inside nnx_core.vmap or scan over that "
                "axis (in_axes=0), or restore it (nnx_core.split_rngs returns backups)."
            )
        out = jax.random.fold_in(key, self.count.value)
        self.count.value = self.count.value + 1
        return out

    def split(self, splits: Shape) -> RngStream:
        """A new stream holding ``splits`` independent keys from one draw of this one."""
        return RngStream(
            jax.random.split(self(), as_shape(splits, "RngStream.split")), tag=self.tag
        )

    def fork(self, *, split: Shape | None = None) -> RngStream:
        """A new, independent stream seeded with one draw of this one (its count starts at 0);
        with ``split``, that draw split into a batch of keys (flax.nnx's ``fork(split=)``)."""
        if split is not None:
            return self.split(split)
        return RngStream(self(), tag=self.tag)

    def broadcast(self, shape: Shape) -> RngStream:
        """A new stream holding one draw of this one repeated ``shape`` times (each copy gives
        the same keys, e.g. for layers that must share a dropout mask)."""
        key = self()
        keys = jnp.broadcast_to(key, as_shape(shape, "RngStream.broadcast") + key.shape)
        return RngStream(keys, tag=self.tag)


def stream_predicate(filter: Filter) -> Callable[[tuple[Any, ...], RngStream], bool]:  # noqa: A002
    """A predicate ``(path, stream) -> bool`` for filters over Rng streams.

    A string names a stream (its tag), also inside a tuple or list; any other filter is
    applied, as in flax.nnx, to the stream's ``key`` and ``count`` Variables at
    ``path + ("key",)`` / ``path + ("count",)`` and must match both.
    """
    if isinstance(filter, str):
        return lambda path, stream: stream.tag == filter
    if isinstance(filter, (tuple, list)):
        parts = [stream_predicate(f) for f in filter]
        return lambda path, stream: any(p(path, stream) for p in parts)
    pred = to_predicate(filter)
    return lambda path, stream: bool(
        pred((*path, "key"), stream.key) and pred((*path, "count"), stream.count)
    )


def suggest(name: str, names: list[str]) -> str:
    """`` Did you mean 'x'?`` for the names close to ``name`` (empty if none are)."""
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(map(repr, close))}?" if close else ""


@add_random_methods
class Rngs(Module):
    """Named Rng streams: ``Rngs(0)``, ``Rngs(params=0, dropout=1)``.

    ``rngs.params()`` / ``rngs["params"]()`` return a fresh key. A stream that does not exist
    is served by the ``default`` stream (the positional seed) when there is one, and is an
    error otherwise. The counters are Variables (kind ``RngCount``), so they advance correctly
    through ``jit`` and are split per example in ``vmap``.

    Example:
        >>> import nnx_core as nnx
        >>> rngs = nnx.Rngs(0, dropout=1)
        >>> rngs.params().shape, rngs["dropout"]().shape, "dropout" in rngs
        ((), (), True)
        >>> int(rngs.default.count.value)
        1
        >>> rngs.split(4).dropout.key.shape, rngs.fork().dropout.key.shape
        ((4,), ())

    Raises:
        TypeError: no seed, the default seed given twice, or a seed that is not an int or key.
        ValueError: a stream name that is also an attribute of Rngs (e.g. ``fork``).
        AttributeError: a stream is missing and there is no ``default`` stream.
    """

    def __init__(self, default: Any = None, /, **streams: Any):
        if default is not None:
            if "default" in streams:
                raise TypeError(
                    "Rngs got the default seed twice (positionally and as default=); pass one."
                )
            streams = {"default": default, **streams}
        if not streams:
            raise TypeError("Rngs needs at least one seed, e.g. Rngs(0) or Rngs(params=0).")
        for name in streams:
            if name.startswith("_") or hasattr(Rngs, name):
                raise ValueError(
                    f"Rngs cannot have a stream named {name!r}: that name is "
                    f"{'private' if name.startswith('_') else 'an attribute of Rngs'}. "
                    f"Choose another name, e.g. Rngs({name.strip('_')}_rng=...)."
                )
        for name, seed in streams.items():
            setattr(self, name, RngStream(seed, tag=name))

    def __getattr__(self, name: str) -> RngStream:
        d = self.__dict__
        if name.startswith("__"):
            raise AttributeError(name)
        default = d.get("default")
        if isinstance(default, RngStream):
            return default
        streams = sorted(k for k, v in d.items() if isinstance(v, RngStream))
        raise AttributeError(
            f"No RngStream named {name!r} in Rngs and no default stream (streams: "
            f"{streams}).{suggest(name, streams)} "
            f"Create it with Rngs({name}=seed, ...) or give a default seed: Rngs(0, ...)."
        )

    def __getitem__(self, name: str) -> RngStream:
        stream = vars(self).get(name)
        return stream if isinstance(stream, RngStream) else self.__getattr__(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(vars(self).get(name), RngStream)  # type: ignore[arg-type,call-overload]

    def __iter__(self) -> Iterator[str]:
        return iter(self.streams())

    def __len__(self) -> int:
        return len(self.streams())

    def __call__(self) -> jax.Array:
        return self.default()

    def streams(self) -> dict[str, RngStream]:
        """The streams by name."""
        return {k: v for k, v in vars(self).items() if isinstance(v, RngStream)}

    def items(self) -> Iterator[tuple[str, RngStream]]:
        """``(name, stream)`` pairs, as in flax.nnx."""
        return iter(self.streams().items())

    def split(self, splits: Shape | Mapping[Filter, Shape | None]) -> Rngs:
        """A new Rngs whose streams hold a batch of keys (one draw of each stream split).

        ``splits`` is a shape for every stream, or a mapping from stream filters (a stream
        name, ``...``, ``nnx.Not(nnx.WithTag("params"))``) to a shape or ``None``; the first
        matching filter wins. A stream matched by ``None`` or by no filter is the same stream object in both.

        Raises:
            TypeError: a split count is not a positive int or tuple of them.
        """
        return self._per_stream(splits, RngStream.split)

    def broadcast(self, shape: Shape | Mapping[Filter, Shape | None]) -> Rngs:
        """A new Rngs whose streams hold one draw repeated ``shape`` times (see
        :meth:`RngStream.broadcast`); a mapping selects streams as in :meth:`split`.

        Raises:
            TypeError: a shape is not a positive int or tuple of them.
        """
        return self._per_stream(shape, RngStream.broadcast)

    def fork(self, *, split: Shape | Mapping[Filter, Shape | None] | None = None) -> Rngs:
        """A new, independent Rngs with one draw of each stream as its seeds.

        Each stream of the new Rngs is seeded with ``rngs.<name>()`` (so this one advances by
        one key per stream); as in flax.nnx, this is how a layer takes its own streams.
        ``split`` (flax.nnx's ``fork(split=)``) makes the selected streams batches of keys, as
        :meth:`split` does, and forks the others.
        """
        if split is None:
            return _rngs_of({name: stream.fork() for name, stream in self.streams().items()})
        split_streams = self._per_stream(split, RngStream.split).streams()
        return _rngs_of(
            {
                name: new if new is not self.streams()[name] else new.fork()
                for name, new in split_streams.items()
            }
        )

    def _per_stream(
        self, shapes: Shape | Mapping[Filter, Shape | None], change: Callable[..., RngStream]
    ) -> Rngs:
        rules = shapes.items() if isinstance(shapes, Mapping) else [(..., shapes)]
        preds = [(stream_predicate(f), n) for f, n in rules]
        out: dict[str, RngStream] = {}
        for name, stream in self.streams().items():
            n = next((n for p, n in preds if p((name,), stream)), None)
            out[name] = stream if n is None else change(stream, n)
        return _rngs_of(out)


def _rngs_of(streams: dict[str, RngStream]) -> Rngs:
    """An Rngs holding these stream objects (not copies)."""
    rngs: Rngs = Rngs.__new__(Rngs)
    for name, stream in streams.items():
        setattr(rngs, name, stream)
    return rngs

"""Changing the Rng streams of a graph: ``split_rngs``, ``fork_rngs``, ``reseed``, ``with_rngs``.

``split_rngs`` and ``fork_rngs`` change the streams in place and return :class:`SplitBackups`
(a context manager that puts them back) or, without a node, decorate a function so that the
streams of its arguments are changed for the duration of each call. ``with_rngs`` (and the
other two given flax.nnx's ``graph=False`` or ``graph_updates=False``) leaves the graph as it
is and returns a copy whose streams are changed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from ._api import clone
from ._filters import Filter
from ._graph import iter_nodes
from ._rngs import RngCount, RngKey, Rngs, RngStream, Shape, as_shape, stream_predicate, suggest
from ._state import format_path

F = TypeVar("F", bound=Callable[..., Any])
Path = tuple[Any, ...]
_MISSING: Any = object()


class SplitBackups:
    """The streams that ``split_rngs``/``fork_rngs`` changed, with their previous key and count.

    Use it as a context manager (the streams are restored on exit) or call :meth:`restore`.

    Example:
        >>> import nnx_core as nnx
        >>> rngs = nnx.Rngs(params=0)
        >>> with nnx.split_rngs(rngs, splits=3) as backups:
        ...     rngs.params.key.shape, len(backups)
        ((3,), 1)
        >>> rngs.params.key.shape, int(rngs.params.count.value)
        ((), 1)
    """

    def __init__(self, backups: list[tuple[RngStream, Any, Any]]):
        self.backups = backups

    def __iter__(self) -> Iterator[tuple[RngStream, Any, Any]]:
        return iter(self.backups)

    def __len__(self) -> int:
        return len(self.backups)

    def __enter__(self) -> SplitBackups:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def restore(self) -> None:
        """Put every changed stream back (its count keeps the draw the change took)."""
        for stream, key, count in reversed(self.backups):
            stream.key.value = key
            stream.count.value = count


def restore_rngs(backups: SplitBackups, /) -> None:
    """Undo a ``split_rngs``/``fork_rngs``: the same as ``backups.restore()``.

    Example:
        >>> import nnx_core as nnx
        >>> rngs = nnx.Rngs(0)
        >>> backups = nnx.fork_rngs(rngs)
        >>> nnx.restore_rngs(backups); int(rngs.default.count.value)
        1
    """
    backups.restore()


def _streams(node: Any) -> list[tuple[Path, RngStream]]:
    return [(path, x) for path, x in iter_nodes(node) if isinstance(x, RngStream)]


def _no_match(name: str, found: list[tuple[Path, RngStream]], rule: str) -> ValueError:
    """A selection given explicitly that selects nothing (a typo would do nothing otherwise)."""
    if not found:
        return ValueError(
            f"{name}: {rule} selects Rng streams, but there are none in what was given; "
            "pass the Module or Rngs that holds them."
        )
    listed = ", ".join(sorted({f"{format_path(p)} ({s.tag!r})" for p, s in found}))
    return ValueError(
        f"{name}: {rule} matches none of the Rng streams found: {listed}. "
        "Name a stream (its tag) or use ... for all of them."
    )


def _check_scalar(name: str, path: Path, stream: RngStream) -> None:
    if stream.key.value.shape:
        raise ValueError(
            f"{name}: the Rng stream at {format_path(path)} ({stream.tag!r}) already holds a "
            f"batch of keys of shape {stream.key.value.shape}; restore it before changing it again."
        )


def _set(stream: RngStream, key: Any, backups: list[tuple[RngStream, Any, Any]]) -> None:
    backups.append((stream, stream.key.value, stream.count.value))
    stream.key.value = key
    stream.count.value = jnp.zeros(key.shape, jnp.uint32)


def _decorate(change: Callable[[Any], SplitBackups], f: F) -> F:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with change((args, kwargs)):
            return f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def split_rngs(
    node: Any = _MISSING,
    /,
    *,
    splits: Shape,
    only: Filter = ...,
    squeeze: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Split the Rng streams of ``node`` in place into batches of keys, for ``vmap``/``scan``.

    Each selected stream draws one key, splits it into ``splits`` keys and resets its count
    (of the same shape), so a ``vmap``/``scan`` with ``in_axes=0`` gives each example or layer
    its own stream. Returns :class:`SplitBackups`, a context manager that restores the streams.
    Without ``node`` it is a decorator: the streams of the arguments are split for each call.

    Args:
        node: a Module, Rngs, or any container of them.
        splits: the number of keys (or their shape) per stream.
        only: which streams: a stream name (or a tuple of names), ``...`` (all), or a filter
            on their key/count Variables (``nnx.Not(nnx.WithTag("params"))``).
        squeeze: with ``splits=1``, keep the key shape unchanged (one key, not a batch of one).
        graph, graph_updates: flax.nnx's modes. ``False`` for either returns a copy of ``node``
            with its streams split (as ``with_rngs(node, split={only: splits})``) and leaves
            ``node`` as it is, as flax.nnx's tree mode does; the traversal is the same.

    Example:
        >>> import jax
        >>> import nnx_core as nnx
        >>> class Block(nnx.Module):
        ...     def __init__(self, rngs):
        ...         self.w = nnx.Param(jax.random.normal(rngs.params(), (2,)))
        >>> @nnx.split_rngs(splits=3)
        ... @nnx.vmap(in_axes=0)
        ... def create(rngs):
        ...     return Block(rngs)
        >>> rngs = nnx.Rngs(params=0)
        >>> create(rngs).w.shape, rngs.params.key.shape
        ((3, 2), ())

    Raises:
        TypeError: ``splits`` is not a positive int or tuple of them.
        ValueError: ``squeeze`` without ``splits=1``; an explicit ``only`` that matches no
            stream; a stream is already split.
    """
    shape = as_shape(splits, "split_rngs")
    if squeeze and shape != (1,):
        raise ValueError(f"split_rngs: squeeze=True needs splits=1, got splits={splits!r}.")
    if graph is False or graph_updates is False:
        split_one = (
            (lambda s: RngStream(jax.random.split(s(), shape)[0], tag=s.tag)) if squeeze else None
        )
        rule = split_one or (lambda s: s.split(shape))
        return _functional(node, [(stream_predicate(only), rule)])
    if node is _MISSING:
        return lambda f: _decorate(
            lambda n: split_rngs(n, splits=splits, only=only, squeeze=squeeze), f
        )
    pred = stream_predicate(only)
    found = _streams(node)
    backups: list[tuple[RngStream, Any, Any]] = []
    for path, stream in found:
        if pred(path, stream):
            _check_scalar("split_rngs", path, stream)
            keys = jax.random.split(stream(), shape)
            _set(stream, keys[0] if squeeze else keys, backups)
    if not backups and only is not Ellipsis and only is not True:
        raise _no_match("split_rngs", found, f"only={only!r}")
    return SplitBackups(backups)


def fork_rngs(
    node: Any = _MISSING,
    /,
    *,
    split: Shape | Mapping[Filter, Shape | None] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Fork the Rng streams of ``node`` in place: each is reseeded with one draw of itself.

    ``split`` optionally turns some forks into batches of keys: a shape for all streams, or
    a mapping from stream filters to a shape or ``None`` (a plain fork); streams that match
    no filter are left alone. Returns :class:`SplitBackups`; without ``node`` it is a decorator.
    With flax.nnx's ``graph=False`` or ``graph_updates=False`` it returns a forked copy of
    ``node`` instead and leaves ``node`` as it is.

    Example:
        >>> import nnx_core as nnx
        >>> rngs = nnx.Rngs(params=0, dropout=1)
        >>> with nnx.fork_rngs(rngs, split={"params": 4, ...: None}):
        ...     rngs.params.key.shape, rngs.dropout.key.shape, int(rngs.dropout.count.value)
        ((4,), (), 0)

    Raises:
        TypeError: a split count is not a positive int or tuple of them.
        ValueError: a ``split`` mapping without ``...`` that matches no stream; a stream is
            already split.
    """
    rules = split.items() if isinstance(split, Mapping) else [(..., split)]
    preds = [
        (stream_predicate(f), None if n is None else as_shape(n, "fork_rngs")) for f, n in rules
    ]
    if graph is False or graph_updates is False:
        changes = [(p, _fork_rule(n)) for p, n in preds]
        return _functional(node, changes)
    if node is _MISSING:
        return lambda f: _decorate(lambda n: fork_rngs(n, split=split), f)
    found = _streams(node)
    backups: list[tuple[RngStream, Any, Any]] = []
    for path, stream in found:
        rule = next((r for r in preds if r[0](path, stream)), None)
        if rule is not None:
            _check_scalar("fork_rngs", path, stream)
            key = stream()
            _set(stream, key if rule[1] is None else jax.random.split(key, rule[1]), backups)
    if not backups and isinstance(split, Mapping) and not any(f in (..., True) for f in split):
        raise _no_match("fork_rngs", found, f"split={split!r}")
    return SplitBackups(backups)


def _scalars_only(path: Path, key: Any, shape: tuple[int, ...]) -> Any:
    if shape:
        raise ValueError(
            f"reseed: the Rng stream at {format_path(path)} holds a batch of keys of shape "
            f"{shape}. Pass policy='match_shape' to give it that many new keys, or a callable "
            "(path, key, shape) -> keys."
        )
    return key


def _match_shape(path: Path, key: Any, shape: tuple[int, ...]) -> Any:
    return jax.random.split(key, shape) if shape else key


_POLICIES: dict[str, Callable[[Path, Any, tuple[int, ...]], Any]] = {
    "scalars_only": _scalars_only,
    "match_shape": _match_shape,
}


def reseed(
    node: Any,
    /,
    *,
    policy: str | Callable[[Path, Any, tuple[int, ...]], Any] = "scalars_only",
    graph: bool | None = None,
    **stream_keys: Any,
) -> None:
    """Give the named Rng streams of ``node`` new keys, as if they had just been created.

    As in flax.nnx, the streams named ``name`` get successive draws of ``Rngs(name=seed)``
    (in graph order) and their counts restart at 0. ``policy`` says what to do with a stream
    that holds a batch of keys: ``"scalars_only"`` (an error), ``"match_shape"`` (split the new
    key to that shape) or a callable ``(path, key, shape) -> new key``. ``graph`` (flax.nnx's
    mode) is accepted for its code: both of its modes reseed in place, as here.

    Example:
        >>> import jax
        >>> import nnx_core as nnx
        >>> rngs = nnx.Rngs(params=0, dropout=1)
        >>> first = jax.random.key_data(rngs.dropout())
        >>> _ = rngs.dropout(); nnx.reseed(rngs, dropout=1)
        >>> int(rngs.dropout.count.value)
        0

    Raises:
        ValueError: an unknown policy; a name that matches no stream of ``node``; a batched
            stream under ``"scalars_only"``.
    """
    if isinstance(policy, str) and policy in _POLICIES:
        rule = _POLICIES[policy]
    elif callable(policy):
        rule = policy
    else:
        raise ValueError(
            f"reseed: policy must be 'scalars_only', 'match_shape' or a callable "
            f"(path, key, shape) -> key, got {policy!r}."
        )
    found = _streams(node)
    tags = sorted({s.tag for _, s in found})
    for name in stream_keys:
        if name not in tags:
            raise ValueError(
                f"reseed: No RngStream named {name!r} in {type(node).__name__} "
                f"(streams: {tags}).{suggest(name, tags)}"
            )
    seeds = Rngs(**stream_keys)
    for path, stream in found:
        if stream.tag in stream_keys:
            key = rule(path, seeds[stream.tag](), stream.key.value.shape)
            stream.key.value = key
            stream.count.value = jnp.zeros(key.shape, jnp.uint32)


# -- copies with changed streams (flax.nnx's with_rngs, and its tree mode) ----------------------
Change = Callable[[RngStream], RngStream]
ShapeRules = Shape | Mapping[Filter, Shape] | None


def _fork_rule(shape: tuple[int, ...] | None) -> Change:
    return (lambda s: s.fork()) if shape is None else (lambda s: s.split(shape))


def _functional(node: Any, changes: list[tuple[Any, Change]]) -> Any:
    """``_copy_with`` where the first ``(predicate, change)`` matching a stream changes it."""

    def change(path: Path, stream: RngStream) -> RngStream | None:
        return next((c(stream) for pred, c in changes if pred(path, stream)), None)

    return _copy_with(node, change)


def _copy_with(node: Any, change: Callable[[Path, RngStream], RngStream | None]) -> Any:
    """A copy of ``node`` (or, without one, a decorator making that copy of the arguments) in
    which each stream for which ``change(path, original stream)`` gives a new stream takes that
    stream's key and count: the new keys are drawn from the original streams, whose counts
    advance; nothing else of ``node`` changes."""
    if node is _MISSING:
        return lambda f: _decorate_copy(lambda n: _copy_with(n, change), f)
    copy = clone(node)
    for (path, stream), (_, copied) in zip(_streams(node), _streams(copy), strict=True):
        new = change(path, stream)
        if new is not None:
            copied.key = RngKey(new.key.value, tag=stream.tag)
            copied.count = RngCount(new.count.value, tag=stream.tag)
    return copy


def _decorate_copy(change: Callable[[Any], Any], f: F) -> F:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = change((args, kwargs))
        return f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _shape_rules(rules: ShapeRules, where: str) -> list[tuple[Any, Any, tuple[int, ...]]]:
    if rules is None:
        return []
    items = rules.items() if isinstance(rules, Mapping) else [(..., rules)]
    return [(f, stream_predicate(f), as_shape(n, where)) for f, n in items]


def with_rngs(
    node: Any = _MISSING,
    /,
    *,
    split: ShapeRules = None,
    fork: Filter | list[Filter] | tuple[Filter, ...] | None = None,
    broadcast: ShapeRules = None,
    only: Filter = ...,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """A copy of ``node`` whose Rng streams are split, broadcast or forked (as flax.nnx's).

    ``split`` and ``broadcast`` are a shape for every stream or a mapping from stream filters
    to shapes (the first matching filter wins); ``fork`` is a filter or a sequence of them
    (``...`` forks every stream no other rule took). A stream matching no rule is copied
    unchanged. The new keys are drawn from ``node``'s own streams, whose counts advance; the
    rest of ``node`` is left as it is. Without ``node`` it decorates a function: each call gets
    such a copy of its arguments. ``graph``/``graph_updates`` (flax.nnx's modes) change nothing:
    a copy is returned in both.

    Args:
        node: a Module, Rngs, or any container of them (e.g. ``{"a": RngStream(0, tag="a")}``).
        split: shapes of the key batches, per stream filter.
        fork: the streams to fork (a new scalar key each).
        broadcast: shapes to repeat one new key to, per stream filter.
        only: the streams considered at all (``...``: every stream).

    Example:
        >>> import nnx_core as nnx
        >>> rngs = nnx.Rngs(params=0, dropout=1)
        >>> new = nnx.with_rngs(rngs, split={"params": 4}, fork=...)
        >>> new.params.key.shape, new.dropout.key.shape, rngs.params.key.shape
        ((4,), (), ())

    Raises:
        TypeError: a shape is not a positive int or tuple of them.
        ValueError: a stream matched by two specific rules (e.g. ``split={"params": 4}`` and
            ``fork="params"``).
    """
    splits = _shape_rules(split, "with_rngs(split=...)")
    broadcasts = _shape_rules(broadcast, "with_rngs(broadcast=...)")
    forks = [] if fork is None else list(fork) if isinstance(fork, (list, tuple)) else [fork]
    fork_rules = [(f, stream_predicate(f), None) for f in forks]
    in_scope = stream_predicate(only)

    def change(stream: RngStream, path: Path) -> RngStream | None:
        found: dict[str, Any] = {}
        for rule, rules in (("split", splits), ("broadcast", broadcasts), ("fork", fork_rules)):
            hit = next((r for r in rules if r[1](path, stream)), None)
            if hit is not None:
                found[rule] = hit
        specific = [r for r, hit in found.items() if hit[0] is not Ellipsis and hit[0] is not True]
        if len(specific) > 1:
            listed = "; ".join(f"{r} by {found[r][0]!r}" for r in specific)
            raise ValueError(
                f"with_rngs: the Rng stream at {format_path(path)} ({stream.tag!r}) matches "
                f"multiple rules ({listed}). Make the filters select disjoint streams."
            )
        if "split" in found:
            return stream.split(found["split"][2])
        if "broadcast" in found:
            return stream.broadcast(found["broadcast"][2])
        return stream.fork() if "fork" in found else None

    return _copy_with(node, lambda path, s: change(s, path) if in_scope(path, s) else None)

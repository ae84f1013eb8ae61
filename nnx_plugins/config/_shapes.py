"""Checking a model abstractly before it is built: every layer's constructor, then the shapes.

`check_model` validates a config (`load_config`), builds every layer under `jax.eval_shape`
(nothing is allocated) reporting each layer that raises at its own path, and, when the input is
known, runs the model abstractly on a batch of two examples: the first layer that cannot take
what the previous one gives is reported at its ``file:line:col`` and path, with the shape and
dtype it received and its own error (which says what it expected).

The input is known from ``data=`` (`DataSpec`, e.g. from ``--input-shape``) or from a config
section that describes the data: a registered section object with a method
``data_spec(config: Config) -> DataSpec | None`` (the whole config: its ``source`` for relative
paths, its other sections, e.g. the task that checks the output). The training ``data`` section
is one; the config package does not know it.

Example:
    >>> import jax
    >>> from nnx_plugins import ConfigError
    >>> from nnx_plugins import DataSpec, check_model
    >>> model = {"type": "Sequential", "layers": [
    ...     {"type": "Linear", "in_features": 64, "out_features": 16},
    ...     {"type": "relu"},
    ...     {"type": "BatchNorm", "num_features": 8}]}
    >>> data = DataSpec(jax.ShapeDtypeStruct((64,), "float32"), "--input-shape 64")
    >>> try:
    ...     check_model({"model": model}, data=data)
    ... except ConfigError as error:
    ...     print(error.problems[0])
    <dict>: model.layers[2]: BatchNorm cannot take float32[2,16] from model.layers[1] (relu): ValueError: BatchNorm expects 8 features over axes (1,), got shape (2, 16) (16 features). ...
    >>> model["layers"][2]["num_features"] = 16
    >>> check_model({"model": model}, data=data).output
    ShapeDtypeStruct(shape=(2, 16), dtype=float32)
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

import jax

import nnx_core
from nnx_core import Rngs
from nnx_layers import Sequential

from .._text import format_path
from ..registry._registry import Registry, default_registry
from ._bound import BoundFunction
from ._build import _Builder, _BuildFailure, build_error, located
from ._errors import ConfigError
from ._load import Config, load_config
from ._summary import owner_node

__all__ = ["DataSpec", "ModelCheck", "check_model", "BATCH"]

#: the batch size of the abstract forward pass
BATCH = 2

Path = tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """What a model will be given, and what its output must be.

    Attributes:
        example: the shape and dtype of one example (no batch axis).
        origin: where it comes from, for messages (``"data (digits, layout flat)"``).
        check_output: given the abstract output for a batch, a message saying why it does not
            fit (``None`` when it does); ``None`` to accept any output.
        hint: added to the message when the layer given the data cannot take it.
    """

    example: jax.ShapeDtypeStruct
    origin: str
    check_output: Callable[[Any], str | None] | None = None
    hint: str = ""

    @property
    def batch(self) -> jax.ShapeDtypeStruct:
        """The abstract batch the model runs on: `BATCH` examples."""
        return jax.ShapeDtypeStruct((BATCH, *self.example.shape), self.example.dtype)


@dataclasses.dataclass(frozen=True)
class ModelCheck:
    """A config that passed `check_model`.

    Attributes:
        config: the validated `Config`.
        data: the `DataSpec` the model was run on (``None``: built only, not run).
        state: the model's abstract state (`nnx_core.State` of ``jax.ShapeDtypeStruct``).
        output: the abstract output for a batch of `BATCH` (``None`` when not run).
        outputs: the abstract output of every layer run, by its path in the model
            (``("model", "layers", 0)``), in the order they ran (empty when not run): the
            layers of a `Sequential` one by one, any other layer as a whole.
    """

    config: Config
    data: DataSpec | None
    state: Any
    output: Any = None
    outputs: dict[Path, Any] = dataclasses.field(default_factory=dict)


def spell(value: Any) -> str:
    """``float32[2,8,8,1]`` for an array-like, a tuple or dict of them in brackets."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{jax.numpy.dtype(value.dtype).name}[{','.join(map(str, value.shape))}]"
    if isinstance(value, (tuple, list)):
        return f"({', '.join(spell(v) for v in value)})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {spell(v)}" for k, v in value.items()) + "}"
    return type(value).__name__


def _data_spec(config: Config) -> DataSpec | None:
    for section in config.sections.values():
        describe = getattr(section, "data_spec", None)
        if callable(describe):
            found = describe(config)
            if found is not None:
                return found
    return None


class _Forward:
    """Runs a built model abstractly, layer by layer, finding the layer that fails."""

    def __init__(self, model: Any, data: DataSpec):
        self.data = data
        self.paths = {id(m): ("model", *p) for p, m in model.iter_modules()}
        self.failure: tuple[Path, str] | None = None
        self.last: Path = ("model",)
        self.outputs: dict[Path, Any] = {}  # (each layer run, in order: its abstract output)

    def run(self, layer: Any, path: Path, x: Any, previous: str) -> Any:
        if isinstance(layer, Sequential):
            for index, child in enumerate(layer.layers):
                child_path = (*path, "layers", index)
                x = self.run(child, child_path, x, previous)
                if self.failure is not None:
                    return None
                previous = f"{format_path(child_path)} ({_name(child)})"
            return x
        self.last = path
        try:
            if isinstance(x, tuple):
                out = layer(*x)
            else:
                out = layer(**x) if isinstance(x, dict) else layer(x)
        except Exception as error:  # noqa: BLE001 - any failure is reported at its layer
            self.failure = self._locate(error, layer, path, x, previous)
            return None
        self.outputs[path] = jax.tree.map(_abstract, out)
        return out

    def _locate(self, error: Exception, layer: Any, path: Path, x: Any, previous: str) -> Any:
        """The innermost module of the model running when ``error`` was raised, and what it
        received (read from its ``__call__`` frame) if it is not ``layer`` itself."""
        culprit, received = path, x
        frames = list(_frames(error.__traceback__))
        for frame in reversed(frames):
            owner = frame.f_locals.get("self")
            found = self.paths.get(id(owner)) if owner is not None else None
            if found is None or found == path or not found[: len(path)] == path:
                continue
            culprit, received = found, _first_argument(frame, x)
            if isinstance(owner, Sequential) and isinstance(frame.f_locals.get("index"), int):
                culprit = (*found, "layers", frame.f_locals["index"])
            previous = "its container"
            break
        what = _name(_at(layer, path, culprit))
        source = "" if previous is None else f" from {previous}"
        text = str(error).strip() or "(no message)"
        return culprit, (
            f"{what} cannot take {spell(received)}{source}: {type(error).__name__}: {text}"
        )


def _abstract(leaf: Any) -> Any:
    """A traced array as its shape and dtype (what outlives the trace)."""
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)
    return leaf


def _name(layer: Any) -> str:
    if isinstance(layer, (nnx_core.Module, BoundFunction)):
        return type(layer).__name__ if isinstance(layer, nnx_core.Module) else repr(layer)
    return getattr(layer, "__name__", type(layer).__name__)


def _at(root: Any, root_path: Path, path: Path) -> Any:
    node = root
    for key in path[len(root_path) :]:
        node = node[key] if isinstance(node, (list, dict)) else getattr(node, key)
    return node


def _frames(tb: types.TracebackType | None) -> Any:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _first_argument(frame: types.FrameType, default: Any) -> Any:
    code = frame.f_code
    names = code.co_varnames[1 : code.co_argcount]
    return frame.f_locals.get(names[0], default) if names else default


def _output_path(model: Any) -> Path:
    """The path of the layer whose output is the model's (the last of nested Sequentials)."""
    path: Path = ("model",)
    while isinstance(model, Sequential) and model.layers:
        path, model = (*path, "layers", len(model.layers) - 1), model.layers[-1]
    return path


def _run(config: Config, builder: _Builder, data: DataSpec | None) -> Any:
    def abstract(x: Any) -> Any:
        builder.rngs = Rngs(0)  # (made inside the trace, where the layers draw from it)
        model = builder.node(config.model, ("model",))
        if builder.failures:
            return None, None
        state = nnx_core.state(model) if isinstance(model, nnx_core.Module) else None
        if data is None:
            return state, None
        if not isinstance(model, nnx_core.Module):
            model = Sequential(model)  # (a bare function as the whole model)
            forward = _Forward(model, data)
            out = forward.run(model.layers[0], ("model",), x, f"the {data.origin}")
        else:
            forward = _Forward(model, data)
            out = forward.run(model, ("model",), x, f"the {data.origin}")
        results.append((forward, model))
        return state, out

    results: list[tuple[_Forward, Any]] = []
    batch = data.batch if data is not None else jax.ShapeDtypeStruct((), "float32")
    output = jax.eval_shape(abstract, batch)
    return output, results


def check_model(
    config: Any, *, data: DataSpec | None = None, registry: Registry | None = None
) -> ModelCheck:
    """Validate ``config``, build it abstractly and, when its input is known, run it abstractly.

    Args:
        config: what `load_config` takes.
        data: the input (and output check); when omitted, from a section with ``data_spec``.
        registry: where names resolve; `default_registry()` when omitted.

    Returns:
        A `ModelCheck` with the abstract output. Nothing is allocated.

    Raises:
        ConfigError: the config is invalid; layers raised while being built (each at its
            path); or a layer cannot take its input, or the output does not fit the data.
    """
    registry = registry or default_registry()
    loaded = load_config(config, registry=registry)
    if data is None:
        data = _data_spec(loaded)
    builder = _Builder(registry, loaded.prefer, None)
    (state, output), results = _run(loaded, builder, data)
    if builder.failures:
        raise build_error(loaded, _BuildFailure(builder.failures))
    if data is None:
        return ModelCheck(loaded, None, state)
    forward, model = results[-1]
    source = located(loaded)
    if forward.failure is not None:
        path, message = forward.failure
        where = _config_path(loaded, path)
        if where != path:  # a sublayer the layer made itself: say which
            message = f"in its sublayer {format_path(path[len(where) :])}: {message}"
        if data.hint and f"from the {data.origin}:" in message:
            message = f"{message} {data.hint}"
        raise ConfigError([source.problem(where, message)])
    problem = data.check_output(output) if data.check_output is not None else None
    if problem is not None:
        where = _output_path(model) if isinstance(model, nnx_core.Module) else ("model",)
        raise ConfigError([source.problem(where, problem)])
    return ModelCheck(loaded, data, state, output, dict(forward.outputs))


def _config_path(config: Config, path: Path) -> Path:
    """``path`` if it is a node of the config, else its deepest ancestor that is."""
    where, _ = owner_node(config.model, path[1:])
    return ("model", *where)

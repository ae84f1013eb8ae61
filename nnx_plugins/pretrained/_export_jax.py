"""`export_jax`: a trained model as one serialized `jax.export` artifact, for serving.

The model of a config is filled from a checkpoint, put in evaluation mode and traced once for
an input whose batch and sequence length are symbolic (any size at call time) where the model
allows it; its weights are constants of the program. The file holds StableHLO and the input and
output shapes: ``jax.export.deserialize(FILE.read_bytes()).call(x)`` runs it with plain jax,
without nnx installed.

The input is token ids ``int32[b, t]`` for a ``language_model`` task, else ``(batch, *one
example)`` of the config's ``data`` section (``float32[b, 8, 8, 1]`` for the digits images), or
``input_shape``: every axis a size or a name (jax's symbolic shape syntax: ``"b, 128"``,
``"1, 8, 8, 1"``), each size at most `MAX_AXIS`. A symbolic length is bounded by the model's
maximum length where a layer has one (`PositionEmbed`). The dtype must be one jax keeps (not
``int64`` without ``jax_enable_x64``) and, for token ids, hold every id of the model's
vocabulary.

Example:
    >>> import pathlib, tempfile
    >>> import jax, numpy as np
    >>> import nnx_plugins
    >>> from nnx_plugins.pretrained._export_jax import export_jax
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> config = {"model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...           "data": {"type": "digits", "layout": "flat"}}
    >>> checkpoint = nnx_plugins.save(nnx_plugins.build_model(config), folder / "ckpt")
    >>> result = export_jax(config, checkpoint=checkpoint, out=folder / "model.jax")
    >>> result.inputs, result.outputs
    ('float32[b,64]', 'float32[b,10]')
    >>> exported = jax.export.deserialize(result.path.read_bytes())
    >>> exported.call(np.ones((3, 64), np.float32)).shape
    (3, 10)
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

import nnx_core as nnx

from .._stopping import check
from ..config._load import load_config
from ..training._config import load_train_config
from ._exporting import ExportError, new_output, trained_model, write_file

__all__ = ["JaxExport", "export_jax", "ARTIFACT_LIMIT", "MAX_AXIS"]

ARTIFACT_LIMIT = 2**31 - 2**24
"""The most bytes of weights an artifact holds: a serialized `jax.export.Exported` is one
flatbuffer, whose offsets are 32-bit (2 GiB), with some room left for the program."""

MAX_AXIS = 2**31 - 1
"""The largest size an axis of the input may be given: jax indexes with 32-bit integers
(without ``jax_enable_x64``), so no input could have a longer axis."""

_DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "uint8", "bool")


@dataclasses.dataclass(frozen=True)
class JaxExport:
    """What `export_jax` wrote.

    Attributes:
        path: the artifact file.
        inputs: the input it takes, e.g. ``"int32[b,t]"`` (names are symbolic sizes).
        outputs: what it returns, e.g. ``"float32[b,t,256]"``.
        size: the file's size in bytes.
    """

    path: pathlib.Path
    inputs: str
    outputs: str
    size: int


@dataclasses.dataclass(frozen=True)
class _Input:
    """The input to trace: each axis a size or a symbol name; where it comes from."""

    axes: tuple[int | str, ...]
    dtype: str
    origin: str
    sample: tuple[int, ...]  # concrete sizes to try when a symbolic trace fails
    guessed: tuple[int, ...] = ()  # the axes whose sample size nnx made up (no data gives it)


def export_jax(
    config: Any,
    *,
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str],
    input_shape: str | Sequence[int | str] | None = None,
    input_dtype: str | None = None,
) -> JaxExport:
    """Write the model of ``config`` filled from ``checkpoint`` to ``out`` as a serialized
    `jax.export` artifact (see the module docstring).

    Args:
        config: a config file path, mapping or `Config` (its ``model``, and ``data``/``task``
            for the input).
        checkpoint: a checkpoint directory, or a directory of ``step_N`` checkpoints.
        out: the file to write; it must not exist.
        input_shape: the whole input shape, batch axis first, each axis a size or a name
            (``"b,128"``, ``(1, 8, 8, 1)``); default: from the data, batch and sequence
            length symbolic.
        input_dtype: the input's dtype (default: the data's; ``int32`` for token ids).

    Returns:
        A `JaxExport`.

    Raises:
        ConfigError: the config is invalid.
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
        ExportError: ``out`` exists or cannot be written; the input is unknown or
            ``input_shape`` malformed, of the wrong rank or with a size past `MAX_AXIS`;
            ``input_dtype`` is one jax narrows (``int64`` without ``jax_enable_x64``) or
            cannot hold the model's token ids; the model does not trace with a symbolic axis
            (named, with the ``input_shape`` that fixes it) or cannot run on the input; the
            weights pass `ARTIFACT_LIMIT`.
    """
    path = new_output(out, file=True)
    written = load_config(config)
    described = _described_input(written)
    loaded = load_train_config(written)
    wanted = _input(described, input_shape, input_dtype)
    model, _ = trained_model(loaded, checkpoint)
    _check_size(model)
    _check_ids(model, wanted)
    check()  # (a stop whose own raise was lost: before the trace, the longest step)
    exported = _export(model, wanted)
    check()
    try:
        data = exported.serialize()
    except Exception as error:  # noqa: BLE001 - jax's serializer: say what failed, not a trace
        check()  # (a stop that the serializer caught as an error: said as the stop)
        raise ExportError(f"the traced model cannot be serialized: {_first_line(error)}") from None
    write_file(path, bytes(data))
    return JaxExport(path, _spell(exported.in_avals[0]), _spell(exported.out_avals[0]), len(data))


# -- the input ---------------------------------------------------------------------------------
def _described_input(loaded: Any) -> _Input | None:
    """The input a language-model task (token ids, without reading the data) or the config's
    data section describes, if any: ``loaded`` holds the sections written in the config."""
    task, data = loaded.sections.get("task"), loaded.sections.get("data")
    if task is not None and task.type == "language_model":
        length = data.arguments.get("seq_len") if data is not None else None
        given = isinstance(length, int) and length > 0
        return _Input(
            ("b", "t"),
            "int32",
            "the language_model task (token ids)",
            (2, length if given else 8),
            (0,) if given else (0, 1),
        )
    spec = data.data_spec(loaded) if data is not None else None
    if spec is None:
        return None
    example = spec.example
    axes: list[int | str] = ["b", *example.shape]
    if len(example.shape) == 1 and np.issubdtype(example.dtype, np.integer):
        axes[1] = "t"  # (a sequence of token ids: any length)
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(example.dtype)).name  # (what jax will take)
    return _Input(tuple(axes), dtype, spec.origin, (2, *example.shape), (0,))


def _input(
    described: _Input | None, shape: str | Sequence[int | str] | None, dtype: str | None
) -> _Input:
    if dtype is not None and dtype not in _DTYPES:
        raise ExportError(f"input_dtype {dtype!r} is not one of {', '.join(_DTYPES)}.")
    kept = None if dtype is None else np.dtype(jax.dtypes.canonicalize_dtype(dtype)).name
    if kept != dtype:
        raise ExportError(
            f"input_dtype {dtype}: jax runs without 64-bit types here (jax_enable_x64 is off), "
            f"so the artifact would take {kept} in its place. Give --input-dtype {kept} "
            f"(input_dtype='{kept}'), or set JAX_ENABLE_X64=1 to keep {dtype}."
        )
    if shape is None:
        if described is None:
            raise ExportError(
                "the model's input is unknown: the config has no data section that describes "
                "it (or its data cannot be read) and no language_model task. Give the input "
                "shape, batch axis first, a name for a symbolic size: --input-shape b,8,8,1 "
                "(input_shape='b,8,8,1'), with --input-dtype int32 for token ids."
            )
        return dataclasses.replace(described, dtype=dtype or described.dtype)
    axes = _parse_shape(shape)
    if described is not None and len(axes) != len(described.axes):
        raise ExportError(
            f"input_shape {_spell_axes(axes)} has {len(axes)} axes but the model's input "
            f"({described.origin}) has {len(described.axes)}: "
            f"{_spell_axes(described.axes)}. Give the batch axis first, e.g. "
            f"--input-shape {_spell_axes(described.axes)} or "
            f"{_spell_axes((1, *described.axes[1:]))}."
        )
    sample = tuple(
        axis
        if isinstance(axis, int)
        else (described.sample[i] if described else 2 if i == 0 else 8)
        for i, axis in enumerate(axes)
    )
    guessed = tuple(
        i
        for i, axis in enumerate(axes)
        if isinstance(axis, str) and (described is None or i in described.guessed)
    )
    origin = f"--input-shape {_spell_axes(axes)}"
    default = described.dtype if described is not None else "float32"
    return _Input(axes, dtype or default, origin, sample, guessed)


def _parse_shape(shape: str | Sequence[int | str]) -> tuple[int | str, ...]:
    parts = shape.split(",") if isinstance(shape, str) else list(shape)
    axes: list[int | str] = []
    for index, part in enumerate(parts):
        text = part.strip() if isinstance(part, str) else ""
        if isinstance(part, int) and not isinstance(part, bool):
            size: int | None = part
        elif text.isascii() and text.isdigit():  # (not "²": a digit int() does not read)
            size = int(text) if len(text.lstrip("0")) <= len(str(MAX_AXIS)) else None
        elif text.isidentifier() and len(text) <= 32:
            axes.append(text)
            continue
        else:
            axes = []
            break
        if size is None or size > MAX_AXIS:
            raise ExportError(
                f"input_shape {str(shape)[:80]!r}: axis {index} is {_shown_size(part)}, more "
                f"than {MAX_AXIS:,} (2**31-1), the most an axis may have: jax indexes with "
                f"32-bit integers (without jax_enable_x64), so no input could have it. Give a "
                f"smaller size, or a name for a symbolic size (e.g. b)."
            )
        if size < 1:
            axes = []
            break
        axes.append(size)
    if not axes or len(axes) > 8:
        raise ExportError(
            f"input_shape {str(shape)[:80]!r} is not a shape: give 1 to 8 axes separated by "
            f"commas, each a size >= 1 or a name for a symbolic size, batch first (e.g. b,128 "
            f"or 1,8,8,1)."
        )
    return tuple(axes)


def _shown_size(part: int | str) -> str:
    """A size too large to take, as said: whole if short, else its first digits and length."""
    if isinstance(part, int) and part.bit_length() > 80:  # (str() of a huge int may fail)
        return f"an integer of {part.bit_length()} bits"
    text = str(part).strip()
    return text if len(text) <= 24 else f"{text[:20]}... ({len(text)} digits)"


def _check_ids(model: Any, wanted: _Input) -> None:
    """Refuse an integer (or bool) input dtype that cannot hold every token id of the model."""
    dtype = np.dtype(wanted.dtype)
    count = _token_count(model)
    if dtype.kind not in "iub" or count is None:
        return
    top = 1 if dtype.kind == "b" else int(np.iinfo(dtype).max)
    if top < count - 1:
        raise ExportError(
            f"input_dtype {wanted.dtype} holds the ids 0 to {top}, but the model has {count} "
            f"tokens (ids 0 to {count - 1}): those past {top} could not be given. Give "
            f"--input-dtype int32 (input_dtype='int32')."
        )


def _token_count(model: Any) -> int | None:
    """How many token ids the model takes: the rows of a language model's ``embed``, else of
    its first embedding table (in the order of ``nnx.state``); None without one."""
    modules = [module for _, module in model.iter_modules()]
    for module in modules:
        rows = getattr(getattr(module, "embed", None), "num_embeddings", None)
        if isinstance(rows, int):
            return rows
    for module in modules:
        rows = getattr(module, "num_embeddings", None)
        if isinstance(rows, int):
            return rows
    return None


# -- tracing -----------------------------------------------------------------------------------
def _check_size(model: Any) -> None:
    state = nnx.state(model)
    size = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in _arrays(state))
    if size > ARTIFACT_LIMIT:
        raise ExportError(
            f"the model's weights take {size / 2**30:.2f} GiB, more than a jax.export artifact "
            f"holds ({ARTIFACT_LIMIT / 2**30:.2f} GiB: the serialized program is one flatbuffer "
            f"with 32-bit offsets, and the weights are its constants). Export a smaller model."
        )


def _arrays(state: Any) -> list[Any]:
    return [
        leaf
        for leaf in jax.tree_util.tree_leaves(state)
        if hasattr(leaf, "shape") and not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
    ]


def _export(model: Any, wanted: _Input) -> Any:
    """The traced model; on failure, the symbolic axis to blame and the input that fixes it."""
    limit = _max_length(model)
    wanted = _with_model_sizes(model, wanted, limit)
    graphdef, state = nnx.split(model)

    def forward(x: jax.Array) -> Any:
        return nnx.merge(graphdef, state)(x)

    try:
        return _trace(forward, wanted.axes, wanted.dtype, limit)
    except Exception as error:  # noqa: BLE001 - a layer's failure: reported below, located
        check()  # (a stop that jax caught as an error: said as the stop, not retraced)
        failure = error
    try:
        _trace(forward, wanted.sample, wanted.dtype, limit)
    except Exception as error:  # noqa: BLE001 - the model cannot run on this input at all
        check()
        unknown = [i for i in wanted.guessed if i > 0 and isinstance(wanted.axes[i], str)]
        if unknown:  # (sizes nobody gave: said as guesses, and the axes to fix named)
            raise ExportError(_unknown_sizes(wanted, unknown, error)) from None
        spelled = f"{wanted.dtype}[{_spell_axes(wanted.sample)}]"
        raise ExportError(
            f"the model cannot run on {spelled} (the input of {wanted.origin}): "
            f"{type(error).__name__}: {_first_line(error)}"
        ) from None
    blamed = [
        axis
        for axis, size in enumerate(wanted.axes)
        if isinstance(size, str) and not _traces_with_only(forward, wanted, axis, limit)
    ]
    if not blamed:  # (each alone traces; together they do not)
        blamed = [axis for axis, size in enumerate(wanted.axes) if isinstance(size, str)]
    fixed = tuple(wanted.sample[i] if i in blamed else a for i, a in enumerate(wanted.axes))
    named = " and ".join(_axis_name(wanted, i) for i in blamed)
    raise ExportError(
        f"the model does not trace with a symbolic {named}: {type(failure).__name__}: "
        f"{_first_line(failure)} Fix {'that size' if len(blamed) == 1 else 'those sizes'} with "
        f"--input-shape {_spell_axes(fixed)} (input_shape='{_spell_axes(fixed)}')."
    )


def _with_model_sizes(model: Any, wanted: _Input, limit: int | None) -> _Input:
    """``wanted`` with the sizes the model gives in place of guessed ones: an image model's
    height and width (a layer's ``image_size``: NHWC input), a sequence no longer than its
    ``max_length``."""
    sample, guessed = list(wanted.sample), set(wanted.guessed)
    image = _image_size(model)
    if image is not None and len(sample) == 4:
        for axis, size in zip((1, 2), image):
            if axis in guessed:
                sample[axis] = size
                guessed.discard(axis)
    if limit is not None and len(sample) == 2 and 1 in guessed:
        sample[1] = min(sample[1], limit)
    return dataclasses.replace(wanted, sample=tuple(sample), guessed=tuple(sorted(guessed)))


def _image_size(model: Any) -> tuple[int, int] | None:
    """The (height, width) a layer of the model takes (an `ImageClassifier`'s ``image_size``)."""
    for _, module in model.iter_modules():
        size = getattr(module, "image_size", None)
        if isinstance(size, int) and not isinstance(size, bool):
            return size, size
        if (
            isinstance(size, (tuple, list))
            and len(size) == 2
            and all(isinstance(s, int) and not isinstance(s, bool) for s in size)
        ):
            return size[0], size[1]
    return None


def _unknown_sizes(wanted: _Input, unknown: list[int], error: BaseException) -> str:
    """The symbolic axes whose sizes nothing gives, named, with the sizes tried said as nnx's
    guesses (the user never gave them) and the input_shape to give instead."""
    one = len(unknown) == 1
    named = " and ".join(_axis_name(wanted, i) for i in unknown)
    tried = " and ".join(str(wanted.sample[i]) for i in unknown)
    numbers = [str(a).upper() for i, a in enumerate(wanted.axes) if i in unknown]
    shown = _spell_axes(  # (the other symbolic sizes but the batch's fixed: they may not trace)
        [
            str(a).upper() if i in unknown else wanted.sample[i] if i and isinstance(a, str) else a
            for i, a in enumerate(wanted.axes)
        ]
    )
    return (
        f"the model does not trace with a symbolic {named}, and {tried}, the "
        f"{'size' if one else 'sizes'} tried in {'its' if one else 'their'} place (no data "
        f"section or layer of the model gives {'it' if one else 'them'}), "
        f"{'does' if one else 'do'} not run either: {type(error).__name__}: "
        f"{_first_line(error)} Give {named} the {'size' if one else 'sizes'} the model takes, "
        f"e.g. --input-shape {shown} with {' and '.join(numbers)} "
        f"{'a number' if one else 'numbers'}."
    )


def _traces_with_only(forward: Any, wanted: _Input, axis: int, limit: int | None) -> bool:
    axes = tuple(a if i == axis else wanted.sample[i] for i, a in enumerate(wanted.axes))
    try:
        _trace(forward, axes, wanted.dtype, limit)
    except Exception:  # noqa: BLE001 - only whether it traces matters here
        check()
        return False
    return True


def _trace(forward: Any, axes: tuple[int | str, ...], dtype: str, limit: int | None) -> Any:
    names = sorted({a for a in axes if isinstance(a, str)})
    tail = {a for a in axes[1:] if isinstance(a, str)}
    constraints = [f"{name} <= {limit}" for name in names if limit is not None and name in tail]
    shape = jax.export.symbolic_shape(_spell_axes(axes), constraints=constraints)
    argument = jax.ShapeDtypeStruct(shape, dtype)
    return jax.export.export(jax.jit(forward))(argument)


def _max_length(model: Any) -> int | None:
    """The smallest ``max_length`` of the model's layers (a `PositionEmbed`'s), if any."""
    limits = [
        module.max_length
        for _, module in model.iter_modules()
        if isinstance(getattr(module, "max_length", None), int)
    ]
    return min(limits) if limits else None


# -- words -------------------------------------------------------------------------------------
def _axis_name(wanted: _Input, axis: int) -> str:
    """``batch (axis 0, 'b')``, ``sequence length (axis 1, 't')`` or ``axis 2 ('w')``."""
    name = repr(wanted.axes[axis])
    if axis == 0:
        return f"batch (axis 0, {name})"
    if axis == 1 and len(wanted.axes) == 2 and wanted.dtype.startswith(("int", "uint")):
        return f"sequence length (axis 1, {name})"
    return f"axis {axis} ({name})"


def _spell_axes(axes: Sequence[int | str]) -> str:
    return ",".join(str(a) for a in axes)


def _spell(aval: Any) -> str:
    return f"{np.dtype(aval.dtype).name}[{','.join(str(d) for d in aval.shape)}]"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else "(no message)"
    return first if first.endswith(".") else first + "."

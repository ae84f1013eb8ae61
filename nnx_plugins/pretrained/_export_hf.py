"""`export_hf`: a model imported by ``nnx import hf`` (and fine-tuned) back out as a directory
transformers loads (``AutoModelForCausalLM``, ``AutoModelForMaskedLM``,
``AutoModelForImageClassification`` ``.from_pretrained(DIR)``).

The model of the config is filled from the checkpoint; LoRA adapters are merged into the
kernels they adapt (``kernel + lora_alpha / lora_rank * lora_a @ lora_b``, as the layers
compute them); the family's converter table, read backwards, gives transformers' tensors, which
are written one at a time to ``model.safetensors``. The transformers ``config.json`` is the one
``nnx import hf`` kept beside ``config.yaml`` (or ``hf_config``): the model must still have the
shapes it describes (fine-tuning changes weights and adds adapters, not sizes). The
``generation_config.json`` and tokenizer files beside ``config.json`` are copied too, each
checked first: a regular file of that folder (a symlink leading out of it is refused), within
the size its reader takes, and what transformers reads; one that is not is refused, never left
out. The output directory appears whole or not at all.

Example:
    >>> import json, os, tempfile
    >>> import numpy as np
    >>> from safetensors.numpy import load_file
    >>> from nnx_plugins import export_hf, import_hf
    >>> folder = tempfile.mkdtemp()
    >>> imported = import_hf("tests/fixtures/hf/llama", os.path.join(folder, "tiny-llama"))
    >>> out = os.path.join(folder, "exported")
    >>> result = export_hf(imported.config, checkpoint=imported.checkpoint, out=out)
    >>> result.architecture, sorted(os.listdir(out))[:3]
    ('LlamaForCausalLM', ['config.json', 'generation_config.json', 'model.safetensors'])
    >>> original = load_file("tests/fixtures/hf/llama/model.safetensors")
    >>> exported = load_file(os.path.join(out, "model.safetensors"))
    >>> sorted(exported) == sorted(original)
    True
    >>> all(np.array_equal(exported[name], original[name]) for name in original)
    True
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

import nnx_core as nnx
from nnx_layers import LoRALinear, LoRAParam

from .._files import read_regular
from .._stopping import check
from ..config._build import build
from ..registry._registry import default_registry
from ..training._config import load_train_config
from ..training.data._tokenizers import MAX_TOKENIZER_BYTES, HFTokenizer, TokenizerError
from ._convert import Rule, _listed, backward, path_text, table_rows
from ._errors import PretrainedError
from ._exporting import ExportError, new_output, trained_model, write_directory
from ._import import find_converter
from ._source import (
    CONFIG,
    GENERATION,
    MAX_JSON_BYTES,
    TOKENIZER,
    TOKENIZER_CONFIG,
    read_json,
    read_side,
)

__all__ = ["HfExport", "export_hf"]

_COPIED = (GENERATION, TOKENIZER, TOKENIZER_CONFIG)
_AUTO = {
    "ForCausalLM": "AutoModelForCausalLM",
    "LMHeadModel": "AutoModelForCausalLM",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForImageClassification": "AutoModelForImageClassification",
}
_CODES = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "bool": "BOOL",
}


@dataclasses.dataclass(frozen=True)
class HfExport:
    """What `export_hf` wrote.

    Attributes:
        directory: the output directory.
        architecture: the transformers architecture (``config.json``'s ``architectures``).
        tensors: how many tensors ``model.safetensors`` holds.
        adapters: how many adapted projections had their LoRA adapters merged into their
            kernels (a `Repeat`'s projection, stacked over its blocks, counts once).
        size: the size of ``model.safetensors`` in bytes.
    """

    directory: pathlib.Path
    architecture: str
    tensors: int
    adapters: int
    size: int

    @property
    def auto_class(self) -> str:
        """The transformers class that loads the directory (``AutoModelForCausalLM``, ...)."""
        for ending, name in _AUTO.items():
            if self.architecture.endswith(ending):
                return name
        return "AutoModel"


def export_hf(
    config: Any,
    *,
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str],
    hf_config: str | os.PathLike[str] | None = None,
) -> HfExport:
    """Write the model of ``config`` filled from ``checkpoint`` to the new directory ``out``
    as transformers saves a model (see the module docstring).

    Args:
        config: the config file (``DST/config.yaml`` of ``nnx import hf``), mapping or `Config`.
        checkpoint: a checkpoint directory, or a directory of ``step_N`` checkpoints.
        out: the directory to write; it must not exist.
        hf_config: transformers' ``config.json`` of the model; default: the ``config.json``
            beside the config file (``nnx import hf`` keeps it there).

    Returns:
        An `HfExport`.

    Raises:
        ConfigError: the config is invalid.
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
        PretrainedError: no ``config.json``, or one that cannot be read; its architecture has
            no converter, or the converter refuses one of its values; a
            ``generation_config.json``, ``tokenizer.json`` or ``tokenizer_config.json`` beside
            it that is not a regular file of that folder (a device, a FIFO, a folder, a symlink
            leading out of the folder), is too large, or is not what transformers reads (a JSON
            object; a tokenizer the tokenizers library reads): transformers would not load the
            output, or the file is not the model's.
        ExportError: ``out`` exists or cannot be written; the model does not have the shapes
            ``config.json`` describes (each differing parameter named).
    """
    path = new_output(out)
    loaded = load_train_config(config)
    where = _hf_config_path(loaded, hf_config)
    try:
        settings = read_json(where, CONFIG)
        architecture = _architecture(settings, where)
        name, converter = find_converter(architecture, where=where)
    except PretrainedError as error:  # (said as an import says it: here, an export)
        raise PretrainedError(error.where, error.problem, action="export") from None
    made, rows = _converted(converter, name, settings, where)
    sides = _side_files(where.parent)
    model, _ = trained_model(loaded, checkpoint)
    check()  # (a stop whose own raise was lost: said before the work goes on)
    adapters = merge_adapters(model)
    state = {
        path_text(p): v.value
        for p, v in nnx.state(model, nnx.All(nnx.Param, nnx.Not(LoRAParam))).flat_state()
    }
    _check_shapes(made, state, where)
    _check_targets(rows, state, name, getattr(loaded, "source", "the config"))
    size = 0

    def fill(folder: pathlib.Path) -> None:
        nonlocal size
        size = _write_safetensors(folder / "model.safetensors", rows, state)
        (folder / CONFIG).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        for name, data in sides:
            (folder / name).write_bytes(data)

    write_directory(path, fill)
    return HfExport(path, architecture, len(rows), adapters, size)


def _hf_config_path(config: Any, given: str | os.PathLike[str] | None) -> pathlib.Path:
    if given is not None:
        return pathlib.Path(given)
    source = getattr(config, "source", "<dict>")
    if os.path.isfile(source):
        beside = pathlib.Path(source).absolute().parent / CONFIG
        if os.path.lexists(beside):  # (one that is not a regular file is refused as it is)
            return beside
        hint = f"there is no {CONFIG} beside {source}"
    else:
        hint = "the config is not a file"
    raise ExportError(
        f"the model's transformers config.json is needed to name its tensors and to be loaded, "
        f"and {hint}. nnx import hf keeps it beside config.yaml; give it with --hf-config "
        f"(hf_config=...)."
    )


def _architecture(settings: Mapping[str, Any], where: pathlib.Path) -> str:
    names = settings.get("architectures")
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise PretrainedError(
            where,
            f"'architectures' must be a list naming the model class (e.g. "
            f"['LlamaForCausalLM']), got {str(names)[:80]}",
        )
    return names[0]


def merge_adapters(model: Any) -> int:
    """Add every `LoRALinear`'s adapter into its kernel (scaled as its layer scales it:
    ``lora_alpha / lora_rank`` of the layer holding it, 1 without an alpha) and zero the
    adapter, so the model computes what it did; how many were merged.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import LoRALinear
        >>> from nnx_plugins.pretrained._export_hf import merge_adapters
        >>> layer = LoRALinear(3, 2, lora_rank=1, rngs=Rngs(0))
        >>> layer.lora.lora_b.value = jnp.ones((1, 2))
        >>> before = layer(jnp.ones((1, 3)))
        >>> merge_adapters(layer), bool(jnp.allclose(layer(jnp.ones((1, 3))), before))
        (1, True)
    """
    merged = 0
    for parent, linear in _adapted(model):
        scale = _scale(parent)
        a, b = linear.lora.lora_a.value, linear.lora.lora_b.value
        kernel = linear.kernel.value
        delta = scale * np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32))
        linear.kernel.value = (np.asarray(kernel, np.float32) + delta).astype(kernel.dtype)
        linear.lora.lora_b.value = np.zeros_like(b)
        merged += 1
    return merged


def _adapted(model: Any) -> Iterator[tuple[Any, Any]]:
    """``(the layer holding it, the LoRALinear)`` for every LoRALinear of ``model``."""
    modules = dict(model.iter_modules())
    for path, module in modules.items():
        if isinstance(module, LoRALinear):
            yield modules.get(tuple(path[:-1]), model), module


def _scale(layer: Any) -> float:
    rank, alpha = getattr(layer, "lora_rank", None), getattr(layer, "lora_alpha", None)
    if isinstance(rank, int) and rank > 0 and alpha is not None:
        return float(alpha) / rank
    return 1.0


def _converted(
    converter: Any, name: str, settings: Mapping[str, Any], where: pathlib.Path
) -> tuple[dict[str, Any], list[tuple[str, Rule, int | None]]]:
    """The nnx config ``config.json`` describes, and the converter's table rows to write.

    Raises:
        PretrainedError: the converter refuses a value of config.json (named, with the value),
            or looks up a field config.json does not have (named, with the fix).
    """
    try:
        made = converter.config(settings)
        rows = [row for row in table_rows(converter, settings) if row[1].targets]
    except KeyError as error:  # (a pack's converter reading config[key]: the field is missing)
        raise PretrainedError(where, _missing(error, name, settings), action="export") from None
    except (ValueError, TypeError) as error:
        text = str(error.args[0]) if error.args else type(error).__name__
        raise PretrainedError(
            where, f"{text} (converter {name}); fix config.json", action="export"
        ) from None
    if not isinstance(made, Mapping) or not isinstance(made.get("model"), Mapping):
        raise PretrainedError(
            where,
            f"the converter {name} returned {type(made).__name__}, not a config with a "
            "'model' section: fix the converter",
            action="export",
        )
    return dict(made), rows


def _missing(error: KeyError, name: str, settings: Mapping[str, Any]) -> str:
    """Why the converter ``name`` raised ``error`` reading ``settings`` (config.json), and the
    fix: the field config.json lacks, or a lookup of the converter's own that failed."""
    key = error.args[0] if error.args else None
    converter = f"converter {name} of {default_registry().resolve('converter', name).plugin}"
    if isinstance(key, str) and key not in settings:
        return (
            f"{CONFIG} has no field {key[:80]!r}, which the converter reads ({converter}). Give "
            f"it the value the model was imported with (nnx import hf copies the source's "
            f"{CONFIG} beside config.yaml), or give that {CONFIG} with --hf-config"
        )
    shown = repr(key)[:80]
    return f"the converter failed looking up {shown} (KeyError) ({converter}): fix the converter"


def _check_targets(
    rows: list[tuple[str, Rule, int | None]], state: Mapping[str, Any], name: str, source: str
) -> None:
    """Refuse, before anything is written, a tensor the converter's table makes from a
    parameter the model does not have (a table that config.json makes ask for more than the
    converter's config builds)."""
    for tensor, rule, _ in rows:
        for target in rule.targets:
            if target not in state:
                shown = _listed(sorted(state), ", ")
                raise ExportError(
                    f"the converter {name} writes the tensor {tensor!r} from the parameter "
                    f"{target!r}, which the model of {source} does not have (its parameters: "
                    f"{shown or 'none'}). Export with the {CONFIG} the model was imported with "
                    f"(--hf-config), or fix the converter's table."
                )


def _side_files(folder: pathlib.Path) -> list[tuple[str, bytes]]:
    """The generation config and tokenizer files beside config.json, read to be copied (name,
    bytes). A file there that cannot be copied as transformers reads it is refused, never left
    out silently: each must be a regular file of ``folder`` (a symlink leading out of it is
    not copied: an export writes that folder's files, not what a link names), within the size
    its reader takes (`MAX_JSON_BYTES`, `MAX_TOKENIZER_BYTES`), and what transformers reads
    (the JSON ones a JSON object, ``tokenizer.json`` a tokenizer the tokenizers library reads).

    Raises:
        PretrainedError: one of them is not a regular file, leads out of ``folder``, is too
            large, cannot be read, or is not what transformers reads (the file named).
    """
    found = []
    for name in _COPIED:
        side = folder / name
        if not os.path.lexists(side):
            continue
        limit = MAX_TOKENIZER_BYTES if name == TOKENIZER else MAX_JSON_BYTES
        data = read_side(side, folder, limit, action="export", read=read_regular)
        _check_side(side, name)
        found.append((name, data))
    return found


def _check_side(side: pathlib.Path, name: str) -> None:
    """Refuse a side file that transformers would not load: a JSON config that is not a JSON
    object, a tokenizer.json the tokenizers library does not read."""
    if name == TOKENIZER:
        try:
            _ = HFTokenizer(str(side)).vocab_size  # (read and parsed: the check)
        except TokenizerError as error:
            problem = error.message.removeprefix(f"{side}: ")
            raise PretrainedError(side, problem, action="export") from None
        return
    try:
        read_json(side, name)
    except PretrainedError as error:
        raise PretrainedError(
            error.where, error.problem + "; fix or remove it", action="export"
        ) from None


def _check_shapes(made: Mapping[str, Any], state: Mapping[str, Any], where: pathlib.Path) -> None:
    """Refuse a model whose parameters differ from those config.json describes."""
    abstract = nnx.eval_shape(lambda: build({"model": made["model"]}))
    wanted = {
        path_text(p): tuple(v.value.shape)
        for p, v in nnx.state(abstract, nnx.All(nnx.Param, nnx.Not(LoRAParam))).flat_state()
    }
    have = {name: tuple(np.shape(value)) for name, value in state.items()}
    problems = [
        f"{name}: {have.get(name, 'absent')} in the model, {wanted.get(name, 'absent')} in {CONFIG}"
        for name in sorted(set(wanted) | set(have))
        if have.get(name) != wanted.get(name)
    ]
    if problems:
        shown = "; ".join(problems[:6]) + (
            f"; and {len(problems) - 6} more" if len(problems) > 6 else ""
        )
        raise ExportError(
            f"the model does not have the parameters {where} describes ({shown}). Export a "
            f"model of the config nnx import hf wrote (fine-tuning may add adapters, not change "
            f"sizes), or give the config.json that describes it with --hf-config."
        )


def _tensors(
    rows: list[tuple[str, Rule, int | None]], state: Mapping[str, Any]
) -> Iterator[tuple[str, np.ndarray]]:
    for name, rule, layer in rows:
        parts = [np.asarray(state[t] if layer is None else state[t][layer]) for t in rule.targets]
        yield name, backward(rule, parts)


def _write_safetensors(
    path: pathlib.Path, rows: list[tuple[str, Rule, int | None]], state: Mapping[str, Any]
) -> int:
    """Write transformers' tensors one at a time (the header first, from their shapes)."""
    described, offset = {}, 0
    for name, rule, layer in rows:
        shapes = [np.shape(state[t])[0 if layer is None else 1 :] for t in rule.targets]
        shape = rule.backward_shape(shapes)
        dtype = np.dtype(state[rule.targets[0]].dtype)
        size = int(np.prod(shape)) * dtype.itemsize
        described[name] = {
            "dtype": _CODES[dtype.name],
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    described["__metadata__"] = {"format": "pt"}
    header = json.dumps(described, separators=(",", ":")).encode("utf-8")
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        for name, array in _tensors(rows, state):
            check()  # (a stop whose own raise was lost ends the write here)
            info = described[name]
            if list(array.shape) != info["shape"]:
                raise ExportError(f"{name}: made of shape {array.shape}, expected {info['shape']}")
            handle.write(np.ascontiguousarray(array).tobytes())
        handle.flush()
        os.fsync(handle.fileno())
    return path.stat().st_size

"""`import_hf`: a transformers model directory -> ``DST/config.yaml`` + ``DST/checkpoint/``.

The steps: read the source (`Source`: config.json, the safetensors files, checked and
memory-mapped), find the converter registered for its architecture (``nnx.converters``), turn
config.json into an nnx config, build the model abstractly (shapes only: nothing allocated),
match every tensor to a parameter (`plan`: every missing, unexpected or misshapen tensor
reported by its transformers name before anything is written), then write the config, the
checkpoint (streamed: `write_checkpoint`) and the tokenizer files into a temporary directory
beside ``DST``, renamed into place at the end. An error leaves nothing behind.

Example:
    >>> import os, tempfile
    >>> import nnx_plugins
    >>> from nnx_plugins import import_hf
    >>> out = os.path.join(tempfile.mkdtemp(), "tiny-llama")
    >>> result = import_hf("tests/fixtures/hf/llama", out)
    >>> result.architecture, sorted(os.listdir(out))
    ('LlamaForCausalLM', ['checkpoint', 'config.json', 'config.yaml', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'])
    >>> model = nnx_plugins.load(os.path.join(out, "checkpoint"))
    >>> type(model).__name__, model.blocks.count
    ('CausalLM', 2)
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import inspect
import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import yaml

import nnx_core

from .._files import usual_mode
from .._stopping import check, published, shielded
from .._text import content_kind, os_problem
from ..config._build import build
from ..registry._errors import PluginError
from ..registry._registry import Registry, default_registry
from ..training._config import load_train_config
from ..training.data._base import DataError
from ..training.data._tokenizers import HFTokenizer, TokenizerError
from ._convert import Converter, plan
from ._errors import PretrainedError
from ._source import CONFIG, GENERATION, Source
from ._write import Parameter, write_checkpoint

__all__ = ["import_hf", "Imported", "find_converter", "DTYPES", "DEFAULT_TEXT", "MASKED_MODELS"]

#: the dtypes ``--dtype`` may ask for
DTYPES = ("float32", "bfloat16", "float16")
#: the text an imported language model's config trains on until ``data.path=`` says otherwise
DEFAULT_TEXT = "stdlib:json"
#: the model types trained as masked language models: their text data masks tokens (BERT's)
MASKED_MODELS = ("MaskedLM",)
_MASK_PROBABILITY = 0.15


@dataclasses.dataclass(frozen=True)
class Imported:
    """What `import_hf` wrote.

    Attributes:
        architecture: the transformers architecture imported.
        directory: ``DST``.
        config: ``DST/config.yaml``.
        checkpoint: ``DST/checkpoint``.
        parameters: how many numbers the model holds.
        bytes: the size of the checkpoint's tensor file.
        dtype: the parameters' dtype.
        converted_from: the checkpoint's own dtype when it is not one ``--dtype`` takes
            (float64: jax computes in float32) and the import converted it to ``dtype``;
            None otherwise.
    """

    architecture: str
    directory: pathlib.Path
    config: pathlib.Path
    checkpoint: pathlib.Path
    parameters: int
    bytes: int
    dtype: str
    converted_from: str | None = None


def find_converter(
    architecture: str, *, registry: Registry | None = None, where: Any = "config.json"
) -> tuple[str, Converter]:
    """The registered converter of ``architecture``: its own name (a built-in), or a pack's
    ``namespace.architecture``.

    Raises:
        PretrainedError: none is registered (the registered ones are listed), or several packs
            provide it.
        PluginError: its pack fails to load (named with its distribution).

    Example:
        >>> from nnx_plugins.pretrained._import import find_converter
        >>> find_converter("LlamaForCausalLM")[0]
        'LlamaForCausalLM'
    """
    registry = registry or default_registry()
    names = registry.names("converter")
    found = (
        [architecture]
        if architecture in names
        else [n for n in names if n.rpartition(".")[2] == architecture]
    )
    if not found:
        raise PretrainedError(
            where,
            f"no converter is registered for the architecture {architecture!r}. Registered: "
            f"{', '.join(names) or 'none'}. A pack adds one through the 'nnx.converters' "
            "entry-point group (docs/pretrained.md)",
        )
    if len(found) > 1:
        owners = [f"{n} ({registry.providers('converter', n)[0].plugin})" for n in found]
        raise PretrainedError(
            where,
            f"several packs convert {architecture!r}: {' and '.join(owners)}. Uninstall one, or "
            "keep one with NNX_PLUGINS",
        )
    return found[0], registry.get("converter", found[0])


def _nnx_config(name: str, converter: Converter, source: Source, registry: Registry) -> dict:
    where = source.directory / CONFIG
    provider = registry.resolve("converter", name).plugin
    try:
        config = converter.config(source.config)
    except KeyError as error:  # (a pack's converter reading config[key]: the field is missing)
        key = error.args[0] if error.args else None
        if isinstance(key, str) and key not in source.config:
            text = f"config.json has no field {key!r}, which the converter reads"
        else:
            text = f"the converter failed looking up {key!r} (KeyError)"
        raise PretrainedError(where, f"{text} (converter {name} of {provider})") from None
    except (ValueError, TypeError, ArithmeticError) as error:
        text = str(error.args[0]) if error.args else type(error).__name__
        raise PretrainedError(where, f"{text} (converter {name} of {provider})") from None
    if not isinstance(config, Mapping) or not isinstance(config.get("model"), Mapping):
        raise PretrainedError(
            where,
            f"the converter {name} of {provider} returned {type(config).__name__}, not a config "
            "with a 'model' section: fix the converter",
        )
    return dict(config)


def _checkpoint_dtype(source: Source) -> np.dtype:
    """The floating dtype holding most of the checkpoint's bytes."""
    sizes: dict[np.dtype, int] = {}
    for name in source.names():
        dtype = np.dtype(source.dtype(name))
        if dtype.kind == "f" or dtype.name == "bfloat16":
            count = int(np.prod(source.shape(name))) * dtype.itemsize
            sizes[dtype] = sizes.get(dtype, 0) + count
    return max(sizes, key=lambda d: sizes[d]) if sizes else np.dtype(np.float32)


def _with_param_dtype(node: Any, dtype: str, registry: Registry) -> Any:
    """``node`` with ``param_dtype: dtype`` on every layer that takes one."""
    if isinstance(node, list):
        return [_with_param_dtype(item, dtype, registry) for item in node]
    if not isinstance(node, Mapping):
        return node
    node = {k: _with_param_dtype(v, dtype, registry) for k, v in node.items()}
    kind = node.get("type")
    if isinstance(kind, str):
        obj = registry.get("layer", kind)
        if isinstance(obj, type) and "param_dtype" in inspect.signature(obj.__init__).parameters:
            node["param_dtype"] = dtype
    return node


def _tokenizer_section(source: Source, model: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``tokenizer:`` section of the source's tokenizer.json (checked: it must load), with
    the EOS and padding ids of generation_config.json (else config.json), checked."""
    if source.tokenizer is None:
        return None
    try:
        vocab = HFTokenizer(str(source.tokenizer)).vocab_size
    except TokenizerError as error:
        problem = error.message.removeprefix(f"{source.tokenizer}: ")
        raise PretrainedError(source.tokenizer, problem) from None
    section: dict[str, Any] = {"type": "hf", "path": "tokenizer.json"}
    eos = _token_ids(source, "eos_token_id", model, vocab)
    if eos is not None:
        section["eos_token_ids"] = eos
    pad = _token_ids(source, "pad_token_id", model, vocab)
    if pad is not None:
        section["pad_token_id"] = pad[0]
    return section


def _token_ids(source: Source, key: str, model: Mapping[str, Any], vocab: int) -> list[int] | None:
    """``key`` (``eos_token_id``: an id or a list of ids; ``pad_token_id``: an id) of
    generation_config.json, else of config.json; None when unset (a negative padding id is
    transformers' old way of saying unset).

    Raises:
        PretrainedError: not an id (or a list of ids), or an id outside the tokenizer's or the
            model's vocabulary (the file, the field, the value and both sizes named).
    """
    if key in source.generation:
        value, where = source.generation[key], source.directory / GENERATION
    else:
        value, where = source.config.get(key), source.directory / CONFIG
    if value is None:
        return None
    many = key == "eos_token_id"
    ids = value if many and isinstance(value, list) else [value]
    if not ids:
        raise PretrainedError(
            where,
            f"'{key}' is an empty list: give a token id or a list of them, or remove the field "
            f"(then {CONFIG}'s is read, as transformers reads it)",
        )
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        shown = json.dumps(value)
        shown = shown if len(shown) <= 60 else content_kind(value)
        wanted = "a token id (a whole number >= 0)" + (" or a list of them" if many else "")
        raise PretrainedError(
            where, f"'{key}' must be {wanted}, got {shown}. Fix it or remove the field"
        )
    if not many and ids[0] < 0:
        return None
    rows = (model.get("embed") or {}).get("num_embeddings")
    sizes = {"the tokenizer's": vocab, "the model's": rows}
    for token in ids:
        for whose, size in sizes.items():
            if isinstance(size, int) and not 0 <= token < size:
                raise PretrainedError(
                    where,
                    f"'{key}' holds {token}, outside {whose} vocabulary of {size:,} token ids "
                    f"(0 to {size - 1}): the file and tokenizer.json do not belong together. "
                    "Fix the id",
                )
    return list(ids)


def _full_config(config: dict[str, Any], source: Source) -> dict[str, Any]:
    """The converter's config plus the tokenizer, and data and training defaults."""
    out = {"model": config["model"]}
    for key, value in config.items():
        if key != "model":
            out[key] = value
    tokenizer = _tokenizer_section(source, out["model"])
    if tokenizer is not None:
        out["tokenizer"] = tokenizer
    if out.get("task", {}).get("type") == "language_model" and "data" not in out:
        out["data"] = _text_data(out["model"], source, tokenizer)
    out.setdefault("checkpoint", {"init_from": "checkpoint"})  # (nnx train starts from it)
    out.setdefault("optimizer", {"type": "adamw", "learning_rate": 1e-4})
    out.setdefault("train", {"steps": 100, "batch_size": 8})
    return out


def _text_data(
    model: Mapping[str, Any], source: Source, tokenizer: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The ``text`` data of a language model: windows that fit its positions; a masked LM's
    (`MASKED_MODELS`) mask tokens as BERT's pretraining does, when its mask token is known."""
    positions = model.get("max_length") or (model.get("position_embed") or {}).get("num_embeddings")
    data = {"type": "text", "path": DEFAULT_TEXT, "seq_len": min(int(positions or 128), 128)}
    if model.get("type") in MASKED_MODELS and tokenizer is not None:
        mask = _mask_token_id(source, model)
        if mask is not None:
            data["masking"] = {"probability": _MASK_PROBABILITY, "mask_token_id": mask}
    return data


def _mask_token_id(source: Source, model: Mapping[str, Any]) -> int | None:
    """The id of the mask token: the tokenizer's (`HFTokenizer.mask_token_id`), else
    config.json's ``mask_token_id``; checked to be a token of the model and the tokenizer.

    Raises:
        PretrainedError: the id is outside either vocabulary (both sizes named).
    """
    assert source.tokenizer is not None
    tokenizer = HFTokenizer(str(source.tokenizer))
    found, where = tokenizer.mask_token_id, source.tokenizer
    given = source.config.get("mask_token_id")
    if found is None and isinstance(given, int) and not isinstance(given, bool):
        found, where = given, source.directory / CONFIG
    if found is None:
        return None
    rows = (model.get("embed") or {}).get("num_embeddings")
    sizes = {"the tokenizer's": tokenizer.vocab_size, "the model's": rows}
    for whose, size in sizes.items():
        if isinstance(size, int) and not 0 <= found < size:
            raise PretrainedError(
                where,
                f"the mask token id {found} is outside {whose} vocabulary of {size:,} token ids "
                f"(0 to {size - 1}); the tokenizer and config.json do not belong together",
            )
    return int(found)


def _check_destination(destination: pathlib.Path, *, meanwhile: bool = False) -> None:
    """Refuse a ``destination`` that is not a new or empty folder (``meanwhile``: it was when
    the import started, and another process wrote it since)."""
    if destination.name in ("", "..") or os.path.ismount(destination):
        raise PretrainedError(
            destination,
            "--out is '.', '..', the root or a mount point: the import puts a new folder in "
            "place under the name --out gives, which such a path cannot be renamed to. Give a "
            "named folder, e.g. --out ./model",
        )
    if destination.is_symlink():
        raise PretrainedError(
            destination,
            f"--out is a symlink (to {os.readlink(destination)}); the import does not write "
            "through links. Give a new or empty directory itself",
        )
    if destination.exists() and not destination.is_dir():
        raise PretrainedError(
            destination, "--out names an existing file; give a new or empty directory"
        )
    if destination.is_dir() and any(destination.iterdir()):
        if meanwhile:
            raise PretrainedError(
                destination,
                "--out was written by another process while this import ran (it was empty "
                "or absent when the import started); nothing of this import was written, "
                "and what is there was left as it is. Give another --out",
            )
        raise PretrainedError(
            destination,
            "--out is a directory that is not empty; nothing was written. Give a new or empty "
            "directory (the import never overwrites)",
        )
    folder = destination.absolute().parent
    while not os.path.lexists(folder) and folder.parent != folder:
        folder = folder.parent
    if not folder.is_dir():
        raise PretrainedError(
            destination,
            f"--out cannot be made: {folder} is a file, not a folder. Give a path in a folder",
        )


def import_hf(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    dtype: str | None = None,
    registry: Registry | None = None,
) -> Imported:
    """Import the transformers model directory ``source`` into ``destination``.

    Args:
        source: a directory as ``save_pretrained`` writes it.
        destination: a new or empty directory: it receives ``config.yaml`` (an nnx config of
            registered layers, with a task, the tokenizer, data and training defaults),
            ``checkpoint/`` (what `nnx_plugins.load`, ``nnx eval``, ``nnx generate`` and
            ``nnx train`` take) and the tokenizer files.
        dtype: the parameters' dtype (``float32``, ``bfloat16``, ``float16``); None keeps the
            checkpoint's (the dtype holding most of its bytes), or converts a float64 one to
            float32 (`Imported.converted_from` says so).
        registry: where converters and layers are found; the default registry when omitted.

    Returns:
        An `Imported`.

    Raises:
        PretrainedError: an unreadable or malformed source, an architecture without a
            converter, a config.json value the converter does not support, tensors that do
            not fit, a destination that is not a new or empty directory, a failed write.
        PluginError: a pack's converter fails to load.
    """
    registry = registry or default_registry()
    for text, name, wanted in (
        (os.fspath(source), "SRC", "the directory transformers' save_pretrained wrote"),
        (os.fspath(destination), "--out", "a new or empty directory to write into"),
    ):
        if not text.strip():
            raise PretrainedError(repr(text), f"{name} is empty: give {wanted}")
        if "\x00" in text:
            raise PretrainedError(
                repr(text), f"{name} holds a NUL character, which no path can: give {wanted}"
            )
    destination = pathlib.Path(destination)
    if dtype is not None and dtype not in DTYPES:
        raise PretrainedError(
            destination, f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}"
        )
    _check_destination(destination)
    src = Source(source)
    name, converter = find_converter(
        src.architecture, registry=registry, where=src.directory / CONFIG
    )
    chosen = np.dtype(dtype) if dtype is not None else _checkpoint_dtype(src)
    converted = None
    if chosen.name not in DTYPES:  # (float64: jax makes float32 models unless x64 is on)
        converted, chosen = chosen.name, np.dtype(np.float32)
    config = _full_config(_nnx_config(name, converter, src, registry), src)
    if chosen != np.float32:
        config["model"] = _with_param_dtype(config["model"], chosen.name, registry)
    abstract = _abstract_model(config, name, src)
    variables = list(nnx_core.state(abstract).flat_state())
    shapes = {tuple(p): (tuple(v.value.shape), type(v)) for p, v in variables}
    matched = plan(converter, src, shapes, where=src.directory, dtype=chosen)
    by_path = {t.path: t for t in matched.targets}
    parameters = [
        Parameter(
            tuple(path),
            variable,
            by_path[tuple(path)].dtype,
            by_path[tuple(path)].shape,
            lambda target=by_path[tuple(path)]: matched.produce(target),
        )
        for path, variable in variables
    ]
    run = {
        "imported_from": {
            "architecture": src.architecture,
            "directory": str(src.directory.resolve()),
            "transformers_version": src.config.get("transformers_version"),
        }
    }
    if src.tokenizer is not None and "tokenizer" in config:  # (what token ids mean: as a run
        run["data"] = {  # records it, so that a run started from it reads text alike)
            "level": "tokenizer",
            "tokenizer": dict(config["tokenizer"]),
            "vocab_size": HFTokenizer(str(src.tokenizer)).vocab_size,
        }
    written = _write(destination, config, parameters, run, src)
    return Imported(
        src.architecture,
        destination,
        destination / "config.yaml",
        destination / "checkpoint",
        sum(int(np.prod(p.shape)) for p in parameters),
        written,
        chosen.name,
        converted,
    )


def _abstract_model(config: dict[str, Any], name: str, source: Source) -> Any:
    """The model ``config`` describes, with shapes only; its config checked as a run's."""
    where = source.directory / CONFIG
    try:
        load_train_config(config)
        return nnx_core.eval_shape(lambda: build({"model": config["model"]}))
    except (PluginError, DataError, ValueError) as error:
        raise PretrainedError(
            where,
            f"the model it describes cannot be built: the config the converter {name} made "
            f"from it is invalid ({_one_line(error)}). Fix the config.json values behind it, "
            "or the converter if config.json is right",
        ) from None


def _one_line(error: BaseException) -> str:
    """A config error's lines as one (an import's error is one line), without the ``<dict>``
    that names a config given as a mapping."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = " ".join(lines).replace("<dict>: ", "").replace(" in <dict>", "")
    return text.rstrip(".")


def _write(
    destination: pathlib.Path,
    config: dict[str, Any],
    parameters: list[Parameter],
    run: dict[str, Any],
    source: Source,
) -> int:
    """Write everything into a temporary folder beside ``destination``, renamed into place
    when complete. Stopped (Ctrl-C, SIGTERM: `nnx_plugins._stopping`) or failed, the temporary folder and the
    folders made for it are removed: nothing outside ``destination`` is left changed."""
    parent = destination.absolute().parent
    made = _missing_folders(parent)
    temporary = None
    try:
        with shielded():  # (a stop waits until the folder is made and known: then removed)
            try:
                parent.mkdir(parents=True, exist_ok=True)
                temporary = pathlib.Path(
                    tempfile.mkdtemp(prefix=f".{destination.name}.tmp-", dir=parent)
                )
            except OSError as error:
                raise PretrainedError(
                    destination,
                    f"--out cannot be made in {parent}: {os_problem(error)}; nothing was written. "
                    "Choose an --out in a folder you can write to",
                ) from None
        usual_mode(temporary)  # (mkdtemp's 0700: DST is read as the umask allows)
        (temporary / "checkpoint").mkdir()
        written = write_checkpoint(
            str(temporary / "checkpoint"), parameters, config={"model": config["model"]}, run=run
        )
        _write_config(temporary / "config.yaml", config, source)
        for name, data in source.side.items():
            (temporary / name).write_bytes(data)
        check()  # (a stop whose own raise was lost: nothing is put in place)
        with shielded():  # (put in place and recorded together)
            _rename_into(temporary, destination)
            temporary, made = None, []
            published(destination)
        return written
    except OSError as error:
        raise PretrainedError(
            destination, f"writing it failed: {os_problem(error)}; nothing was left behind"
        ) from None
    finally:
        with shielded():
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
            for folder in reversed(made):  # (the innermost first; only if still empty)
                with contextlib.suppress(OSError):
                    folder.rmdir()


def _missing_folders(folder: pathlib.Path) -> list[pathlib.Path]:
    """``folder`` and the folders above it that do not exist yet, outermost first (made for
    the destination, removed again if the import does not complete)."""
    missing = []
    while not os.path.lexists(folder) and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


def _rename_into(temporary: pathlib.Path, destination: pathlib.Path) -> None:
    """Rename ``temporary`` to ``destination`` (new, or an empty folder, which the rename
    replaces); refused when another process filled ``destination`` meanwhile."""
    try:
        os.rename(temporary, destination)
        return
    except OSError as error:
        if error.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
            raise
    _check_destination(destination, meanwhile=True)
    destination.rmdir()  # (empty: a system whose rename does not replace an empty folder)
    os.rename(temporary, destination)


def _usage(config: Mapping[str, Any]) -> str:
    """The header's lines on what the weights are for (a masked LM's on its masking; an
    image classifier's: predict and train on images, not generate from text)."""
    if (config.get("task") or {}).get("type") == "classification":
        return (
            "# The weights are in checkpoint/ (an image classifier, NHWC images: nnx predict\n"
            "# config.yaml --checkpoint checkpoint --input images.npz --output predictions.csv);\n"
            "# fine-tune on your images with: nnx train config.yaml data.type=npz "
            "data.path=images.npz\n"
        )
    if config["model"].get("type") not in MASKED_MODELS:
        return (
            "# The weights are in checkpoint/ (nnx generate config.yaml --checkpoint checkpoint);\n"
            + _TEXT
        )
    masking = (config.get("data") or {}).get("masking")
    if masking is not None:
        return (
            "# The weights are in checkpoint/. A masked LM: data.masking picks "
            f"{masking['probability']:.0%} of the tokens\n# to predict, given as the mask id "
            f"{masking['mask_token_id']} (80%), a random id (10%) or themselves (10%);\n" + _TEXT
        )
    return (
        "# The weights are in checkpoint/. A masked LM, but no mask token was found (the\n"
        "# mask_token of tokenizer_config.json, [MASK] or <mask> in tokenizer.json, config.json's\n"
        "# mask_token_id): set data.masking: {probability: 0.15, mask_token_id: ID} before training\n"
        "# (without it the text data trains next-token prediction, which this model sees through);\n"
        + _TEXT
    )


_TEXT = "# fine-tune on your text with: nnx train config.yaml data.path=notes.txt\n"


class _Plain(yaml.SafeDumper):
    """Writes repeated values out in full (no ``&id001`` anchors): the file is for reading."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _quoted(text: str) -> str:
    """``text`` in double quotes, escaped (JSON's escapes) so that it stays on its line of a
    YAML comment: a SRC named ``m\\ntrain: {steps: 9}`` wrote a line of config."""
    shown = json.dumps(text, ensure_ascii=False)
    return shown if shown.isprintable() else json.dumps(text)  # (U+2028, U+0085: YAML breaks)


def _write_config(path: pathlib.Path, config: dict[str, Any], source: Source) -> None:
    head = (
        f"# {_quoted(source.architecture)} imported from {_quoted(str(source.directory.resolve()))}"
        " by nnx import hf.\n" + _usage(config)
    )
    body = yaml.dump(config, Dumper=_Plain, sort_keys=False, default_flow_style=None, width=100)
    path.write_text(head + body, encoding="utf-8")

"""nnx_plugins: the plugin registry, validated model configs and the ``nnx`` command.

Names are resolved lazily (module ``__getattr__``), so ``import nnx_plugins`` imports neither
jax nor pydantic nor any plugin; the first use of a name imports what it needs. Once both
nnx_core and nnx_plugins are in use, nnx_core knows a pack's Variable kinds by their
entry-point names (``nnx_core.state(model, "acme.LoRAParam")``), whatever was imported first.

Example:
    >>> import nnx_plugins
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    >>> type(model).__name__, nnx_plugins.to_config(model)["out_features"]
    ('Linear', 3)
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    # the root of every error below
    "NnxError": "._errors",
    "NnxWarning": "._errors",
    # plugin errors
    "PluginInfo": ".registry._errors",
    "PluginError": ".registry._errors",
    "PluginLoadError": ".registry._errors",
    "PluginNameError": ".registry._errors",
    "NameCollisionError": ".registry._errors",
    "UnknownNameError": ".registry._errors",
    "PluginSettingsError": ".registry._errors",
    "PluginWarning": ".registry._errors",
    # hooks
    "hookimpl": ".registry._hookspecs",
    "hookspec": ".registry._hookspecs",
    # registry
    "Settings": ".registry._discovery",
    "Registry": ".registry._registry",
    "Provider": ".registry._providers",
    "default_registry": ".registry._registry",
    "set_default_registry": ".registry._registry",
    "get_layer": ".registry._lookup",
    "get_variable_type": ".registry._lookup",
    "load_variable_types": ".registry._lookup",
    "register_layer": ".registry._inprocess",
    "register_variable_kind": ".registry._inprocess",
    # configs
    "ConfigError": ".config._errors",
    "Problem": ".config._errors",
    "Config": ".config._load",
    "ConfigLimits": ".config._limits",
    "load_config": ".config._load",
    "build": ".config._build",
    "to_config": ".config._build",
    "register_section": ".config._sections",
    "config_schema": ".config._schema",
    "check_model": ".config._shapes",
    "DataSpec": ".config._shapes",
    "ModelCheck": ".config._shapes",
    "layer_spec": ".config._fields",
    "LayerSpec": ".config._fields",
    # run parts
    "register_task": ".registry._run_parts",
    "register_dataset": ".registry._run_parts",
    "register_metric": ".registry._run_parts",
    "register_logger": ".registry._run_parts",
    "register_callback": ".registry._run_parts",
    "get_run_part": ".registry._run_parts",
    "Task": ".training.tasks._base",
    "Dataset": ".training.data._base",
    "ArrayDataset": ".training.data._base",
    "DataInfo": ".training.data._base",
    "Logger": ".training.loggers._base",
    "Callback": ".training.callbacks._base",
    "Vocabulary": ".training.data._text",
    # training and checkpoints
    "save": ".training.checkpoints._save",
    "load": ".training.checkpoints._load",
    "read_manifest": ".training.checkpoints._manifest",
    "CheckpointError": ".training.checkpoints._save",
    "train": ".training._loop",
    "CompileCacheWarning": ".training._compile_cache",
    "evaluate": ".training._loop",
    "build_model": ".training._loop",
    "TrainResult": ".training._loop",
    "TrainingDivergedError": ".training._run_state",
    "load_train_config": ".training._config",
    "DataError": ".training.data._base",
    "RunPartError": ".training._part_calls",
    "SelectionWarning": ".training._assembly",
    "ProcessGroup": ".training._processes",
    # language models
    "generate": ".generation._generate",
    "Generation": ".generation._generate",
    "GenerationError": ".generation._decode",
    "decode": ".generation._decode",
    # pretrained models and tokenizers
    "import_hf": ".pretrained._import",
    "Imported": ".pretrained._import",
    "PretrainedError": ".pretrained._errors",
    "Converter": ".pretrained._convert",
    "Rule": ".pretrained._convert",
    "Tokenizer": ".training.data._tokenizers",
    "TokenizerError": ".training.data._tokenizers",
    "register_tokenizer": ".registry._run_parts",
    "register_converter": ".registry._run_parts",
    # pretrained models out
    "export_jax": ".pretrained._export_jax",
    "JaxExport": ".pretrained._export_jax",
    "export_hf": ".pretrained._export_hf",
    "HfExport": ".pretrained._export_hf",
    "ExportError": ".pretrained._exporting",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'nnx_plugins' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    _install_kind_resolver()
    return value


def _install_kind_resolver() -> None:
    if "nnx_core" in sys.modules:  # (else nothing to do: importing it would import jax)
        importlib.import_module(".registry._registry", __name__).install_kind_resolver()


_install_kind_resolver()


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from ._errors import NnxError as NnxError
    from .config._build import build as build
    from .config._build import to_config as to_config
    from .config._errors import ConfigError as ConfigError
    from .config._errors import Problem as Problem
    from .config._fields import LayerSpec as LayerSpec
    from .config._fields import layer_spec as layer_spec
    from .config._limits import ConfigLimits as ConfigLimits
    from .config._load import Config as Config
    from .config._load import load_config as load_config
    from .config._schema import config_schema as config_schema
    from .config._sections import register_section as register_section
    from .config._shapes import DataSpec as DataSpec
    from .config._shapes import ModelCheck as ModelCheck
    from .config._shapes import check_model as check_model
    from .generation._decode import GenerationError as GenerationError
    from .generation._decode import decode as decode
    from .generation._generate import Generation as Generation
    from .generation._generate import generate as generate
    from .pretrained._convert import Converter as Converter
    from .pretrained._convert import Rule as Rule
    from .pretrained._errors import PretrainedError as PretrainedError
    from .pretrained._export_hf import HfExport as HfExport
    from .pretrained._export_hf import export_hf as export_hf
    from .pretrained._export_jax import JaxExport as JaxExport
    from .pretrained._export_jax import export_jax as export_jax
    from .pretrained._exporting import ExportError as ExportError
    from .pretrained._import import Imported as Imported
    from .pretrained._import import import_hf as import_hf
    from .registry._discovery import Settings as Settings
    from .registry._errors import NameCollisionError as NameCollisionError
    from .registry._errors import PluginError as PluginError
    from .registry._errors import PluginInfo as PluginInfo
    from .registry._errors import PluginLoadError as PluginLoadError
    from .registry._errors import PluginNameError as PluginNameError
    from .registry._errors import PluginSettingsError as PluginSettingsError
    from .registry._errors import PluginWarning as PluginWarning
    from .registry._errors import UnknownNameError as UnknownNameError
    from .registry._hookspecs import hookimpl as hookimpl
    from .registry._hookspecs import hookspec as hookspec
    from .registry._inprocess import register_layer as register_layer
    from .registry._inprocess import register_variable_kind as register_variable_kind
    from .registry._lookup import get_layer as get_layer
    from .registry._lookup import get_variable_type as get_variable_type
    from .registry._lookup import load_variable_types as load_variable_types
    from .registry._providers import Provider as Provider
    from .registry._registry import Registry as Registry
    from .registry._registry import default_registry as default_registry
    from .registry._registry import set_default_registry as set_default_registry
    from .registry._run_parts import get_run_part as get_run_part
    from .registry._run_parts import register_callback as register_callback
    from .registry._run_parts import register_converter as register_converter
    from .registry._run_parts import register_dataset as register_dataset
    from .registry._run_parts import register_logger as register_logger
    from .registry._run_parts import register_metric as register_metric
    from .registry._run_parts import register_task as register_task
    from .registry._run_parts import register_tokenizer as register_tokenizer
    from .training._assembly import SelectionWarning as SelectionWarning
    from .training._config import load_train_config as load_train_config
    from .training._loop import TrainResult as TrainResult
    from .training._loop import build_model as build_model
    from .training._loop import evaluate as evaluate
    from .training._loop import train as train
    from .training._part_calls import RunPartError as RunPartError
    from .training._processes import ProcessGroup as ProcessGroup
    from .training._run_state import TrainingDivergedError as TrainingDivergedError
    from .training.callbacks._base import Callback as Callback
    from .training.checkpoints._load import load as load
    from .training.checkpoints._manifest import read_manifest as read_manifest
    from .training.checkpoints._save import CheckpointError as CheckpointError
    from .training.checkpoints._save import save as save
    from .training.data._base import ArrayDataset as ArrayDataset
    from .training.data._base import DataError as DataError
    from .training.data._base import DataInfo as DataInfo
    from .training.data._base import Dataset as Dataset
    from .training.data._text import Vocabulary as Vocabulary
    from .training.data._tokenizers import Tokenizer as Tokenizer
    from .training.data._tokenizers import TokenizerError as TokenizerError
    from .training.loggers._base import Logger as Logger
    from .training.tasks._base import Task as Task

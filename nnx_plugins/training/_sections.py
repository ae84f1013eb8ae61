"""The config sections of run parts: ``task``, ``data``, ``metrics``, ``loggers``, ``callbacks``.

Each names registered parts (`nnx_plugins.registry._run_parts`) by ``type``; the other keys
are the part's ``__init__`` arguments, validated against the config model derived from its
signature exactly as a layer's (`layer_spec`): an unknown type gets a did-you-mean, an unknown
argument the valid keys, a wrong value its expected type, each at its ``file:line:col``. Every
default is filled in, and the part is built once to catch what its ``__init__`` refuses.

Example:
    >>> from nnx_plugins.training._sections import LoggersSection, TaskSection
    >>> task = TaskSection.model_validate({"type": "regression", "loss": "huber"})
    >>> task.model_dump()
    {'type': 'regression', 'loss': 'huber', 'huber_delta': 1.0}
    >>> LoggersSection.model_validate(["csv", {"type": "jsonl"}]).model_dump()
    [{'type': 'csv', 'file': 'metrics.csv'}, {'type': 'jsonl'}]
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Collection, Mapping
from typing import Any, ClassVar

import pydantic
from pydantic_core import ValidationError

from .._text import suggest
from ..config._errors import ConfigError
from ..config._fields import layer_spec
from ..config._types import to_json
from ..registry._errors import PluginError
from ..registry._providers import NOUN
from ..registry._registry import default_registry
from ._part_calls import PartLabel, RunPartError
from ._problems import Problems

#: ``*args`` (e.g. of ``object.__init__``) is no config argument
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)

__all__ = [
    "Part",
    "TaskSection",
    "DataSection",
    "MetricsSection",
    "LoggersSection",
    "CallbacksSection",
    "part_schemas",
]


@dataclasses.dataclass(frozen=True)
class Part:
    """A validated run part: its kind, registered name and ``__init__`` arguments."""

    kind: str
    type: str
    arguments: dict[str, Any]

    @property
    def cls(self) -> Any:
        """The registered class."""
        return default_registry().get(self.kind, self.type)

    def make(self) -> Any:
        """A new instance of the part."""
        return self.cls(**self.arguments)

    def dump(self) -> dict[str, Any]:
        return {"type": self.type, **self.arguments}


def _problem_text(item: Mapping[str, Any], kind: str, name: str, fields: list[str]) -> str:
    loc = ".".join(map(str, item["loc"])) or "(the arguments)"
    if item["type"] == "extra_forbidden":
        key = str(item["loc"][-1])
        return (
            f"unknown argument {key!r} for {NOUN[kind]} {name!r}.{suggest(key, fields)} "
            f"Valid keys: {', '.join(['type', *fields])}"
        )
    if item["type"] == "missing":
        return f"{NOUN[kind]} {name!r} needs the argument {loc!r}"
    return item["msg"] or "invalid value"


def _check_part(
    kind: str, data: Any, loc: tuple[Any, ...], problems: Problems, default: str | None
) -> Part | None:
    """The `Part` ``data`` describes, or ``None`` after adding its problems at ``loc``."""
    noun = NOUN[kind]
    if isinstance(data, str):
        data = {"type": data}
    if data is None and default is not None:
        data = {}
    if not isinstance(data, Mapping):
        problems.add(loc, f"expected a {noun} name or {{type: NAME, ...its arguments}}", data)
        return None
    name = data.get("type", default)
    if not isinstance(name, str):
        where = (*loc, "type") if "type" in data else loc
        problems.add(where, f"expected the name of a registered {noun} as 'type'", name)
        return None
    registry = default_registry()
    try:
        cls = registry.get(kind, name)
        spec = layer_spec(name, cls, registry=registry)
    except PluginError as error:
        problems.add((*loc, "type") if "type" in data else loc, str(error), name)
        return None
    fields = [
        f.name for f in spec.fields if f.kind != "opaque" and f.parameter_kind not in _VARIADIC
    ]
    given = {k: v for k, v in data.items() if k != "type"}
    try:
        validated = spec.model.model_validate(
            {"type": name, **given}, context={"registry": registry}
        )
    except ValidationError as error:
        for item in error.errors(include_url=False):
            problems.add(
                (*loc, *item["loc"]), _problem_text(item, kind, name, fields), item.get("input")
            )
        return None
    dumped = validated.model_dump(by_alias=True)
    arguments = {key: to_json(dumped[key]) for key in fields if key in dumped}
    return _built(Part(kind, name, arguments), loc, problems)


def _built(part: Part, loc: tuple[Any, ...], problems: Problems) -> Part | None:
    """``part`` if its class accepts its arguments (``__init__`` must be cheap: no I/O)."""
    try:
        part.make()
    except Exception as error:  # noqa: BLE001 - whatever __init__ refuses is a config problem
        key = getattr(error, "key", None)
        where = (*loc, key) if isinstance(key, str) and key in part.arguments else loc
        text = getattr(error, "message", None) or str(error)
        problems.add(
            where,
            f"{NOUN[part.kind]} {part.type!r} refused it: {text}",
            part.arguments.get(key) if key else part.dump(),
        )
        return None
    return part


def part_schemas(kind: str) -> list[dict[str, Any]]:
    """The JSON Schema of every loadable part of ``kind`` (its ``type`` a constant)."""
    registry = default_registry()
    schemas = []
    for name, cls in sorted(registry.load_kind(kind).items()):
        try:
            model = layer_spec(name, cls, registry=registry).model
            schema = model.model_json_schema(by_alias=True)
        except Exception:  # noqa: BLE001 - a part pydantic cannot describe is left out
            continue
        schema = _inlined(schema, schema.pop("$defs", {}))
        schema["title"] = name
        schemas.append(schema)
    return schemas


def _inlined(schema: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """``schema`` with each ``{"$ref": "#/$defs/X"}`` of a part's own models (e.g. the text
    dataset's ``masking``) replaced by the definition, so the part's schema stands alone."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and depth < 8:
            found = defs.get(ref.removeprefix("#/$defs/"))
            if found is not None:
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                return {**_inlined(found, defs, depth + 1), **rest}
        return {key: _inlined(value, defs, depth) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_inlined(value, defs, depth) for value in schema]
    return schema


class _OnePart(pydantic.BaseModel):
    """A section naming one part: ``{type: NAME, ...arguments}`` (or just ``NAME``)."""

    model_config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    kind: ClassVar[str]
    default_type: ClassVar[str]
    part: Part

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, cls):
            return data
        problems = Problems()
        part = _check_part(cls.kind, data, (), problems, cls.default_type)
        problems.raise_if_any(cls.__name__)
        return cls.model_construct(part=part)

    @pydantic.model_serializer(mode="plain")
    def _flat(self) -> dict[str, Any]:
        return self.part.dump()

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {
            "description": cls.__doc__.split("\n")[0] if cls.__doc__ else "",
            "anyOf": [{"type": "string"}, *part_schemas(cls.kind)],
        }

    @classmethod
    def default_value(cls) -> dict[str, Any]:
        return {"type": cls.default_type}

    @property
    def type(self) -> str:
        return self.part.type

    @property
    def arguments(self) -> dict[str, Any]:
        return self.part.arguments

    def make(self) -> Any:
        """A new instance of the part."""
        return self.part.make()


class _PartList(pydantic.BaseModel):
    """A section listing parts: ``[NAME or {type: NAME, ...arguments}, ...]``."""

    model_config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    kind: ClassVar[str]
    defaults: ClassVar[tuple[str, ...]] = ()
    parts: tuple[Part, ...]

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, cls):
            return data
        problems = Problems()
        if not isinstance(data, (list, tuple)):
            problems.add(
                (),
                f"expected a list of {NOUN[cls.kind]}s, each a name or {{type: NAME, ...}}",
                data,
            )
            problems.raise_if_any(cls.__name__)
        parts = [
            _check_part(cls.kind, item, (index,), problems, None) for index, item in enumerate(data)
        ]
        problems.raise_if_any(cls.__name__)
        return cls.model_construct(parts=tuple(p for p in parts if p is not None))

    @pydantic.model_serializer(mode="plain")
    def _flat(self) -> list[dict[str, Any]]:
        return [part.dump() for part in self.parts]

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {
            "description": cls.__doc__.split("\n")[0] if cls.__doc__ else "",
            "type": "array",
            "items": {"anyOf": [{"type": "string"}, *part_schemas(cls.kind)]},
        }

    @classmethod
    def default_value(cls) -> list[dict[str, Any]]:
        return [{"type": name} for name in cls.defaults]

    def make(self) -> list[Any]:
        """A new instance of each part, in order."""
        return [part.make() for part in self.parts]


class TaskSection(_OnePart):
    """``task:`` what the model is asked and how it is scored (default ``classification``)."""

    kind = "task"
    default_type = "classification"


#: the key of the data section that is the run's, not the dataset's
VALIDATION = "validation"
_FRACTION = {
    "anyOf": [{"type": "number", "minimum": 0, "exclusiveMaximum": 1}, {"type": "null"}],
    "default": None,
    "description": "the share of the training examples held out as the validation split "
    "(unset: the data's own validation split, or 0.1; 0: none)",
}


def _fraction_problem(value: Any) -> str | None:
    """Why ``value`` is not a validation fraction (``None``: it is one, or unset)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "expected a fraction in [0, 1) (0: no validation split)"
    if not 0 <= value < 1:
        return f"expected a fraction in [0, 1) (0: no validation split), got {value}"
    return None


class DataSection(_OnePart):
    """``data:`` where the batches come from (default ``digits``), and ``validation``: the
    share of the training examples held out as the validation split."""

    kind = "dataset"
    default_type = "digits"
    validation: float | None = None

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, cls):
            return data
        fraction = None
        problems = Problems()
        if isinstance(data, Mapping) and VALIDATION in data:
            fraction = data[VALIDATION]
            data = {k: v for k, v in data.items() if k != VALIDATION}
            problem = _fraction_problem(fraction)
            if problem is not None:
                problems.add((VALIDATION,), problem, fraction)
        part = _check_part(cls.kind, data, (), problems, cls.default_type)
        problems.raise_if_any(cls.__name__)
        if isinstance(fraction, int):
            fraction = float(fraction)
        return cls.model_construct(part=part, validation=fraction)

    @pydantic.model_serializer(mode="plain")
    def _flat(self) -> dict[str, Any]:
        dumped = self.part.dump()
        if self.validation is not None:
            dumped[VALIDATION] = self.validation
        return dumped

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        schemas = part_schemas(cls.kind)
        for schema in schemas:
            schema.setdefault("properties", {})[VALIDATION] = dict(_FRACTION)
        return {
            "description": cls.__doc__.split("\n")[0] if cls.__doc__ else "",
            "anyOf": [{"type": "string"}, *schemas],
        }

    def with_paths_resolved(self, folder: str, overridden: Collection[str] = ()) -> DataSection:
        """This section with its path arguments (``path``) relative to ``folder``; those
        named in ``overridden`` (given as ``KEY=VALUE`` overrides) relative to the current
        directory."""
        cls = self.part.cls
        arguments = dict(self.part.arguments)
        for key in getattr(cls, "path_arguments", ("path",)):
            value = arguments.get(key)
            if isinstance(value, str) and value:
                base = os.getcwd() if key in overridden else folder
                resolve = getattr(cls, "resolve_path", None)
                arguments[key] = resolve(value, base) if resolve else os.path.join(base, value)
        part = dataclasses.replace(self.part, arguments=arguments)
        if isinstance(self, DataSection):  # (the tokenizer section shares this method)
            return type(self).model_construct(part=part, validation=self.validation)
        return type(self).model_construct(part=part)

    def data_spec(self, config: Any) -> Any:
        """What this data feeds the model, and the task's check of its output, for
        `check_model` (``nnx config validate``); ``None`` when the data cannot be described."""
        from ..config._shapes import DataSpec  # (here: it imports jax)
        from .data._base import DataError  # (here: it imports jax)

        source = getattr(config, "source", "<dict>")
        overridden = [key for key in self.part.arguments if config.from_override(("data", key))]
        section = (
            self.with_paths_resolved(os.path.dirname(os.path.abspath(source)), overridden)
            if os.path.isfile(source)
            else self
        )
        task_section = config.sections.get("task") or TaskSection.model_validate(
            TaskSection.default_value()
        )
        label = PartLabel("dataset", section.type, ("data",))
        try:
            with label.calling("describe()"):
                info = section.make().describe()
        except DataError:
            return None  # (train reports it)
        except RunPartError as error:
            raise ConfigError([config.problem(("data",), str(error))]) from None
        task = task_section.make()
        return DataSpec(
            info.inputs, info.origin, lambda output: task.check_output(output, info), info.hint
        )


class MetricsSection(_PartList):
    """``metrics:`` metrics reported besides the task's own."""

    kind = "metric"


class LoggersSection(_PartList):
    """``loggers:`` where the records of a run go (default ``[jsonl]``: metrics.jsonl)."""

    kind = "logger"
    defaults = ("jsonl",)


class CallbacksSection(_PartList):
    """``callbacks:`` what happens around the steps (early stopping, EMA of the weights)."""

    kind = "callback"

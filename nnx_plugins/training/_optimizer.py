"""The ``optimizer`` section: any optax optimizer by name, its arguments checked against optax.

The section names any optax optimizer; its arguments are checked against the optax function's
signature (optax is read for the names and signatures of its optimizers and schedules), with
the same error quality as the ``model`` section: every problem with its ``file:line:col``, its
path (``optimizer.b1``) and a "did you mean" for misspelt names. ``accumulate_steps: k`` makes
one update average the gradients of ``k`` micro-batches (see the train step).

Example:
    >>> from nnx_plugins.training._optimizer import OptimizerSection
    >>> opt = OptimizerSection.model_validate(
    ...     {"type": "adamw", "learning_rate": 0.01, "weight_decay": 0.001, "accumulate_steps": 4})
    >>> opt.type, opt.arguments, opt.trainable, opt.accumulate_steps
    ('adamw', {'learning_rate': 0.01, 'weight_decay': 0.001}, ['Param'], 4)
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import re
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers bfloat16 & co. with numpy)
import numpy as np
import optax
import pydantic
from pydantic_core import ValidationError

import nnx_core

from .._text import suggest
from ..config._errors import ConfigError
from ..config._scalars import strict_type
from ..registry._registry import default_registry
from ._memory import trainable_kinds
from ._problems import Problems

__all__ = [
    "PositiveInt",
    "PositiveFloat",
    "OptimizerSection",
    "optimizer_names",
    "schedule_names",
    "make_optimizer",
    "check_trainable",
]

#: counts (steps, batch sizes, intervals): strict ints that fit in 32 bits
PositiveInt = Annotated[int, pydantic.Field(gt=0, le=2**31 - 1, strict=True)]
#: strict finite positive floats (no bool, no inf/nan)
PositiveFloat = Annotated[float, pydantic.Field(gt=0, strict=True, allow_inf_nan=False)]
#: ranges of optimizer arguments optax does not check itself, by argument name
_RANGES: dict[str, tuple[float, float, str]] = {
    "learning_rate": (0.0, math.inf, "a finite number >= 0"),
    "b1": (0.0, 1.0, "a number in [0, 1)"),
    "b2": (0.0, 1.0, "a number in [0, 1)"),
    "momentum": (0.0, 1.0, "a number in [0, 1)"),
    "decay": (0.0, 1.0, "a number in [0, 1)"),
    "eps": (0.0, math.inf, "a finite number >= 0"),
    "weight_decay": (0.0, math.inf, "a finite number >= 0"),
}

# optax functions with a ``learning_rate`` argument that are not optimizers a user would pick.
_NOT_OPTIMIZERS = frozenset({"scale_by_learning_rate", "scale_by_rprop", "lbfgs"})
# schedule arguments that take Python callables or lists of mappings: no config spelling.
_NOT_SCHEDULES = frozenset(
    {"join_schedules", "sgdr_schedule", "inject_hyperparams", "inject_stateful_hyperparams"}
)
_SCHEDULE_MARKER = "schedule"


def _functions(namespace: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
    return {n: f for n, f in namespace.items() if inspect.isfunction(f) and not n.startswith("_")}


def optimizer_names() -> list[str]:
    """The optax optimizers a config may name: functions of ``optax`` taking ``learning_rate``.

    Example:
        >>> from nnx_plugins.training._optimizer import optimizer_names
        >>> {"adam", "adamw", "sgd", "lion"} <= set(optimizer_names())
        True
    """
    found = []
    for name, function in _functions(vars(optax)).items():
        try:
            parameters = inspect.signature(function).parameters
        except (TypeError, ValueError):
            continue
        if "learning_rate" in parameters and name not in _NOT_OPTIMIZERS:
            found.append(name)
    return sorted(found)


def schedule_names() -> list[str]:
    """The optax learning-rate schedules a config may name (``optax.schedules``).

    Example:
        >>> from nnx_plugins.training._optimizer import schedule_names
        >>> "warmup_cosine_decay_schedule" in schedule_names()
        True
    """
    return sorted(set(_functions(vars(optax.schedules))) - _NOT_SCHEDULES)


# -- argument kinds derived from optax annotations -------------------------------------------
_SCALARS = (bool, int, float, str, type(None))


def _plain(annotation: Any) -> tuple[Any, bool]:
    """``(a pydantic-checkable annotation or None, whether a schedule is accepted)``."""

    origin = typing.get_origin(annotation)
    if annotation in _SCALARS:
        return annotation, False
    if isinstance(annotation, type) and issubclass(annotation, np.number):
        return float, False
    if origin in (typing.Union, types.UnionType):
        kept, schedule = [], False
        if Any in typing.get_args(annotation):
            return None, False
        for arg in typing.get_args(annotation):
            if typing.get_origin(arg) is Callable or arg is Callable:
                schedule = True
                continue
            plain, _ = _plain(arg)
            if plain is not None and plain not in kept:
                kept.append(plain)
        if float in kept:  # a number (optax's ArrayLike): strict float accepts ints, not bools
            kept = [k for k in kept if k not in (int, bool)]
        if not kept:
            return None, schedule
        return functools.reduce(operator.or_, kept), schedule
    if origin in (list, tuple, dict):
        args = [_plain(a)[0] for a in typing.get_args(annotation)]
        if any(a is None for a in args if a is not Ellipsis):
            return None, False
        return (origin[tuple(args)] if args else origin), False
    return None, False


def _argument_kind(parameter: inspect.Parameter) -> tuple[Any, bool]:
    annotation, schedule = _plain(parameter.annotation)
    if parameter.name.endswith("dtype"):
        return "dtype", False
    if annotation is None and parameter.default is not inspect.Parameter.empty:
        default = parameter.default
        if isinstance(default, (bool, int, float, str)):
            annotation = type(default)
    return annotation, schedule


def _check_dtype(value: Any, loc: tuple[Any, ...], problems: Problems) -> None:

    if value is None:
        return
    try:
        np.dtype(value if isinstance(value, str) else "?invalid")
    except TypeError:
        problems.add(loc, "expected a dtype name such as 'float32' or 'bfloat16'", value)


def _check_arguments(
    function: Callable[..., Any],
    label: str,
    given: Mapping[str, Any],
    loc: tuple[Any, ...],
    problems: Problems,
    *,
    fixed: tuple[str, ...] = (),
) -> None:
    """Check ``given`` against ``function``'s signature; recurse into schedules."""
    parameters = inspect.signature(function).parameters
    for name, value in given.items():
        parameter = parameters.get(name) if isinstance(name, str) else None
        if parameter is None or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            valid = [
                *fixed,
                *(
                    p
                    for p in parameters
                    if parameters[p].kind
                    not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
                ),
            ]
            problems.add(
                (*loc, name),
                f"unknown argument {name!r} for {label}."
                f"{suggest(name, valid)} Valid keys: {', '.join(valid)}",
                value,
            )
            continue
        _check_value(parameter, value, label, (*loc, name), problems)
    for name, parameter in parameters.items():
        required = parameter.default is inspect.Parameter.empty and parameter.kind not in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
        )
        if required and name not in given:
            problems.add(loc, f"{label} needs the argument {name!r}", dict(given))


def _check_value(
    parameter: inspect.Parameter, value: Any, label: str, loc: tuple[Any, ...], problems: Problems
) -> None:
    annotation, schedule = _argument_kind(parameter)
    if schedule and isinstance(value, Mapping):
        _check_schedule(value, loc, problems)
        return
    if annotation == "dtype":
        _check_dtype(value, loc, problems)
        return
    if annotation is None:
        problems.add(
            loc,
            f"{label}'s argument {parameter.name!r} takes a Python object and cannot "
            "be set from a config; leave it out",
            value,
        )
        return
    takes_mapping = any(
        typing.get_origin(a) is dict for a in (annotation, *typing.get_args(annotation))
    )
    adapter = pydantic.TypeAdapter(_strict_argument(annotation))
    try:
        adapter.validate_python(value)
    except pydantic.ValidationError as error:
        if isinstance(value, Mapping) and not schedule and not takes_mapping:
            problems.add(
                loc, f"{label}'s argument {parameter.name!r} does not take a schedule", value
            )
            return
        problems.extend(error, loc)
        return
    _check_range(parameter.name, value, label, loc, problems)


def _strict_argument(annotation: Any) -> Any:
    """Strict scalars (no bool for a number, no "1" for an int, finite floats), except for the
    keys of mappings: JSON turns the keys of {10: 0.5} into strings."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return dict[args[0], strict_type(args[1])]  # type: ignore[valid-type]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, [_strict_argument(a) for a in args])
    return strict_type(annotation)


def _check_range(
    name: str, value: Any, label: str, loc: tuple[Any, ...], problems: Problems
) -> None:
    if name not in _RANGES or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    low, high, text = _RANGES[name]
    if not low <= value < high:
        problems.add(loc, f"{label}'s argument {name!r} must be {text}", value)


def _check_schedule(value: Mapping[str, Any], loc: tuple[Any, ...], problems: Problems) -> None:
    name = value.get("type")
    names = schedule_names()
    if not isinstance(name, str) or name not in names:
        where = (*loc, "type") if "type" in value else loc
        problems.add(
            where,
            f"expected an optax schedule name as 'type'.{suggest(name, names)} "
            f"Schedules: {', '.join(names)}",
            name,
        )
        return
    function = getattr(optax.schedules, name)
    arguments = {k: v for k, v in value.items() if k != "type"}
    _check_arguments(function, f"optax.{name}", arguments, loc, problems, fixed=("type",))


def _resolve_arguments(
    function: Callable[..., Any], arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """Turn validated config arguments into Python values (schedules, dtypes, tuples)."""

    parameters = inspect.signature(function).parameters
    resolved: dict[str, Any] = {}
    for name, value in arguments.items():
        annotation, schedule = _argument_kind(parameters[name])
        if schedule and isinstance(value, Mapping):
            schedule_fn = getattr(optax.schedules, value["type"])
            value = schedule_fn(
                **_resolve_arguments(schedule_fn, {k: v for k, v in value.items() if k != "type"})
            )
        elif annotation == "dtype" and value is not None:
            value = jnp.dtype(value)
        elif any(
            typing.get_origin(a) in (tuple, dict)
            for a in (annotation, *typing.get_args(annotation))
        ):
            value = pydantic.TypeAdapter(annotation).validate_python(value)
        resolved[name] = value
    return resolved


def _blame(error: Exception, arguments: Mapping[str, Any]) -> str | None:
    """The argument an optax error names (``decay_steps=0`` names ``decay_steps``), if any."""
    text = str(error)
    return next((n for n in arguments if re.search(rf"\b{re.escape(n)}\b", text)), None)


def _try_optax(function: Callable[..., Any], arguments: Mapping[str, Any]) -> Exception | None:
    with warnings.catch_warnings():  # (warned about when the run makes it, not here)
        warnings.simplefilter("ignore")
        try:
            function(**_resolve_arguments(function, arguments))
        except Exception as error:  # noqa: BLE001 - any optax refusal is a config problem
            return error
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_optax(name: str, given: Mapping[str, Any], problems: Problems) -> None:
    """Make the schedules and the optimizer once, reporting what optax refuses at the argument
    it names: optax raises plain ValueErrors for arguments out of range."""
    for key, value in given.items():
        if isinstance(value, Mapping) and value.get("type") in schedule_names():
            arguments = {k: v for k, v in value.items() if k != "type"}
            warmup, total = arguments.get("warmup_steps"), arguments.get("decay_steps")
            if _whole(warmup) and _whole(total) and 0 < total <= warmup:
                problems.add(
                    (key, "decay_steps"),
                    f"decay_steps counts the warmup too, so it must be larger than warmup_steps "
                    f"({warmup}); it is {total}. Make the run longer (train.steps, when decay_steps "
                    "follows it) or the warmup shorter.",
                    total,
                )
                continue
            error = _try_optax(getattr(optax.schedules, value["type"]), arguments)
            if error is not None:
                blamed = _blame(error, arguments)
                where = (key, blamed) if blamed else (key,)
                problems.add(
                    where, f"optax.{value['type']} refused it: {error}", arguments.get(blamed)
                )
    if problems.items:
        return
    error = _try_optax(getattr(optax, name), given)
    if error is not None:
        blamed = _blame(error, given)
        where = (blamed,) if blamed else ()
        problems.add(where, f"optax.{name} refused it: {error}", given.get(blamed, dict(given)))


# -- the sections ----------------------------------------------------------------------------
def _optimizer_schema(schema: dict[str, Any]) -> None:
    """The file spelling: the optax arguments sit next to ``type``, not under ``arguments``."""
    schema["properties"].pop("arguments", None)
    schema["properties"]["learning_rate"] = {
        "description": "a number, or {type: <optax.schedules function>, ...its arguments}",
        "anyOf": [{"type": "number"}, {"type": "object", "required": ["type"]}],
    }
    schema["additionalProperties"] = True  # the optax function's other arguments


class OptimizerSection(pydantic.BaseModel):
    """``optimizer:`` an optax optimizer by name with its arguments, clipping and ``trainable``.

    Keys besides ``type``, ``clip_grad_norm``, ``clip_grad_value``, ``trainable`` and
    ``accumulate_steps`` are the
    optax function's arguments (``learning_rate`` may be a schedule mapping with its own
    ``type``). ``trainable`` lists the Variable kinds (registered names) that are optimized.
    ``accumulate_steps: k``: one update averages the gradients of ``k`` consecutive
    micro-batches of ``train.batch_size``; ``train.steps`` counts updates.
    """

    model_config = pydantic.ConfigDict(extra="forbid", json_schema_extra=_optimizer_schema)

    type: str = "adam"
    arguments: dict[str, Any] = {"learning_rate": 1e-3}
    clip_grad_norm: PositiveFloat | None = None
    clip_grad_value: PositiveFloat | None = None
    trainable: list[str] = ["Param"]
    accumulate_steps: PositiveInt = 1

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _split_arguments(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, cls) or not isinstance(data, Mapping):
            return handler(data)
        fixed = {k: v for k, v in data.items() if k in cls.model_fields and k != "arguments"}
        given = {k: v for k, v in data.items() if k not in fixed}
        if not given and "type" not in data:
            given = {"learning_rate": 1e-3}
        problems = Problems()
        try:
            section = handler(fixed)
        except ValidationError as error:
            problems.extend(error, (), keep=1)
            section = None
        name = data.get("type", "adam")
        names = optimizer_names() if isinstance(name, str) else []
        if section is not None and name not in names:
            problems.add(
                ("type",),
                f"unknown optax optimizer {name!r}.{suggest(name, names)} "
                f"Optimizers: {', '.join(names)}",
                name,
            )
        elif isinstance(name, str) and name in names:
            fixed_keys = tuple(k for k in cls.model_fields if k != "arguments")
            _check_arguments(
                getattr(optax, name), f"optax.{name}", given, (), problems, fixed=fixed_keys
            )
        if section is not None:
            _check_trainable(section.trainable, problems)
        if not problems.items and isinstance(name, str) and name in names:
            _check_optax(name, given, problems)
        problems.raise_if_any(cls.__name__)
        section.arguments = dict(given)
        return section

    @pydantic.model_serializer(mode="plain")
    def _flat(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, **self.arguments}
        for key in ("clip_grad_norm", "clip_grad_value"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["trainable"] = list(self.trainable)
        if self.accumulate_steps != 1:
            out["accumulate_steps"] = self.accumulate_steps
        return out

    def make(self) -> Any:
        """The optax ``GradientTransformation`` this section describes (clipping first)."""
        return make_optimizer(self)


def _check_trainable(trainable: list[str], problems: Problems) -> None:

    named = {  # explicit names only: not the automatic 'module.Class' names of unnamed kinds
        name
        for name, kind in nnx_core.registered_variable_types().items()
        if name != f"{kind.__module__}.{kind.__qualname__}"
    }
    known = sorted(set(default_registry().names("variable")) | named)
    for index, name in enumerate(trainable):
        if name not in known and name not in nnx_core.registered_variable_types():
            problems.add(
                ("trainable", index),
                f"unknown Variable kind {name!r}.{suggest(name, known, key='last')} Installed kinds: "
                f"{', '.join(known)}",
                name,
            )


def check_trainable(config: Any, state: Any) -> None:
    """Refuse an ``optimizer.trainable`` that selects no Variable of the model whose State
    (abstract or not) is ``state``: the run would train nothing.

    Raises:
        ConfigError: at ``optimizer.trainable``, naming the kinds it lists and those the model
            holds.

    Example:
        >>> import nnx_core as nnx
        >>> import nnx_plugins
        >>> from nnx_plugins.training._config import load_train_config
        >>> from nnx_plugins.training._optimizer import check_trainable
        >>> model = {"type": "Linear", "in_features": 2, "out_features": 2}
        >>> config = load_train_config({"model": model, "optimizer": {"trainable": ["LoRAParam"]}})
        >>> try:
        ...     check_trainable(config, nnx.state(nnx_plugins.build(model)))
        ... except nnx_plugins.ConfigError as error:
        ...     print(error.problems[0])
        <dict>: optimizer.trainable: [LoRAParam] selects no Variable of the model, ...
    """
    trainable = config.sections["optimizer"].trainable
    held = {type(v) for _, v in state.flat_state()}
    if any(issubclass(kind, trainable_kinds(trainable)) for kind in held):
        return
    names = ", ".join(sorted(map(nnx_core.variable_name, held)))
    has = f"the model holds Variables of the kinds {names}" if held else "the model holds none"
    message = (
        f"[{', '.join(trainable)}] selects no Variable of the model, so the run would train "
        f"nothing: {has}. "
        "List the kinds to train (e.g. trainable: [Param]), or give the model Variables of the "
        "kinds listed (LoRAParam adapters: set lora_rank on its layers)."
    )
    raise ConfigError([config.problem(("optimizer", "trainable"), message)])


def make_optimizer(section: OptimizerSection) -> Any:
    """Build the optax transformation of a validated `OptimizerSection`.

    Example:
        >>> from nnx_plugins.training._optimizer import OptimizerSection, make_optimizer
        >>> section = OptimizerSection.model_validate({"type": "sgd", "learning_rate": 0.1,
        ...                                            "clip_grad_norm": 1.0})
        >>> hasattr(make_optimizer(section), "update")
        True
    """
    # one object per spelling: jit caches compiled steps by the transformation's identity
    spelling = repr(section.model_dump())
    if spelling not in _TRANSFORMS:
        _TRANSFORMS[spelling] = _build_optimizer(section)
    return _TRANSFORMS[spelling]


_TRANSFORMS: dict[str, Any] = {}


def _build_optimizer(section: OptimizerSection) -> Any:
    function = getattr(optax, section.type)
    tx = function(**_resolve_arguments(function, section.arguments))
    clipping = []
    if section.clip_grad_value is not None:
        clipping.append(optax.clip(section.clip_grad_value))
    if section.clip_grad_norm is not None:
        clipping.append(optax.clip_by_global_norm(section.clip_grad_norm))
    return optax.chain(*clipping, tx) if clipping else tx

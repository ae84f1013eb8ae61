"""The ``mesh:`` and ``sharding_rules:`` config sections: the device mesh of a run (axes
``data``, ``fsdp``, ``model``) and the rules laying the layers' logical axis names on it.

```yaml
mesh: {data: 2, fsdp: 2, model: 2}     # or --mesh data=2,fsdp=2,model=2, or train(mesh=...)
sharding_rules:                         # merged over DEFAULT_RULES, name by name
  embed: fsdp                           # a mesh axis, a list of them, or null (whole)
```

The defaults (`DEFAULT_RULES`) split attention heads, MLP hidden units and the vocabulary over
``model`` (Megatron's tensor parallelism) and keep a `Repeat`'s ``layers`` axis whole; every
parameter not split over ``fsdp`` by a rule has its largest free dimension split over
``fsdp`` (when divisible: fully sharded data parallelism). The batch is split over ``data``
and ``fsdp`` together. See docs/multi-device.md.

Example:
    >>> from nnx_plugins.training._rules import MeshSection, RulesSection
    >>> MeshSection.model_validate({"fsdp": 4, "model": 2}).sizes()
    {'data': 1, 'fsdp': 4, 'model': 2}
    >>> RulesSection.model_validate({"embed": "fsdp", "mlp": None}).given()
    {'embed': ('fsdp',), 'mlp': ()}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import pydantic
from pydantic_core import PydanticCustomError

__all__ = [
    "MESH_AXES",
    "BATCH_AXES",
    "DEFAULT_RULES",
    "MeshSection",
    "RulesSection",
    "axes_text",
    "as_axes",
    "rules_of",
]

#: the axes of a run's mesh, in the order of its device grid
MESH_AXES = ("data", "fsdp", "model")
#: the batch is split over these together
BATCH_AXES = ("data", "fsdp")
#: logical name -> mesh axes (``()``: whole on every device); a `sharding_rules` entry replaces
#: the default of its name
DEFAULT_RULES: dict[str, tuple[str, ...]] = {
    "vocab": ("model",),
    "heads": ("model",),
    "kv_heads": ("model",),
    "mlp": ("model",),
    "layers": (),
}


def axes_text(axes: Any = MESH_AXES) -> str:
    """``'data, fsdp and model'``."""
    names = list(axes)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _axis(name: str) -> str:
    if name not in MESH_AXES:
        raise PydanticCustomError(
            "nnx_mesh_axis",
            "unknown mesh axis '{name}'; the mesh axes are {axes}",
            {"name": name, "axes": axes_text()},
        )
    return name


MeshAxis = Annotated[str, pydantic.AfterValidator(_axis)]
Size = Annotated[int, pydantic.Field(ge=1, le=2**20, strict=True)]


class MeshSection(pydantic.RootModel[dict[MeshAxis, Size]]):
    """``mesh:`` the number of devices along each axis (``data``, ``fsdp``, ``model``; 1 if
    absent). ``--mesh`` (``train(mesh=...)``) replaces it."""

    def sizes(self) -> dict[str, int]:
        """Every axis' size."""
        return {axis: self.root.get(axis, 1) for axis in MESH_AXES}


def as_axes(value: Any) -> tuple[str, ...]:
    """A rule's value as a tuple of mesh axes (``None`` -> ``()``)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _no_repeats(value: Any) -> Any:
    axes = as_axes(value)
    if len(set(axes)) != len(axes):
        raise PydanticCustomError(
            "nnx_rule_repeat",
            "a rule names each mesh axis at most once, got {axes}",
            {"axes": list(axes)},
        )
    return value


Rule = Annotated[MeshAxis | list[MeshAxis] | None, pydantic.AfterValidator(_no_repeats)]
LogicalName = Annotated[str, pydantic.Field(min_length=1, max_length=200)]


class RulesSection(pydantic.RootModel[dict[LogicalName, Rule]]):
    """``sharding_rules:`` logical axis name -> mesh axis, list of mesh axes, or null (the
    dimension stays whole). Entries replace the defaults of their names."""

    def given(self) -> dict[str, tuple[str, ...]]:
        """The rules as written, each as a tuple of mesh axes."""
        return {name: as_axes(value) for name, value in self.root.items()}


def rules_of(section: RulesSection | Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """The rules ``section`` gives (a section, a mapping or nothing)."""
    if section is None:
        return {}
    if isinstance(section, RulesSection):
        return section.given()
    return RulesSection.model_validate(dict(section)).given()

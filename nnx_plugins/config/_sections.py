"""Top-level config sections besides ``model``: an extension point for other tools.

``model`` (layers) and ``plugins`` (name preferences) belong to the config package. Other
tools add theirs as pydantic models, published in the ``nnx.config_sections`` entry-point
group (the training package publishes ``optimizer``, ``data``, ``train`` and ``checkpoint``
this way) or registered in-process with `register_section`. A known section is validated with
its model (errors carry locations like any other problem); an unknown one is an error.
``include`` is not a section: the reader merges the files it names (see `_compose`).

Example:
    >>> import pydantic
    >>> from nnx_plugins import register_section
    >>> class Seed(pydantic.BaseModel):
    ...     value: int = 0
    >>> register_section("seed_docs", Seed) is Seed
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pydantic

if TYPE_CHECKING:
    from ..registry._registry import Registry

__all__ = ["PluginsSection", "register_section", "registered_sections", "RESERVED"]

RESERVED = ("model", "plugins")
_READER_KEYS = ("include",)  # (the reader's own top-level key; no section may take it)


class PluginsSection(pydantic.BaseModel):
    """The ``plugins:`` section: ``prefer: {name: distribution}`` settles name collisions."""

    model_config = pydantic.ConfigDict(extra="forbid")
    prefer: dict[str, str] = {}


_SECTIONS: dict[str, type[pydantic.BaseModel]] = {}


def register_section(name: str, model: type[pydantic.BaseModel]) -> type[pydantic.BaseModel]:
    """Validate the top-level section ``name`` of every config with the pydantic ``model``.

    Registering the same pair again is a no-op. Returns ``model`` (usable as a decorator via
    ``functools.partial``).

    Raises:
        TypeError: ``model`` is not a pydantic model class.
        ValueError: ``name`` is reserved or already taken by another model.
    """
    if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
        raise TypeError(
            f"register_section({name!r}, ...) expects a pydantic BaseModel subclass, got {model!r}."
        )
    if name in RESERVED or name in _READER_KEYS:
        raise ValueError(f"The config section {name!r} is reserved by nnx_plugins.")
    holder = _SECTIONS.get(name)
    if holder is not None and holder is not model:
        raise ValueError(
            f"The config section {name!r} is already registered to {holder.__qualname__}; "
            f"cannot also register {model.__qualname__}."
        )
    _SECTIONS[name] = model
    return model


def registered_sections(registry: Registry | None = None) -> dict[str, type[pydantic.BaseModel]]:
    """Every known top-level section (besides ``model`` and ``plugins``), by name.

    Args:
        registry: where published sections are found; only in-process ones when ``None``.
    """
    published = registry.load_static("section") if registry is not None else {}
    return {**published, **_SECTIONS}

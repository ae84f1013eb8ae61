"""Collecting the problems of a config section as one pydantic `ValidationError`.

Sections that check more than pydantic can (optax signatures, registered run parts) add each
problem at its location relative to the section; `load_config` then reports every one at its
``file:line:col``.

Example:
    >>> from pydantic import ValidationError
    >>> from nnx_plugins.training._problems import Problems
    >>> problems = Problems()
    >>> problems.add(("loss",), "expected 'mse', 'mae' or 'huber'", "msa")
    >>> try:
    ...     problems.raise_if_any("task")
    ... except ValidationError as error:
    ...     [(e["loc"], e["msg"]) for e in error.errors()]
    [(('loss',), "expected 'mse', 'mae' or 'huber'")]
"""

from __future__ import annotations

from typing import Any

from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from ..config._messages import condense

__all__ = ["Problems"]


class Problems:
    """Collects pydantic line errors with locations relative to the section."""

    def __init__(self) -> None:
        self.items: list[InitErrorDetails] = []

    def add(self, loc: tuple[Any, ...], message: str, value: Any) -> None:
        # the message is the template itself: pydantic shortens long context values
        error = PydanticCustomError("nnx_training", message.replace("{", "(").replace("}", ")"))
        self.items.append(InitErrorDetails(type=error, loc=loc, input=value))

    def extend(self, error: ValidationError, prefix: tuple[Any, ...], *, keep: int = 0) -> None:
        for loc, message, value in condense(error.errors(include_url=False), keep=keep):
            self.add((*prefix, *loc), message, value)

    def raise_if_any(self, title: str) -> None:
        if self.items:
            raise ValidationError.from_exception_data(title, self.items)

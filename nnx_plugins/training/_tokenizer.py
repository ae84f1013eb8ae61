"""The ``tokenizer:`` config section, and how it reaches the data.

``tokenizer: {type: hf, path: tokenizer.json}`` names a registered tokenizer (``nnx.tokenizers``;
the default is ``bytes``) with its arguments, a ``path`` relative to the config file. A dataset
that takes a ``tokenizer`` argument (the ``text`` dataset) gets the section's tokenizer unless
its own ``tokenizer`` argument says otherwise.

Example:
    >>> from nnx_plugins.training._tokenizer import TokenizerSection
    >>> section = TokenizerSection.model_validate({"type": "hf", "path": "tokenizer.json"})
    >>> section.with_paths_resolved("/models/tiny").arguments["path"]
    '/models/tiny/tokenizer.json'
    >>> TokenizerSection.model_validate(None).type
    'bytes'
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Collection
from typing import Any

from ._sections import DataSection, _OnePart

__all__ = ["TokenizerSection", "tokenized", "tokenizer_path"]


class TokenizerSection(_OnePart):
    """``tokenizer:`` how text becomes token ids and back (default ``bytes``)."""

    kind = "tokenizer"
    default_type = "bytes"

    def with_paths_resolved(
        self, folder: str, overridden: Collection[str] = ()
    ) -> TokenizerSection:
        """This section with its path arguments (``path``) relative to ``folder`` (those in
        ``overridden``: to the current directory)."""
        return DataSection.with_paths_resolved(self, folder, overridden)  # type: ignore[arg-type, return-value]


def tokenized(data: Any, tokenizer: TokenizerSection | None) -> Any:
    """``data`` (a `DataSection`) given the config's tokenizer, when its dataset takes a
    ``tokenizer`` argument it does not set itself, and the tokenizer is not the default."""
    if tokenizer is None or tokenizer.type == TokenizerSection.default_type:
        return data
    try:
        parameters = inspect.signature(data.part.cls.__init__).parameters
    except (TypeError, ValueError):
        return data
    if "tokenizer" not in parameters or data.arguments.get("tokenizer") is not None:
        return data
    arguments = {**data.arguments, "tokenizer": tokenizer.part.dump()}
    part = dataclasses.replace(data.part, arguments=arguments)
    return type(data).model_construct(part=part, validation=data.validation)


def tokenizer_path(config: Any) -> tuple[str, ...]:
    """Where ``config`` names the file of its data's tokenizer: ``tokenizer.path`` when the
    data reads the ``tokenizer`` section's (`tokenized`), else its own ``data.tokenizer.path``.

    Example:
        >>> from nnx_plugins.training._config import load_train_config
        >>> from nnx_plugins.training._tokenizer import tokenizer_path
        >>> config = load_train_config({
        ...     "model": {"type": "Linear", "in_features": 2, "out_features": 2},
        ...     "tokenizer": {"type": "hf", "path": "tokenizer.json"},
        ...     "data": {"type": "text", "path": "notes.txt"}})
        >>> tokenizer_path(config)
        ('tokenizer', 'path')
    """
    section = config.sections.get("tokenizer")
    given = config.sections["data"].arguments.get("tokenizer")
    if section is not None and given == section.part.dump():
        return ("tokenizer", "path")
    return ("data", "tokenizer", "path")

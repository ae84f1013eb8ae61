"""`PretrainedError`: a transformers checkpoint that cannot be imported, and why.

Example:
    >>> from nnx_plugins import NnxError
    >>> from nnx_plugins.pretrained._errors import PretrainedError
    >>> error = PretrainedError("model/config.json", "is not JSON")
    >>> str(error), isinstance(error, NnxError)
    ('cannot import model/config.json: is not JSON', True)
"""

from __future__ import annotations

import os

from .._errors import NnxError

__all__ = ["PretrainedError"]


class PretrainedError(NnxError, ValueError):
    """A checkpoint directory (or one of its files) that cannot be imported or exported.

    Attributes:
        where: the file or directory at fault (in the message as Python's ``repr`` writes
            it when it holds a newline or another character that is not printable).
        problem: what is wrong with it, and how to fix it.
    """

    def __init__(self, where: str | os.PathLike[str], problem: str, *, action: str = "import"):
        self.where = os.fspath(where)
        self.problem = problem
        shown = self.where if self.where.isprintable() else repr(self.where)  # (one line)
        super().__init__(f"cannot {action} {shown}: {problem}")

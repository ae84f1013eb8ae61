"""Text shared by every error message: paths as users write them, and "did you mean".

Example:
    >>> from nnx_plugins._text import format_path, suggest
    >>> format_path(("model", "layers", 3, "out_features"))
    'model.layers[3].out_features'
    >>> suggest("Linaer", ["Linear", "LayerNorm"])
    " Did you mean 'Linear'?"
"""

from __future__ import annotations

import difflib
import errno
import re
from collections.abc import Iterable, Sequence

__all__ = ["format_path", "suggest", "close_matches", "os_problem", "content_kind"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "the operation is not permitted (an immutable or protected file?)",
    errno.EROFS: "the file system is read-only",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.EEXIST: "it exists already",
    errno.EISDIR: "it is a directory",
    errno.ENAMETOOLONG: "the path or one of its names is too long",
}


def format_path(path: Sequence[object]) -> str:
    """Render a path in a config or a model the way users write it.

    Example:
        >>> from nnx_plugins._text import format_path
        >>> format_path(("model", "layers", 3, "kernel_init", "type"))
        'model.layers[3].kernel_init.type'
        >>> format_path(("model", "branches", "a b"))
        "model.branches['a b']"
        >>> format_path(())
        '<root>'
    """
    text = ""
    for key in path:
        if isinstance(key, int) and not isinstance(key, bool):
            text += f"[{key}]"
        elif isinstance(key, str) and _IDENTIFIER.match(key):
            text += f".{key}" if text else key
        else:
            text += f"[{key!r}]"
    return text or "<root>"


def close_matches(
    word: object, options: Iterable[str], *, cutoff: float = 0.6, key: str = "name"
) -> list[str]:
    """Up to three options closest to ``word`` (case-insensitive), best first.

    ``key="last"`` also compares ``word`` with the last dotted part of each option, so that
    ``LoRAParam`` finds ``acme.LoRAParam``.

    Example:
        >>> from nnx_plugins._text import close_matches
        >>> close_matches("lora", ["acme.LoRAParam", "Param"], key="last", cutoff=0.5)
        ['acme.LoRAParam']
    """
    word = str(word).lower()

    def score(option: str) -> float:
        ratio = difflib.SequenceMatcher(None, word, option.lower()).ratio()
        if key == "last":
            last = option.rsplit(".", 1)[-1].lower()
            ratio = max(ratio, difflib.SequenceMatcher(None, word, last).ratio())
        return ratio

    scored = sorted(((score(o), o) for o in set(options)), key=lambda p: (-p[0], p[1]))
    best = scored[0][0] if scored else 0.0
    return [o for r, o in scored[:3] if r >= cutoff and r >= best - 0.1]


def suggest(word: object, options: Iterable[str], **how: object) -> str:
    """``" Did you mean 'x'?"`` for the closest options (see `close_matches`), or ``""``.

    Example:
        >>> from nnx_plugins._text import suggest
        >>> suggest("out_feature", ["out_features", "use_bias"])
        " Did you mean 'out_features'?"
        >>> suggest("zzz", ["out_features"])
        ''
    """
    close = close_matches(word, options, **how)  # type: ignore[arg-type]
    return f" Did you mean {' or '.join(map(repr, close))}?" if close else ""


def os_problem(error: OSError) -> str:
    """A plain reason for an OS error: ``no space left on the device (ENOSPC)``.

    Example:
        >>> import errno
        >>> from nnx_plugins._text import os_problem
        >>> os_problem(OSError(errno.ENOSPC, "No space left on device"))
        'no space left on the device (ENOSPC)'
    """
    code = errno.errorcode.get(error.errno or 0, "")
    reason = _REASONS.get(error.errno or 0, error.strerror or str(error))
    return f"{reason} ({code})" if code else reason


def content_kind(value: object) -> str:
    """What a value read from a file is, by type and size, never by content: what an error
    about a file the config may not have been meant to read says it holds.

    Example:
        >>> from nnx_plugins._text import content_kind
        >>> content_kind("root:x:0:0:root:/root:/bin/bash")
        'text of 31 characters'
        >>> content_kind([1, 2]), content_kind({"a": 1}), content_kind(3.5), content_kind(None)
        ('a list of 2 items', 'a mapping of 1 key', 'a number (float)', 'null')
    """
    if isinstance(value, str):
        return f"text of {len(value):,} character{'s' * (len(value) != 1)}"
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value):,} byte{'s' * (len(value) != 1)}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,} item{'s' * (len(value) != 1)}"
    if isinstance(value, dict):
        return f"a mapping of {len(value):,} key{'s' * (len(value) != 1)}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({type(value).__name__})"
    return f"a {type(value).__name__}"

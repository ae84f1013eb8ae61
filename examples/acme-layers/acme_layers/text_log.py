"""The ``acme.text`` logger: one readable line per record in a text file of the run directory.

Example:
    >>> import pathlib, tempfile
    >>> from acme_layers.text_log import TextLog
    >>> run_dir = pathlib.Path(tempfile.mkdtemp())
    >>> log = TextLog()
    >>> log.open(run_dir, 0)
    >>> log.write({"step": 10, "split": "test", "loss": 0.25})
    >>> log.close()
    >>> (run_dir / "log.txt").read_text()
    'step 10 test loss=0.25\\n'
"""

import pathlib
from typing import Any

from nnx_plugins import Logger

__all__ = ["TextLog"]


class TextLog(Logger):
    """``step N split key=value ...`` lines in ``RUN/<file>``; on a resume, later lines dropped.

    Args:
        file: the file name inside the run directory.
    """

    def __init__(self, *, file: str = "log.txt"):
        if not file or "/" in file:
            raise ValueError(f"file must be a plain file name, got {file!r}.")
        self.file = file
        self.handle: Any = None

    def open(self, run_dir: pathlib.Path, start: int) -> None:
        path = run_dir / self.file
        kept = []
        for line in self.read(path) if start > 0 else []:  # (never through a planted link)
            parts = line.split()
            if len(parts) > 1 and parts[1].isdigit() and int(parts[1]) <= start:
                kept.append(line)
        self.handle = self.create(path, kept)  # (made anew, kept open for the records)

    def write(self, record: dict[str, Any]) -> None:
        values = " ".join(
            f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in record.items()
            if k not in ("step", "split")
        )
        line = f"step {record['step']} {record.get('split', '')} {values}\n"
        self.handle.write(line.encode("utf-8"))
        self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None

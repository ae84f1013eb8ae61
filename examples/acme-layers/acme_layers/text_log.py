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
        if start > 0 and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
                parts = line.split()
                if len(parts) > 1 and parts[1].isdigit() and int(parts[1]) <= start:
                    kept.append(line)
        path.write_text("".join(kept), encoding="utf-8")
        self.handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, record: dict[str, Any]) -> None:
        values = " ".join(
            f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in record.items()
            if k not in ("step", "split")
        )
        self.handle.write(f"step {record['step']} {record.get('split', '')} {values}\n")
        self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None

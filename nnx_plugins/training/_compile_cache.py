"""The compile cache: programs compiled by one run of ``nnx train``, ``nnx eval`` or ``nnx
generate`` (or `train`, `evaluate`, `generate`) are kept on disk for the next.

While one of these runs, JAX's persistent compilation cache is on, in nnx's folder: each program
JAX compiles (the train step, the evaluation, the decoding loop, and the small programs that
build and load the model) is written there, and a later run that compiles the same program
loads it instead. JAX keys each entry by the program (its shapes, dtypes and shardings, so a
change of model, batch, precision or mesh compiles again), the jaxlib version, the backend and
the devices; the folder is also split by jaxlib version and device kind (for a CPU, its
instruction set too), so a copy of the folder shared between machines never hands one
machine's code to another.

- Where: ``<user cache dir>/nnx/compile/...`` (``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux,
  ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows); ``NNX_CACHE_DIR=DIR`` moves
  nnx's cache folder to ``DIR`` (``DIR/compile/...``). Deleting it is always safe.
- Off: ``--no-compile-cache`` on the command line, ``compile_cache=False`` in Python.
- A JAX cache the user configured already (``jax_compilation_cache_dir``) is used as it is.
- Every program is kept, however fast it compiled (JAX's default keeps only those over 1 s):
  loading one from the cache costs less than compiling even a small one.
- Entries are written whole or not at all (a temporary file renamed into place), so processes
  sharing the folder (the processes of a multi-process run, or two runs) never read half an
  entry. An entry that is damaged (not what was written) is removed and compiled again. A
  folder that cannot be created or written, or a full disk, is one `CompileCacheWarning`
  line and a run that compiles as if there were no cache; nothing fails.
- Outside these calls JAX's settings are as they were: the cache is on only while nnx runs.

Example:
    >>> import os, tempfile
    >>> import jax, jax.numpy as jnp
    >>> os.environ["NNX_CACHE_DIR"] = tempfile.mkdtemp()
    >>> from nnx_plugins.training._compile_cache import cache_folder, compile_cache
    >>> with compile_cache():
    ...     _ = jax.jit(lambda x: x * 41 + 1)(jnp.ones(3))
    >>> folder = cache_folder()
    >>> folder.is_relative_to(os.environ["NNX_CACHE_DIR"]), any(folder.glob("*.nnx"))
    (True, True)
    >>> jax.config.jax_compilation_cache_dir is None  # (as it was before)
    True
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pathlib
import platform
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import jaxlib
from jax.experimental.compilation_cache.compilation_cache import reset_cache

try:  # (JAX's cache object, replaced by one that writes whole entries: see _install)
    from jax._src import compilation_cache as _jax_cache
except ImportError:  # pragma: no cover - another JAX: its own file cache is used
    _jax_cache = None  # type: ignore[assignment]

from .._errors import NnxWarning
from .._files import read_regular
from .._text import os_problem

__all__ = ["CompileCacheWarning", "cache_folder", "compile_cache", "with_compile_cache"]

ENV = "NNX_CACHE_DIR"
MAGIC = b"nnx-xla2"  # an entry: MAGIC, the sha256 of its key and payload, the payload (JAX's)
_FORMERLY = b"nnx-xla"  # (an entry of another version: replaced without a warning)
_MOST_BYTES = 1 << 36  # (an entry larger is not one: 64 GiB)
_SUFFIX = ".nnx"
_SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_enable_compilation_cache",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


class CompileCacheWarning(NnxWarning):
    """The compile cache could not be used as asked (a folder that cannot be written, a full
    disk, damaged entries); the run goes on, compiling what it cannot load."""


def user_cache_root() -> pathlib.Path:
    """nnx's cache folder: ``$NNX_CACHE_DIR`` when set, else ``nnx`` in the user's cache
    directory (the platform's convention).

    Example:
        >>> import os
        >>> from nnx_plugins.training._compile_cache import user_cache_root
        >>> os.environ["NNX_CACHE_DIR"] = "/tmp/somewhere"
        >>> str(user_cache_root())
        '/tmp/somewhere'
        >>> del os.environ["NNX_CACHE_DIR"]
        >>> user_cache_root().name
        'nnx'
    """
    given = os.environ.get(ENV, "")
    if given:
        return pathlib.Path(given).expanduser().absolute()
    home = pathlib.Path.home()
    if sys.platform == "win32":
        base = pathlib.Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Caches"
    else:
        base = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    return base / "nnx"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


@functools.cache
def _host_fingerprint() -> str:
    """What the code compiled for this CPU depends on: its architecture and instruction set."""
    flags = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            flags = next((line for line in info if line.startswith(("flags", "Features"))), flags)
    except OSError:
        pass
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:12]


def _device() -> Any:
    return jax.devices()[0]


def cache_folder() -> pathlib.Path:
    """The folder this process's compiled programs go to: nnx's cache folder, then
    ``compile/jax-<version>-jaxlib-<version>/<platform>-<device kind>`` (and the host's
    fingerprint for a CPU), so that what one version or device compiled is never offered to
    another."""
    device = _device()
    kind = f"{device.platform}-{_slug(device.device_kind)}"
    if device.platform == "cpu":
        kind += f"-{_host_fingerprint()}"
    versions = f"jax-{_slug(jax.__version__)}-jaxlib-{_slug(jaxlib.__version__)}"
    return user_cache_root() / "compile" / versions / kind


_WARNED: set[tuple[str, pathlib.Path]] = set()


def _digest(key: str, payload: bytes) -> bytes:
    """The sha256 of an entry's key and payload: a damaged entry, or one copied under another
    program's name (whose inputs may even have the same shapes), fails it."""
    digest = hashlib.sha256(key.encode("utf-8"))
    digest.update(b"\0")
    digest.update(payload)
    return digest.digest()


class _Entries:
    """The cache JAX reads and writes through (its ``get``/``put`` interface): one file per
    entry in `cache_folder` (found, and created, at the first use: a run that stops before it
    compiles touches nothing), written to a temporary file and renamed into place, checked when
    read.

    The first problem of each kind is one `CompileCacheWarning` (once per process and folder);
    after a folder that cannot be written or a failed write, the run writes no more (reads go
    on).
    """

    def __init__(self) -> None:
        self._folder: pathlib.Path | None = None
        self.writable: bool | None = None  # (None: not tried yet)

    @property
    def _path(self) -> pathlib.Path:
        if self._folder is None:
            self._folder = cache_folder()
        return self._folder

    def _warn(self, kind: str, text: str) -> None:
        if (kind, self._path) not in _WARNED:  # (once per process, kind and folder)
            _WARNED.add((kind, self._path))
            warnings.warn(CompileCacheWarning(text), stacklevel=2)

    def get(self, key: str) -> bytes | None:
        path = self._path / f"{key}{_SUFFIX}"
        try:  # (a FIFO or a link to a device in the folder is refused, not waited on)
            data = read_regular(path, _MOST_BYTES)
        except (FileNotFoundError, NotADirectoryError):  # (no entry, or no folder yet)
            return None
        except OSError as error:
            self._warn(
                "read",
                f"cannot read the compile cache in {self._path}: {os_problem(error)}; "
                "compiling instead.",
            )
            return None
        except ValueError:  # (not a regular file, or too large)
            data = b""
        payload = data[len(MAGIC) + 32 :]
        if (
            data[: len(MAGIC)] != MAGIC
            or _digest(key, payload) != data[len(MAGIC) : len(MAGIC) + 32]
        ):
            with contextlib.suppress(OSError):
                path.unlink()
            if not (data.startswith(_FORMERLY) and data[: len(MAGIC)] != MAGIC):
                self._warn(
                    "damaged",
                    f"the compile cache in {self._path} held a damaged entry (or one stored "
                    "under another program's name); it was removed and its program compiled "
                    "again.",
                )
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # (the last use, for whoever prunes the folder)
        return payload

    def put(self, key: str, value: bytes) -> None:
        if self.writable is None:
            self.writable = self._usable()
        if not self.writable:
            return
        path = self._path / f"{key}{_SUFFIX}"
        if path.exists():
            return
        temporary = None
        try:
            handle, name = tempfile.mkstemp(dir=self._path, prefix=".", suffix=".tmp")
            temporary = pathlib.Path(name)
            _write(handle, MAGIC + _digest(key, value) + value)
            os.replace(temporary, path)
        except OSError as error:
            self.writable = False
            if temporary is not None:
                with contextlib.suppress(OSError):
                    temporary.unlink()
            self._warn(
                "write",
                f"cannot write to the compile cache in {self._path}: {os_problem(error)}; "
                f"this run compiles without saving its programs. Free space, set {ENV} to "
                "another folder, or pass --no-compile-cache.",
            )

    def _usable(self) -> bool:
        """Create the folder and write and remove a file in it; False (warned) if it fails."""
        try:
            self._path.mkdir(parents=True, exist_ok=True)
            handle, name = tempfile.mkstemp(dir=self._path, prefix=".probe-", suffix=".tmp")
            os.close(handle)
            os.unlink(name)
        except OSError as error:
            self._warn(
                "folder",
                f"cannot use the compile cache folder {self._path}: {os_problem(error)}; "
                f"this run compiles every program. Set {ENV} to a folder you can write, or "
                "pass --no-compile-cache.",
            )
            return False
        return True


def _write(handle: int, data: bytes) -> None:
    """Write ``data`` to the open file ``handle`` and close it."""
    with os.fdopen(handle, "wb") as out:
        out.write(data)


def _install() -> None:
    """JAX's persistent cache on, every program kept, read and written through `_Entries`
    (where JAX's internals are not as this version knows them: JAX's own file cache, in
    `cache_folder`)."""
    state = _jax_cache
    ours = state is not None and all(
        hasattr(state, name)
        for name in ("_cache", "_cache_initialized", "_cache_initialized_mutex")
    )
    folder = user_cache_root() / "compile" if ours else cache_folder()
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    reset_cache()
    if ours:
        assert state is not None
        with state._cache_initialized_mutex:
            state._cache = _Entries()
            state._cache_initialized = True


_ACTIVE: list[bool] = []  # (the choice of the outermost block in progress)


@contextlib.contextmanager
def compile_cache(enabled: bool = True) -> Iterator[None]:
    """Inside the block, JAX keeps what it compiles in `cache_folder` and loads it from there
    (``enabled``), or keeps nothing (``enabled=False``); JAX's settings are restored after.

    A cache the user configured for JAX already is used as it is; a block inside another
    keeps the outer block's choice. Problems with the folder are `CompileCacheWarning` lines
    when the first program is compiled, never errors.
    """
    if _ACTIVE:
        yield
        return
    before = {name: getattr(jax.config, name) for name in _SETTINGS}
    theirs = enabled and bool(before["jax_compilation_cache_dir"])
    if theirs:
        pass
    elif enabled:
        _install()
    else:
        jax.config.update("jax_enable_compilation_cache", False)
        reset_cache()
    _ACTIVE.append(enabled)
    try:
        yield
    finally:
        _ACTIVE.pop()
        if not theirs:
            for name, value in before.items():
                jax.config.update(name, value)
            reset_cache()


def with_compile_cache(fn: _Fn) -> _Fn:
    """Run ``fn`` inside `compile_cache`, enabled unless it is called with
    ``compile_cache=False`` (a keyword ``fn`` takes and documents).

    Raises:
        TypeError: ``compile_cache`` is not True or False.
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        enabled = kwargs.get("compile_cache", True)
        if not isinstance(enabled, bool):
            raise TypeError(f"compile_cache must be True or False, got {enabled!r}.")
        with compile_cache(enabled):
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]

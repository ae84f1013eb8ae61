"""How much memory a training run needs, known before anything is allocated.

From a model's abstract state (`check_model` builds it under ``jax.eval_shape``): every
Variable, plus one gradient per trainable value, plus the optimizer's state (``tx.init`` run
abstractly). Activations are not counted (they depend on the batch and the model's code), so
the figure is a lower bound. `check_memory` refuses a run whose estimate exceeds the memory
available (the accelerator's limit, else the host's available RAM) unless ``allow_large``.

Example:
    >>> import optax
    >>> from nnx_plugins.config._shapes import check_model
    >>> from nnx_plugins.training._memory import estimate_memory
    >>> check = check_model({"model": {"type": "Linear", "in_features": 3, "out_features": 4}})
    >>> estimate = estimate_memory(check.state, optax.adam(1e-3), trainable_kinds(["Param"]))
    >>> estimate.model_bytes, estimate.gradient_bytes, estimate.optimizer_bytes
    (64, 64, 132)
    >>> human_bytes(estimate.total_bytes)
    '260 B'
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import jax
import numpy as np

import nnx_core

from ..config._build import located
from ..config._errors import ConfigError
from ..config._load import Config
from ..registry._lookup import get_variable_type

__all__ = [
    "MemoryEstimate",
    "estimate_memory",
    "available_memory",
    "check_memory",
    "human_bytes",
    "trainable_kinds",
]


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a training run holds: the model's Variables, the gradients, the optimizer state."""

    model_bytes: int
    gradient_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.gradient_bytes + self.optimizer_bytes


def human_bytes(nbytes: float) -> str:
    """``'1.5 GB'``-style sizes (powers of 1024).

    Example:
        >>> from nnx_plugins.training._memory import human_bytes
        >>> human_bytes(512), human_bytes(3 * 1024**4)
        ('512 B', '3.0 TB')
    """
    size = float(nbytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _nbytes(struct: Any) -> int:
    dtype = struct.dtype
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype))
        return math.prod(struct.shape) * math.prod(data.shape) * np.dtype(data.dtype).itemsize
    return math.prod(struct.shape) * np.dtype(dtype).itemsize


def trainable_kinds(names: Any) -> tuple[type, ...]:
    """The Variable classes of the kind names an ``optimizer.trainable`` lists."""
    kinds = []
    for name in names:
        try:
            kinds.append(nnx_core.variable_type(name))
        except KeyError:
            kinds.append(get_variable_type(name))
    return tuple(kinds)


def estimate_memory(state: Any, tx: Any, kinds: tuple[type, ...]) -> MemoryEstimate:
    """The `MemoryEstimate` of training ``state`` (abstract) with the optax transformation ``tx``,
    optimizing the Variables of the classes ``kinds``."""
    variables = list(state.flat_state()) if state is not None else []
    params = [v.value for _, v in variables if isinstance(v, kinds)]
    optimizer = jax.eval_shape(tx.init, params) if params else ()
    return MemoryEstimate(
        sum(_nbytes(v.value) for _, v in variables),
        sum(_nbytes(p) for p in params),
        sum(_nbytes(leaf) for leaf in jax.tree.leaves(optimizer)),
    )


def available_memory() -> tuple[int, str]:
    """``(bytes, what)``: the first device's memory limit, or the host's available RAM."""
    device = jax.devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"{device.platform} device memory"
    return _host_available(), "available host memory"


def _host_available() -> int:
    """``MemAvailable`` of /proc/meminfo (free plus reclaimable), else the free pages."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_memory(estimate: MemoryEstimate, config: Config, *, allow_large: bool) -> MemoryEstimate:
    """Return ``estimate``, or refuse a run of ``config`` that needs more memory than is
    available.

    Raises:
        ConfigError: at ``model``, with the size needed and available, unless ``allow_large``.
    """
    available, what = available_memory()
    if allow_large or estimate.total_bytes <= available:
        return estimate
    raise ConfigError(
        [
            located(config).problem(
                ("model",),
                f"training this model needs at least {human_bytes(estimate.total_bytes)} "
                f"({human_bytes(estimate.model_bytes)} of Variables, "
                f"{human_bytes(estimate.gradient_bytes)} of gradients, "
                f"{human_bytes(estimate.optimizer_bytes)} of optimizer state; activations "
                f"not counted) but only {human_bytes(available)} of {what} is free. Make the "
                "model smaller, or pass --allow-large (allow_large=True) to try anyway.",
            )
        ]
    )

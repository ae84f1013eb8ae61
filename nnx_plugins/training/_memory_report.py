"""What each device of a mesh would hold for a run of a config, without running it (``nnx build
CONFIG --summary --mesh ...``): parameters and optimizer state from the layout, and, when the
config has data to shape a batch, the compiled train step's peak.

Example:
    >>> from nnx_plugins.training._config import load_train_config
    >>> from nnx_plugins.training._memory_report import layout_memory
    >>> from nnx_plugins.training._mesh import run_layout
    >>> config = load_train_config({
    ...     "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...     "data": {"type": "digits", "layout": "flat"}})
    >>> memory = layout_memory(config, run_layout(config, {"data": 1}), allow_large=False)
    >>> memory.parameter_bytes, memory.optimizer_bytes
    (2600, 5208)
"""

from __future__ import annotations

import pathlib
from typing import Any

from ._assembly import assemble
from ._device_memory import DeviceMemory
from ._layout import Layout
from ._plan import make_plan, measure_layout, steps_of
from ._precision import model_config
from ._preflight import check_on_data, plan_layout
from ._sharded import constructor

__all__ = ["layout_memory", "layout_step_memory"]


def layout_memory(config: Any, layout: Layout, *, allow_large: bool) -> DeviceMemory:
    """Each device's share of the parameters and optimizer state of a run of ``config``.

    Raises:
        ConfigError: the model cannot be built or laid out, or does not fit (unless
            ``allow_large``).
    """
    return plan_layout(config, layout, constructor(config), allow_large=allow_large)[1]


def layout_step_memory(config: Any, layout: Layout, *, allow_large: bool) -> DeviceMemory:
    """`layout_memory` with the peak of the train step compiled for the config's data.

    Raises:
        ConfigError: as `layout_memory`, or the model does not take the data.
        DataError: the data cannot be read.
    """
    parts = assemble(config)
    plan = make_plan(config, parts, pathlib.Path("."))
    check_on_data(model_config(config), parts.info, parts.task)
    plan.steps = steps_of(plan)
    return measure_layout(plan, layout, allow_large=allow_large)

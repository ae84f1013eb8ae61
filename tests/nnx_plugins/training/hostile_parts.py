"""Run parts that break their promises, published by a fake distribution ``hostile-pack 2.3``
(see ``hostile_registry`` in test_part_calls.py)."""

import jax.numpy as jnp

from nnx_core.metrics import Metric, MetricState
from nnx_plugins import Callback, Logger, Task
from nnx_plugins.training.data._bundled import Digits


class BoomLogger(Logger):
    """Raises on the write of any record at step ``at``."""

    def __init__(self, *, at: int = 10):
        self.at = at

    def write(self, record):
        if record["step"] == self.at:
            raise RuntimeError("the log server went away")


class FlakyCallback(Callback):
    """Raises in after_eval at step ``at``."""

    def __init__(self, *, at: int = 10):
        self.at = at

    def after_eval(self, run, step, results):
        if step == self.at:
            raise KeyError("val")
        return False


class Shifty(Digits):
    """Digits whose batch of step ``at`` (1-based) loses a feature."""

    def __init__(self, *, at: int = 3):
        super().__init__(layout="flat")
        self.at = at

    def batch(self, step, batch_size, seed):
        batch = super().batch(step, batch_size, seed)
        if step + 1 == self.at:
            batch["inputs"] = batch["inputs"][:, :-1]
        return batch


class Broken(Digits):
    """Digits whose describe() divides by zero."""

    def __init__(self):
        super().__init__(layout="flat")

    def describe(self):
        return 1 / 0


class PerClassMetric(Metric):
    """Reports one value per class instead of one number."""

    requires = ("logits", "labels")

    def __init__(self):
        self.sums = MetricState(jnp.zeros((10,), jnp.float32))

    def reset(self):
        self.sums = MetricState(jnp.zeros((10,), jnp.float32))

    def update(self, *, logits, **_):
        self.sums.value = self.sums.value + logits.sum(axis=0)

    def compute(self):
        return self.sums.value


class PerExampleLoss(Task):
    """Returns the per-example losses as "the" loss."""

    metrics = ()
    gives = ("loss",)

    def loss(self, outputs, batch):
        losses = (outputs.astype(jnp.float32) ** 2).mean(axis=1)
        return losses, {"loss": losses}

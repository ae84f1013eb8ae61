"""The ``acme.waves`` dataset: noisy samples of ``sin`` drawn per step, never held in memory.

It shows a dataset that streams: each batch is made from a generator seeded by ``(seed,
step)``, so the batch of a step is a pure function of its arguments (resumes stay exact) while
nothing but the fixed validation and test sets is ever stored.

Example:
    >>> from acme_layers.waves import Waves
    >>> data = Waves(examples=256, noise=0.0)
    >>> batch = data.batch(step=3, batch_size=8, seed=0)
    >>> batch["inputs"].shape, batch["targets"].shape, data.steps_per_epoch(8)
    ((8, 1), (8,), 32)
    >>> bool(abs(batch["targets"] - __import__("numpy").sin(batch["inputs"][:, 0])).max() < 1e-6)
    True
"""

from collections.abc import Iterator

import jax
import numpy as np

from nnx_plugins import DataInfo, Dataset

__all__ = ["Waves"]


class Waves(Dataset):
    """``y = sin(x) + noise`` for ``x`` uniform in ``[-3, 3]``.

    Args:
        examples: examples per epoch (what ``train.epochs`` counts).
        noise: the standard deviation of the Gaussian noise added to the targets.
        test_examples: the size of the fixed test set.
    """

    path_arguments = ()

    def __init__(self, *, examples: int = 4096, noise: float = 0.1, test_examples: int = 512):
        if examples < 1 or test_examples < 1:
            raise ValueError(
                f"examples and test_examples must be >= 1, got {examples}, {test_examples}."
            )
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}.")
        self.examples, self.noise, self.test_examples = examples, noise, test_examples
        self.name = "acme.waves"

    def _draw(self, generator: np.random.Generator, count: int) -> dict[str, np.ndarray]:
        x = generator.uniform(-3.0, 3.0, size=(count, 1)).astype(np.float32)
        y = np.sin(x[:, 0]) + self.noise * generator.normal(size=count)
        return {"inputs": x, "targets": y.astype(np.float32)}

    def describe(self) -> DataInfo:
        return DataInfo(
            self.name,
            jax.ShapeDtypeStruct((1,), np.float32),
            jax.ShapeDtypeStruct((), np.float32),
            "data (acme.waves)",
        )

    def steps_per_epoch(self, batch_size: int) -> int:
        return max(1, self.examples // batch_size)

    def batch(self, step: int, batch_size: int, seed: int) -> dict[str, np.ndarray]:
        return self._draw(np.random.default_rng([seed, step]), batch_size)

    def test_batches(self, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        yield from self._fixed(2**31 - 1, batch_size)

    def val_batches(self, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        """The validation split: a fixed set of its own, drawn apart from the test set (a
        streaming dataset gives one this way; callbacks watch it as ``val.*``)."""
        yield from self._fixed(2**31 - 2, batch_size)

    def _fixed(self, seed: int, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        fixed = self._draw(np.random.default_rng([seed]), self.test_examples)
        for start in range(0, self.test_examples, batch_size):
            yield {key: value[start : start + batch_size] for key, value in fixed.items()}

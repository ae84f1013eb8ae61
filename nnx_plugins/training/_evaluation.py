"""Evaluating a model on the test split: every metric of the run, streamed over its batches.

Example:
    >>> from nnx_plugins.training._evaluation import describe_metrics
    >>> describe_metrics({"loss": 0.08123, "accuracy": 0.975})
    'test accuracy: 97.50% (test loss 0.0812)'
    >>> describe_metrics({"loss": 2900.5, "mse": 2900.5, "mae": 43.21, "r2": 0.4812})
    'test loss 2900.5, mse 2900.5, mae 43.21, r2 0.4812'
"""

from __future__ import annotations

import math
from typing import Any

from nnx_core.metrics import MultiMetric

from ._mesh import replicate_unplaced

__all__ = ["evaluate_model", "eval_batch_size", "describe_metrics", "evaluation_line"]

_ROWS = 1024


def eval_batch_size(info: Any, batch_size: int) -> int:
    """Test rows per evaluation step: about 1024 target values, and at least a train batch."""
    per_row = max(1, math.prod(info.targets.shape))
    return max(batch_size, _ROWS // per_row)


def evaluate_model(
    model: Any, parts: Any, steps: Any, batch_size: int, *, mesh: Any = None
) -> dict[str, float]:
    """Every metric of ``parts`` for ``model`` (put in eval mode) over the test split (the
    metrics' totals replicated over ``mesh`` when the model is placed on one)."""
    model.eval()
    metrics = MultiMetric(**parts.metric_objects())
    if mesh is not None:
        replicate_unplaced(metrics, mesh)
    for batch in parts.data.test_batches(batch_size):
        steps.evaluate(model, metrics, batch)
    return {key: float(value) for key, value in metrics.compute().items()}


def _number(key: str, value: float) -> str:
    if "accuracy" in key:
        return f"{value:.2%}"
    return f"{value:.4f}" if key == "loss" else f"{value:.4g}"


def _language_model_line(metrics: dict[str, float], token: str) -> str:
    words = {
        "bits_per_token": lambda v: f"{v:.3g} bits per {token}",
        "perplexity": lambda v: f"perplexity {v:.3g}",
        "accuracy": lambda v: f"next-{token} accuracy {v:.2%}",
    }
    shown = [words[k](metrics[k]) for k in words if k in metrics]
    shown += [f"{k} {_number(k, v)}" for k, v in metrics.items() if k not in (*words, "loss")]
    loss = f" (loss {metrics['loss']:.4f} nats per {token})" if "loss" in metrics else ""
    return f"test: {', '.join(shown)}{loss}"


def describe_metrics(metrics: dict[str, float], *, token: str = "token") -> str:
    """The summary line of a run's final test metrics; a language model's (``bits_per_token``
    among them) in the words of the docs, ``token`` naming what a token is (``byte`` for
    text read as bytes: bits per byte).

    Example:
        >>> from nnx_plugins.training._evaluation import describe_metrics
        >>> lm = {"loss": 1.517, "perplexity": 4.559, "bits_per_token": 2.1886, "accuracy": 0.603}
        >>> describe_metrics(lm, token="byte")
        'test: 2.19 bits per byte, perplexity 4.56, next-byte accuracy 60.30% (loss 1.5170 nats per byte)'
    """
    if "bits_per_token" in metrics:
        return _language_model_line(metrics, token)
    if "accuracy" in metrics:
        others = [
            f"{k} {_number(k, v)}" for k, v in metrics.items() if k not in ("loss", "accuracy")
        ]
        extra = f", {', '.join(others)}" if others else ""
        return f"test accuracy: {metrics['accuracy']:.2%} (test loss {metrics['loss']:.4f}{extra})"
    return "test " + ", ".join(
        f"{k} {v:.4f}" if k == "loss" and abs(v) < 1000 else f"{k} {v:.5g}"
        for k, v in metrics.items()
    )


def evaluation_line(step: int, total: int, split: str, metrics: dict[str, float]) -> str:
    """The line printed at each evaluation during training."""
    values = "  ".join(f"{k} {_number(k, v)}" for k, v in metrics.items())
    return f"step {step:>6}/{total}  {split} {values}"

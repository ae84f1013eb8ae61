"""Evaluating a model on a split (``val`` or ``test``): every metric of the run, streamed over
its batches.

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
from ._part_calls import check_scalar

__all__ = ["evaluate_model", "eval_batch_size", "describe_metrics", "evaluation_line"]

_ROWS = 1024


def eval_batch_size(info: Any, batch_size: int) -> int:
    """Test rows per evaluation step: about 1024 target values, and at least a train batch."""
    per_row = max(1, math.prod(info.targets.shape))
    return max(batch_size, _ROWS // per_row)


def evaluate_model(
    model: Any, parts: Any, steps: Any, batch_size: int, *, mesh: Any = None, split: str = "test"
) -> dict[str, float]:
    """Every metric of ``parts`` for ``model`` (put in eval mode) over ``split`` (``test`` or
    ``val``: the data's ``test_batches`` or ``val_batches``; the metrics' totals replicated
    over ``mesh`` when the model is placed on one).

    Raises:
        RunPartError: the dataset gave a batch that is not what it described, or a metric a
            value that is not one number (each named with its distribution).
    """
    model.eval()
    made = parts.metric_objects()
    metrics = MultiMetric(**made)
    if mesh is not None:
        replicate_unplaced(metrics, mesh)
    for batch in parts.batches(split, batch_size):
        steps.evaluate(model, metrics, batch)
    found = {}
    for key in made:
        label = parts.metrics[key].label if key in parts.metrics else parts.label(parts.task)
        with label.calling("compute()"):
            value = getattr(metrics, key).compute()
        found[key] = check_scalar(label, key, value)
    return found


def _number(key: str, value: float) -> str:
    if "accuracy" in key:
        return f"{value:.2%}"
    return f"{value:.4f}" if key == "loss" else f"{value:.4g}"


def _language_model_line(metrics: dict[str, float], token: str, masked: bool) -> str:
    which = "masked" if masked else "next"
    words = {
        "bits_per_token": lambda v: f"{v:.3g} bits per {token}",
        "perplexity": lambda v: f"perplexity {v:.3g}",
        "accuracy": lambda v: f"{which}-{token} accuracy {v:.2%}",
    }
    shown = [words[k](metrics[k]) for k in words if k in metrics]
    shown += [f"{k} {_number(k, v)}" for k, v in metrics.items() if k not in (*words, "loss")]
    loss = f" (loss {metrics['loss']:.4f} nats per {token})" if "loss" in metrics else ""
    return f"test: {', '.join(shown)}{loss}"


def describe_metrics(
    metrics: dict[str, float], *, token: str = "token", masked: bool = False
) -> str:
    """The summary line of a run's final test metrics; a language model's (``bits_per_token``
    among them) in the words of the docs, ``token`` naming what a token is (``byte`` for
    text read as bytes: bits per byte), ``masked`` for a masked language model (its metrics
    are of the masked tokens).

    Example:
        >>> from nnx_plugins.training._evaluation import describe_metrics
        >>> lm = {"loss": 1.517, "perplexity": 4.559, "bits_per_token": 2.1886, "accuracy": 0.603}
        >>> describe_metrics(lm, token="byte")
        'test: 2.19 bits per byte, perplexity 4.56, next-byte accuracy 60.30% (loss 1.5170 nats per byte)'
        >>> describe_metrics(lm, masked=True)[:65]
        'test: 2.19 bits per token, perplexity 4.56, masked-token accuracy'
    """
    if "bits_per_token" in metrics:
        return _language_model_line(metrics, token, masked)
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


def evaluation_line(
    step: int, total: int, split: str, metrics: dict[str, float], *, weights_of: int | None = None
) -> str:
    """The line printed at each evaluation during training (``weights_of``: the step whose
    weights were evaluated, when a callback restored an earlier step's).

    Example:
        >>> from nnx_plugins.training._evaluation import evaluation_line
        >>> evaluation_line(100, 100, "test", {"loss": 0.25}, weights_of=80)
        'step    100/100  test (the weights of step 80) loss 0.2500'
    """
    values = "  ".join(f"{k} {_number(k, v)}" for k, v in metrics.items())
    restored = f" (the weights of step {weights_of})" if weights_of is not None else ""
    return f"step {step:>6}/{total}  {split}{restored} {values}"

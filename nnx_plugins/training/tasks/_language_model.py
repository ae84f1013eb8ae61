"""The ``language_model`` task: next-token cross-entropy on ``(batch, seq, vocab)`` logits.

``inputs`` are token ids ``(batch, seq)``, ``targets`` the next token of each position, and
``mask`` (when the batch has one) is 1 where a target counts: padding does not. The loss is
the mean cross-entropy over counted tokens; the test split reports ``loss``, ``perplexity``,
``bits_per_token`` and ``accuracy`` (of the next token).

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins.training.tasks._language_model import LanguageModel
    >>> logits = jnp.zeros((1, 3, 4))          # uniform over 4 tokens: log(4) nats each
    >>> loss, values = LanguageModel().loss(logits, {"targets": jnp.array([[1, 2, 3]]),
    ...                                              "mask": jnp.array([[1, 1, 0]])})
    >>> round(float(loss), 4), values["mask"].tolist()
    (1.3863, [[1.0, 1.0, 0.0]])
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from ...config._shapes import spell
from ..data._base import DataError, first_outside
from ..data._text import TextDataset
from ._base import Task
from ._causal import first_acausal

__all__ = ["LanguageModel"]


class LanguageModel(Task):
    """Next-token cross-entropy on (batch, seq, vocab) logits of token ids.

    See the module docstring.
    """

    metrics = ("perplexity", "bits_per_token", "accuracy")
    train_metrics = ()
    gives = ("logits", "labels", "mask", "loss")

    def __init__(self) -> None:
        pass

    def check_data(self, data: Any, info: Any, output: Any) -> None:
        """Token ids, one sequence per example; every target id (the first bad one named) a
        row of the model's logits."""
        for what, struct in (("inputs", info.inputs), ("targets", info.targets)):
            if not jnp.issubdtype(struct.dtype, jnp.integer) or len(struct.shape) != 1:
                raise DataError(
                    f"{info.name}: a language model reads token ids, one sequence per example, "
                    f"but its {what} are {spell(struct)} per example; use data of type text (or "
                    "integer arrays of shape (examples, seq_len))."
                )
        shape = tuple(getattr(output, "shape", ()))
        if len(shape) != 3:
            return
        held = data.label_arrays() if callable(getattr(data, "label_arrays", None)) else ()
        found = first_outside(held, shape[-1])
        if found is not None:
            name, where, value = found
            raise DataError(
                f"{info.name}: target token id {name}[{where}] is {value}, outside the model's "
                f"{shape[-1]} token logits (ids 0 to {shape[-1] - 1}). Token ids must index "
                "the vocabulary: fix the data, or give the model more outputs."
            )

    def check_model(self, config: Any, data: Any) -> tuple[tuple[Any, ...], str] | None:
        """On next-token data (text without ``masking``), a model that sees the token each
        position must predict: attention without ``is_causal``, or a MaskedLM (`first_acausal`;
        a layer it cannot judge passes). Masked-LM data, or data of another kind, passes."""
        if not (isinstance(data, TextDataset) and data.masking is None):
            return None
        found = first_acausal(config.model, prefer=config.prefer)
        if found is None:
            return None
        path, what = found
        copies = (
            "next-token training would learn to copy it (task language_model on text without "
            "data.masking: the loss falls near zero and the model predicts nothing)"
        )
        masking = "masking: {probability: 0.15, mask_token_id: ID}"
        if what.endswith("MaskedLM"):
            return path, (
                f"{what}, which attends to every position, the very token each must predict: "
                f"{copies}. To fine-tune it, train it as a masked LM: give the data {masking} "
                "(the id of its tokenizer's mask token); to train on next tokens, use a CausalLM."
            )
        return path, (
            f"{what}, so each position sees the tokens after it, the very token it must "
            f"predict: {copies}. Set is_causal: true here; or, to train a masked LM (BERT) "
            f"instead, give the data {masking}."
        )

    def check_output(self, output: Any, info: Any) -> str | None:
        seq = info.inputs.shape[0]
        vocab = info.vocab_size
        shape = tuple(getattr(output, "shape", ()))
        fits = isinstance(output, jax.ShapeDtypeStruct) and len(shape) == 3 and shape[1] == seq
        if fits and (vocab is None or shape[2] >= vocab):
            return None
        size = vocab if vocab is not None else "vocab"
        return (
            f"the model returns {spell(output)} but a language model over the {size} tokens of "
            f"{info.name} needs logits of shape (batch, {seq}, {size}): one score per token of "
            "the vocabulary at every position; end the model with a layer of that many outputs."
        )

    def loss(self, outputs: Any, batch: dict[str, jax.Array]) -> tuple[jax.Array, dict[str, Any]]:
        logits = outputs.astype(jnp.float32)
        labels = batch["targets"]
        mask = batch.get("mask")
        mask = jnp.ones(labels.shape, jnp.float32) if mask is None else mask.astype(jnp.float32)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        mean = (losses * mask).sum() / jnp.maximum(mask.sum(), 1.0)
        return mean, {"logits": logits, "labels": labels, "mask": mask, "loss": losses}

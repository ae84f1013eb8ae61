"""What a converter must satisfy, checked from a ``config.json`` alone: `converter_problems`.

The converter's config must validate (registered layers, a run's sections), its table must
name only parameters of the model that config builds and fill every one of them, and the table
read backwards then forwards must give every parameter back exactly (random values through
`to_transformers` and `plan`). `nnx_plugins.testing.check_converter` runs this for a pack.

Example:
    >>> from nnx_plugins.pretrained._check import converter_problems
    >>> from nnx_plugins.pretrained.converters._vit import VIT
    >>> tensors, problems = converter_problems(VIT, {"hidden_size": 8, "num_attention_heads": 2,
    ...     "num_hidden_layers": 1, "intermediate_size": 16, "image_size": 8, "patch_size": 4,
    ...     "num_labels": 3})
    >>> problems, tensors["vit.embeddings.patch_embeddings.projection.weight"]
    ([], (8, 3, 4, 4))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import nnx_core

from ..config._build import build
from ..training._config import load_train_config
from ._convert import Converter, MemorySource, path_text, plan, to_transformers

__all__ = ["converter_problems"]


def converter_problems(
    converter: Converter, settings: Mapping[str, Any], *, seed: int = 0
) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """The transformers tensors ``converter`` expects for ``settings`` (name -> shape), and
    every way it fails (an empty list: it conforms)."""
    try:
        config = converter.config(settings)
        load_train_config({k: v for k, v in config.items() if k != "tokenizer"})
        model = nnx_core.eval_shape(lambda: build({"model": config["model"]}))
    except Exception as error:  # noqa: BLE001 - any failure of a pack's converter is reported
        return {}, [f"its config for {dict(settings)} does not build: {error}"]
    variables = {
        tuple(p): (tuple(v.value.shape), type(v)) for p, v in nnx_core.state(model).flat_state()
    }
    rng = np.random.default_rng(seed)
    state = {
        path_text(p): rng.normal(size=shape).astype(np.float32)
        for p, (shape, _) in variables.items()
    }
    try:
        tensors = to_transformers(converter, settings, state)
        matched = plan(
            converter, MemorySource(settings, tensors), variables, where="check", dtype=None
        )
    except Exception as error:  # noqa: BLE001 - as above
        return {}, [f"its table does not fit the model its config builds: {error}"]
    problems = []
    for target in matched.targets:
        pieces = [
            piece[None] if target.pieces[0][1].per_layer else piece
            for piece in matched.produce(target)
        ]
        made = np.concatenate(pieces) if target.pieces[0][1].per_layer else pieces[0]
        if not np.array_equal(made.reshape(target.shape), state[path_text(target.path)]):
            problems.append(
                f"{path_text(target.path)}: exported then imported it does not come back the "
                "same: a transform and its inverse disagree"
            )
    return {name: tuple(array.shape) for name, array in tensors.items()}, problems

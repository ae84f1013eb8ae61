"""The masked-language-model objective of the ``text`` dataset (``data.masking``), as BERT's
pretraining does it.

Each position of a row is chosen with ``probability`` (at least one real position per row);
a chosen position's input becomes ``mask_token_id`` 80% of the time, a random token id 10%,
and stays itself 10%. The targets are the original tokens at the same positions (not shifted)
and the ``mask`` marks the chosen positions, so the ``language_model`` task's loss (cross
entropy where the mask is 1) is the masked-LM loss. A row's choice is a pure function of the
numbers that seed it: a training batch's ``(train.seed, step)`` and the row's index; a
validation or test window's own fixed seed (its split and index), the same in every run and
whatever the batch size.

Example:
    >>> import numpy as np
    >>> from nnx_plugins.training.data._masking import Masking, mask_rows
    >>> masking = Masking(probability=0.5, mask_token_id=0)
    >>> windows = np.arange(1, 9, dtype=np.int32).reshape(2, 4)
    >>> real = np.ones((2, 4), bool)
    >>> out = mask_rows(windows, real, (0, 0), masking, vocab_size=10)
    >>> sorted(out), out["targets"].tolist() == windows.tolist()
    (['inputs', 'mask', 'targets'], True)
    >>> bool((out["mask"].sum(axis=1) >= 1).all())                 # at least one per row
    True
    >>> bool((out["inputs"][out["mask"] == 0] == windows[out["mask"] == 0]).all())
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import numpy as np
import pydantic
from pydantic_core import PydanticCustomError, ValidationError

from ._base import Batch, DataError

__all__ = [
    "Masking",
    "mask_rows",
    "as_masking",
    "MASK_SHARE",
    "RANDOM_SHARE",
    "MASK_STREAM",
    "SPLITS",
]

#: of the chosen positions: the share given the mask id, then the share given a random id
#: (the rest keep their token), as in BERT's pretraining
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1
#: the first number of every masking seed: no other random stream of the data starts with it
MASK_STREAM = 0x6D61736B  # ("mask")
#: the first number after it of a validation or test window's seed ``(SPLITS[split], window)``
#: (a training batch's is ``(train.seed, step)``; a seed is at most 2**63 - 1)
SPLITS = {"validation": 2**64 - 2, "test": 2**64 - 1}


class Masking(pydantic.BaseModel):
    """``data.masking``: train a masked language model (BERT) instead of next-token prediction.

    Attributes:
        probability: the share of the positions chosen for prediction, in (0, 1] (BERT: 0.15).
        mask_token_id: the id of the mask token (``[MASK]``): an id of the tokenizer's
            vocabulary. With ``level: bytes`` and no tokenizer, 0 (NUL, which text never holds).
    """

    model_config = pydantic.ConfigDict(strict=True, frozen=True)  # (unknown keys: refused below)

    probability: Annotated[float, pydantic.Field(gt=0, le=1, allow_inf_nan=False)] = 0.15
    mask_token_id: Annotated[int, pydantic.Field(ge=0, le=2**31 - 1)]

    @pydantic.model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = [str(key) for key in data if key not in cls.model_fields]
            if unknown:
                raise PydanticCustomError(
                    "masking_key",
                    "unknown key(s) {unknown} in masking; it takes probability and mask_token_id",
                    {"unknown": ", ".join(map(repr, unknown))},
                )
        return data


def as_masking(value: Any) -> Masking | None:
    """``value`` (a mapping, a `Masking` or None) as a `Masking`.

    Raises:
        DataError: (key ``masking``) a value `Masking` does not accept, each problem named.
    """
    if value is None or isinstance(value, Masking):
        return value
    if not isinstance(value, Mapping):
        raise DataError(
            f"masking must be a mapping such as {{probability: 0.15, mask_token_id: 103}}, got "
            f"{type(value).__name__}.",
            key="masking",
        )
    try:
        return Masking.model_validate(dict(value))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, item['loc'])) or 'masking'}: {item['msg']} (got "
            f"{item.get('input')!r})"
            for item in error.errors(include_url=False)
        )
        raise DataError(
            f"masking is invalid: {problems}. It takes probability (in (0, 1], default 0.15) and "
            "mask_token_id (the id of the tokenizer's mask token).",
            key="masking",
        ) from None


def mask_rows(
    windows: np.ndarray,
    real: np.ndarray,
    seed: Sequence[int],
    masking: Masking,
    *,
    vocab_size: int,
) -> Batch:
    """The masked-LM batch of ``windows`` (``int32[rows, seq_len]``): ``inputs`` (the chosen
    positions replaced), ``targets`` (the windows) and ``mask`` (1 at the chosen positions).

    Only ``real`` positions (``bool[rows, seq_len]``, each row holding at least one) are chosen.
    Everything is drawn from one ``np.random.default_rng([MASK_STREAM, *seed])``, row ``i`` from
    row ``i`` of its arrays: a row's choice is a function of ``seed``, its index and the shape.
    """
    rng = np.random.default_rng([MASK_STREAM, *map(int, seed)])
    draw, kind = rng.random(windows.shape), rng.random(windows.shape)
    random_ids = rng.integers(0, vocab_size, windows.shape, dtype=np.int64)
    spare = rng.random(windows.shape[0])
    chosen = (draw < masking.probability) & real
    for row in np.flatnonzero(~chosen.any(axis=1)):  # (every row predicts something)
        places = np.flatnonzero(real[row])
        chosen[row, places[int(spare[row] * len(places))]] = True
    inputs = np.where(chosen & (kind < MASK_SHARE), masking.mask_token_id, windows)
    replace = chosen & (kind >= MASK_SHARE) & (kind < MASK_SHARE + RANDOM_SHARE)
    inputs = np.where(replace, random_ids, inputs).astype(np.int32)
    return {"inputs": inputs, "targets": windows, "mask": chosen.astype(np.int32)}

"""Shared test configuration: warnings are errors (pyproject), strict dtype promotion, and
float32 matmuls at full precision.

GPUs multiply float32 matrices in TF32 by default (about 3 decimal digits): the tests that
compare two float32 computations to 1e-5 (a decoding step against the full pass, our optimizer
against a plain step) would fail there only because of it. On CPU "highest" is the default.
"""

import jax
import pytest


@pytest.fixture(autouse=True)
def _strict_numerics():
    with jax.numpy_dtype_promotion("standard"), jax.default_matmul_precision("highest"):
        yield

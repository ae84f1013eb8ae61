"""Shared test configuration: warnings are errors (pyproject), strict dtype promotion."""

import jax
import pytest


@pytest.fixture(autouse=True)
def _strict_promotion():
    with jax.numpy_dtype_promotion("standard"):
        yield

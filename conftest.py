"""For every test and doctest: XLA compiles with few optimizations (below), and nnx's cache folder (``NNX_CACHE_DIR``, where the compile cache
of train, evaluate and generate goes) is a temporary folder, never the user's: one for the
session, set before any test module is imported (so environments copied at import, and
module-scoped fixtures, have it too), and a new one for each test."""

import os
import shutil
import tempfile

import pytest

# The suite compiles thousands of tiny programs and runs each a few times: XLA's backend
# optimizations cost more than they save there (about 15% of the suite's time on 2 cores). Set
# for this process and, through the environment, for the processes the tests start. Users'
# programs are compiled as JAX's defaults say: this is the test harness only.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")


def _fewer_optimizations():
    import jax

    jax.config.update(
        "jax_disable_most_optimizations", os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] != "0"
    )


_fewer_optimizations()

_SESSION: list[str] = []


def pytest_configure(config):
    _SESSION.append(tempfile.mkdtemp(prefix="nnx-test-cache-"))
    os.environ["NNX_CACHE_DIR"] = _SESSION[-1]


def pytest_unconfigure(config):
    for folder in _SESSION:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _private_cache_folder(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NNX_CACHE_DIR", str(tmp_path_factory.mktemp("nnx-cache")))

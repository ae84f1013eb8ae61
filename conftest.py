"""For every test and doctest: nnx's cache folder (``NNX_CACHE_DIR``, where the compile cache
of train, evaluate and generate goes) is a temporary folder, never the user's: one for the
session, set before any test module is imported (so environments copied at import, and
module-scoped fixtures, have it too), and a new one for each test."""

import os
import shutil
import tempfile

import pytest

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

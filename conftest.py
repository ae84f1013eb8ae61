"""For every test and doctest: XLA compiles with few optimizations (below), and nnx's cache folder
(``NNX_CACHE_DIR``, where the compile cache of train, evaluate and generate goes) is a
temporary folder, never the user's: one for the whole session, shared by the xdist workers and
set before any test module is imported (so environments copied at import, and module-scoped
fixtures, have it too). A program one test's run compiled is loaded by the next that compiles
it (the CLI and multi-process tests train the same small configs again and again: 13% of their
time). A test marked ``fresh_compile_cache`` (one that counts compilations or cache entries)
gets an empty folder of its own."""

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

_SESSION = "NNX_TEST_SESSION_CACHE"
_MADE: list[str] = []


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "fresh_compile_cache: the test's runs start from an empty compile cache"
    )
    if _SESSION not in os.environ:  # (the controller; its xdist workers inherit it)
        _MADE.append(tempfile.mkdtemp(prefix="nnx-test-cache-"))
        os.environ[_SESSION] = _MADE[-1]
    os.environ["NNX_CACHE_DIR"] = os.environ[_SESSION]


def pytest_unconfigure(config):
    for folder in _MADE:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _test_cache_folder(request, monkeypatch, tmp_path_factory):
    if request.node.get_closest_marker("fresh_compile_cache"):
        monkeypatch.setenv("NNX_CACHE_DIR", str(tmp_path_factory.mktemp("nnx-cache")))
    else:
        monkeypatch.setenv("NNX_CACHE_DIR", os.environ[_SESSION])


# --- Distribution over xdist workers (``pytest -n 2``) ---------------------------------------
# xdist's default sends the tests one by one to whichever worker is free, so a module's
# fixture of module or session scope runs on each worker that gets one of its tests: an
# 8-device training subprocess of 100 s (test_layouts.py) ran twice. Modules that declare such
# a fixture go whole to one worker, the largest first; every other test is its own unit.
# (``--dist loadgroup`` would do this with marks, but it renames node ids, which pytest 9.2
# no longer lets a plugin do.)
_SHARED_FIXTURE = ('@pytest.fixture(scope="module"', '@pytest.fixture(scope="session"')


def _one_worker(path: str, known: dict[str, bool] = {}) -> bool:  # noqa: B006 (a memo)
    if path not in known:
        try:
            with open(path, encoding="utf-8") as source:
                text = source.read()
        except OSError:
            text = ""
        known[path] = path.endswith(".py") and any(mark in text for mark in _SHARED_FIXTURE)
    return known[path]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModulesWithSharedFixtures(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if _one_worker(os.path.join(str(config.rootpath), path)) else nodeid

    return ModulesWithSharedFixtures(config, log)

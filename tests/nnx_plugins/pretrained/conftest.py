"""The committed transformers fixtures (tests/fixtures/hf, made by make_fixtures.py) and their
imports, made once per test session."""

import pathlib
import shutil

import numpy as np
import pytest

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "hf"
FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "bert", "vit")
CAUSAL = ("gpt2", "llama", "mistral", "qwen2", "qwen3")


@pytest.fixture(scope="session")
def imported(tmp_path_factory):
    """``imported(family)``: the family's fixture imported (once) into a session directory."""
    from nnx_plugins import import_hf

    done: dict[str, pathlib.Path] = {}

    def get(family: str) -> pathlib.Path:
        if family not in done:
            out = tmp_path_factory.mktemp("imported") / family
            import_hf(FIXTURES / family, out)
            done[family] = out
        return done[family]

    return get


@pytest.fixture
def copy_of(tmp_path):
    """``copy_of(family)``: a writable copy of a fixture directory, to damage."""

    def make(family: str) -> pathlib.Path:
        target = tmp_path / f"src-{family}"
        shutil.copytree(FIXTURES / family, target)
        return target

    return make


def reference(family: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / family / "reference.npz") as data:
        return {key: data[key] for key in data.files}


def relative_error(ours, theirs) -> float:
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())

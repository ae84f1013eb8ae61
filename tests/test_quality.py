"""Architecture and code-quality gates that run with the test suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = BIN / tool if (BIN / tool).exists() else shutil.which(tool)
    if exe is None:
        pytest.fail(f"{tool} is not installed; install the test extras: pip install -e '.[test]'")
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True)


def test_import_contracts_hold():
    """nnx_plugins -> nnx_layers -> nnx_core, no cycles, pluggy/pydantic/yaml only in plugins."""
    out = _run("lint-imports")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_ruff_is_clean():
    out = _run("ruff", "check", "nnx_core", "nnx_layers", "nnx_plugins", "benchmarks", "tests")
    assert out.returncode == 0, out.stdout + out.stderr


def test_nnx_core_type_checks():
    out = _run("mypy", "nnx_core")
    assert out.returncode == 0, out.stdout + out.stderr

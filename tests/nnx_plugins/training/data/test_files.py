"""Data files: regular files only (never a FIFO, device or /dev/stdin), sizes bounded."""

import os
import subprocess
import sys

import pytest

from nnx_plugins import DataError
from nnx_plugins.training.data._files import LIMIT_VARIABLE, check_size, data_limit, open_regular


def test_a_regular_file_opens(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"abc")
    with open_regular(tmp_path / "a.bin") as handle:
        assert handle.read() == b"abc"


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # (no writer: a blocking open would wait forever)
    with pytest.raises(DataError, match=r"'.*pipe' is a FIFO \(named pipe\), not a regular file"):
        open_regular(fifo)


@pytest.mark.parametrize(
    "path, match",
    [
        (
            "/dev/null",
            r"'/dev/null' is a character device \(a terminal or /dev/\.\.\.\), not a regular file",
        ),
        ("/", r"'/' is a directory"),
        ("/nonexistent/x.npz", r"no such file '/nonexistent/x\.npz'"),
    ],
)
def test_other_things_are_refused(path, match):
    with pytest.raises(DataError, match=match):
        open_regular(path)


def test_dev_stdin_fed_by_a_pipe_is_refused():
    code = (
        "from nnx_plugins.training.data._npz import read_npz\n"
        "from nnx_plugins import DataError\n"
        "try:\n    read_npz('/dev/stdin', ['x'])\nexcept DataError as e:\n    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=b"",
        capture_output=True,
        timeout=60,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert "'/dev/stdin' is a FIFO (named pipe), not a regular file" in done.stdout.decode(), done


def test_the_size_limit(monkeypatch):
    monkeypatch.setenv(LIMIT_VARIABLE, "1000")
    assert data_limit() == 1000
    check_size(1000, "x")
    with pytest.raises(
        DataError,
        match=r"x needs 1001 B \(1,001 bytes\) in memory, more than NNX_DATA_MAX_BYTES=1000",
    ):
        check_size(1001, "x")
    monkeypatch.setenv(LIMIT_VARIABLE, "lots")
    with pytest.raises(
        DataError, match=r"NNX_DATA_MAX_BYTES='lots' is not a positive whole number"
    ):
        data_limit()
    monkeypatch.delenv(LIMIT_VARIABLE)
    assert data_limit() > 0

"""`open_regular` when a stop (Ctrl-C, SIGTERM) lands just after the file object is made: the
interpreter drops the call's result, whose file object closes the descriptor. Closing it by
hand a second time raised EBADF in place of the stop: a SIGTERM during a checkpoint's save
ended `nnx train` with "writing it failed: Bad file descriptor" and exit 1, not 143."""

import os

import pytest

import nnx_plugins
from nnx_plugins import _files


@pytest.fixture
def stop_after_fdopen(monkeypatch):
    """``os.fdopen`` as seen when a signal's handler raises right after it returns; the
    descriptors it was given."""
    real, given = os.fdopen, []

    def stopped(fd, *args, **kwargs):
        given.append(fd)
        real(fd, *args, **kwargs).close()  # (made; dropped with the stop, it closes ``fd``)
        raise KeyboardInterrupt

    monkeypatch.setattr(_files.os, "fdopen", stopped)
    return given


def test_a_stop_after_the_file_object_is_made_is_the_stop_and_leaks_nothing(
    tmp_path, stop_after_fdopen
):
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 100)
    with pytest.raises(KeyboardInterrupt):
        _files.open_regular(path)
    (fd,) = stop_after_fdopen
    with pytest.raises(OSError):  # (closed, once)
        os.fstat(fd)


def test_a_stop_while_a_save_hashes_its_file_is_the_stop_and_leaves_nothing(
    tmp_path, stop_after_fdopen
):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    with pytest.raises(KeyboardInterrupt) as stop:
        nnx_plugins.save(model, tmp_path / "checkpoint")
    assert not isinstance(stop.value, OSError) and list(tmp_path.iterdir()) == []


def test_a_folder_is_refused_and_closed(tmp_path, monkeypatch):
    real, opened = os.open, []

    def recorded(*args, **kwargs):
        opened.append(real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(_files.os, "open", recorded)
    with pytest.raises(_files.NotRegularFile, match="it is a directory, not a regular file"):
        _files.open_regular(tmp_path)
    monkeypatch.setattr(_files.os, "open", real)
    (fd,) = opened
    with pytest.raises(OSError):
        os.fstat(fd)

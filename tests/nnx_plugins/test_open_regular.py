"""`open_regular` when a stop (Ctrl-C, SIGTERM) lands just after the file object is made: the
interpreter drops the call's result, whose file object closes the descriptor. Closing it by
hand a second time raised EBADF in place of the stop: a SIGTERM during a checkpoint's save
ended `nnx train` with "writing it failed: Bad file descriptor" and exit 1, not 143."""

import os

import pytest

import nnx_plugins
from nnx_plugins import _files


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def stop_after_fdopen(monkeypatch):
    """``os.fdopen`` as seen when a signal's handler raises right after it returns."""
    real = os.fdopen

    def stopped(fd, *args, **kwargs):
        real(fd, *args, **kwargs).close()  # (made; dropped with the stop, it closes ``fd``)
        raise KeyboardInterrupt

    monkeypatch.setattr(_files.os, "fdopen", stopped)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_a_stop_after_the_file_object_is_made_is_the_stop_and_leaks_nothing(
    tmp_path, stop_after_fdopen
):
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 100)
    before = open_descriptors()
    with pytest.raises(KeyboardInterrupt):
        _files.open_regular(path)
    assert open_descriptors() == before


def test_a_stop_while_a_save_hashes_its_file_is_the_stop_and_leaves_nothing(
    tmp_path, stop_after_fdopen
):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    with pytest.raises(KeyboardInterrupt) as stop:
        nnx_plugins.save(model, tmp_path / "checkpoint")
    assert not isinstance(stop.value, OSError) and list(tmp_path.iterdir()) == []


def test_a_folder_is_still_refused_and_closed(tmp_path):
    before = open_descriptors() if os.path.isdir("/proc/self/fd") else None
    with pytest.raises(_files.NotRegularFile, match="it is a directory, not a regular file"):
        _files.open_regular(tmp_path)
    if before is not None:
        assert open_descriptors() == before

"""What nnx renames into place (a checkpoint, an imported model, an export, predictions) gets the
permissions the user's umask gives a new file or folder, not tempfile's private 0700/0600."""

import os
import pathlib
import stat

import numpy as np
import pytest

import nnx_plugins
from nnx_plugins._files import umask, usual_mode
from nnx_plugins.pretrained._export_jax import export_jax
from nnx_plugins.pretrained._import import import_hf

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"
LINEAR = {"type": "Linear", "in_features": 64, "out_features": 10}


@pytest.fixture
def group_umask():
    previous = os.umask(0o027)
    yield 0o027
    os.umask(previous)


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_umask_is_read_without_changing_it(group_umask):
    assert umask() == 0o027
    assert umask() == 0o027  # (unchanged by reading it)


def test_usual_mode_gives_what_mkdir_and_open_give(tmp_path, group_umask):
    folder, file = tmp_path / "d", tmp_path / "f"
    folder.mkdir(mode=0o700)
    file.write_bytes(b"")
    file.chmod(0o600)
    usual_mode(folder)
    usual_mode(file)
    assert (mode(folder), mode(file)) == (0o750, 0o640)


def test_checkpoints_imports_and_exports_follow_the_umask(tmp_path, group_umask):
    checkpoint = nnx_plugins.save(nnx_plugins.build(LINEAR), tmp_path / "ckpt")
    assert mode(pathlib.Path(checkpoint)) == 0o750
    import_hf(FIXTURES / "llama", tmp_path / "llama")
    assert mode(tmp_path / "llama") == 0o750
    assert mode(tmp_path / "llama" / "config.yaml") == 0o640
    config = {"model": LINEAR, "data": {"type": "digits", "layout": "flat"}}
    export_jax(config, checkpoint=checkpoint, out=tmp_path / "m.jax")
    assert mode(tmp_path / "m.jax") == 0o640


def test_predictions_follow_the_umask(tmp_path, group_umask, capsys):
    from nnx_plugins.cli._main import main

    config = tmp_path / "c.yaml"
    config.write_text(
        "model: {type: Linear, in_features: 64, out_features: 10}\n"
        "data: {type: digits, layout: flat}\n"
    )
    checkpoint = nnx_plugins.save(nnx_plugins.build(LINEAR), tmp_path / "ckpt")
    np.savez(tmp_path / "in.npz", x=np.zeros((3, 64), np.float32))
    status = main(
        [
            "predict",
            str(config),
            "--checkpoint",
            str(checkpoint),
            "--input",
            str(tmp_path / "in.npz"),
            "--output",
            str(tmp_path / "out.npz"),
        ]
    )
    assert status == 0, capsys.readouterr().err
    assert mode(tmp_path / "out.npz") == 0o640

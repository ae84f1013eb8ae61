"""export_hf on odd inputs: a config.json value the converter refuses, a broken generation or
tokenizer config beside it, a side file that cannot be read; each refused naming the file,
nothing written. And an output folder that appears while the export renames its own."""

import errno
import json
import os
import shutil

import pytest

from nnx_plugins import PretrainedError, export_hf
from nnx_plugins.cli._main import main
from nnx_plugins.pretrained import _exporting


@pytest.fixture
def copied(imported, tmp_path):
    """A writable copy of the imported tiny Llama (config.yaml, config.json, checkpoint...)."""
    target = tmp_path / "llama"
    shutil.copytree(imported("llama"), target)
    return target


def refused(copied, match):
    out = copied.parent / "out"
    with pytest.raises(PretrainedError, match=match) as caught:
        export_hf(copied / "config.yaml", checkpoint=copied / "checkpoint", out=out)
    assert str(caught.value).startswith("cannot export ") and "\n" not in str(caught.value)
    assert sorted(p.name for p in copied.parent.iterdir()) == ["llama"]
    return caught.value


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"num_hidden_layers": "2"}, r"'num_hidden_layers' must be a positive whole number, got '2' \(converter LlamaForCausalLM\); fix config\.json"),
        ({"rope_parameters": {"rope_type": "yarn"}}, r"'rope_parameters\.rope_type' is 'yarn': this converter supports"),
        ({"hidden_act": "gelu_fast"}, r"'hidden_act' is 'gelu_fast', an activation this converter does not support"),
    ],
)  # fmt: skip
def test_a_config_json_value_the_converter_refuses(copied, capsys, change, match):
    """It was a ValueError out of export_hf: a traceback at the command."""
    settings = json.loads((copied / "config.json").read_text())
    (copied / "config.json").write_text(json.dumps({**settings, **change}))
    error = refused(copied, match)
    assert error.where == str(copied / "config.json")
    argv = ["export", "hf", str(copied / "config.yaml"), "--checkpoint", str(copied / "checkpoint")]
    assert main([*argv, "--out", str(copied.parent / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nnx: error: cannot export ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("generation_config.json", "{eos", r"generation_config\.json is not valid JSON: .*; fix or remove it"),
        ("tokenizer_config.json", "[]", r"tokenizer_config\.json must hold a JSON object .*got a list of 0 items; fix or remove it"),
    ],
)  # fmt: skip
def test_a_broken_config_beside_config_json_is_refused(copied, name, content, match):
    """It was copied as it was: transformers' from_pretrained then fails on the output."""
    (copied / name).write_text(content)
    assert refused(copied, match).where == str(copied / name)


def test_a_side_file_that_cannot_be_read_is_named(copied, monkeypatch):
    """It was "cannot write OUT: permission denied ... free space or fix permissions"."""

    def denied(path, limit):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr("nnx_plugins.pretrained._export_hf.read_regular", denied)
    error = refused(
        copied, r"generation_config\.json: cannot be read: permission denied \(EACCES\)"
    )
    assert error.where == str(copied / "generation_config.json")


def test_a_folder_that_appears_full_at_the_rename_is_another_process(tmp_path, monkeypatch):
    """Between the check that --out is absent and the rename, another export put its folder
    there: the rename fails (ENOTEMPTY), said as the race it is."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "theirs").write_text("x")
    monkeypatch.setattr(_exporting.os.path, "lexists", lambda path: False)
    with pytest.raises(FileExistsError) as caught:
        _exporting._rename_new(tmp_path / "mine", tmp_path / "out")
    assert caught.value.errno == errno.EEXIST
    assert os.listdir(tmp_path / "out") == ["theirs"]

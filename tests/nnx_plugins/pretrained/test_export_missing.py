"""nnx export hf when what the converter's export reads is missing: a config.json field the
converter looks up (the import-time config.json edited, or another given with --hf-config), a
parameter its table writes that the model does not have. Each is one clear line naming the
field or parameter, where it was looked for and the fix; nothing is written to --out."""

import json
import pathlib

import numpy as np
import pytest
from safetensors.numpy import save_file

from nnx_plugins import Converter, PretrainedError, Rule, export_hf, import_hf, register_converter
from nnx_plugins.cli._main import main
from nnx_plugins.pretrained._exporting import ExportError


def _acme(config):
    return {"model": {"type": "Linear", "in_features": config["input_size"], "out_features": 2}}


def _table(config):
    rows = [Rule("w", "kernel", "transpose"), Rule("b", "bias")]
    return rows + ([Rule("scale", "scale")] if config.get("scaled") else [])


@pytest.fixture
def acme(tmp_path, nnx_registry):
    """A model of a pack's converter (``checks.AcmeForTests``, which reads ``input_size`` and
    writes ``scale`` when config.json says ``scaled``), imported."""
    register_converter(
        "checks.AcmeForTests", Converter(config=_acme, table=_table, layers=lambda c: 0)
    )
    source = tmp_path / "src"
    source.mkdir()
    settings = {"architectures": ["AcmeForTests"], "input_size": 3}
    (source / "config.json").write_text(json.dumps(settings))
    tensors = {"w": np.ones((2, 3), np.float32), "b": np.zeros((2,), np.float32)}
    save_file(tensors, str(source / "model.safetensors"))
    import_hf(source, tmp_path / "acme")
    return tmp_path / "acme"


def edited(folder: pathlib.Path, change) -> None:
    path = folder / "config.json"
    settings = json.loads(path.read_text())
    change(settings)
    path.write_text(json.dumps(settings))


def test_the_pack_converter_exports_what_it_imported(acme, tmp_path):
    done = export_hf(acme / "config.yaml", checkpoint=acme / "checkpoint", out=tmp_path / "out")
    assert done.tensors == 2


def test_a_config_json_field_the_converter_reads_that_is_missing_is_named(acme, tmp_path):
    """It was ``cannot export .../config.json: input_size (converter ...)``."""
    edited(acme, lambda settings: settings.pop("input_size"))
    out = tmp_path / "out"
    with pytest.raises(PretrainedError) as caught:
        export_hf(acme / "config.yaml", checkpoint=acme / "checkpoint", out=out)
    assert str(caught.value) == (
        f"cannot export {acme / 'config.json'}: config.json has no field 'input_size', which the "
        "converter reads (converter checks.AcmeForTests of in-process). Give it the value the "
        "model was imported with (nnx import hf copies the source's config.json beside "
        "config.yaml), or give that config.json with --hf-config"
    )
    assert not out.exists()


def test_the_command_says_the_missing_field_in_one_line(acme, tmp_path, capsys):
    edited(acme, lambda settings: settings.pop("input_size"))
    out = tmp_path / "out"
    argv = ["export", "hf", str(acme / "config.yaml"), "--checkpoint", str(acme / "checkpoint")]
    assert main([*argv, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nnx: error: cannot export ") and err.count("\n") == 1, err
    assert "config.json has no field 'input_size', which the converter reads" in err, err
    assert "Traceback" not in err and not out.exists()


def test_a_parameter_the_converter_writes_that_the_model_lacks_is_named(acme, tmp_path):
    """It was a bare ``KeyError: 'scale'`` from inside the write."""
    edited(acme, lambda settings: settings.update(scaled=True))
    out = tmp_path / "out"
    with pytest.raises(
        ExportError,
        match=r"^the converter checks\.AcmeForTests writes the tensor 'scale' from the parameter "
        r"'scale', which the model of .*config\.yaml does not have \(its parameters: bias, "
        r"kernel\)\. Export with the config\.json the model was imported with",
    ):
        export_hf(acme / "config.yaml", checkpoint=acme / "checkpoint", out=out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []

"""nnx export jax FILE --checkpoint DIR --out FILE: one line on stdout; bad input exits 1 with
one line on stderr and no traceback, nothing written; bad options exit 2."""

import pathlib
import re

import jax
import numpy as np
import pytest
import yaml

import nnx_plugins
from nnx_plugins.cli._main import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-export")
    config = {
        "model": {"type": "Linear", "in_features": 64, "out_features": 10},
        "data": {"type": "digits", "layout": "flat"},
    }
    (folder / "linear.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    model = nnx_plugins.build_model(config, seed=3)
    checkpoint = nnx_plugins.save(model, folder / "checkpoint")
    return folder, checkpoint, model


def export(folder: pathlib.Path, checkpoint: pathlib.Path, out: str, *more: str) -> list[str]:
    config = str(folder / "linear.yaml")
    return [
        "export",
        "jax",
        config,
        "--checkpoint",
        str(checkpoint),
        "--out",
        str(folder / out),
        *more,
    ]


def test_writes_the_artifact_and_says_what_it_takes(run, capsys):
    folder, checkpoint, model = run
    assert main(export(folder, checkpoint, "linear.jax")) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"wrote {folder / 'linear.jax'} (") and err == ""
    assert "MiB): float32[b,64] -> float32[b,10]; run it with jax.export.deserialize" in out
    exported = jax.export.deserialize((folder / "linear.jax").read_bytes())
    x = np.linspace(-1, 1, 3 * 64, dtype=np.float32).reshape(3, 64)
    np.testing.assert_allclose(exported.call(x), model(x), rtol=1e-6, atol=1e-6)


def test_overrides_and_a_fixed_input_shape(run, capsys):
    folder, checkpoint, _ = run
    argv = export(folder, checkpoint, "one.jax", "--input-shape", "1,64", "train.steps=3")
    assert main(argv) == 0
    assert "float32[1,64] -> float32[1,10]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("more", "match"),
    [
        (["--input-shape", "b,h"], r"does not trace with a symbolic axis 1 \('h'\)"),
        (["--input-shape", "64"], r"input_shape 64 has 1 axes but the model's input"),
        (["model.out_features=11"], r"model\.bias: the checkpoint holds float32\(10,\)"),
    ],
)
def test_bad_input_is_one_line_on_stderr(run, capsys, more, match):
    folder, checkpoint, _ = run
    before = set(folder.iterdir())
    assert main(export(folder, checkpoint, "bad.jax", *more)) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.startswith("nnx: error: ")
    assert re.search(match, err), err
    assert set(folder.iterdir()) == before


def test_an_existing_output_is_refused(run, capsys):
    folder, checkpoint, _ = run
    (folder / "taken.jax").write_text("keep")
    assert main(export(folder, checkpoint, "taken.jax")) == 1
    err = capsys.readouterr().err
    assert "taken.jax exists (a file): an export never replaces anything" in err
    assert (folder / "taken.jax").read_text() == "keep"


def test_usage_errors_exit_2(run, capsys):
    folder, checkpoint, _ = run
    with pytest.raises(SystemExit) as stopped:
        main(["export", "jax", str(folder / "linear.yaml"), "--checkpoint", str(checkpoint)])
    assert stopped.value.code == 2
    assert "the following arguments are required: --out" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(export(folder, checkpoint, "x.jax", "--input-dtype", "complex64"))
    assert stopped.value.code == 2
    assert "invalid choice: 'complex64'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["export", "onnx"])
    assert stopped.value.code == 2
    assert "invalid choice: 'onnx'" in capsys.readouterr().err


def test_the_checkpoint_argument_reads_best_as_the_other_commands_do(run, capsys):
    folder, checkpoint, _ = run
    argv = ["export", "jax", str(folder / "linear.yaml"), "--checkpoint", str(folder / "best")]
    assert main([*argv, "--out", str(folder / "best.jax")]) == 1
    err = capsys.readouterr().err
    assert "no best checkpoint" in err and "keep_best" in err
    assert not (folder / "best.jax").exists()

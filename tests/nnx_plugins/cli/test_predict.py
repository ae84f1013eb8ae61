"""nnx predict FILE --checkpoint DIR --input IN --output OUT: npz or CSV in, npz or CSV out,
the model's outputs; every bad input refused before the model runs, the output whole or absent."""

import os
import stat

import jax.numpy as jnp
import numpy as np
import pytest

import nnx_plugins
from nnx_plugins._stopping import Terminated
from nnx_plugins.cli import _predict_files, _predict_model
from nnx_plugins.cli._main import main
from nnx_plugins.cli._predict_files import Inputs, PredictError
from nnx_plugins.cli._predict_model import check_inputs
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._loop import build_model
from nnx_plugins.training.checkpoints._best import write_best
from nnx_plugins.training.checkpoints._save import step_directory

CLASSIFIER = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 3, out_features: 8}
    - {type: relu}
    - {type: Linear, in_features: 8, out_features: 4}
task: {type: classification}
data: {type: csv, path: train.csv, target: kind, inputs: [a, b, c]}
"""

REGRESSION = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 10, out_features: 2}
task: {type: regression}
data: {type: diabetes}
"""


@pytest.fixture
def classifier(tmp_path, monkeypatch):
    """A classifier of CSV rows and its checkpoint (saved untrained: outputs are what count)."""
    monkeypatch.chdir(tmp_path)
    rows = "".join(f"{i},{i % 5}.5,{-i},x{i},{i % 4}\n" for i in range(12))
    (tmp_path / "train.csv").write_text("a,b,c,note,kind\n" + rows)
    (tmp_path / "clf.yaml").write_text(CLASSIFIER)
    model = build_model("clf.yaml", seed=3)
    root = tmp_path / "runs" / "clf" / "checkpoints"
    nnx_plugins.save(model, step_directory(root, 7), step=7)
    write_best(root, step=7, metric="val.accuracy", mode="max", value=0.5)
    return model, root


def outputs_of(model, x):
    model.eval()
    return np.asarray(model(jnp.asarray(x, jnp.float32)))


def test_csv_in_csv_out_in_the_columns_of_the_config(classifier, tmp_path, capsys):
    model, root = classifier
    # another order, an extra column, no target: the columns are found by name
    (tmp_path / "new.csv").write_text("note,c,b,a\nq,-1,0.5,1\nr,-2,1.5,2\nt,-3,2.5,3\n")
    argv = ["predict", "clf.yaml", "--checkpoint", "best", "--input", "new.csv"]
    assert main([*argv, "--output", "out.csv"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("nnx: 3 examples (new.csv: 3 columns) through runs/clf/checkpoints/")
    assert "(step 7, the best by val.accuracy 0.5): predictions float32[3,4] and labels" in err
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert lines[0] == "kind,logit_0,logit_1,logit_2,logit_3" and len(lines) == 4
    table = np.loadtxt(tmp_path / "out.csv", delimiter=",", skiprows=1)
    expected = outputs_of(model, [[1, 0.5, -1], [2, 1.5, -2], [3, 2.5, -3]])
    np.testing.assert_allclose(table[:, 1:], expected, rtol=1e-6)
    np.testing.assert_array_equal(table[:, 0], expected.argmax(-1))


def test_npz_in_npz_out_in_batches(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reg.yaml").write_text(REGRESSION)
    model = build_model("reg.yaml", seed=1)
    nnx_plugins.save(model, tmp_path / "ckpt", step=2)
    x = np.random.default_rng(0).normal(size=(37, 10))  # float64: narrowed as in training
    np.savez(tmp_path / "in.npz", feats=x)
    argv = ["predict", "reg.yaml", "--checkpoint", "ckpt", "--input", "in.npz"]
    argv += ["--input-key", "feats", "--output", "out.npz", "--batch-size", "16"]
    assert main(argv) == 0
    saved = np.load(tmp_path / "out.npz")
    assert sorted(saved) == ["predictions"]  # (no labels: not a classification)
    np.testing.assert_allclose(saved["predictions"], outputs_of(model, x), rtol=1e-5, atol=1e-6)
    assert "predictions float32[37,2] in out.npz" in capsys.readouterr().err
    assert main([*argv[:-4], "--output", "out.csv", "--overwrite"]) == 0
    assert (tmp_path / "out.csv").read_text().splitlines()[0] == "output_0,output_1"


def test_an_output_that_exists_is_replaced_only_with_overwrite_and_a_link_is_not_followed(
    classifier, tmp_path, capsys
):
    (tmp_path / "theirs.txt").write_text("the user's own file\n")
    os.symlink(tmp_path / "theirs.txt", tmp_path / "out.csv")
    argv = ["predict", "clf.yaml", "--checkpoint", "best", "--input", "train.csv"]
    assert main([*argv, "--output", "out.csv"]) == 1
    assert (
        "--output out.csv exists; give another file name, or --overwrite" in capsys.readouterr().err
    )
    assert main([*argv, "--output", "out.csv", "--overwrite"]) == 0
    assert (tmp_path / "theirs.txt").read_text() == "the user's own file\n"
    assert not os.path.islink(tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text().startswith("kind,logit_0")


@pytest.mark.parametrize(
    ("files", "options", "match"),
    [
        (
            {},
            ["--input", "train.txt", "--output", "o.csv"],
            r"--input train.txt: unknown "
            r"extension '\.txt'; nnx predict reads and writes \.npz and \.csv files\.",
        ),
        (
            {},
            ["--input", "train.csv", "--output", "o"],
            r"--output o: unknown extension '\(none\)'",
        ),
        ({}, ["--input", "train.csv", "--output", "no/o.csv"], r"the folder .*/no does not exist"),
        ({}, ["--input", "train.csv", "--output", "."], r"--output \. is a directory; give a file"),
        (
            {"afile": ""},
            ["--input", "train.csv", "--output", "afile/o.csv"],
            r"the folder .*/afile is a file, not a folder; give a path in a folder",
        ),
        (
            {"d.csv/": ""},
            ["--input", "train.csv", "--output", "d.csv"],
            r"--output d.csv is a "
            r"directory",
        ),
        (
            {},
            ["--input", "train.csv", "--output", "train.csv", "--overwrite"],
            r"--output "
            r"train.csv is the input file",
        ),
        ({}, ["--input", "missing.csv", "--output", "o.csv"], r"no such file .*missing\.csv"),
        (
            {"x.npz": {"y": np.ones((2, 3))}},
            ["--input", "x.npz", "--output", "o.csv"],
            r"--input "
            r"x\.npz has no array 'x'; it holds the arrays 'y'\. Choose one with --input-key\.",
        ),
        (
            {"x.npz": {"x": np.ones((2, 5))}},
            ["--input", "x.npz", "--output", "o.csv"],
            r"--input x\.npz: array 'x': the model takes examples of shape \(3,\), but the file "
            r"gives float32 examples of shape \(5,\) \(an array of shape \(2, 5\)\)\. Give an "
            r"array of shape \(N, 3\): N examples\.",
        ),
        (
            {"x.npz": {"x": np.ones((0, 3))}},
            ["--input", "x.npz", "--output", "o.csv"],
            r"--input x\.npz holds no examples",
        ),
        (
            {"x.npz": {"x": np.array([[1, np.nan, 3]])}},
            ["--input", "x.npz", "--output", "o.csv"],
            r"--input x\.npz\[0, 1\] is nan: inputs and targets must be finite",
        ),
        (
            {"x.npz": {"x": np.array(["a", "b"])}},
            ["--input", "x.npz", "--output", "o.csv"],
            r"--input x\.npz holds <U1 values",
        ),
        (
            {"x.npz": {"x": np.ones((2, 3, 1))}},
            ["--input", "x.npz", "--output", "o.csv"],
            r"the model takes examples of shape \(3,\), but the file gives float32 examples of "
            r"shape \(3, 1\)",
        ),
        (
            {"n.csv": "a,b\n1,2\n"},
            ["--input", "n.csv", "--output", "o.csv"],
            r"n\.csv: the "
            r"header has no column 'c'",
        ),
        (
            {"n.csv": "a,b,c\n1,2,oops\n"},
            ["--input", "n.csv", "--output", "o.csv"],
            r"n\.csv: "
            r"line 2, column 'c': the cell \(4 characters\) is not a number",
        ),
        (
            {"n.csv": "a,b,c\n1,2,3\n"},
            ["--input", "n.csv", "--output", "o.csv", "--input-key", "x"],
            r"--input-key names an array of an \.npz input",
        ),
        (
            {"bad.npz": b"PK not a zip"},
            ["--input", "bad.npz", "--output", "o.csv"],
            r"cannot read it as an \.npz file",
        ),
    ],
)
def test_bad_input_is_one_line_before_anything_is_written(
    classifier, tmp_path, capsys, files, options, match
):
    for name, content in files.items():
        if name.endswith("/"):
            (tmp_path / name[:-1]).mkdir()
        elif isinstance(content, dict):
            np.savez(tmp_path / name, **content)
        elif isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        else:
            (tmp_path / name).write_text(content)
    before = sorted(os.listdir(tmp_path))
    assert main(["predict", "clf.yaml", "--checkpoint", "best", *options]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("nnx: error: ") and "Traceback" not in err
    import re

    assert re.search(match, err), err
    assert sorted(os.listdir(tmp_path)) == before  # (no output, no temporary file)


def test_examples_of_another_shape_than_the_datas_are_named_with_both_shapes(
    tmp_path, monkeypatch, capsys
):
    """Not the first layer's advice to rebuild it: the shape the model was trained on."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cnn.yaml").write_text(
        "model:\n"
        "  type: Sequential\n"
        "  layers:\n"
        "    - {type: Conv, in_features: 1, out_features: 2, kernel_size: [3, 3]}\n"
        "    - {type: Reshape, shape: [-1]}\n"
        "    - {type: Linear, in_features: 128, out_features: 10}\n"
        "data: {type: digits}\n"
    )
    nnx_plugins.save(build_model("cnn.yaml"), tmp_path / "ckpt", step=1)
    np.savez(tmp_path / "flat.npz", x=np.ones((4, 64)))
    argv = ["predict", "cnn.yaml", "--checkpoint", "ckpt", "--input", "flat.npz"]
    assert main([*argv, "--output", "o.npz"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "nnx: error: --input flat.npz: array 'x': the model takes examples of shape "
        "(8, 8, 1), but the file gives float32 examples of shape (64,) (an array of shape "
        "(4, 64)). Give an array of shape (N, 8, 8, 1): N examples.\n"
    )
    assert not (tmp_path / "o.npz").exists()
    flat = Inputs(np.ones((4, 64), np.float32), "flat.npz: array 'x'")
    with pytest.raises(PredictError, match=r"takes examples of shape \(8, 8, 1\), .* \(64,\)"):
        check_inputs(load_train_config("cnn.yaml"), flat)


def test_examples_the_model_cannot_take_name_the_layer_when_the_data_is_gone(
    classifier, tmp_path, capsys
):
    (tmp_path / "train.csv").unlink()
    np.savez(tmp_path / "x.npz", x=np.ones((2, 5)))
    argv = ["predict", "clf.yaml", "--checkpoint", "best", "--input", "x.npz"]
    assert main([*argv, "--output", "o.csv"]) == 1
    assert (
        "clf.yaml:4:7: model.layers[0]: Linear cannot take float32[2,5] from the input (x.npz: "
        "array 'x')"
    ) in capsys.readouterr().err


def test_outputs_a_csv_row_cannot_hold_are_refused_before_the_model_runs(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "seq.yaml").write_text(
        "model: {type: Linear, in_features: 3, out_features: 2}\ntask: {type: regression}\n"
    )
    nnx_plugins.save(build_model("seq.yaml"), tmp_path / "ckpt", step=1)
    np.savez(tmp_path / "x.npz", x=np.ones((4, 5, 3)))
    argv = ["predict", "seq.yaml", "--checkpoint", "ckpt", "--input", "x.npz"]
    assert main([*argv, "--output", "o.csv"]) == 1
    assert (
        "--output o.csv: the model returns (2, 5, 2) for a batch, more than one value or one row "
        "of values per example, which a CSV row cannot hold; write an .npz file."
    ) in capsys.readouterr().err
    assert main([*argv, "--output", "o.npz"]) == 0
    assert np.load(tmp_path / "o.npz")["predictions"].shape == (4, 5, 2)


def test_a_checkpoint_that_does_not_fit(classifier, capsys):
    argv = [
        "predict",
        "clf.yaml",
        "model.layers[2].out_features=5",
        "model.layers[2].in_features=8",
    ]
    argv += ["--checkpoint", "best", "--input", "train.csv", "--output", "o.csv"]
    assert main(argv) == 1
    assert "cannot load checkpoint runs/clf/checkpoints/step_00000007" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "x", "1000001", "9" * 100])
def test_a_bad_batch_size_is_a_usage_error(classifier, capsys, value):
    argv = ["predict", "clf.yaml", "--checkpoint", "best", "--input", "train.csv"]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--output", "o.csv", "--batch-size", value])
    assert stop.value.code == 2
    assert "expected a whole number from 1 to 1,000,000" in capsys.readouterr().err


def test_a_fifo_or_device_is_never_replaced_even_with_overwrite(classifier, tmp_path, capsys):
    os.mkfifo(tmp_path / "fifo.csv")
    argv = ["predict", "clf.yaml", "--checkpoint", "best", "--input", "train.csv"]
    assert main([*argv, "--output", "fifo.csv", "--overwrite"]) == 1
    assert (
        "--output fifo.csv is not a regular file (a device, a FIFO or a socket); nnx predict "
        "writes a file of its own"
    ) in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo.csv").st_mode)
    assert main([*argv, "--output", "/dev/null", "--overwrite"]) == 1  # (no extension either)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


PREDICT = ["predict", "clf.yaml", "--checkpoint", "best", "--input", "new.csv"]


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_stop_while_predicting_writes_nothing_and_says_so(
    classifier, tmp_path, monkeypatch, capsys, sigterm_default, signum
):
    (tmp_path / "new.csv").write_text("a,b,c\n1,0.5,-1\n")
    stop = KeyboardInterrupt() if signum == "SIGINT" else Terminated()

    def stopped(*args, **kwargs):
        raise stop

    monkeypatch.setattr(_predict_model, "predict", stopped)
    status = main([*PREDICT, "--output", "out.csv"])
    how = "interrupted" if signum == "SIGINT" else "stopped by SIGTERM"
    assert status == (130 if signum == "SIGINT" else 143)
    assert capsys.readouterr().err == (
        f"nnx: {how}: nothing was written (out.csv is as it was; the prediction writes its "
        "output whole or not at all). Run the same command again to predict.\n"
    )
    assert not (tmp_path / "out.csv").exists() and not list(tmp_path.glob(".nnx-predict-*"))


def test_a_sigterm_as_the_temporary_is_made_leaves_nothing(
    classifier, tmp_path, capsys, sigterm_default, sigterm_after
):
    (tmp_path / "new.csv").write_text("a,b,c\n1,0.5,-1\n")
    sigterm_after(_predict_files.tempfile, "mkstemp")
    assert main([*PREDICT, "--output", "out.csv"]) == 143
    assert "nnx: stopped by SIGTERM: nothing was written" in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists() and not list(tmp_path.glob(".nnx-predict-*"))


def test_a_sigterm_as_the_output_is_put_in_place_says_it_is_complete(
    classifier, tmp_path, capsys, sigterm_default, sigterm_after
):
    (tmp_path / "new.csv").write_text("a,b,c\n1,0.5,-1\n")
    sigterm_after(_predict_files.os, "replace")
    assert main([*PREDICT, "--output", "out.csv"]) == 143
    assert capsys.readouterr().err == (
        "nnx: stopped by SIGTERM after out.csv was written whole; it is complete.\n"
    )
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 2
    assert not list(tmp_path.glob(".nnx-predict-*"))

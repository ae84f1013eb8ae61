"""nnx predict on a language model: token ids outside the model's vocabulary, integers given as
floats and examples of another length are refused (what the model takes per example, what the
file gives), one line, nothing written."""

import os
import pathlib
import re

import numpy as np
import pytest

import nnx_plugins
from nnx_plugins.cli._main import main
from nnx_plugins.cli._predict_files import Inputs, PredictError
from nnx_plugins.cli._predict_model import check_inputs
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._loop import build_model

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "hf"

TINY_LM = """\
model:
  type: Sequential
  layers:
    - {type: Embed, num_embeddings: 256, features: 8}
    - {type: PositionEmbed, max_length: 16, features: 8}
    - {type: Linear, in_features: 8, out_features: 256}
task: {type: language_model}
data: {type: text, path: "stdlib:json", level: bytes, seq_len: 16}
"""


@pytest.fixture
def tiny_lm(tmp_path, monkeypatch):
    """A byte-level language model of 16 positions and its checkpoint (untrained)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lm.yaml").write_text(TINY_LM)
    nnx_plugins.save(build_model("lm.yaml", seed=0), tmp_path / "ckpt", step=2)
    return tmp_path


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """The llama fixture as ``nnx import hf`` writes it (320 tokens, 64 positions)."""
    out = tmp_path_factory.mktemp("imported") / "llama"
    nnx_plugins.import_hf(FIXTURES / "llama", out)
    return out


def refused(capsys, folder, argv):
    before = sorted(os.listdir(folder))
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("nnx: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert sorted(os.listdir(folder)) == before  # (no output, no temporary file)
    return err


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        (
            [[1, 2, 3, 4], [5, 6, 7, 256]],
            r"^nnx: error: --input x\.npz: array 'x': the token id at \[1, 3\] \(row 1, position "
            r"3, from 0\) is 256, but the model embeds 256 tokens \(0 to 255; its Embed at "
            r"model\.layers\[0\]\)\. Give token ids of the model's tokenizer, from 0 to 255\.\n$",
        ),
        ([[1, -1, 3, 4]], r"the token id at \[0, 1\] \(row 0, position 1, from 0\) is -1, but"),
        ([[1, 2], [3, 2**31 - 1]], r"at \[1, 1\] \(row 1, position 1, from 0\) is 2,147,483,647"),
    ],
)
def test_a_token_id_outside_the_embedding_is_refused(tiny_lm, capsys, ids, match):
    np.savez(tiny_lm / "x.npz", x=np.array(ids, np.int64))  # (narrowed to int32, as training)
    argv = ["predict", "lm.yaml", "--checkpoint", "ckpt", "--input", "x.npz", "--output", "o.npz"]
    err = refused(capsys, tiny_lm, argv)
    assert re.search(match, err), err


def test_token_ids_in_a_csv_are_floats_and_an_npz_is_asked_for(tiny_lm, capsys):
    (tiny_lm / "x.csv").write_text("a,b,c\n1,2,3\n4,999,6\n")
    argv = ["predict", "lm.yaml", "--checkpoint", "ckpt", "--input", "x.csv", "--output", "o.csv"]
    err = refused(capsys, tiny_lm, argv)
    assert err.endswith(
        "--input x.csv: 3 columns: the model takes int32 examples of shape (L,) (L from 1 to 16), "
        "but the file gives float32 examples of shape (3,) (an array of shape (2, 3)). Give an "
        "array of shape (N, L) of int32 values in an .npz file (a .csv is read as floats): N "
        "examples.\n"
    )


def test_check_inputs_refuses_the_first_bad_id(tiny_lm):
    config = load_train_config("lm.yaml")
    good = Inputs(np.array([[0, 255, 7]], np.int32), "x.npz: array 'x'")
    assert check_inputs(config, good).shape == (2, 3, 256)
    bad = Inputs(np.array([[0, 1, 2], [300, -5, 1]], np.int32), "x.npz: array 'x'")
    with pytest.raises(PredictError, match=r"at \[1, 0\] \(row 1, position 0, from 0\) is 300"):
        check_inputs(config, bad)


@pytest.mark.parametrize(
    ("array", "match"),
    [
        (  # integers written as floats: the model embeds token ids
            np.array([[1.0, 2.0, 3.0]], np.float32),
            r"^nnx: error: --input x\.npz: array 'x': the model takes int32 examples of shape "
            r"\(L,\) \(L from 1 to 16\), but the file gives float32 examples of shape \(3,\) \(an "
            r"array of shape \(1, 3\)\)\. Give an array of shape \(N, L\) of int32 values: N "
            r"examples\.\n$",
        ),
        (  # longer than the model's positions, not than the data's windows only
            np.ones((2, 17), np.int32),
            r"the model takes examples of shape \(L,\) \(L from 1 to 16\), but the file gives "
            r"int32 examples of shape \(17,\) \(an array of shape \(2, 17\)\)\. Give an array of "
            r"shape \(N, L\): N examples\.",
        ),
    ],
)
def test_examples_the_model_cannot_take_say_what_it_takes(tiny_lm, capsys, array, match):
    np.savez(tiny_lm / "x.npz", x=array)
    argv = ["predict", "lm.yaml", "--checkpoint", "ckpt", "--input", "x.npz", "--output", "o.npz"]
    err = refused(capsys, tiny_lm, argv)
    assert re.search(match, err), err


def test_examples_shorter_than_the_datas_windows_are_taken(tiny_lm, capsys):
    np.savez(tiny_lm / "x.npz", x=np.array([[1, 2, 3]], np.int32))
    argv = ["predict", "lm.yaml", "--checkpoint", "ckpt", "--input", "x.npz", "--output", "o.npz"]
    assert main(argv) == 0
    assert np.load(tiny_lm / "o.npz")["predictions"].shape == (1, 3, 256)


def test_an_imported_model_refuses_a_token_id_past_its_vocabulary(llama, tmp_path, capsys):
    np.savez(tmp_path / "ids.npz", tokens=np.array([[1, 2, 3], [4, 320, 5]], np.int32))
    argv = ["predict", str(llama / "config.yaml"), "--checkpoint", str(llama / "checkpoint")]
    argv += ["--input", str(tmp_path / "ids.npz"), "--input-key", "tokens"]
    err = refused(capsys, tmp_path, [*argv, "--output", str(tmp_path / "o.npz")])
    assert err.endswith(
        "ids.npz: array 'tokens': the token id at [1, 1] (row 1, position 1, from 0) is 320, but "
        "the model embeds 320 tokens (0 to 319; its Embed at model.embed). Give token ids of the "
        "model's tokenizer, from 0 to 319.\n"
    )
    np.savez(tmp_path / "ids.npz", tokens=np.ones((1, 65), np.int32))
    err = refused(capsys, tmp_path, [*argv, "--output", str(tmp_path / "o.npz")])
    assert "the model takes examples of shape (L,) (L from 1 to 64), but the file gives" in err

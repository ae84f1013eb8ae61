"""--checkpoint: a directory as before, RUN/checkpoints/best and the word best (best.json)."""

import json

import pytest

import nnx_plugins
from nnx_plugins.cli._checkpoint import resolve_checkpoint
from nnx_plugins.cli._main import main
from nnx_plugins.training._loop import build_model
from nnx_plugins.training.checkpoints._best import write_best
from nnx_plugins.training.checkpoints._save import CheckpointError, step_directory

CONFIG = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 10, out_features: 8}
    - {type: relu}
    - {type: Linear, in_features: 8, out_features: 1}
task: {type: regression}
data: {type: diabetes}
train: {steps: 5, batch_size: 16}
"""


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run directory as `nnx train tiny.yaml` leaves it, with keep_best's record: two
    checkpoints (steps 3 and 5), step 3 the best; made without training."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    root = tmp_path / "runs" / "tiny" / "checkpoints"
    for step in (3, 5):
        model = build_model(str(tmp_path / "tiny.yaml"), seed=step)
        nnx_plugins.save(model, step_directory(root, step), step=step)
    write_best(root, step=3, metric="val.loss", mode="min", value=0.125)
    return root


def test_best_names_the_checkpoint_best_json_records(run, capsys):
    for argument in (str(run / "best"), "best", "runs/tiny/checkpoints/best"):
        assert main(["eval", "tiny.yaml", "--checkpoint", argument]) == 0
        out = capsys.readouterr().out
        assert out.startswith("checkpoint ") and out.endswith("\n"), out
        assert "/step_00000003 (step 3, the best by val.loss 0.125): test loss" in out, out
    assert main(["eval", "tiny.yaml", "--checkpoint", str(run)]) == 0  # the newest, as before
    assert "(step 5): test loss" in capsys.readouterr().out


def test_an_empty_checkpoint_argument_is_refused(run, capsys):
    """pathlib reads '' as '.': it was taken for the current directory."""
    assert main(["eval", "tiny.yaml", "--checkpoint", ""]) == 1
    assert "--checkpoint is empty: give a checkpoint directory, or best." in capsys.readouterr().err


def test_eval_takes_overrides_like_train(run, capsys):
    assert main(["eval", "tiny.yaml", "train.batch_size=4", "--checkpoint", "best"]) == 0
    assert "(step 3, the best by val.loss 0.125)" in capsys.readouterr().out
    assert main(["eval", "tiny.yaml", "--checkpoint", "best", "data.typ=npz"]) == 1
    err = capsys.readouterr().err
    assert (
        "<override data.typ=npz>:1:10: data.typ: unknown argument 'typ' for dataset 'diabetes'"
        in err
    )


def test_a_checkpoint_that_does_not_fit_the_overridden_model_is_refused(run, capsys):
    overrides = ["model.layers[0].out_features=4", "model.layers[2].in_features=4"]
    assert main(["eval", "tiny.yaml", *overrides, "--checkpoint", "best"]) == 1
    err = capsys.readouterr().err
    assert "cannot load checkpoint runs/tiny/checkpoints/step_00000003" in err, err


def test_a_directory_really_named_best_keeps_its_meaning(run, capsys):
    (run / "step_00000003").rename(run / "best")
    assert resolve_checkpoint(str(run / "best"), None).path == run / "best"
    assert main(["eval", "tiny.yaml", "--checkpoint", str(run / "best")]) == 0
    assert "(step 3): test loss" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (
            None,
            r"no best checkpoint: there is no .*best\.json\. The best is recorded by training "
            r"with checkpoint\.keep_best",
        ),
        (
            b"root:x:0:0:root:/root:/bin/bash\n",
            r"best\.json is not a record nnx wrote: it holds "
            r"32 bytes that are not a JSON object\.",
        ),
        (
            b'"root:x:0:0:root:/root:/bin/bash"',
            r"it holds text of 31 characters, not a JSON object",
        ),
        (b"[1, 2, 3]", r"it holds a list of 3 items, not a JSON object"),
        (b"\xff\xfe" * 10, r"it holds 20 bytes that are not a JSON object"),
        (b"[" * 100_000, r"it is 100,000 bytes\."),
        (
            b'{"step": 3, "directory": "../../../etc"}',
            r"names no step_N checkpoint directory "
            r"\(its 'directory' is text of 12 characters\)",
        ),
        (b'{"directory": ["step_00000003"]}', r"its 'directory' is a list of 1 item\)"),
        (
            b'{"directory": "step_00000009"}',
            r"names step_00000009, which is not a checkpoint "
            r"directory here",
        ),
    ],
)
def test_a_best_json_that_nnx_did_not_write_is_refused_without_quoting_it(
    run, capsys, content, match
):
    path = run / "best.json"
    path.unlink()
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CheckpointError, match=match):
        resolve_checkpoint(str(run / "best"), None)
    assert main(["eval", "tiny.yaml", "--checkpoint", "best"]) == 1
    err = capsys.readouterr().err
    assert "root:x" not in err and "etc" not in err and "Traceback" not in err


def test_a_best_json_that_is_a_link_or_a_folder_is_refused(run, tmp_path):
    (run / "best.json").unlink()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"directory": "step_00000003"}))
    (run / "best.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(
        CheckpointError, match=r"best\.json is not a record nnx wrote: it is not a regular file"
    ):
        resolve_checkpoint("best", _config())
    (run / "best.json").unlink()
    (run / "best.json").mkdir()
    with pytest.raises(CheckpointError, match=r"it is not a regular file"):
        resolve_checkpoint(str(run / "best"), None)


def test_the_word_best_without_a_run_says_where_it_looked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    assert main(["eval", "tiny.yaml", "--checkpoint", "best"]) == 1
    err = capsys.readouterr().err
    assert "no best checkpoint: runs/tiny/checkpoints does not exist." in err


def _config():
    from nnx_plugins.training._config import load_train_config

    return load_train_config("tiny.yaml")


def test_the_record_read_is_the_one_keep_best_writes():
    from nnx_plugins.cli import _checkpoint
    from nnx_plugins.training.checkpoints import _best

    assert _checkpoint.BEST_FILE == _best.BEST_FILE

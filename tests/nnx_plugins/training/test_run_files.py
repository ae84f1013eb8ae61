"""Files the run owns: a logger writes only files of its own, inside the run directory, created
without following what someone planted there; two parts writing one file are refused."""

import os

import pytest

from nnx_plugins import ConfigError, train
from nnx_plugins.training._run_dir import RunError
from nnx_plugins.training._safe_io import open_whole, read_regular, write_whole

CONFIG = {
    "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 4, "batch_size": 32, "eval_interval": 2, "log_interval": 2},
    "checkpoint": {"interval": 2},
}


@pytest.mark.parametrize(
    "file, match",
    [
        ("config.yaml", r"'config\.yaml' is the resolved config, which the run writes itself"),
        ("metrics.jsonl", r"'metrics\.jsonl' is the jsonl logger's log, which the run reads back"),
        ("metrics.png", r"'metrics\.png' is the plot of the run, which the run writes itself"),
        ("checkpoints", r"'checkpoints' is the checkpoint folder \(checkpoint\.dir\)"),
        ("Config.YAML", r"'Config\.YAML' is the resolved config"),  # (case-insensitive disks)
        (".nnx-run.lock", r"'\.nnx-run\.lock' is hidden \(a leading '\.'\)"),
        (".metrics.csv.tmp", r"'\.metrics\.csv\.tmp' is hidden \(a leading '\.'\)"),
        ("log\x00.csv", r"'log\\x00\.csv' holds a control character"),
        ("x" * 300, r"'x{40}'\.\.\. is a name longer than a file system takes \(255 bytes\)"),
    ],
)
def test_a_logger_may_not_write_a_file_of_the_run(tmp_path, file, match):
    config = {**CONFIG, "loggers": ["jsonl", {"type": "csv", "file": file}]}
    with pytest.raises(ConfigError, match=r"<dict>: loggers\[1\]\.file: " + match):
        train(config, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # (refused before anything starts)


def test_a_logger_file_outside_the_run_directory_is_refused(tmp_path):
    config = {**CONFIG, "loggers": [{"type": "tensorboard", "dir": "../elsewhere"}]}
    with pytest.raises(
        ConfigError, match=r"loggers\[0\]: logger 'tensorboard' refused it: dir must"
    ):
        train(config, run_dir=tmp_path / "run", progress=False)
    config = {**CONFIG, "loggers": [{"type": "tensorboard", "dir": "checkpoints/tb"}]}
    with pytest.raises(ConfigError, match=r"loggers\[0\]\.dir: 'checkpoints/tb' is the checkpoint"):
        train(config, run_dir=tmp_path / "run", progress=False)


@pytest.mark.parametrize(
    "loggers, where, match",
    [
        (
            ["csv", "csv"],
            r"loggers\[1\]\.file",
            r"'metrics\.csv' is written by loggers\[0\] \(csv\)",
        ),
        (
            ["jsonl", "jsonl"],
            r"loggers\[1\]",
            r"'metrics\.jsonl' is written by loggers\[0\] \(jsonl\)",
        ),
        (
            [{"type": "csv", "file": "log"}, {"type": "acme.text", "file": "log"}],
            r"loggers\[1\]\.file",
            r"'log' is written by loggers\[0\] \(csv\) already: two parts writing one file",
        ),
    ],
)
def test_two_parts_writing_one_file_are_refused(tmp_path, loggers, where, match):
    with pytest.raises(ConfigError, match=rf"<dict>: {where}: {match}"):
        train({**CONFIG, "loggers": loggers}, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_folder_elsewhere_is_the_runs_too(tmp_path):
    config = {
        **CONFIG,
        "checkpoint": {"dir": "saved/ckpt"},
        "loggers": [{"type": "acme.text", "file": "saved"}],
    }
    with pytest.raises(
        ConfigError,
        match=r"loggers\[0\]\.file: 'saved' is the checkpoint folder \(checkpoint\.dir\)",
    ):
        train(config, run_dir=tmp_path / "run", progress=False)


def test_planted_links_are_never_followed(tmp_path):
    run = tmp_path / "run"
    config = {**CONFIG, "loggers": ["jsonl", "csv"], "checkpoint": {"interval": 2, "keep_best": {}}}
    train({**config, "train": {**CONFIG["train"], "steps": 2}}, run_dir=run, progress=False)
    victim = tmp_path / "thesis.tex"
    victim.write_text("years of work")
    for name in (".metrics.csv.tmp", ".metrics.png.tmp", "checkpoints/.best.json.tmp"):
        (run / name).symlink_to(victim)
    result = train(config, run_dir=run, progress=False, resume=True)
    assert result.step == 4 and victim.read_text() == "years of work"
    assert (run / "metrics.png").read_bytes()[:4] == b"\x89PNG"
    assert (run / "metrics.csv").read_text().startswith("step,split,name,value\n")
    assert not any(p.is_symlink() for p in run.rglob(".*.tmp"))


@pytest.mark.parametrize(
    "name, kind, match",
    [
        (
            "metrics.jsonl",
            "link",
            r"metrics\.jsonl is a symbolic link .*: the run writes that file",
        ),
        ("metrics.csv", "link", r"cannot read .*metrics\.csv: .*symbolic link"),
        ("metrics.csv", "fifo", r"cannot read .*metrics\.csv: .*not a regular file"),
    ],
)
def test_a_log_that_is_not_a_regular_file_is_refused_on_resume(tmp_path, name, kind, match):
    run = tmp_path / "run"
    config = {**CONFIG, "loggers": ["jsonl", "csv"]}
    train({**config, "train": {**CONFIG["train"], "steps": 2}}, run_dir=run, progress=False)
    victim = tmp_path / "victim"
    victim.write_text("1,train,loss,1.0\n")
    os.unlink(run / name)
    if kind == "link":
        (run / name).symlink_to(victim)
    else:
        os.mkfifo(run / name)  # (a reader would wait for a writer forever)
    with pytest.raises(RunError, match=match):
        train(config, run_dir=run, progress=False, resume=True)
    assert victim.read_text() == "1,train,loss,1.0\n"


def test_safe_writes_replace_a_link_and_keep_a_folder(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "link").symlink_to(target)
    write_whole(tmp_path / "link", b"new")
    assert target.read_text() == "keep" and read_regular(tmp_path / "link") == b"new"
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        write_whole(tmp_path / "folder", b"x")
    assert not (tmp_path / ".folder.tmp").exists()
    with open_whole(tmp_path / "log", b"a\n") as handle:
        os.replace(tmp_path / "link", tmp_path / "log")  # (renamed over it: the handle holds ours)
        handle.write(b"b\n")
    assert (tmp_path / "log").read_bytes() == b"new" and read_regular(tmp_path / "none") is None

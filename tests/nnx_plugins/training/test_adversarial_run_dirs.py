"""Hostile and careless run directories: every probe is a clear error, nothing is lost.

Probes: a run directory that is a file, a run directory another run holds (a real second
process), two `nnx train` at once into one directory (real processes), a full disk and a
read-only file system during a save, metrics files that cannot be written.
"""

import errno
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from nnx_plugins import CheckpointError, train
from nnx_plugins.cli._main import main
from nnx_plugins.training._run_dir import LOCK_NAME, RunError, RunLock
from nnx_plugins.training.checkpoints import _save as _checkpoint

SMALL = {
    "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 6, "batch_size": 16, "log_interval": 2, "eval_interval": 3},
    "checkpoint": {"interval": 3, "keep": 5},
}


def write_config(tmp_path, config=SMALL, name="c.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_run_directory_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    code = main(["train", str(write_config(tmp_path)), "--run-dir", str(target), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"--run-dir {target} is a file, not a directory" in err
    assert target.read_text() == "mine"


def _holder(run_dir, ready):
    """A real second process that holds the run directory until its stdin closes."""
    script = textwrap.dedent(f"""
        import pathlib, sys
        from nnx_plugins.training._run_dir import RunLock
        with RunLock(pathlib.Path({str(run_dir)!r})):
            pathlib.Path({str(ready)!r}).write_text("held")
            sys.stdin.read()
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert process.poll() is None and time.monotonic() < deadline, "holder did not start"
        time.sleep(0.05)
    return process


def test_a_run_directory_held_by_another_process_is_refused_naming_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    holder = _holder(run_dir, tmp_path / "ready")
    try:
        with pytest.raises(
            RunError,
            match=rf"another nnx train is using the run directory "
            rf"{run_dir}: process {holder.pid} on .*, started ",
        ):
            train(SMALL, run_dir=run_dir, progress=False)
        code = main(["train", str(write_config(tmp_path)), "--run-dir", str(run_dir)])
        err = capsys.readouterr().err
        assert code == 1 and "Traceback" not in err and f"process {holder.pid}" in err
        assert listing(run_dir) == [LOCK_NAME]  # nothing read or written besides the lock
    finally:
        holder.communicate("")
    assert train(SMALL, run_dir=run_dir, progress=False).step == 6  # free again


def test_two_trainings_into_one_directory_at_once_one_stops_nothing_is_mixed(tmp_path):
    run_dir = tmp_path / "run"
    slow = write_config(tmp_path, {**SMALL, "train": {**SMALL["train"], "steps": 400}}, "slow.json")
    command = [sys.executable, "-m", "nnx_plugins.cli._main", "train"]
    first = subprocess.Popen(
        [*command, str(slow), "--run-dir", str(run_dir), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while (
        not (run_dir / LOCK_NAME).exists()
        or str(first.pid) not in (run_dir / LOCK_NAME).read_text()
    ):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = subprocess.run(
        [*command, str(slow), "--run-dir", str(run_dir), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert second.returncode == 1 and "Traceback" not in second.stderr
    assert f"another nnx train is using the run directory {run_dir}: process {first.pid}" in (
        second.stderr
    )
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = [(r["step"], r["split"]) for r in records]
    assert len(keys) == len(set(keys)) and keys[-1] == (400, "test")


def _fail_with(code):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), "tensors.safetensors")

    return fail


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ENOSPC, r"no space left on the device \(ENOSPC\)"),
        (errno.EROFS, r"the file system is read-only \(EROFS\)"),
        (errno.EPERM, r"the operation is not permitted .* \(EPERM\)"),
    ],
)
def test_a_failing_save_is_a_checkpoint_error_and_keeps_the_last_checkpoint(
    tmp_path, monkeypatch, capsys, code, reason
):
    run_dir = tmp_path / "run"
    first = train(
        {**SMALL, "train": {**SMALL["train"], "steps": 3}}, run_dir=run_dir, progress=False
    )
    before = listing(run_dir / "checkpoints")
    monkeypatch.setattr(_checkpoint, "_write_tensors", _fail_with(code))
    with pytest.raises(
        CheckpointError,
        match=rf"cannot save checkpoint .*step_00000006:\n  "
        rf"writing it failed: {reason} .* Nothing was replaced",
    ):
        train(SMALL, run_dir=run_dir, resume=True, progress=False)
    assert listing(run_dir / "checkpoints") == before  # no leftovers, the last one intact
    assert first.checkpoint.name == "step_00000003"
    config = write_config(tmp_path)
    status = main(["train", str(config), "--run-dir", str(run_dir), "--resume", "--no-progress"])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err and "earlier checkpoints are intact" in err


def test_a_metrics_log_that_cannot_be_written_is_a_run_error(tmp_path, capsys):
    run_dir = tmp_path / "run"
    (run_dir / "metrics.jsonl").mkdir(parents=True)  # a directory where the log goes
    with pytest.raises(
        RunError, match=r"cannot write .*metrics\.jsonl: it is a directory \(EISDIR\)"
    ):
        train(SMALL, run_dir=run_dir, progress=False)
    code = main(["train", str(write_config(tmp_path)), "--run-dir", str(run_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "then continue with --resume" in err


def test_a_failed_log_rewrite_on_resume_keeps_the_old_log(tmp_path):
    run_dir = tmp_path / "run"
    train({**SMALL, "train": {**SMALL["train"], "steps": 3}}, run_dir=run_dir, progress=False)
    log = (run_dir / "metrics.jsonl").read_text()
    (run_dir / ".metrics.jsonl.tmp").mkdir()  # the rewrite cannot happen
    with pytest.raises(RunError, match=r"cannot write"):
        train(SMALL, run_dir=run_dir, resume=True, progress=False)
    assert (run_dir / "metrics.jsonl").read_text() == log


def test_the_lock_is_released_when_a_run_fails(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "metrics.jsonl").mkdir(parents=True)
    with pytest.raises(RunError):
        train(SMALL, run_dir=run_dir, progress=False)
    with RunLock(run_dir):  # free: acquiring it does not raise
        pass


def test_a_run_directory_that_cannot_be_created_is_a_run_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(
        RunError,
        match=r"cannot use the run directory .*file/run: a part of the "
        r"path is a file, not a directory \(ENOTDIR\)",
    ):
        with RunLock(blocker / "run"):
            pass
    assert listing(tmp_path) == ["file"]  # nothing created

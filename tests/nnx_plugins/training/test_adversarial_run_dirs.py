"""Hostile and careless run directories: every probe is a clear error, nothing is lost.

Probes: a run directory that is a file, a run directory another run holds (a real second
process), two `nnx train` at once into one directory (real processes), a full disk and a
read-only file system during a save, metrics files that cannot be written; a lock file that is
a link (to a user's file, dangling, hard), a directory or a FIFO, a malformed lock note; an
empty ``--run-dir``, ``.`` and folders of the user's files; a run directory whose config.yaml is
the config being read; run files and a checkpoint directory that are links or files.
"""

import errno
import fcntl
import json
import os
import re
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


def test_a_full_disk_as_safetensors_reports_it_is_a_checkpoint_error(tmp_path, monkeypatch):
    """safetensors raises its own error type, not OSError (a full disk was a traceback)."""
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(_checkpoint, "save_file", full)
    with pytest.raises(
        CheckpointError,
        match=r"writing it failed: no space left on the device \(ENOSPC\) .*tensors\.safetensors",
    ):
        train({**SMALL, "train": {**SMALL["train"], "steps": 3}}, run_dir=tmp_path, progress=False)


def test_a_metrics_log_that_cannot_be_written_is_a_run_error(tmp_path, capsys):
    run_dir = tmp_path / "run"
    (run_dir / "metrics.jsonl").mkdir(parents=True)  # a directory where the log goes
    (run_dir / LOCK_NAME).touch()  # (a run directory already, not a folder of the user's)
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
    (run_dir / LOCK_NAME).touch()
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


# -- the lock file, the run's files and the directory: never written through, never misplaced ---
def _outside(tmp_path):
    """A file of the user's outside the run directory, with its content and times."""
    thesis = tmp_path / "home" / "thesis.tex"
    thesis.parent.mkdir()
    thesis.write_text("\\chapter{Results}\n")
    return thesis, thesis.stat()


def _untouched(path, before):
    after = path.stat()
    return path.read_text() == "\\chapter{Results}\n" and (after.st_mtime_ns, after.st_size) == (
        before.st_mtime_ns,
        before.st_size,
    )


def _train(tmp_path, run_dir, *more):
    config = write_config(tmp_path / "configs")
    return main(["train", str(config), "--run-dir", str(run_dir), "--no-progress", *more])


@pytest.fixture
def configs(tmp_path):
    (tmp_path / "configs").mkdir()
    return tmp_path


def test_a_lock_file_that_links_to_a_users_file_is_refused_and_the_file_untouched(configs, capsys):
    thesis, before = _outside(configs)
    run_dir = configs / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).symlink_to(thesis)
    assert _train(configs, run_dir) == 1
    err = capsys.readouterr().err
    assert re.search(
        rf"nnx: error: the lock file {re.escape(str(run_dir / LOCK_NAME))} is a symbolic link "
        rf"\(to {re.escape(str(thesis))}\); nnx never follows a link there",
        err,
    ), err
    assert "Traceback" not in err and _untouched(thesis, before)
    assert listing(run_dir) == [LOCK_NAME]
    with pytest.raises(RunError, match=r"is a symbolic link \(to .*thesis.tex\)"):
        train(SMALL, run_dir=run_dir, progress=False)


def test_a_dangling_lock_link_is_refused_and_nothing_is_created_outside(configs, capsys):
    target = configs / "home" / "created.txt"
    target.parent.mkdir()
    run_dir = configs / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).symlink_to(target)
    assert _train(configs, run_dir) == 1
    assert re.search(
        r"the lock file .*\.nnx-run\.lock is a symbolic link \(to .*created\.txt\)",
        capsys.readouterr().err,
    )
    assert not os.path.lexists(target) and listing(configs / "home") == []


def test_a_lock_file_hard_linked_to_a_users_file_is_refused(configs):
    thesis, before = _outside(configs)
    run_dir = configs / "run"
    run_dir.mkdir()
    os.link(thesis, run_dir / LOCK_NAME)
    with pytest.raises(
        RunError,
        match=rf"the lock file {re.escape(str(run_dir / LOCK_NAME))} has other hard links: nnx "
        r"writes its note there and would change another file",
    ):
        train(SMALL, run_dir=run_dir, progress=False)
    assert _untouched(thesis, before)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_lock_path_that_is_not_a_file_is_named(tmp_path, kind):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if kind == "directory":
        (run_dir / LOCK_NAME).mkdir()
        match = rf"the lock file {re.escape(str(run_dir / LOCK_NAME))} is a directory\. Remove it"
    else:
        os.mkfifo(run_dir / LOCK_NAME)
        match = rf"the lock file {re.escape(str(run_dir / LOCK_NAME))} is not a file"
    with pytest.raises(RunError, match=match):
        train(SMALL, run_dir=run_dir, progress=False)
    assert listing(run_dir) == [LOCK_NAME]


@pytest.mark.parametrize(
    "note",
    [
        "[" * 100_000,  # (json.loads would recurse)
        '{"pid": 7, "host": "' + "h" * 100_000 + '", "started": "now"}',  # (read: 4 KiB of it)
        '{"pid": "7", "host": "a", "started": "b"}',
        "\xff\xfe not text",
    ],
)
def test_a_malformed_lock_note_of_a_live_holder_is_a_clear_error(tmp_path, note):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).write_text(note, errors="surrogateescape")
    with open(run_dir / LOCK_NAME, "rb") as held:  # (a live holder: this process, another fd)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(
            RunError,
            match=rf"another nnx train is using the run directory {re.escape(str(run_dir))}: a "
            r"process that did not say who it is\. Wait for it",
        ):
            with RunLock(run_dir):
                pass
    assert (run_dir / LOCK_NAME).read_text(errors="surrogateescape") == note  # (not rewritten)


def test_a_lock_note_shows_only_printable_text(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).write_text('{"pid": 7, "host": "evil\\u001b[2J", "started": "t"}')
    with open(run_dir / LOCK_NAME, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RunError, match=r"using the run directory .*: process 7 on evil\[2J, "):
            with RunLock(run_dir):
                pass


@pytest.mark.parametrize(
    ("given", "name", "message"),
    [
        (
            "",
            "config.yaml",
            r"--run-dir is empty \(an unset shell variable\?\)\. Give the directory",
        ),
        ("  ", "c.yaml", r"--run-dir is empty"),
        (
            ".",
            "config.yaml",
            r"the run would replace config\.yaml, a config file it reads \(config\.yaml\), with "
            r"the resolved config \(comments and includes lost\)\. Choose another --run-dir",
        ),
        (
            ".",
            "c.yaml",
            r"--run-dir \. holds files that are not a run's \(c\.yaml\)\. A run writes "
            r"config\.yaml, metrics\.jsonl, metrics\.png and checkpoints/ into its directory",
        ),
    ],
)
def test_the_current_folder_is_never_a_run_directory_by_accident(
    tmp_path, monkeypatch, capsys, given, name, message
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text("# my notes\n" + json.dumps(SMALL))
    before = (tmp_path / name).read_text()
    assert main(["train", name, "--run-dir", given, "--no-progress"]) == 1
    assert re.search("nnx: error: " + message, capsys.readouterr().err)
    with pytest.raises(RunError, match=message):
        train(name, run_dir=given, progress=False)
    assert (tmp_path / name).read_text() == before and listing(tmp_path) == [name]


def test_a_folder_of_the_users_files_is_refused_listing_some(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt"):
        (folder / name).write_text(name)
    with pytest.raises(
        RunError,
        match=r"--run-dir .*project holds files that are not a run's \((\w\.txt, ){3}"
        r"\.\.\.\)\. .* choose a new or empty directory, e\.g\. --run-dir .*project/run\.",
    ):
        train(SMALL, run_dir=folder, progress=False)
    assert listing(folder) == ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"]


def test_a_run_never_replaces_the_config_it_reads(tmp_path):
    run_dir = tmp_path / "run"
    train(SMALL, run_dir=run_dir, progress=False)
    saved = run_dir / "config.yaml"
    saved.write_text("# edited by hand\n" + saved.read_text())
    before = saved.read_text()
    with pytest.raises(
        RunError,
        match=rf"the run would replace {re.escape(str(saved))}, a config file it reads "
        r"\(.*config.yaml\), with the resolved config \(comments and includes lost\)",
    ):
        train(saved, run_dir=run_dir, resume=True, progress=False)
    (tmp_path / "top.yaml").write_text(f"include: [{saved}]\n")  # (an include counts too)
    with pytest.raises(RunError, match=r"a config file it reads \(.*run/config.yaml\)"):
        train(tmp_path / "top.yaml", run_dir=run_dir, resume=True, progress=False)
    assert saved.read_text() == before


@pytest.mark.parametrize("name", ["metrics.jsonl", "metrics.png", ".config.yaml.tmp"])
def test_a_run_file_that_is_a_link_is_refused_before_training(configs, name):
    thesis, before = _outside(configs)
    run_dir = configs / "run"
    train({**SMALL, "train": {**SMALL["train"], "steps": 3}}, run_dir=run_dir, progress=False)
    (run_dir / name).unlink(missing_ok=True)
    (run_dir / name).symlink_to(thesis)
    with pytest.raises(
        RunError,
        match=rf"{re.escape(str(run_dir / name))} is a symbolic link \(to .*thesis.tex\): the run "
        r"writes that file, and never through a link",
    ):
        train(SMALL, run_dir=run_dir, resume=True, progress=False)
    assert _untouched(thesis, before)


@pytest.mark.parametrize("kind", ["file", "dangling"])
def test_a_checkpoint_directory_that_cannot_hold_checkpoints_is_found_before_training(
    configs, capsys, kind
):
    run_dir = configs / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).touch()
    if kind == "file":
        (run_dir / "checkpoints").write_text("not a folder")
        match = r"run/checkpoints is a file, not a directory: checkpoints could not be saved there"
    else:
        (run_dir / "checkpoints").symlink_to(configs / "gone")
        match = (
            r"run/checkpoints is a symbolic link to .*gone, which does not exist: checkpoints "
            r"could not be saved there"
        )
    started = time.monotonic()
    with pytest.raises(RunError, match=match):
        train({**SMALL, "train": {**SMALL["train"], "steps": 400}}, run_dir=run_dir, progress=False)
    assert time.monotonic() - started < 30  # (not after 400 steps)
    assert not (run_dir / "metrics.jsonl").exists() and not (run_dir / "config.yaml").exists()
    assert _train(configs, run_dir) == 1
    assert re.search(match, capsys.readouterr().err)
    sub = {**SMALL, "checkpoint": {**SMALL["checkpoint"], "dir": "checkpoints/deeper"}}
    with pytest.raises(RunError, match=match.split(":")[0]):  # (a folder on the way counts)
        train(sub, run_dir=run_dir, progress=False)


def test_a_run_directory_that_is_a_dangling_link_is_named(tmp_path):
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(
        RunError, match=r"--run-dir .*run is a symbolic link to .*elsewhere, which does not exist"
    ):
        train(SMALL, run_dir=tmp_path / "run", progress=False)


@pytest.mark.parametrize("given", ["x" * 300, "d/" * 2047])
def test_a_run_directory_path_too_long_is_refused_creating_nothing(tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.json").write_text(json.dumps(SMALL))
    with pytest.raises(
        RunError,
        match=r"cannot use (--run-dir|the run directory) [xd/]{1,200}: the path or one of its "
        r"names is too long \(ENAMETOOLONG\)\. Choose another",
    ):
        train("c.json", run_dir=given, progress=False)
    assert listing(tmp_path) == ["c.json"]


def test_a_deep_run_directory_is_made_without_recursion(tmp_path):
    deep = tmp_path.joinpath(*["d"] * 1500)  # (pathlib's own mkdir would recurse 1,500 deep)
    try:
        with RunLock(deep):
            assert (deep / LOCK_NAME).is_file()
    finally:  # (without recursion too: shutil.rmtree would recurse as deep)
        (deep / LOCK_NAME).unlink(missing_ok=True)
        while deep != tmp_path:
            if deep.is_dir():
                deep.rmdir()
            deep = deep.parent


def test_a_damaged_newest_checkpoint_says_how_to_resume_from_the_one_before(tmp_path):
    """--resume takes the newest checkpoint: "load an earlier one" alone cannot be followed."""
    config = {
        **SMALL,
        "train": {**SMALL["train"], "steps": 4},
        "checkpoint": {"interval": 2, "keep": 3},
    }
    train(config, run_dir=tmp_path, progress=False)
    newest = tmp_path / "checkpoints" / "step_00000004"
    with open(newest / "tensors.safetensors", "r+b") as handle:
        handle.truncate(100)
    with pytest.raises(
        CheckpointError,
        match=r"If this one is damaged, rename it \(mv .*step_00000004 .*step_00000004\.damaged"
        r": a step_N name only is taken\) and run again with --resume: it continues from "
        r"step_00000002\.",
    ):
        train(
            {**config, "train": {**config["train"], "steps": 6}},
            run_dir=tmp_path,
            resume=True,
            progress=False,
        )
    os.rename(newest, f"{newest}.damaged")
    result = train(
        {**config, "train": {**config["train"], "steps": 6}},
        run_dir=tmp_path,
        resume=True,
        progress=False,
    )
    assert result.step == 6


def test_a_stop_as_the_lock_is_released_never_closes_it_twice(tmp_path, monkeypatch):
    """Its descriptor is forgotten before it is closed: a stop landing just after the close
    left it remembered, and the next exit closed it again (EBADF, or another file's
    descriptor opened meanwhile)."""
    from nnx_plugins.training import _run_dir

    real, closed = os.close, []

    def close_then_stop(fd):
        real(fd)
        if not closed:
            closed.append(fd)
            raise KeyboardInterrupt

    lock = RunLock(tmp_path / "run")
    lock.__enter__()
    monkeypatch.setattr(_run_dir.os, "close", close_then_stop)
    with pytest.raises(KeyboardInterrupt):
        lock.__exit__(None, None, None)
    monkeypatch.setattr(_run_dir.os, "close", real)
    other = os.open(tmp_path / "other", os.O_CREAT | os.O_WRONLY, 0o644)  # (may reuse it)
    try:
        lock.__exit__(None, None, None)
        os.fstat(other)  # (still open)
    finally:
        os.close(other)
    with RunLock(tmp_path / "run"):  # (free)
        pass

"""nnx import hf stopped by Ctrl-C or SIGTERM (real processes, the signal sent at a known
point): exit 130 or 143, one line, DST whole or absent and no temporary folder beside it; and
two imports into one DST at once: one wins whole, the other fails saying why."""

import os
import pathlib
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import nnx_plugins

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "hf"


def start(*code: str, cwd: pathlib.Path) -> subprocess.Popen:
    """A Python child running ``code``, with Ctrl-C at Python's default (a pytest-xdist worker
    ignores SIGINT, and a child would inherit that; set in the child: no preexec_fn, whose fork
    jax warns about)."""
    default = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    return subprocess.Popen(
        [sys.executable, "-c", default + "".join(textwrap.dedent(part) for part in code)],
        cwd=cwd,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(process: subprocess.Popen, word: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready and word in process.stdout.readline():
            return
        assert process.poll() is None, process.communicate()
    pytest.fail(f"the child never said {word}")


def stop_when_ready(child: subprocess.Popen, sent: int, temporary: pathlib.Path) -> str:
    """Once ``child`` says READY (its temporary output, a name starting as ``temporary``, is
    there), send it ``sent``; its stderr when it has ended."""
    try:
        wait_for(child, "READY")
        assert [p for p in temporary.parent.iterdir() if p.name.startswith(temporary.name)]
        child.send_signal(sent)
        return child.communicate(timeout=60)[1]
    finally:
        child.kill()


def command(*argv: str) -> str:
    return f"""
        import sys
        sys.argv = ["nnx", *{list(argv)!r}]
        from nnx_plugins.cli._main import run
        run()
        """


BLOCKED_WRITE = """
    import time
    from nnx_plugins.pretrained import _import
    real = _import.write_checkpoint
    def blocked(*args, **kwargs):
        written = real(*args, **kwargs)   # (the temporary folder holds the checkpoint now)
        print("READY", flush=True)
        time.sleep(60)
        return written
    _import.write_checkpoint = blocked
    """


@pytest.mark.parametrize(("sent", "status", "how"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM")])  # fmt: skip
def test_a_stopped_import_says_so_in_one_line_and_leaves_nothing(tmp_path, sent, status, how):
    """SIGTERM ended the process at once (exit -15, no word) and left `.out.tmp-*` beside DST;
    Ctrl-C said "nnx: interrupted." whatever had been written."""
    out = tmp_path / "out"
    argv = ("import", "hf", str(FIXTURES / "llama"), "--out", str(out))
    child = start(BLOCKED_WRITE, command(*argv), cwd=tmp_path)
    err = stop_when_ready(child, sent, tmp_path / ".out.tmp-")
    assert child.returncode == status, err
    assert err == (
        f"nnx: {how}: nothing was written ({out} is as it was; the import writes its output whole "
        "or not at all). Run the same command again to import.\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_stop_after_dst_is_in_place_says_it_is_complete(tmp_path):
    out = tmp_path / "out"
    waiting = """
        import time
        from nnx_plugins.cli import _import
        def waiting(*args):
            print("READY", flush=True)
            time.sleep(60)
        _import._next_steps = waiting
        """
    child = start(
        waiting, command("import", "hf", str(FIXTURES / "vit"), "--out", str(out)), cwd=tmp_path
    )
    try:
        wait_for(child, "READY")
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert (child.returncode, err) == (
        143,
        f"nnx: stopped by SIGTERM after {out} was written whole; it is complete.\n",
    )
    assert type(nnx_plugins.load(out / "checkpoint")).__name__ == "ImageClassifier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


BEFORE_THE_RENAME = """
    import os, time
    from nnx_plugins.pretrained import _import
    real = _import.check
    def held():
        print("READY", flush=True)   # (DST is whole in the temporary folder, not yet renamed)
        while not os.path.exists("go"):
            time.sleep(0.01)
        real()
    _import.check = held
    """


def test_two_imports_into_one_destination_at_once(tmp_path):
    """The command is held before its rename while another import fills DST: it fails in one
    line, and the other's DST is whole and loads."""
    out = tmp_path / "out"
    argv = ("import", "hf", str(FIXTURES / "llama"), "--out", str(out))
    child = start(BEFORE_THE_RENAME, command(*argv), cwd=tmp_path)
    try:
        wait_for(child, "READY")
        nnx_plugins.import_hf(FIXTURES / "llama", out)  # (the winner)
        (tmp_path / "go").touch()
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 1, err
    assert err == (
        f"nnx: error: cannot import {out}: --out was written by another process while this import "
        "ran (it was empty or absent when the import started); nothing of this import was "
        "written, and what is there was left as it is. Give another --out\n"
    )
    assert nnx_plugins.load(out / "checkpoint").blocks.count == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "out"]

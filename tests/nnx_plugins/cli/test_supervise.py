"""The parent that watches a process of a multi-process run: real forks, in a subprocess each
(a forked pytest worker would run pytest's code in the child)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from nnx_plugins.cli._supervise import explain_signal

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from nnx_plugins.cli._supervise import supervise

    def work():
        mode = sys.argv[1]
        if mode == "status":
            print("child ran", flush=True)
            return 7
        if mode == "abort":
            os.abort()
        if mode == "raise":
            raise SystemExit(4)
        if mode == "term":   # report the SIGTERM the parent forwards, then leave with 143
            signal.signal(signal.SIGTERM, lambda *_: (print("child got SIGTERM", flush=True),
                                                      os._exit(143)))
        with open(sys.argv[2], "w") as note:
            note.write(str(os.getpid()))
        time.sleep(60)
        return 0

    print("parent got", supervise(work, "process 1 of 2"), flush=True)
""")


def run(*arguments, timeout=60):
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *arguments], capture_output=True, text=True, timeout=timeout
    )


def test_the_exit_status_of_the_child_comes_back():
    done = run("status")
    assert done.stdout.splitlines() == ["child ran", "parent got 7"], done.stderr
    assert run("raise").stdout.splitlines() == ["parent got 4"]


def test_a_native_end_is_explained_with_status_1_and_no_traceback():
    done = run("abort")
    assert done.returncode == 0 and done.stdout.strip() == "parent got 1"
    assert "Traceback" not in done.stderr
    assert "nnx: error: process 1 of 2: JAX's runtime ended it with SIGABRT" in done.stderr
    assert "start all processes again with --resume" in done.stderr


def wait_for(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return int(path.read_text())


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    if not os.path.exists(f"/proc/{pid}/stat"):
        return True
    with open(f"/proc/{pid}/stat") as stat:  # (a zombie no init reaps is not alive)
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_sigterm_to_the_parent_reaches_the_child(tmp_path):
    note = tmp_path / "pid"
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "term", str(note)], stdout=subprocess.PIPE, text=True
    )
    wait_for(note)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=30)
    assert out.splitlines() == ["child got SIGTERM", "parent got 143"]


def test_killing_the_parent_ends_the_child(tmp_path):
    note = tmp_path / "pid"
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, "sleep", str(note)])
    child = wait_for(note)
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 60
    while alive(child):
        assert time.monotonic() < deadline, "the child outlived its killed parent"
        time.sleep(0.05)


def test_the_signals_are_named():
    assert explain_signal(signal.SIGKILL).startswith("it was killed (SIGKILL: out of memory")
    assert "SIGSEGV" in explain_signal(signal.SIGSEGV)


def test_a_forwarded_signal_that_ends_the_child_is_named_as_sent(tmp_path):
    note = tmp_path / "pid"  # ("sleep": the child keeps SIGTERM's default action and dies of it)
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "sleep", str(note)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(note)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert out.splitlines() == ["parent got 143"]
    assert err.startswith("nnx: process 1 of 2: stopped by SIGTERM, sent to this command. Every")
    assert "JAX's runtime" not in err

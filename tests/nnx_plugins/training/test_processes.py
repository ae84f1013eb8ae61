"""Many processes: real `nnx train` processes on localhost (gloo collectives, 4 CPU devices each).

Each test starts its processes with free ports; the tiny digits MLP keeps every test well under a
minute. The first Linear's kernel is split over the ``data`` axis (8 blocks over 2 processes),
so each process really writes and reads its own blocks.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

import nnx_core as nnx
import nnx_plugins
from nnx_plugins import load, read_manifest, train
from nnx_plugins.cli._main import build_parser
from nnx_plugins.training._processes import ProcessGroup
from nnx_plugins.training._run_dir import RunError
from nnx_plugins.training.checkpoints._save import latest_checkpoint, list_checkpoints

# examples/digits_mlp.yaml, smaller. The first Linear has no bias: a bias right before BatchNorm
# gets no gradient, and Adam turns its float noise into full-size steps that differ between
# any two device layouts (the loss does not depend on it; the eval-mode statistics do).
MLP = {
    "model": {
        "type": "Sequential",
        "layers": [
            {
                "type": "Linear",
                "in_features": 64,
                "out_features": 32,
                "use_bias": False,
                "kernel_metadata": {"sharding_names": [None, "data"]},
            },
            {"type": "BatchNorm", "num_features": 32},
            {"type": "relu"},
            {"type": "Dropout", "rate": 0.2},
            {"type": "Linear", "in_features": 32, "out_features": 10},
        ],
    },
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 12, "batch_size": 32, "log_interval": 1, "eval_interval": 6},
    "checkpoint": {"interval": 6, "keep": 3},
}
ROOT = pathlib.Path(__file__).resolve().parents[3]
COMMAND = [sys.executable, "-m", "nnx_plugins.cli._main", "train"]


def free_port():
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def environment(devices):
    return dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        PYTHONUNBUFFERED="1",
    )


def start(arguments, *, devices, script=None):
    command = [sys.executable, "-c", script] if script else COMMAND
    return subprocess.Popen(
        [*command, *arguments],
        env=environment(devices),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_two(arguments, *, heartbeat=100, script=None):
    """Two processes of one run (4 devices each), the same arguments but --process-id."""
    port = free_port()
    group = ["--coordinator", f"localhost:{port}", "--num-processes", "2"]
    group += ["--heartbeat-timeout", str(heartbeat)]
    return [
        start([*arguments, *group, "--process-id", str(i)], devices=4, script=script)
        for i in range(2)
    ]


def finish(processes, timeout=240):
    outputs = [p.communicate(timeout=timeout) for p in processes]
    return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]


def write_config(where, config=MLP, name="mlp.json"):
    where.mkdir(parents=True, exist_ok=True)
    (where / name).write_text(json.dumps(config))
    return str(where / name)


def losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["split"] == "train"], [
        (r["step"], r["split"], r["loss"], r["accuracy"])
        for r in rows
        if r["split"] in ("val", "test")
    ]


def values(checkpoint):
    """Every array of a checkpoint, loaded here (one process, one device)."""
    model = load(checkpoint, into=nnx_plugins.build(MLP, rngs=nnx.Rngs(1)))
    out = {}
    for path, variable in nnx.state(model).flat_state():
        value = variable.value
        if jax.numpy.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        out[path] = np.asarray(value)
    return out


def assert_close(want, got):
    assert want.keys() == got.keys()
    for path in want:
        np.testing.assert_allclose(got[path], want[path], rtol=2e-3, atol=1e-5, err_msg=str(path))


def without_last_checkpoint(source, target):
    """A copy of a finished run, as if it had been stopped after its step-6 checkpoint."""
    shutil.copytree(source, target)
    shutil.rmtree(target / "checkpoints" / "step_00000012")
    return target


# -- the acceptance runs ---------------------------------------------------------------------
def test_two_processes_train_like_one_process_and_their_checkpoint_resumes_in_one(tmp_path):
    config = write_config(tmp_path)
    two_dir, one_dir = tmp_path / "two", tmp_path / "one"
    began = time.monotonic()
    two = start_two([config, "--run-dir", str(two_dir), "--mesh", "data=8"])
    one = start([config, "--run-dir", str(one_dir), "--mesh", "data=8"], devices=8)
    (code0, out0, err0), (code1, out1, err1), (code, out, err) = finish([*two, one])
    seconds = time.monotonic() - began
    assert (code0, code1, code) == (0, 0, 0), err0[-3000:] + err1[-3000:] + err[-3000:]

    # one process reports for all: the bar, the evaluations, the summary, one log and plot
    assert "trained 12 steps" in out0 and "step      6/12  val loss" in out0
    assert re.search(r"^train .* 12/12 loss \d\.\d{4} [\d,]+ ex/s", out0, re.M), out0  # (the bar)
    assert out1 == "" and err1 == ""
    assert sorted(p.name for p in two_dir.iterdir()) == [
        ".nnx-run.lock",
        "checkpoints",
        "config.yaml",
        "metrics.jsonl",
        "metrics.png",
    ]
    train_two, test_two = losses(two_dir)
    train_one, test_one = losses(one_dir)
    assert len(train_two) == 12 and [t[:2] for t in test_two] == [
        (6, "val"),
        (12, "val"),
        (12, "test"),
    ]
    np.testing.assert_allclose(train_two, train_one, rtol=2e-3)
    np.testing.assert_allclose([t[2:] for t in test_two], [t[2:] for t in test_one], rtol=2e-3)

    # each process wrote its own blocks; process 0 committed
    final = two_dir / "checkpoints" / "step_00000012"
    manifest = read_manifest(final)
    assert manifest["format_version"] == 2
    assert sorted(os.listdir(final)) == [
        "manifest.json",
        "tensors-00000-of-00002.safetensors",
        "tensors-00001-of-00002.safetensors",
    ]
    files = [b["file"] for b in manifest["entries"]["model/layers/0/kernel"]["blocks"]]
    assert (
        files
        == ["tensors-00000-of-00002.safetensors"] * 4 + ["tensors-00001-of-00002.safetensors"] * 4
    )
    reference, got = values(one_dir / "checkpoints" / "step_00000012"), values(final)
    assert_close(reference, got)
    loss_gap = max(abs(a - b) / abs(b) for a, b in zip(train_two, train_one))
    test_gap = max(abs(a - b) for s, t in zip(test_two, test_one) for a, b in zip(s[2:], t[2:]))
    parameter_gap = max(float(np.max(np.abs(got[k] - reference[k].astype(float)))) for k in got)

    # 2 -> 1: the 2-process checkpoint of step 6 resumes here, in one process on one device
    resumed_dir = without_last_checkpoint(two_dir, tmp_path / "resumed")
    resumed = train(config, run_dir=resumed_dir, resume=True, progress=False)
    assert resumed.step == 12 and resumed.steps_trained == 6
    assert_close(reference, values(resumed.checkpoint))
    assert read_manifest(resumed.checkpoint)["format_version"] == 1
    resumed_gap = max(
        float(np.max(np.abs(v - reference[k].astype(float))))
        for k, v in values(resumed.checkpoint).items()
    )
    print(  # (the figures in docs/multi-device.md)
        f"\n2 x 4 devices against 1 x 8: train losses within {loss_gap:.1e} (relative), "
        f"test loss and accuracy within {test_gap:.1e}, "
        f"parameters within {parameter_gap:.1e}; resumed 2 -> 1: within {resumed_gap:.1e}; "
        f"both runs side by side: {seconds:.1f} s"
    )


def test_two_processes_run_the_callbacks_and_keep_best_as_one_process_does(tmp_path):
    # the ema callback's average starts as a copy sharing the model's arrays: the first update
    # copies them, shard by shard for arrays spread over both processes (device_put refused)
    config = dict(
        MLP,
        train={"steps": 24, "batch_size": 32, "log_interval": 1, "eval_interval": 3},
        checkpoint={"interval": 3, "keep": 1, "keep_best": {"metric": "val.loss", "mode": "min"}},
        callbacks=[
            {"type": "ema", "decay": 0.9},
            # no improvement counts (min_delta): stops after the third evaluation, restoring
            # the first one's weights
            {
                "type": "early_stopping",
                "metric": "val.loss",
                "patience": 2,
                "min_delta": 10.0,
                "restore_best": True,
            },
        ],
    )
    path = write_config(tmp_path, config)
    two_dir, one_dir = tmp_path / "two", tmp_path / "one"
    two = start_two([path, "--run-dir", str(two_dir), "--mesh", "data=8"])
    one = start([path, "--run-dir", str(one_dir), "--mesh", "data=8"], devices=8)
    (code0, out0, err0), (code1, _, err1), (code, out, err) = finish([*two, one])
    assert (code0, code1, code) == (0, 0, 0), err0[-3000:] + err1[-3000:] + err[-3000:]
    for text in (out0, out):
        assert "trained 9 steps (steps 1 to 9)" in text and "early_stopping stopped the run" in text
    ema_two, ema_one = (
        [
            (r["step"], r["loss"])
            for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())
            if r["split"] == "val_ema"
        ]
        for d in (two_dir, one_dir)
    )
    assert [step for step, _ in ema_two] == [step for step, _ in ema_one] == [3, 6, 9]
    np.testing.assert_allclose(np.array(ema_two)[:, 1], np.array(ema_one)[:, 1], rtol=2e-3)
    best_two, best_one = (
        json.loads((d / "checkpoints" / "best.json").read_text()) for d in (two_dir, one_dir)
    )
    assert best_two["step"] == best_one["step"]
    np.testing.assert_allclose(best_two["value"], best_one["value"], rtol=2e-3)
    final = re.search(r"test loss (\d\.\d+)\)", out0).group(1)
    assert final == re.search(r"test loss (\d\.\d+)\)", out).group(1)


def test_a_one_process_checkpoint_resumes_in_two_processes(tmp_path):
    config = write_config(tmp_path)
    uninterrupted = train(config, run_dir=tmp_path / "full", progress=False)
    stopped = train(config, run_dir=tmp_path / "resumed", progress=False, stop_at=6)
    assert stopped.checkpoint.name == "step_00000006"
    arguments = [config, "--run-dir", str(tmp_path / "resumed"), "--mesh", "data=8"]
    results = finish(start_two([*arguments, "--resume", "--no-progress"]))
    (code0, out0, err0), (code1, _, err1) = results
    assert (code0, code1) == (0, 0), err0[-3000:] + err1[-3000:]
    assert "trained 6 steps (steps 7 to 12)" in out0
    want, got = values(uninterrupted.checkpoint), values(tmp_path / "resumed" / "checkpoints")
    assert_close(want, got)
    gap = max(float(np.max(np.abs(got[k] - want[k].astype(float)))) for k in got)
    print(f"\nresumed 1 -> 2 against uninterrupted: parameters within {gap:.1e}")
    log = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in log]
    # (train lines; val at 6; val and test at 12)
    assert steps == [1, 2, 3, 4, 5, 6, 6, 7, 8, 9, 10, 11, 12, 12, 12]


# -- failures --------------------------------------------------------------------------------
def test_killing_one_process_stops_the_other_and_keeps_the_last_checkpoint(tmp_path):
    long = {**MLP, "train": {**MLP["train"], "steps": 5000, "eval_interval": 5000}}
    long["checkpoint"] = {"interval": 5, "keep": 2}
    config = write_config(tmp_path, long)
    run_dir = tmp_path / "run"
    processes = start_two(
        [config, "--run-dir", str(run_dir), "--mesh", "data=8", "--no-progress"], heartbeat=10
    )
    try:
        deadline = time.monotonic() + 180
        while latest_checkpoint(run_dir / "checkpoints") is None:
            assert all(p.poll() is None for p in processes), finish(processes)
            assert time.monotonic() < deadline, "no checkpoint within 180 s"
            time.sleep(0.1)
        seen = latest_checkpoint(run_dir / "checkpoints")
        os.kill(processes[1].pid, signal.SIGKILL)
        killed = time.monotonic()
        (code, _, err), (code1, _, _) = finish(processes, timeout=120)
        stopped = time.monotonic() - killed
    finally:
        for process in processes:
            process.kill()
    assert code1 == -signal.SIGKILL
    assert code == 1 and "Traceback" not in err, err[-3000:]
    # Either the watcher notices the silence, or (when process 1 died in the middle of a
    # collective) gloo aborts process 0 natively and its supervising parent says so.
    watched = (
        "nnx: error: process 1 of 2 stopped without a word (killed, out of memory or crashed: "
        "no heartbeat for 10 s)\nnnx: stopping process 0 of 2 as well."
    )
    aborted = "nnx: error: process 0 of 2: JAX's runtime ended it with SIGABRT"
    assert watched in err or aborted in err, err[-3000:]
    assert "start all processes again with --resume" in err
    assert stopped < 90
    how = "watcher" if watched in err else "gloo abort, reported by its parent"
    print(f"\nprocess 0 ended {stopped:.1f} s after process 1 was killed ({how}; heartbeat 10 s)")
    # the newest complete checkpoint loads; the steps that were cut short left nothing half-done
    last = latest_checkpoint(run_dir / "checkpoints")
    assert read_manifest(last)["step"] % 5 == 0 and last.name >= seen.name
    values(last)
    assert all(p.name.startswith(("step_", ".step_")) for p in (run_dir / "checkpoints").iterdir())
    assert [p.name for p in list_checkpoints(run_dir / "checkpoints")][-1] == last.name


@pytest.mark.parametrize("victim", [1, 0])
def test_sigterm_to_one_process_stops_the_run_as_ctrl_c_does(tmp_path, victim):
    """JAX's preemption service would take SIGTERM for itself (both processes then train on);
    the command takes it back: the process sent it stops, saying so, and so do the others."""
    long = {**MLP, "train": {**MLP["train"], "steps": 5000, "eval_interval": 5000}}
    long["checkpoint"] = {"interval": 5, "keep": 2}
    config = write_config(tmp_path, long)
    run_dir = tmp_path / "run"
    processes = start_two(
        [config, "--run-dir", str(run_dir), "--mesh", "data=8", "--no-progress"], heartbeat=10
    )
    try:
        deadline = time.monotonic() + 180
        while latest_checkpoint(run_dir / "checkpoints") is None:
            assert all(p.poll() is None for p in processes), finish(processes)
            assert time.monotonic() < deadline, "no checkpoint within 180 s"
            time.sleep(0.1)
        processes[victim].send_signal(signal.SIGTERM)
        sent = time.monotonic()
        results = finish(processes, timeout=120)
        stopped = time.monotonic() - sent
    finally:
        for process in processes:
            process.kill()
    other = 1 - victim
    (code, _, err), (other_code, _, other_err) = results[victim], results[other]
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert f"nnx: process {victim} of 2: stopped by SIGTERM. The checkpoints written so far" in err
    assert other_code == 1 and "Traceback" not in err + other_err, other_err[-3000:]
    watched = (
        f"nnx: error: process {victim} of 2 was stopped (SIGTERM)\nnnx: stopping process "
        f"{other} of 2 as well."
    )
    aborted = f"nnx: error: process {other} of 2: JAX's runtime ended it with SIGABRT"  # (gloo)
    assert watched in other_err or aborted in other_err, other_err[-3000:]
    assert stopped < 60  # (not the 5000 steps)
    last = latest_checkpoint(run_dir / "checkpoints")
    assert read_manifest(last)["step"] % 5 == 0
    values(last)


def test_an_error_in_one_process_stops_the_others_naming_it(tmp_path):
    config = write_config(tmp_path)
    missing = str(tmp_path / "missing.json")
    port = free_port()
    group = ["--coordinator", f"localhost:{port}", "--num-processes", "2", "--no-progress"]
    run = ["--run-dir", str(tmp_path / "run"), "--mesh", "data=8", *group]
    processes = [
        start([config, *run, "--process-id", "0"], devices=4),
        start([missing, *run, "--process-id", "1"], devices=4),
    ]
    (code0, _, err0), (code1, _, err1) = finish(processes, timeout=120)
    assert (
        code1 == 1 and "process 1 of 2: 1 problem in" in err1 and "cannot read the config" in err1
    )
    assert code0 == 1 and "Traceback" not in err0, err0[-3000:]
    assert "nnx: error: process 1 of 2 failed: ConfigError: 1 problem in " in err0
    assert "stopping process 0 of 2 as well" in err0
    assert not (tmp_path / "run" / "checkpoints").exists()


FAIL_SECOND_WRITE_IN_PROCESS_1 = textwrap.dedent("""
    import errno, os, sys
    from nnx_plugins.training.checkpoints import _save as _checkpoint
    from nnx_plugins.cli._main import main

    if sys.argv[sys.argv.index("--process-id") + 1] == "1":
        calls, real = [], _checkpoint._write_tensors

        def full_disk(tensors, path):
            calls.append(path)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            return real(tensors, path)

        _checkpoint._write_tensors = full_disk
    sys.exit(main(["train", *sys.argv[1:]]))
""")


def test_a_save_that_fails_in_one_process_is_refused_by_all_and_keeps_the_last(tmp_path):
    config = write_config(tmp_path)
    run_dir = tmp_path / "run"
    processes = start_two(
        [config, "--run-dir", str(run_dir), "--mesh", "data=8", "--no-progress"],
        script=FAIL_SECOND_WRITE_IN_PROCESS_1,
    )
    (code0, _, err0), (code1, _, err1) = finish(processes, timeout=180)
    assert (code0, code1) == (1, 1), err0[-3000:] + err1[-3000:]
    for err in (err0, err1):
        assert "Traceback" not in err
        assert "process 1 of 2" in err and "no space left on the device (ENOSPC)" in err
    assert "could not write its part" in err0
    assert [p.name for p in list_checkpoints(run_dir / "checkpoints")] == ["step_00000006"]
    values(run_dir / "checkpoints" / "step_00000006")


# -- joining -----------------------------------------------------------------------------------
def test_joining_errors_say_what_is_missing_or_wrong(tmp_path):
    config = write_config(tmp_path)
    script = textwrap.dedent(f"""
        from nnx_plugins.cli._main import main
        print(main(["train", {config!r}, "--distributed"]))
        print(main(["train", {config!r}, "--coordinator", "localhost:1", "--num-processes", "2",
                    "--process-id", "5"]))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={k: v for k, v in environment(1).items() if not k.startswith(("SLURM", "OMPI"))},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.stdout.split() == ["1", "1"], done.stderr[-3000:]
    first, second = done.stderr.strip().splitlines()
    assert first.startswith(
        "nnx: error: cannot join a multi-process run (--coordinator None, --num-processes None, "
        "--process-id None): coordinator_address should be defined. JAX found none in the "
        "environment either"
    )
    assert first.endswith(
        "Give all three: --coordinator HOST:PORT --num-processes N --process-id I."
    )
    assert "--process-id 5): process_id and num_processes must be nonnegative" in second
    assert "Start every process with the same --coordinator" in second
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "option, match",
    [
        (
            ["--num-processes", "0"],
            r"argument --num-processes: expected a whole number >= 1, got '0'",
        ),
        (["--process-id", "x"], r"argument --process-id: expected a whole number >= 0, got 'x'"),
        (["--heartbeat-timeout", "-1"], r"expected a whole number >= 1, got '-1'"),
        (["--coordinator", "garbage"], r"HOST:PORT, got 'garbage': there is no port \(no ':'\)"),
        (["--coordinator", "localhost:abc"], r"the port 'abc' is not a number; give a port from 1"),
        (["--coordinator", "a:b:c"], r"'a:b:c': an IPv6 address goes in brackets, e\.g\. \[::1\]"),
        (["--coordinator", "localhost:-5"], r"the port '-5' is not a number"),
        (["--coordinator", "[::1]:notaport"], r"the port 'notaport' is not a number"),
        (
            ["--coordinator", "localhost:0"],
            r"the port 0 is out of range; give a port from 1 to 65535",
        ),
        (["--coordinator", "localhost:65536"], r"the port 65536 is out of range"),
        (["--coordinator", "[::1"], r"an IPv6 address in brackets is followed by ':PORT'"),
        (["--coordinator", "[nope]:5"], r"\[nope\] is not an IPv6 address"),
        (["--coordinator", ":5"], r"the host is missing before ':'"),
        (["--coordinator", "my host:5"], r"'my host' is not a host name or IPv4 address"),
        (["--coordinator", ""], r"HOST:PORT, got '': it is empty"),
    ],
)
def test_process_options_are_checked_by_the_parser(option, match, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "c.yaml", *option])
    assert re.search(match, capsys.readouterr().err)


@pytest.mark.parametrize("address", ["[::1]:5555", "10.0.0.1:1234", "node-7.cluster.local:80"])
def test_coordinator_addresses_that_parse(address):
    args = build_parser().parse_args(["train", "c.yaml", "--coordinator", address])
    assert args.coordinator == address


@pytest.mark.parametrize(
    ("given", "environment", "match"),
    [
        (
            "localhost:abc",
            {},
            r"cannot join a multi-process run: --coordinator 'localhost:abc' is not process 0's "
            r"HOST:PORT: the port 'abc' is not a number",
        ),
        (
            "nosuchhost.invalid:5555",
            {},
            r"--coordinator 'nosuchhost.invalid:5555' is not process 0's HOST:PORT: the host "
            r"'nosuchhost.invalid' cannot be resolved \(.*\); check its name, or use its IP\.",
        ),
        (
            None,
            {"JAX_COORDINATOR_ADDRESS": "a:b:c"},
            r"JAX_COORDINATOR_ADDRESS 'a:b:c' is not process 0's HOST:PORT: an IPv6 address",
        ),
    ],
)
def test_a_bad_coordinator_is_refused_before_jax_sees_it(monkeypatch, given, environment, match):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    group = ProcessGroup(coordinator=given, num_processes=2, process_id=1)
    with pytest.raises(RunError, match=match):
        with group:
            pass
    assert not group.joined


def test_a_bad_coordinator_on_the_command_line_is_a_usage_error(capsys):
    from nnx_plugins.cli._main import main

    with pytest.raises(SystemExit) as info:
        main(["train", "c.yaml", "--coordinator", "localhost:abc", "--num-processes", "2"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert (
        "nnx train: error: argument --coordinator: expected HOST:PORT, got 'localhost:abc'" in err
    )


def wait_for_child(process, timeout=120):
    """Wait until ``process`` (an ``nnx train`` of a group) has forked its worker."""
    children = pathlib.Path(f"/proc/{process.pid}/task/{process.pid}/children")
    if not children.parent.exists():  # (no /proc: the fork comes within seconds when idle)
        time.sleep(5)
        return
    deadline = time.monotonic() + timeout
    while not (children.exists() and children.read_text().strip()):
        assert process.poll() is None and time.monotonic() < deadline, "no worker was forked"
        time.sleep(0.05)


def test_sigterm_while_joining_ends_the_process_at_once(tmp_path):
    """Joining blocks in JAX's native code, where no Python handler can run: there SIGTERM
    keeps its default action (not a 300 s wait for the coordinator)."""
    config = write_config(tmp_path)
    group = ["--coordinator", f"localhost:{free_port()}", "--num-processes", "2"]
    process = start(
        [config, "--run-dir", str(tmp_path / "run"), *group, "--process-id", "1"], devices=1
    )
    wait_for_child(process)  # (its supervising parent forwards SIGTERM from then on)
    time.sleep(3)  # (waiting for a process 0 that never comes)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert time.monotonic() - sent < 30 and process.returncode == 128 + signal.SIGTERM, err
    assert "nnx: process 1 of 2: stopped by SIGTERM, sent to this command." in err
    assert not (tmp_path / "run").exists()


def test_sigterm_reaches_python_after_joining():
    """jax.distributed.initialize starts a preemption notifier that installs its own SIGTERM
    handler; a ProcessGroup turns the service off and puts the Python handler back."""
    script = textwrap.dedent(f"""
        import os, signal, time
        from nnx_plugins.training._processes import ProcessGroup
        seen = []
        signal.signal(signal.SIGTERM, lambda *_: seen.append("python"))
        with ProcessGroup(coordinator="localhost:{free_port()}", num_processes=1, process_id=0):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        print(seen)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=environment(1),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["['python']"], done.stderr[-3000:]


def test_process_options_parse():
    args = build_parser().parse_args(
        ["train", "c.yaml", "--coordinator", "10.0.0.1:1234", "--num-processes", "4"]
        + ["--process-id", "3", "--heartbeat-timeout", "30"]
    )
    assert (args.coordinator, args.num_processes, args.process_id) == ("10.0.0.1:1234", 4, 3)
    assert args.heartbeat_timeout == 30 and args.distributed is False


def documented_commands():
    """The ``nnx train`` command lines of docs/multi-device.md's "Many processes" bash blocks."""
    section = (
        (ROOT / "docs" / "multi-device.md")
        .read_text(encoding="utf-8")
        .split("## Many processes", 1)[1]
    )
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("nnx train"):  # (without "nnx train" and a final "&")
                words = line.replace("$RANK", "3").split()[2:]
                commands.append(words[:-1] if words[-1] == "&" else words)
    return commands


def test_the_documented_command_lines_parse_into_one_run_of_processes():
    commands = documented_commands()
    assert len(commands) == 3  # (localhost: two processes; a cluster: one line per host)
    parsed = [build_parser().parse_args(["train", *command]) for command in commands]
    localhost, cluster = parsed[:2], parsed[2]
    assert [a.process_id for a in localhost] == [0, 1]
    for args in localhost:
        assert (args.file, args.mesh, args.num_processes) == (
            "examples/digits_mlp.yaml",
            "data=8",
            2,
        )
        assert args.coordinator == "localhost:5555" and args.overrides == []
    assert (cluster.coordinator, cluster.num_processes, cluster.mesh) == (
        "10.0.0.1:5555",
        4,
        "data=16",
    )
    assert (ROOT / localhost[0].file).is_file()

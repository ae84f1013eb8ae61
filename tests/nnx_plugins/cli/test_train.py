"""nnx train FILE [KEY=VALUE...]: the run keeps its resolved config, which reproduces it alone."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from safetensors.numpy import load_file

import nnx_plugins
from nnx_plugins import read_manifest
from nnx_plugins.cli._main import main
from nnx_plugins.training.checkpoints._save import latest_checkpoint

BASE = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 64, out_features: 16}
    - {type: relu}
    - {type: Linear, in_features: "${model.layers[0].out_features}", out_features: 10}
optimizer: {type: adam, learning_rate: 0.01}
data: {type: digits, layout: flat}
train: {steps: 100, batch_size: 16, seed: 1}
"""


def tensors(run_dir):
    (checkpoint,) = sorted((run_dir / "checkpoints").iterdir())
    return checkpoint, load_file(checkpoint / "tensors.safetensors")


def test_a_run_saves_its_resolved_config_and_reproduces_from_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yaml").write_text(BASE)
    (tmp_path / "configs" / "run.yaml").write_text("include: [base.yaml]\ntrain: {seed: 2}\n")
    monkeypatch.chdir(tmp_path)
    argv = ["train", "configs/run.yaml", "--no-progress", "--run-dir", "first", "train.steps=3"]
    assert main([*argv, "model.layers[0].out_features=8"]) == 0
    saved = yaml.safe_load((tmp_path / "first" / "config.yaml").read_text())
    assert saved["train"]["steps"] == 3 and saved["train"]["seed"] == 2
    assert saved["model"]["layers"][2]["in_features"] == 8 and "include" not in saved
    assert saved["checkpoint"] == {
        "dir": "checkpoints",
        "interval": None,
        "keep": 3,
        "keep_best": None,
        "init_from": None,
    }
    checkpoint, first = tensors(tmp_path / "first")
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    assert manifest["config"] == saved and manifest["step"] == 3

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.yaml").write_text((tmp_path / "first" / "config.yaml").read_text())
    monkeypatch.chdir(elsewhere)
    assert main(["train", "config.yaml", "--no-progress", "--run-dir", "again"]) == 0
    _, again = tensors(elsewhere / "again")
    assert sorted(first) == sorted(again)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    capsys.readouterr()


def test_a_bad_override_stops_training_before_anything_is_written(tmp_path, monkeypatch, capsys):
    (tmp_path / "base.yaml").write_text(BASE)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "base.yaml", "--no-progress", "train.step=3"]) == 1
    err = capsys.readouterr().err
    assert (
        "<override train.step=3>:1:7: train.step: unknown key 'step'. Did you mean 'steps'?" in err
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.yaml"]


LONG = BASE.replace("steps: 100", "steps: 100000") + "checkpoint: {interval: 5, keep: 2}\n"


def test_sigterm_stops_a_run_as_ctrl_c_does_keeping_its_checkpoints(tmp_path):
    (tmp_path / "long.yaml").write_text(LONG)
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "nnx_plugins.cli._main", "train", "long.yaml", "--no-progress"]
        + ["--run-dir", str(run_dir)],
        cwd=tmp_path,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while latest_checkpoint(run_dir / "checkpoints") is None:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert err.startswith(
        "nnx: stopped by SIGTERM. The checkpoints written so far are intact (saves are atomic); "
        "continue with the same command and --resume."
    ), err
    last = latest_checkpoint(run_dir / "checkpoints")
    assert read_manifest(last)["step"] % 5 == 0
    nnx_plugins.load(last)  # (whole: it loads)
    done = subprocess.run(
        [sys.executable, "-m", "nnx_plugins.cli._main", "train", "long.yaml", "--no-progress"]
        + [
            "--run-dir",
            str(run_dir),
            "--resume",
            "train.steps=" + str(read_manifest(last)["step"] + 5),
        ],
        cwd=tmp_path,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "trained 5 steps" in done.stdout, done.stderr


def test_sigterm_is_left_alone_when_it_is_ignored_or_handled():
    from nnx_plugins._stopping import stop_on_signals

    for handler in (signal.SIG_IGN, print):
        previous = signal.signal(signal.SIGTERM, handler)
        try:
            with stop_on_signals():
                assert signal.getsignal(signal.SIGTERM) is handler
        finally:
            signal.signal(signal.SIGTERM, previous)
    with stop_on_signals():
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_the_summary_names_tokens_in_the_datas_words(tmp_path):
    from nnx_plugins.cli._train import summary_words
    from nnx_plugins.training._evaluation import describe_metrics

    def token_name(config):
        return summary_words(config)["token"]

    model = {"type": "Linear", "in_features": 2, "out_features": 2}
    text = {"type": "text", "path": str(tmp_path / "t.txt")}  # (not read: __init__ is cheap)
    assert token_name({"model": model, "data": {**text, "level": "bytes"}}) == "byte"
    assert token_name({"model": model, "data": {**text, "level": "characters"}}) == "character"
    assert token_name({"model": model, "data": {"type": "digits"}}) == "token"
    tokenized = {**text, "tokenizer": {"type": "hf", "path": str(tmp_path / "t.json")}}
    assert token_name({"model": model, "data": tokenized}) == "token"
    metrics = {"loss": 2.0, "accuracy": 0.5, "bits_per_token": 2.885, "top_5_accuracy": 0.9}
    assert describe_metrics(metrics) == (
        "test: 2.88 bits per token, next-token accuracy 50.00%, top_5_accuracy 90.00% (loss "
        "2.0000 nats per token)"
    )
    assert describe_metrics({"loss": 0.25, "accuracy": 0.9}).startswith("test accuracy: 90.00%")


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_whose_raise_is_lost_still_stops_the_run(nnx_registry, tmp_path, sent, monkeypatch):
    """A signal handler's exception raised inside a garbage-collector callback is printed as
    "ignored" by Python and lost (1 SIGTERM in 12 under load, and Ctrl-C early in a run: the
    run trained on). The stop is recorded too, and the loop raises it at its next step;
    Python's report of the lost raise ("Exception ignored in ... Traceback") is not printed."""
    import gc

    from nnx_plugins import Callback, register_callback, train
    from nnx_plugins._stopping import Terminated, stop_on_signals

    def send_once(phase, info):
        gc.callbacks.remove(send_once)
        os.kill(os.getpid(), sent)  # (its handler runs here, inside the callback)

    steps = []

    @register_callback("test.sigterm_in_gc")
    class SigtermInGC(Callback):
        def after_step(self, run, step):
            steps.append(step)
            if step == 3:
                gc.callbacks.append(send_once)
                gc.collect()

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    config = yaml.safe_load(BASE)
    config["callbacks"] = ["test.sigterm_in_gc"]
    stop = Terminated if sent == signal.SIGTERM else KeyboardInterrupt
    # (Python's own Ctrl-C handler, as a command has it: a pytest-xdist worker ignores SIGINT)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(stop), stop_on_signals():
            train(config, run_dir=tmp_path / "run", progress=False)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # (restored)
    finally:
        signal.signal(signal.SIGINT, before)
    assert steps == [1, 2, 3]
    assert send_once not in gc.callbacks
    assert reported == [] and sys.unraisablehook == reported.append  # (not printed; restored)


@pytest.mark.parametrize(
    ("status", "ends_at_once"), [(130, True), (143, True), (0, False), (1, False)]
)
def test_the_command_ends_a_stopped_process_at_once(monkeypatch, status, ends_at_once):
    """Stopped while XLA compiled, the interpreter's teardown beside XLA's threads crashed the
    process after the stop message (a segmentation fault in 3 of 4 stops): `run` ends it."""
    from nnx_plugins.cli import _main

    ended, ignored = [], []
    monkeypatch.setattr(_main, "main", lambda: status)
    monkeypatch.setattr(_main.os, "_exit", lambda code: ended.append(code))
    monkeypatch.setattr(_main.signal, "signal", lambda signum, how: ignored.append((signum, how)))
    try:
        _main.run()
    except SystemExit as exit_:
        assert exit_.code == status
    assert ended == ([status] if ends_at_once else [])
    # (once the command is done a stop is ignored: it would only break the teardown)
    assert ignored == [(signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, signal.SIG_IGN)]


def test_a_stop_while_the_command_loads_is_one_line(monkeypatch, capsys):
    from nnx_plugins.cli import _main

    def loading():
        raise KeyboardInterrupt

    monkeypatch.setattr(_main, "build_parser", loading)
    assert _main.main(["train", "x.yaml"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "nnx: interrupted." and "Traceback" not in err


def test_a_stop_while_the_console_script_loads_the_command_is_one_line(monkeypatch, capsys):
    """The console script imports the command's modules first: a Ctrl-C then printed the
    traceback of the import it broke (exit 1), before `main` could say anything."""
    from nnx_plugins.cli import _entry

    def loading():
        raise KeyboardInterrupt

    ended = []
    monkeypatch.setattr(_entry, "_command", loading)
    monkeypatch.setattr(_entry.os, "_exit", ended.append)
    _entry.run()
    assert ended == [130]
    assert capsys.readouterr().err == "nnx: interrupted.\n"

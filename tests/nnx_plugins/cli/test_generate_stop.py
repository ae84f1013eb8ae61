"""nnx generate stopped by Ctrl-C or SIGTERM (real processes, the signal sent while the model
generates): one line, exit 130 or 143, nothing on stdout; also when the stop lands in a
garbage-collector callback, where Python prints it as "ignored" and goes on."""

import signal
import subprocess

import pytest

from ..generation.test_generate import byte_model_run
from .test_import_stop import command, start, wait_for


@pytest.fixture
def model(tmp_path):
    config, checkpoint = byte_model_run(tmp_path, b"cd")
    return ("generate", str(config), "--checkpoint", str(checkpoint), "--prompt", "ab")


HELD = """
    import ctypes
    from nnx_plugins.generation import _generate
    def held(*args, **kwargs):
        print("READY", flush=True)   # (the model is loaded, the prompt encoded: decoding)
        # native code that holds its thread as XLA's program does: no signal ends it (a
        # mutex locked twice), and Python runs no handler in that thread meanwhile
        lock, mutex = ctypes.CDLL(None).pthread_mutex_lock, ctypes.create_string_buffer(64)
        lock(mutex)
        lock(mutex)
    _generate._continued = held
    """


@pytest.mark.parametrize(("sent", "status", "said"), [(signal.SIGINT, 130, "nnx: interrupted.\n"), (signal.SIGTERM, 143, "nnx: stopped by SIGTERM.\n")])  # fmt: skip
def test_a_stop_while_generating_is_one_line(model, tmp_path, sent, status, said):
    """SIGTERM ended the process at once (exit -15, no word said); Ctrl-C waited for the end
    of XLA's decoding program (a model without a maximum length asked for 10,000,000 tokens:
    hours), the handler running in the main thread only between its bytecodes."""
    child = start(HELD, command(*model), cwd=tmp_path)
    try:
        wait_for(child, "READY")
        child.send_signal(sent)
        try:
            out, err = child.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the command went on after {signal.Signals(sent).name}")
    finally:
        child.kill()
    assert (child.returncode, out, err) == (status, "", said)


LOST = """
    import signal
    import numpy as np
    from nnx_plugins.generation import _generate
    class Collected:
        def __del__(self):    # (as jax's garbage-collector callback: a stop raised in it is lost)
            signal.raise_signal(signal.SIGINT)
    def lost(model, rows, pad, options):
        Collected()
        new = options["max_tokens"]  # (the tokens, and no row's logits were not finite)
        return np.full((len(rows), new), 99, np.int32), np.full(len(rows), new)
    _generate._continued = lost
    """


def test_a_stop_lost_in_a_garbage_collector_callback_still_stops(model, tmp_path):
    """Python printed "Exception ignored in ... KeyboardInterrupt" with a traceback and went
    on: the text came out and the command exited 0 after the Ctrl-C."""
    child = start(LOST, command(*model, "--max-tokens", "2"), cwd=tmp_path)
    try:
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert (child.returncode, out, err) == (130, "", "nnx: interrupted.\n")

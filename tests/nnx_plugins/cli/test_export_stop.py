"""nnx export hf / export jax stopped by Ctrl-C or SIGTERM (real processes, the signal sent at
a known point): exit 130 or 143, one line, the output absent and no temporary beside it; and
two exports to one --out at once: one wins whole, the other fails saying why."""

import signal

import jax
import pytest
from safetensors.numpy import load_file

import nnx_plugins

from .test_import_stop import FIXTURES, command, start, stop_when_ready, wait_for


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The tiny Llama imported, exported once each way (the exports in the tests are then
    quick: what a process does once is done)."""
    folder = tmp_path_factory.mktemp("stop")
    done = nnx_plugins.import_hf(FIXTURES / "llama", folder / "llama")
    nnx_plugins.export_hf(done.config, checkpoint=done.checkpoint, out=folder / "hf")
    nnx_plugins.export_jax(done.config, checkpoint=done.checkpoint, out=folder / "llama.jax")
    return done


def export(imported, kind: str, out) -> tuple[str, ...]:
    return (
        "export",
        kind,
        str(imported.config),
        "--checkpoint",
        str(imported.checkpoint),
        "--out",
        str(out),
    )


HELD = """
    import os, time
    from nnx_plugins.pretrained import _exporting
    real = _exporting.check
    def held():
        print("READY", flush=True)   # (the output is whole in its temporary, not yet in place)
        while not os.path.exists("go"):
            time.sleep(0.01)
        real()
    _exporting.check = held
    """


@pytest.mark.parametrize(
    ("kind", "sent", "status", "how"),
    [("hf", signal.SIGTERM, 143, "stopped by SIGTERM"), ("jax", signal.SIGINT, 130, "interrupted")],
)
def test_a_stopped_export_says_so_in_one_line_and_leaves_nothing(
    imported, tmp_path, kind, sent, status, how
):
    """SIGTERM ended the process at once (exit -15, no word), leaving the temporary `.out.*`
    beside --out; a stop lost in jax's garbage-collector callback let the export finish."""
    out = tmp_path / "out"
    child = start(HELD, command(*export(imported, kind, out)), cwd=tmp_path)
    err = stop_when_ready(child, sent, tmp_path / ".out.")
    assert child.returncode == status, err
    assert err == (
        f"nnx: {how}: nothing was written ({out} is as it was; the export writes its output whole "
        "or not at all). Run the same command again to export.\n"
    )
    assert list(tmp_path.iterdir()) == []


STARTED = """
    from nnx_plugins.pretrained import _export_hf, _export_jax
    def started(new):
        def checked(*args, **kwargs):
            path = new(*args, **kwargs)
            print("STARTED", flush=True)   # (--out checked: it did not exist)
            return path
        return checked
    _export_hf.new_output = started(_export_hf.new_output)
    _export_jax.new_output = started(_export_jax.new_output)
    """


@pytest.mark.parametrize("kind", ["hf", "jax"])
def test_two_exports_to_one_output_at_once(imported, tmp_path, kind):
    """The command checked --out, then another export wrote it while the command was held
    before putting its output in place: it failed with "it exists already (EEXIST) ... free
    space or fix permissions"; now it says another process wrote it. The other's output is
    whole and loads."""
    out = tmp_path / "out"
    child = start(STARTED, HELD, command(*export(imported, kind, out)), cwd=tmp_path)
    try:
        wait_for(child, "STARTED")
        if kind == "hf":
            nnx_plugins.export_hf(imported.config, checkpoint=imported.checkpoint, out=out)
        else:
            nnx_plugins.export_jax(imported.config, checkpoint=imported.checkpoint, out=out)
        wait_for(child, "READY")
        (tmp_path / "go").touch()
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 1, err
    assert err == (
        f"nnx: error: the output {out} was written by another process while this export ran (it "
        "did not exist when the export started): an export never replaces anything. Nothing of "
        "this export was written; choose another --out.\n"
    )
    if kind == "hf":
        assert "model.norm.weight" in load_file(str(out / "model.safetensors"))
    else:
        assert jax.export.deserialize(out.read_bytes()).in_avals[0].dtype == "int32"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "out"]

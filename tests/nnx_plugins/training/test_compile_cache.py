"""The compile cache of train / evaluate / generate: a second run loads what the first compiled;
another model, shape, dtype, mesh, version or device compiles again; a folder that cannot be
written, a full disk or a damaged entry is one warning and a run that trains."""

import errno
import os
import subprocess
import sys
import tempfile
import textwrap
import types

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.compilation_cache.compilation_cache import reset_cache

from nnx_plugins import CompileCacheWarning, NnxWarning, train
from nnx_plugins.cli._main import main
from nnx_plugins.training import _compile_cache
from nnx_plugins.training._compile_cache import (
    MAGIC,
    cache_folder,
    compile_cache,
    user_cache_root,
    with_compile_cache,
)

# (these tests count what a run compiles and what its cache folder holds)
pytestmark = pytest.mark.fresh_compile_cache

EVENTS: list[str] = []
_HITS, _WRITES = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"
jax.monitoring.register_event_listener(
    lambda name, **_: EVENTS.append(name) if name in (_HITS, _WRITES) else None
)

CONFIG = {
    "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    "optimizer": {"type": "adam", "learning_rate": 0.05},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 2, "batch_size": 8},
}


def cached_call(value=None):
    """One small program, compiled (or loaded) inside `compile_cache` (its input made before)."""
    value = jnp.ones((2, 3)) if value is None else value
    with compile_cache():
        jax.block_until_ready(STEP(value))


STEP = jax.jit(lambda x: jnp.tanh(x) * 3 + 1)


def counted(fn):
    """Run ``fn`` after dropping every compiled program this process holds (as a new process
    would start); ``(hits, writes)`` of the persistent cache while it ran."""
    jax.clear_caches()
    EVENTS.clear()
    fn()
    return EVENTS.count(_HITS), EVENTS.count(_WRITES)


def entries():
    return sorted(user_cache_root().rglob("*.nnx"))


def run(config=CONFIG, **kwargs):
    """A call that trains ``config`` in a new run directory."""
    return lambda: train(config, run_dir=tempfile.mkdtemp(), progress=False, **kwargs)


def test_a_second_run_loads_every_program_and_another_model_compiles_its_steps():
    hits, writes = counted(run())
    first = entries()
    assert hits == 0 and writes == len(first) > 0
    assert all(path.parent == cache_folder() for path in first)
    hits, writes = counted(run())
    assert (hits, writes) == (len(first), 0) and entries() == first
    wider = {**CONFIG, "model": {"type": "Linear", "in_features": 64, "out_features": 12}}
    hits, writes = counted(run(wider))
    assert writes >= 2 and len(entries()) == len(first) + writes  # (train and eval steps)


@pytest.mark.parametrize(
    "change",
    [
        lambda x: x.astype(jnp.bfloat16),  # dtype
        lambda x: jnp.ones((4, 3)),  # shape
    ],
    ids=["dtype", "shape"],
)
def test_a_program_of_another_dtype_or_shape_is_compiled_not_loaded(change):
    x = jnp.ones((2, 3))
    assert counted(lambda: cached_call(x)) == (0, 1)
    assert counted(lambda: cached_call(x)) == (1, 0)
    changed = change(x)
    assert counted(lambda: cached_call(changed)) == (0, 1)


def test_another_jax_version_or_device_kind_has_a_folder_of_its_own(monkeypatch):
    here = cache_folder()
    monkeypatch.setattr(_compile_cache.jaxlib, "__version__", "99.0")
    assert cache_folder() != here and "jaxlib-99.0" in cache_folder().parts[-2]
    monkeypatch.undo()
    monkeypatch.setattr(_compile_cache.jax, "__version__", "99.1")
    assert cache_folder() != here and "jax-99.1" in cache_folder().parts[-2]
    monkeypatch.undo()
    assert counted(cached_call) == (0, 1)
    device = types.SimpleNamespace(platform="gpu", device_kind="NVIDIA H200")
    monkeypatch.setattr(_compile_cache, "_device", lambda: device)
    assert cache_folder().name == "gpu-nvidia-h200"
    assert counted(cached_call) == (0, 1)
    assert {path.parent.name for path in entries()} == {here.name, "gpu-nvidia-h200"}


def test_another_mesh_is_compiled_not_loaded(tmp_path):
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from nnx_plugins.training._compile_cache import compile_cache
        writes = []
        jax.monitoring.register_event_listener(
            lambda name, **_: writes.append(name) if name.endswith("cache_misses") else None)
        step = jax.jit(lambda x: (x * 2).sum(0))
        x = jnp.arange(8.0).reshape(4, 2)
        for shape in [(2,), (1,), (2,)]:
            mesh = Mesh(np.array(jax.devices()[: shape[0]]), ("data",))
            jax.clear_caches()
            with compile_cache():
                jax.block_until_ready(step(jax.device_put(x, NamedSharding(mesh, P("data")))))
            print(len(writes))
        """
    )
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, other, again = map(int, done.stdout.split())
    assert first >= 1 and other > first and again == other  # (mesh of 1: new; of 2: loaded)


def test_settings_are_restored_and_an_off_cache_keeps_nothing():
    before = jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache

    def off():
        with compile_cache(False):
            jax.block_until_ready(STEP(jnp.ones((2, 3))))

    assert counted(off) == (0, 0) and entries() == []
    after = jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache
    assert before == after == (None, True)
    counted(cached_call)
    assert (jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache) == (
        None,
        True,
    )


def test_a_jax_cache_the_user_configured_is_used_as_it_is(tmp_path):
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "theirs"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        hits, writes = counted(cached_call)
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "theirs")
    finally:
        jax.config.update("jax_compilation_cache_dir", None)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
        reset_cache()
    assert hits == 0 and writes >= 1 and entries() == []
    assert len(list((tmp_path / "theirs").glob("*-cache"))) == writes


def test_a_folder_that_cannot_be_written_is_one_warning(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("NNX_CACHE_DIR", str(tmp_path / "a-file" / "cache"))

    def two_programs():
        cached_call()
        cached_call(jnp.ones(5))

    with pytest.warns(CompileCacheWarning) as caught:
        assert counted(two_programs) == (0, 2)  # (JAX offered two programs: none was kept)
    assert len(caught) == 1 and entries() == []
    message = str(caught[0].message)
    assert message.startswith(f"cannot use the compile cache folder {tmp_path / 'a-file'}")
    assert "(ENOTDIR)" in message and "NNX_CACHE_DIR" in message


def test_a_full_disk_is_one_warning_and_leaves_no_partial_entry(monkeypatch):
    def full(handle, data):
        os.write(handle, data[: len(data) // 2])
        os.close(handle)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_compile_cache, "_write", full)

    def two_programs():
        cached_call()
        cached_call(jnp.ones(5))

    with pytest.warns(CompileCacheWarning, match=r"no space left on the device \(ENOSPC\)") as w:
        assert counted(two_programs) == (0, 2)  # (JAX offered two programs: none was kept)
    assert len(w) == 1
    assert entries() == [] and not list(user_cache_root().rglob("*.tmp"))


def test_damaged_entries_are_one_warning_removed_and_compiled_again():
    counted(run())
    for path in entries():
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2] if "train" in path.name else b"garbage")
    with pytest.warns(CompileCacheWarning, match=r"held a damaged entry .*; it was removed") as w:
        hits, writes = counted(run())
    assert len(w) == 1 and hits == 0 and writes == len(entries())
    assert all(path.read_bytes().startswith(MAGIC) for path in entries())


def test_an_entry_under_another_programs_name_is_not_loaded():
    """Two whole entries swapped (by hand, a bad copy): each is refused, not run with the
    other program's inputs (a traceback; with equal shapes, a wrong result)."""
    counted(lambda: (cached_call(), cached_call(jnp.ones(5))))
    first, second = entries()
    one, other = first.read_bytes(), second.read_bytes()
    first.write_bytes(other)
    second.write_bytes(one)
    with pytest.warns(CompileCacheWarning, match="stored under another program's name"):
        assert counted(lambda: (cached_call(), cached_call(jnp.ones(5)))) == (0, 2)


def test_an_entry_that_is_a_fifo_or_of_the_former_format(recwarn):
    """A FIFO is refused unread (reading it waited for a writer: the run hung); an entry of
    the earlier format is replaced without a warning."""
    counted(cached_call)
    (entry,) = entries()
    entry.unlink()
    os.mkfifo(entry)
    with pytest.warns(CompileCacheWarning, match="held a damaged entry"):
        assert counted(cached_call) == (0, 1)
    (entry,) = entries()
    entry.write_bytes(b"nnx-xla1" + entry.read_bytes()[len(MAGIC) :])
    assert counted(cached_call) == (0, 1)
    assert not [w for w in recwarn if issubclass(w.category, CompileCacheWarning)]
    assert entry.read_bytes().startswith(MAGIC)


def test_the_command_warns_in_one_line_trains_and_eval_loads_from_the_cache(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "run.yaml").write_text(
        "model: {type: Linear, in_features: 64, out_features: 10}\n"
        "optimizer: {type: adam, learning_rate: 0.05}\n"
        "data: {type: digits, layout: flat}\ntrain: {steps: 2, batch_size: 8}\n"
    )
    monkeypatch.setenv("NNX_CACHE_DIR", str(tmp_path / "a-file"))
    monkeypatch.chdir(tmp_path)
    counted(lambda: main(["train", "run.yaml", "--no-progress", "--run-dir", "out"]))
    out = capsys.readouterr()
    lines = [x for x in out.err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnx: warning: cannot use the compile cache")
    assert "trained 2 steps" in out.out and (tmp_path / "out" / "checkpoints").is_dir()
    monkeypatch.setenv("NNX_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["train", "run.yaml", "--no-progress", "--run-dir", "off", "--no-compile-cache"]
    assert main(argv) == 0 and entries() == []
    checkpoint = str(tmp_path / "off" / "checkpoints")
    evaluation = ["eval", "run.yaml", "--checkpoint", checkpoint]
    assert counted(lambda: main([*evaluation, "--no-compile-cache"])) == (0, 0)
    hits, writes = counted(lambda: main(evaluation))
    assert hits == 0 and writes == len(entries()) > 0
    assert counted(lambda: main(evaluation)) == (writes, 0)
    assert capsys.readouterr().err == ""


def test_two_processes_writing_one_folder_at_once_leave_whole_entries(tmp_path):
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        from nnx_plugins.training._compile_cache import compile_cache
        with compile_cache():
            for n in range(1, 13):
                jax.block_until_ready(jax.jit(lambda x: jnp.sin(x) * n)(jnp.ones(n)))
        """
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    both = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    errors = [p.communicate(timeout=300)[1] for p in both]
    assert [p.returncode for p in both] == [0, 0], errors
    assert all(b"warning" not in error.lower() for error in errors), errors
    found = entries()
    assert len(found) >= 12 and all(path.read_bytes().startswith(MAGIC) for path in found)
    assert not list(user_cache_root().rglob("*.tmp"))
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    assert entries() == found  # (the third process loaded every program)


def test_compile_cache_must_be_a_bool():
    @with_compile_cache
    def fn(*, compile_cache=True):
        return compile_cache

    assert fn() is True and fn(compile_cache=False) is False
    with pytest.raises(TypeError, match=r"compile_cache must be True or False, got 'no'"):
        fn(compile_cache="no")


def test_a_block_inside_another_keeps_the_outer_choice():
    def nested():
        with compile_cache(False):
            cached_call()

    assert counted(nested) == (0, 0) and entries() == []


def test_the_warning_is_an_nnx_warning():
    assert issubclass(CompileCacheWarning, NnxWarning) and issubclass(NnxWarning, UserWarning)

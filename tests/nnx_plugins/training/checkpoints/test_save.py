"""Checkpoints: round trips, manifest contents, atomic writes, and every refusal."""

import errno
import json
import os
import pathlib
import signal

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx
import nnx_plugins
from nnx_plugins import CheckpointError, load, read_manifest, save
from nnx_plugins._stopping import Terminated, stop_on_signals
from nnx_plugins.training.checkpoints import _save as _checkpoint
from nnx_plugins.training.checkpoints._save import (
    latest_checkpoint,
    list_checkpoints,
    rotate,
    step_directory,
)

CNN = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Conv", "in_features": 1, "out_features": 4, "kernel_size": [3, 3]},
            {"type": "BatchNorm", "num_features": 4},
            {"type": "relu"},
            {"type": "Flatten"},
            {"type": "Dropout", "rate": 0.5},
            {"type": "Linear", "in_features": 256, "out_features": 10},
        ],
    }
}


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss(m):
        return optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean()

    optimizer.update(model, nnx.grad(loss)(model))


TX = optax.adam(1e-2)  # one object: a new optax transformation is a new static (recompiles)


def trained(seed=0, steps=2):
    model = nnx_plugins.build(CNN, rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, TX)
    x = np.linspace(-1, 1, 8 * 64, dtype=np.float32).reshape(8, 8, 8, 1)
    y = np.arange(8) % 10
    for _ in range(steps):
        train_step(model, optimizer, x, y)
    return model, optimizer


def leaves(node):
    out = {}
    for path, variable in nnx.state(node).flat_state():
        value = variable.value
        if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        out[path] = (type(variable), value.dtype, np.asarray(value))
    return out


def assert_same(a, b):
    left, right = leaves(a), leaves(b)
    assert left.keys() == right.keys()
    for path in left:
        assert left[path][0] is right[path][0], path
        assert left[path][1] == right[path][1], path
        np.testing.assert_array_equal(left[path][2], right[path][2], err_msg=str(path))


def test_round_trip_with_optimizer_batch_stats_and_rng_state(tmp_path):
    model, optimizer = trained()
    save(model, tmp_path / "c", optimizer=optimizer, config=CNN, step=2)
    fresh_model, _ = trained(seed=1, steps=0)
    fresh_optimizer = nnx.Optimizer(fresh_model, TX)
    load(tmp_path / "c", into=fresh_model, optimizer=fresh_optimizer)
    assert_same(model, fresh_model)
    assert_same(optimizer, fresh_optimizer)
    assert int(fresh_optimizer.step.value) == 2
    rng = fresh_model.layers[4].rngs
    assert int(rng.count.value) == int(model.layers[4].rngs.count.value) == 2  # a mask a step
    assert jnp.issubdtype(rng.key.value.dtype, jax.dtypes.prng_key)
    assert float(jnp.abs(fresh_model.layers[1].mean.value).sum()) > 0  # BatchStats moved


def test_load_rebuilds_the_model_from_the_manifest_config(tmp_path):
    model, _ = trained()
    save(model, tmp_path / "c", config=nnx_plugins.load_config(CNN))
    assert_same(model, load(tmp_path / "c"))


def test_to_config_is_the_default_config(tmp_path):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    save(model, tmp_path / "c")
    assert read_manifest(tmp_path / "c")["config"]["model"]["type"] == "Linear"
    assert_same(model, load(tmp_path / "c"))


def test_bfloat16_round_trips(tmp_path):
    model = nnx_plugins.build(
        {"type": "Linear", "in_features": 3, "out_features": 2, "param_dtype": "bfloat16"}
    )
    model.kernel.value = jnp.array([[1.5, -2.25], [3.0, 0.1], [7.0, 1e-3]], jnp.bfloat16)
    save(model, tmp_path / "c")
    entry = read_manifest(tmp_path / "c")["entries"]["model/kernel"]
    assert (entry["dtype"], entry["stored_as"]) == ("bfloat16", "uint16")
    restored = load(tmp_path / "c")
    assert restored.kernel.value.dtype == jnp.bfloat16
    assert_same(model, restored)


def test_manifest_records_kinds_providers_versions_and_checksum(tmp_path):
    model = nnx_plugins.build(
        {"type": "acme.GatedDense", "in_features": 4, "out_features": 2, "lora_rank": 2}
    )
    model, optimizer = model, nnx.Optimizer(model, optax.sgd(0.1))
    save(model, tmp_path / "c", optimizer=optimizer, step=5)
    manifest = read_manifest(tmp_path / "c")
    lora = manifest["entries"]["model/lora_a"]
    assert lora["kind"] == "acme.LoRAParam" and lora["provider"].startswith("acme-layers ")
    assert lora["shape"] == [4, 2] and lora["dtype"] == "float32"
    assert manifest["entries"]["model/value/kernel"]["kind"] == "Param"
    assert manifest["entries"]["optimizer/step"]["kind"] == "OptState"
    assert manifest["entries"]["optimizer/step"]["provider"].startswith("nnx-jax ")
    assert manifest["step"] == 5 and manifest["packages"]["nnx-jax"] and manifest["packages"]["jax"]
    assert "acme-layers" in manifest["plugins"]
    with open(tmp_path / "c" / "tensors.safetensors", "rb") as handle:
        import hashlib

        assert manifest["sha256"] == hashlib.sha256(handle.read()).hexdigest()
    assert_same(model, load(tmp_path / "c"))


def damage(path, how):
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_corrupt_checkpoint_is_refused_and_the_previous_one_is_intact(tmp_path, how):
    model, optimizer = trained(steps=1)
    save(model, step_directory(tmp_path, 1), optimizer=optimizer, config=CNN, step=1)
    before = leaves(model)
    trained_more, optimizer = trained(steps=2)
    save(trained_more, step_directory(tmp_path, 2), optimizer=optimizer, config=CNN, step=2)
    damage(step_directory(tmp_path, 2) / "tensors.safetensors", how)
    with pytest.raises(
        CheckpointError,
        match=r"step_00000002:\n  tensors\.safetensors is corrupt "
        r"or truncated: its sha256 is .* but the manifest records .* Load an "
        r"earlier checkpoint instead",
    ):
        load(tmp_path)  # the newest one
    restored = load(step_directory(tmp_path, 1))
    after = leaves(restored)
    for path in before:
        np.testing.assert_array_equal(before[path][2], after[path][2])


def test_interrupted_save_leaves_the_last_good_checkpoint(tmp_path, monkeypatch):
    model, optimizer = trained(steps=1)
    target = tmp_path / "c"
    save(model, target, optimizer=optimizer, config=CNN, step=1)
    good = (target / "tensors.safetensors").read_bytes(), (target / "manifest.json").read_text()
    more, optimizer = trained(steps=3)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("simulated kill during the manifest write")

    monkeypatch.setattr(_checkpoint, "_write_manifest", crash)
    with pytest.raises(KeyboardInterrupt, match="simulated kill"):
        save(more, target, optimizer=optimizer, config=CNN, step=3)
    assert (target / "tensors.safetensors").read_bytes() == good[0]
    assert (target / "manifest.json").read_text() == good[1]
    assert sorted(os.listdir(tmp_path)) == ["c"]  # no temporary directory left behind
    assert read_manifest(target)["step"] == 1
    load(target, into=trained(steps=0)[0])


def test_saving_over_a_checkpoint_replaces_it(tmp_path):
    model, _ = trained(steps=1)
    save(model, tmp_path / "c", step=1)
    save(model, tmp_path / "c", step=2)
    assert read_manifest(tmp_path / "c")["step"] == 2
    assert sorted(os.listdir(tmp_path)) == ["c"]


def test_rotation_keeps_the_newest_and_cleans_interrupted_saves(tmp_path):
    model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
    for step in (1, 2, 3):
        save(model, step_directory(tmp_path, step), step=step)
    (tmp_path / ".step_00000004.tmp-abc").mkdir()
    (tmp_path / "step_00000009").mkdir()  # incomplete: no manifest
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step_00000001",
        "step_00000002",
        "step_00000003",
    ]
    deleted = rotate(tmp_path, 2)
    assert [p.name for p in deleted] == ["step_00000001"]
    assert sorted(os.listdir(tmp_path)) == ["step_00000002", "step_00000003", "step_00000009"]
    assert latest_checkpoint(tmp_path).name == "step_00000003"


def test_a_sigterm_in_the_middle_of_a_rotation_leaves_every_checkpoint_whole(
    tmp_path, monkeypatch, sigterm_default
):
    """Deleted in place, a checkpoint stopped half way (SIGTERM during `rotate`) kept its
    manifest without its tensors: listed as the latest, `--resume` could not load it. Now it
    is renamed away first, and the stop waits for the deletion (``shutil.rmtree`` interrupted
    can close a descriptor twice: its EBADF replaced the stop)."""
    model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
    for step in (1, 2, 3):
        save(model, step_directory(tmp_path, step), step=step)
    real = _checkpoint.shutil.rmtree

    def rmtree_sigterm(path, ignore_errors=False):
        next(pathlib.Path(path).rglob("tensors.safetensors")).unlink()
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # (the handler runs here, one file gone)
            pass
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(_checkpoint.shutil, "rmtree", rmtree_sigterm)
    with pytest.raises(Terminated), stop_on_signals():
        rotate(tmp_path, 1)
    assert sorted(os.listdir(tmp_path)) == ["step_00000002", "step_00000003"]
    for checkpoint in list_checkpoints(tmp_path):
        nnx_plugins.load(checkpoint)  # (whole)


def test_a_leftover_of_a_killed_rotation_is_removed_by_the_next(tmp_path):
    model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
    for step in (1, 2):
        save(model, step_directory(tmp_path, step), step=step)
    old = tmp_path / ".step_00000001.old-abc"  # (killed after the rename, one file deleted)
    old.mkdir()
    os.replace(step_directory(tmp_path, 1), old / "previous")
    (old / "previous" / "tensors.safetensors").unlink()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000002"]
    rotate(tmp_path, 1)
    assert os.listdir(tmp_path) == ["step_00000002"]


def test_a_sigterm_as_the_temporary_is_made_leaves_nothing(
    tmp_path, sigterm_default, sigterm_after
):
    """A stop landing inside ``mkdtemp``, after the folder was made and before the save knew
    its name, left ``.c.tmp-*`` behind (1 in 28 SIGTERMs of a sweep of nnx train)."""
    sigterm_after(_checkpoint.tempfile, "mkdtemp")
    model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
    with pytest.raises(Terminated), stop_on_signals():
        save(model, tmp_path / "c")
    assert os.listdir(tmp_path) == []


def test_a_sigterm_between_moving_the_old_checkpoint_aside_and_renaming_keeps_one(
    tmp_path, monkeypatch, sigterm_default, sigterm_after
):
    """Saving over a checkpoint moves it aside, then renames the new one into place; a stop
    between the two removed the new one and left the old one in a leftover: neither in place."""
    model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
    save(model, tmp_path / "c", step=1)
    real = os.replace
    sigterm_after(_checkpoint.os, "replace")
    with pytest.raises(Terminated), stop_on_signals():
        save(model, tmp_path / "c", step=2)
    monkeypatch.setattr(_checkpoint.os, "replace", real)
    assert read_manifest(tmp_path / "c")["step"] == 2 and os.listdir(tmp_path) == ["c"]
    load(tmp_path / "c")


@pytest.fixture
def failing_renames(monkeypatch, tmp_path):
    """Step 1 saved at ``tmp_path / "c"``; ``failing_renames(calls)`` makes a save's renames
    numbered in ``calls`` (1: moving the old checkpoint aside, 2: the new one into place, 3:
    the old one back) fail with EIO, and returns the model."""
    model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
    save(model, tmp_path / "c", step=1)
    real, made = os.replace, []

    def fail(calls):
        def replace(source, target):
            made.append(target)
            if len(made) in calls:
                raise OSError(errno.EIO, "Input/output error")
            real(source, target)

        monkeypatch.setattr(_checkpoint.os, "replace", replace)
        return model

    return fail


def test_a_failed_rename_puts_the_old_checkpoint_back(tmp_path, failing_renames):
    model = failing_renames({2})
    with pytest.raises(CheckpointError, match="writing it failed: Input/output error"):
        save(model, tmp_path / "c", step=2)
    assert read_manifest(tmp_path / "c")["step"] == 1 and os.listdir(tmp_path) == ["c"]


def test_an_old_checkpoint_that_cannot_be_put_back_is_kept_aside(tmp_path, failing_renames):
    model = failing_renames({2, 3})
    with pytest.raises(CheckpointError, match="writing it failed: Input/output error"):
        save(model, tmp_path / "c", step=2)
    (aside,) = os.listdir(tmp_path)  # (never deleted: the only copy of step 1)
    assert aside.startswith(".c.old-")
    assert read_manifest(tmp_path / aside / "previous")["step"] == 1


def test_mismatches_are_reported_by_path_all_at_once(tmp_path):
    small = nnx_plugins.build(
        {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": 2, "out_features": 3},
                {"type": "Linear", "in_features": 3, "out_features": 1, "use_bias": False},
            ],
        }
    )
    save(small, tmp_path / "c")
    other = nnx_plugins.build(
        {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": 4, "out_features": 3, "param_dtype": "float16"},
                {"type": "Linear", "in_features": 3, "out_features": 1},
            ],
        }
    )
    with pytest.raises(CheckpointError) as info:
        load(tmp_path / "c", into=other)
    problems = info.value.problems
    assert (
        "model.layers[0].kernel: the checkpoint holds float32(2, 3) but the model expects "
        "float16(4, 3)."
    ) in problems
    assert any(
        p.startswith(
            "model.layers[0].bias: the checkpoint holds float32(3,) but the model "
            "expects float16(3,)"
        )
        for p in problems
    )
    assert (
        "model.layers[1].bias: missing from the checkpoint (the model has a Param (1,) here)."
    ) in problems
    before = np.asarray(other.layers[1].kernel.value)
    np.testing.assert_array_equal(before, other.layers[1].kernel.value)  # nothing half-loaded
    bigger = nnx_plugins.build(
        {"type": "Sequential", "layers": [{"type": "Linear", "in_features": 2, "out_features": 3}]}
    )
    with pytest.raises(
        CheckpointError,
        match=r"model\.layers\[1\]\.kernel: unexpected entry in the "
        r"checkpoint \(Param float32\(3, 1\)\); the model has nothing at this path",
    ):
        load(tmp_path / "c", into=bigger)


def edit_manifest(directory, change):
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def test_unknown_variable_kind_names_the_plugin_distribution(tmp_path):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 2})
    save(model, tmp_path / "c")

    def ghost(manifest):
        manifest["entries"]["model/kernel"].update(
            kind="ghost.Adapter", provider="ghost-layers 1.2"
        )

    edit_manifest(tmp_path / "c", ghost)
    with pytest.raises(
        CheckpointError,
        match=r"model\.kernel: its Variable kind 'ghost\.Adapter' is "
        r"not installed \(it was provided by ghost-layers 1\.2 when saved\)\. "
        r"Install it: pip install ghost-layers\.",
    ):
        load(tmp_path / "c", into=model)


def test_kind_mismatch_is_reported(tmp_path):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 2})
    save(model, tmp_path / "c")
    edit_manifest(tmp_path / "c", lambda m: m["entries"]["model/bias"].update(kind="BatchStat"))
    with pytest.raises(
        CheckpointError,
        match=r"model\.bias: the checkpoint holds a BatchStat but "
        r"the model has a Param",
    ):
        load(tmp_path / "c", into=model)


@pytest.mark.parametrize(
    "change, match",
    [
        (
            lambda d: (d / "manifest.json").write_text("{not json"),
            r"manifest\.json is unreadable or corrupt",
        ),
        (
            lambda d: (d / "manifest.json").write_text("[1, 2]"),
            r"manifest\.json is not an nnx checkpoint manifest",
        ),
        (
            lambda d: edit_manifest(d, lambda m: m.update(format_version=99)),
            r"format version 99 is not supported",
        ),
        (lambda d: (d / "tensors.safetensors").unlink(), r"tensors\.safetensors is missing"),
        (
            lambda d: edit_manifest(d, lambda m: m.update(config=None)),
            r"the manifest has no model config",
        ),
        (
            lambda d: edit_manifest(
                d,
                lambda m: (
                    m["entries"]["model/bias"].update(path=["bias2"])
                    or m["entries"].update({"model/bias2": m["entries"].pop("model/bias")})
                ),
            ),
            r"model\.bias2: listed in the manifest but absent|model\.bias: missing",
        ),
    ],
)
def test_broken_checkpoints_are_refused_clearly(tmp_path, change, match):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 2})
    save(model, tmp_path / "c")
    change(tmp_path / "c")
    with pytest.raises(CheckpointError, match=match):
        load(tmp_path / "c")


def test_entry_in_manifest_but_not_in_the_tensor_file(tmp_path):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 2})
    save(model, tmp_path / "c")
    edit_manifest(
        tmp_path / "c",
        lambda m: m["entries"].update(
            {"model/extra": dict(m["entries"]["model/bias"], path=["extra"])}
        ),
    )
    model.extra = nnx.Param(jnp.zeros(2))
    with pytest.raises(
        CheckpointError,
        match=r"model\.extra: listed in the manifest but absent "
        r"from the tensor file",
    ):
        load(tmp_path / "c", into=model)


def test_missing_checkpoint_directories(tmp_path):
    with pytest.raises(CheckpointError, match=r"nowhere:\n  no such directory"):
        load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        CheckpointError,
        match=r"no manifest\.json here and no step_N checkpoint below it\. \(Was the save "
        r"interrupted",
    ):
        load(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match=r"file:\n  not a directory: a checkpoint is a"):
        load(tmp_path / "file")


def test_a_folder_holding_a_checkpoint_names_it(tmp_path):
    """``nnx import hf`` writes DST/checkpoint: giving DST names the checkpoint inside."""
    model, _ = trained(steps=0)
    save(model, tmp_path / "imported" / "checkpoint")
    with pytest.raises(
        CheckpointError,
        match=r"It holds checkpoint/, which is a checkpoint: give .*imported/checkpoint\.",
    ):
        load(tmp_path / "imported")


def test_optimizer_state_requested_but_not_saved(tmp_path):
    model, optimizer = trained(steps=0)
    save(model, tmp_path / "c")
    with pytest.raises(
        CheckpointError, match=r"optimizer: the checkpoint holds no optimizer state"
    ):
        load(tmp_path / "c", into=model, optimizer=optimizer)


def test_save_rejects_bad_configs_and_ambiguous_paths(tmp_path):
    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 2})
    with pytest.raises(
        TypeError, match=r"save\(config=\.\.\.\) expects a Config or a mapping, got int"
    ):
        save(model, tmp_path / "c", config=3)

    class Clash(nnx.Module):
        def __init__(self):
            self.d = {"a/b": nnx.Param(jnp.ones(1)), "a": {"b": nnx.Param(jnp.ones(1))}}

    with pytest.raises(ValueError, match=r"two entries would be stored as 'model/d/a/b'"):
        save(Clash(), tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_extra_modules_are_saved_beside_the_model_and_loaded_by_name(tmp_path):
    import nnx_plugins
    from nnx_plugins import CheckpointError

    model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    average = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    where = nnx_plugins.save(
        model, tmp_path / "c", extra={"ema": average}, run={"data": {"level": "bytes"}}
    )
    manifest = nnx_plugins.read_manifest(where)
    assert "ema/kernel" in manifest["entries"] and manifest["run"] == {"data": {"level": "bytes"}}
    into = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    nnx_plugins.load(where, into=model, extra={"ema": into})
    assert (into.kernel.value == average.kernel.value).all()
    with pytest.raises(CheckpointError, match=r"swa: the checkpoint holds no swa state"):
        nnx_plugins.load(where, into=model, extra={"swa": into})
    for name in ("model", "optimizer", "not a name"):
        with pytest.raises(ValueError, match=r"extra checkpoint entries need a name other than"):
            nnx_plugins.save(model, tmp_path / "d", extra={name: average})

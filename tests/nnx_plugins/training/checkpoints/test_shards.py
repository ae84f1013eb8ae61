"""Sharded checkpoints (one tensor file per process): round trips, resharding, and hostile files.

The checkpoints here are written by this one process with `save_sharded`, then cut into more
blocks and files (as two processes write them) by `split`; test_processes.py has the real
multi-process runs. The adversarial probes mirror test_adversarial_checkpoints.py: every one
is a CheckpointError, or loads values bit-identical to what was saved.
"""

import copy
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

import nnx_core as nnx
from nnx_plugins import CheckpointError, load, read_manifest
from nnx_plugins.training.checkpoints._save import latest_checkpoint, rotate, save_sharded

from .checkpoint_model import CONFIG, build, values

FIRST, SECOND = "tensors-00000-of-00002.safetensors", "tensors-00001-of-00002.safetensors"


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def edit_manifest(where, change):
    path = where / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def rehash(where):
    def change(manifest):
        for record in manifest["files"]:
            record["sha256"] = sha256(where / record["name"])

    edit_manifest(where, change)


def split(where):
    """Cut every entry with two or more rows into two blocks, the second in a second file."""
    manifest = json.loads((where / "manifest.json").read_text())
    (only,) = manifest["files"]
    tensors = load_file(str(where / only["name"]))
    parts = {FIRST: {}, SECOND: {}}
    for entry in manifest["entries"].values():
        (block,) = entry["blocks"]
        data = tensors[block["tensor"]]
        if not entry["shape"] or entry["shape"][0] < 2:
            block["file"] = FIRST
            parts[FIRST][block["tensor"]] = data
            continue
        cut, name = entry["shape"][0] // 2, block["tensor"]
        top, bottom = dict(block, file=FIRST, tensor=name + "a"), dict(block, file=SECOND)
        top["stop"] = [cut, *block["stop"][1:]]
        bottom.update(tensor=name + "b", start=[cut, *block["start"][1:]])
        parts[FIRST][top["tensor"]], parts[SECOND][bottom["tensor"]] = data[:cut], data[cut:]
        entry["blocks"] = [top, bottom]
    os.remove(where / only["name"])
    for name, part in parts.items():
        save_file(part, str(where / name))
    manifest["files"] = [{"name": n, "sha256": sha256(where / n)} for n in (FIRST, SECOND)]
    (where / "manifest.json").write_text(json.dumps(manifest))
    return where


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    where = tmp_path_factory.mktemp("ckpt") / "c"
    model = build(0)
    save_sharded(model, where, config=CONFIG, step=5)
    return split(where), values(model)


@pytest.fixture
def checkpoint(saved, tmp_path):
    where = tmp_path / "box" / "c"
    shutil.copytree(saved[0], where)
    return where


def assert_identical(got, want):
    assert got.keys() == want.keys()
    for key, (dtype, array) in want.items():
        assert got[key][0] == dtype and got[key][1].tobytes() == array.tobytes(), key


# -- round trips -----------------------------------------------------------------------------
def test_a_split_checkpoint_loads_bit_identical_values(saved):
    where, expected = saved
    manifest = read_manifest(where)
    assert manifest["format_version"] == 2
    assert sorted(os.listdir(where)) == ["manifest.json", FIRST, SECOND]
    assert [b["file"] for b in manifest["entries"]["model/layers/0/kernel"]["blocks"]] == [
        FIRST,
        SECOND,
    ]
    assert manifest["entries"]["model/layers/0/kernel"]["stored_as"] == "uint16"
    assert_identical(values(load(where, into=build(1))), expected)
    assert_identical(values(load(where)), expected)  # rebuilt from the manifest's config


def test_optimizer_state_round_trips(tmp_path):
    model = build(0)
    optimizer = nnx.Optimizer(model, optax.adam(1e-2))
    where = save_sharded(model, tmp_path / "c", optimizer=optimizer, config=CONFIG, step=1)
    fresh = build(1)
    fresh_optimizer = nnx.Optimizer(fresh, optax.adam(1e-2))
    load(split(where), into=fresh, optimizer=fresh_optimizer)
    assert_identical(values(fresh_optimizer), values(optimizer))


def test_sharded_checkpoints_are_found_rotated_and_replaced(tmp_path):
    model = build(0)
    for step in (1, 2, 3):
        save_sharded(model, tmp_path / f"step_{step:08d}", step=step)
    split(tmp_path / "step_00000003")
    assert latest_checkpoint(tmp_path).name == "step_00000003"
    assert [p.name for p in rotate(tmp_path, 1)] == ["step_00000001", "step_00000002"]
    save_sharded(model, tmp_path / "step_00000003", step=4)  # replaces a 2-file checkpoint
    assert read_manifest(tmp_path / "step_00000003")["step"] == 4
    assert sorted(os.listdir(tmp_path)) == ["step_00000003"]


def test_a_sharded_checkpoint_loads_resharded_on_a_mesh_of_eight_devices(saved, tmp_path):
    script = textwrap.dedent(f"""
        import json, jax, numpy as np
        import nnx_core as nnx, nnx_plugins
        from nnx_plugins.training._mesh import make_mesh
        config = {CONFIG!r}
        config["model"]["layers"][0]["kernel_metadata"] = {{"sharding_names": [None, "model"]}}
        model = nnx_plugins.build(config, rngs=nnx.Rngs(1))
        nnx.shard(model, make_mesh({{"data": 2, "model": 4}}))
        nnx_plugins.load({str(saved[0])!r}, into=model)
        kernel = model.layers[0].kernel.value
        print(json.dumps({{
            "spec": str(kernel.sharding.spec),
            "blocks": sorted({{str(s.index) for s in kernel.addressable_shards}}),
            "kernel": np.asarray(kernel.astype(np.float32)).tolist()}}))
    """)
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # (saved as two row blocks; read back as four column blocks, each on two devices)
    assert report["spec"] == "P(None, 'model')" and len(report["blocks"]) == 4
    want = saved[1][("layers", 0, "kernel")][1].astype(np.float32)
    np.testing.assert_array_equal(np.array(report["kernel"], np.float32), want)


# -- hostile and careless files ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: m["files"][1].__setitem__("name", "../tensors-00001-of-00002.safetensors"),
            "'files' must be a list of {name, sha256} tensor files",
        ),
        (lambda m: m["files"][1].__setitem__("name", "/etc/passwd"), "'files' must be a list"),
        (lambda m: m["files"].append(dict(m["files"][0])), "'files' must be a list"),
        (lambda m: m.pop("files"), "'files' is missing"),
        (lambda m: m["files"][0].__setitem__("sha256", "x"), "'files' must be a list"),
        (lambda m: m.__setitem__("files", []), "'files' must be a list"),
        (
            lambda m: _blocks(m)[1].__setitem__("file", "other.safetensors"),
            "each block needs 'file' (one of 'files')",
        ),
        (lambda m: _blocks(m)[1].__setitem__("start", ["1", 0]), "each block needs"),
        (lambda m: _blocks(m)[1].__setitem__("stop", [3]), "one start and stop per dimension"),
        (lambda m: _blocks(m)[1].__setitem__("start", [0, 0]), "overlap or leave gaps"),
        (lambda m: _blocks(m)[1].__setitem__("stop", [9, 4]), "does not fit its shape [3, 4]"),
        (lambda m: _blocks(m).pop(), "overlap or leave gaps along dimension 0"),
        (lambda m: _blocks(m).append(dict(_blocks(m)[1])), "do not form a grid"),
        (lambda m: _kernel(m).__setitem__("blocks", []), "'blocks' must be a non-empty list"),
        (lambda m: m.__setitem__("format_version", 3), "format version 3 is not supported"),
    ],
)
def test_a_manifest_with_bad_files_or_blocks_is_refused(checkpoint, change, message):
    edit_manifest(checkpoint, change)
    with pytest.raises(CheckpointError, match=_literal(message)):
        load(checkpoint, into=build(1))


def _literal(text):
    import re

    return re.escape(text)


def _kernel(m):
    return m["entries"]["model/layers/0/kernel"]


def _blocks(m):
    return _kernel(m)["blocks"]


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_a_corrupt_tensor_file_is_refused_naming_it(checkpoint, how):
    path = checkpoint / SECOND
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if how == "truncate" else data[:-1] + b"\x00")
    with pytest.raises(
        CheckpointError,
        match=rf"{SECOND} is corrupt or truncated: its sha256 is .* but the manifest records "
        r".* Load an earlier checkpoint instead",
    ):
        load(checkpoint, into=build(1))


def test_a_missing_tensor_file_is_refused(checkpoint):
    os.remove(checkpoint / SECOND)
    with pytest.raises(CheckpointError, match=rf"{SECOND} is missing"):
        load(checkpoint, into=build(1))


def test_a_tensor_file_that_is_a_folder_is_named_so(checkpoint):
    os.remove(checkpoint / SECOND)
    (checkpoint / SECOND).mkdir()
    with pytest.raises(
        CheckpointError, match=rf"{SECOND} is a directory, not a regular file: not the file"
    ):
        load(checkpoint, into=build(1))


def test_a_tensor_file_symlinked_out_of_the_checkpoint_is_not_followed(checkpoint):
    outside = checkpoint.parent / "outside.safetensors"
    shutil.move(checkpoint / SECOND, outside)
    os.symlink(outside, checkpoint / SECOND)
    with pytest.raises(CheckpointError, match=f"{SECOND} is a symlink leading out of"):
        load(checkpoint, into=build(1))


def rewrite(where, name, change):
    tensors = load_file(str(where / name))
    change(tensors)
    save_file(tensors, str(where / name))
    rehash(where)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda t: t.__setitem__("model/layers/0/kernel#0b", np.zeros((2, 4), np.float32)),
            r"model\.layers\[0\]\.kernel: a block in the tensor file holds float32\(2, 4\) but "
            r"the manifest records uint16\(2, 4\)",
        ),
        (
            lambda t: t.__setitem__("model/layers/0/kernel#0b", np.zeros((1, 4), np.uint16)),
            r"holds uint16\(1, 4\) but the manifest records uint16\(2, 4\)",
        ),
        (
            lambda t: t.pop("model/layers/0/kernel#0b"),
            rf"model\.layers\[0\]\.kernel: listed in the manifest but absent from {SECOND}",
        ),
    ],
)
def test_blocks_are_checked_against_the_manifest_before_anything_is_read(
    checkpoint, change, message
):
    rewrite(checkpoint, SECOND, change)
    model = build(1)
    before = values(model)
    with pytest.raises(CheckpointError, match=message):
        load(checkpoint, into=model)
    assert_identical(values(model), before)  # nothing assigned


def test_key_data_is_checked(checkpoint):
    key = "model/layers/2/rngs/key#0"
    rewrite(checkpoint, FIRST, lambda t: t.__setitem__(key, np.zeros(2, np.float32)))
    with pytest.raises(
        CheckpointError, match=r"records PRNG keys of shape \(\) \(uint32 key data\)"
    ):
        load(checkpoint, into=build(1))


def test_an_unknown_key_implementation_is_a_checkpoint_error(checkpoint):
    edit_manifest(
        checkpoint,
        lambda m: m["entries"]["model/layers/2/rngs/key"].__setitem__("key_impl", "nope"),
    )
    with pytest.raises(CheckpointError, match=r"cannot be restored with key_impl 'nope'"):
        load(checkpoint, into=build(1))


# -- the property: refused, or bit-identical ----------------------------------------------------
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.text(max_size=8)
    | st.sampled_from([FIRST, SECOND, "../x", "key", "uint16", "tensors.safetensors", 0, 1, 2, 3]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


def _paths(node, prefix=()):
    yield prefix, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


@st.composite
def mutations(draw, original):
    manifest = copy.deepcopy(original)
    path, _ = draw(st.sampled_from([p for p in _paths(manifest) if p[0]]))
    parent = manifest
    for key in path[:-1]:
        parent = parent[key]
    if draw(st.booleans()) and isinstance(parent, dict):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = draw(JSON)
    return manifest


def _refused_or_identical(where, expected):
    model = build(1)
    try:
        load(where, into=model)
    except CheckpointError:
        return
    assert_identical(values(model), expected)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_mutated_manifest_is_refused_or_loads_identical_values(saved, tmp_path, data):
    where, expected = saved
    manifest = json.loads((where / "manifest.json").read_text())
    target = pathlib.Path(tempfile.mkdtemp(dir=tmp_path)) / "c"
    shutil.copytree(where, target)
    (target / "manifest.json").write_text(json.dumps(data.draw(mutations(manifest))))
    _refused_or_identical(target, expected)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), name=st.sampled_from([FIRST, SECOND]), fix_checksum=st.booleans())
def test_a_mutated_tensor_file_is_refused_or_fits_the_model(
    saved, tmp_path, data, name, fix_checksum
):
    """Without the checksum fixed: refused or identical. With it (an attacker who also edits
    the manifest): refused, or every Variable keeps the model's shape and dtype."""
    where, expected = saved
    target = pathlib.Path(tempfile.mkdtemp(dir=tmp_path)) / "c"
    shutil.copytree(where, target)
    raw = bytearray((target / name).read_bytes())
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    (target / name).write_bytes(bytes(raw))
    if not fix_checksum:
        _refused_or_identical(target, expected)
        return
    rehash(target)
    model = build(1)
    try:
        load(target, into=model)
    except CheckpointError:
        return
    got = values(model)
    for key, (dtype, array) in expected.items():
        assert got[key][0] == dtype and got[key][1].shape == array.shape, key

"""Hostile and careless checkpoints: every probe is a CheckpointError, nothing outside is touched.

The property at the end mutates manifests and tensor files at random: each mutation is either
refused with `CheckpointError` or loads values bit-identical to what was saved.
"""

import copy
import hashlib
import json
import os
import pathlib
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nnx_plugins
from nnx_plugins import CheckpointError, load, save
from nnx_plugins.training.checkpoints import _manifest as manifest_module
from nnx_plugins.training.checkpoints._save import rotate, step_directory

from .checkpoint_model import CONFIG, build, values


def edit_manifest(where, change):
    path = where / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def rehash(where):
    digest = hashlib.sha256((where / "tensors.safetensors").read_bytes()).hexdigest()
    edit_manifest(where, lambda m: m.__setitem__("sha256", digest))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    where = tmp_path_factory.mktemp("ckpt") / "c"
    model = build(0)
    save(model, where, config=CONFIG, step=5)
    return where, values(model)


@pytest.fixture
def checkpoint(saved, tmp_path):
    where = tmp_path / "box" / "c"
    shutil.copytree(saved[0], where)
    return where


# -- paths named by the manifest stay inside the checkpoint ---------------------------------------
@pytest.mark.parametrize(
    "name", ["../outside.safetensors", "../../etc/passwd", "/etc/passwd", "sub/t.safetensors", ""]
)
def test_a_manifest_cannot_name_a_file_outside_the_checkpoint(checkpoint, name):
    outside = checkpoint.parent / "outside.safetensors"
    shutil.copy(checkpoint / "tensors.safetensors", outside)  # a valid file, right checksum
    edit_manifest(checkpoint, lambda m: m.__setitem__("tensors", name))
    with pytest.raises(CheckpointError, match="not a plain file name inside the checkpoint"):
        load(checkpoint, into=build(1))


@pytest.mark.parametrize("name", ["tensors.safetensors", "manifest.json"])
def test_a_symlink_out_of_the_checkpoint_is_not_followed(checkpoint, name):
    outside = checkpoint.parent / f"outside-{name}"
    shutil.move(checkpoint / name, outside)
    os.symlink(outside, checkpoint / name)
    with pytest.raises(CheckpointError, match=f"{name} is a symlink leading out of"):
        load(checkpoint, into=build(1))


@pytest.mark.parametrize("name", ["tensors.safetensors", "manifest.json"])
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            pathlib.Path.mkdir,
            r"is a directory, not a regular file: not the file the checkpoint was saved with\. "
            r"Put its {name} back, or load an earlier checkpoint\.",
        ),
        (os.mkfifo, r"is a FIFO \(named pipe\), not a regular file"),  # (never opened: it waits)
        (
            lambda path: path.symlink_to(path.parent / "gone"),
            r"is a broken symbolic link \(to .*gone, which does not exist\)\. Restore what it "
            r"pointed to, or load an earlier checkpoint\.",
        ),
    ],
)
def test_a_file_of_the_checkpoint_that_is_no_regular_file_is_named_so_not_missing(
    checkpoint, name, make, match
):
    (checkpoint / name).unlink()
    make(checkpoint / name)
    with pytest.raises(CheckpointError, match=f"{name} " + match.replace("{name}", name)):
        load(checkpoint, into=build(1))


# -- manifests of valid JSON but the wrong structure ----------------------------------------------
def _entry(m):
    return m["entries"]["model/layers/0/kernel"]


BAD_MANIFESTS = {
    "entries is a list": (lambda m: m.__setitem__("entries", []), "'entries' must be a mapping"),
    "no sha256": (lambda m: m.pop("sha256"), "'sha256' is missing"),
    "step is text": (lambda m: m.__setitem__("step", "5"), "'step' must be null or an integer"),
    "step is a bool": (lambda m: m.__setitem__("step", True), "'step' must be null or an integer"),
    "entry is a list": (
        lambda m: m["entries"].__setitem__("model/layers/0/kernel", [1]),
        "must be a mapping",
    ),
    "shape of text": (lambda m: _entry(m).__setitem__("shape", ["3"]), "'shape' must be a list"),
    "negative size": (lambda m: _entry(m).__setitem__("shape", [-3, 4]), "sizes >= 0"),
    "object dtype": (lambda m: _entry(m).__setitem__("dtype", "object"), "not a numeric dtype"),
    "dtype missing": (lambda m: _entry(m).pop("dtype"), "not a numeric dtype"),
    "wrong stored_as": (
        lambda m: _entry(m).__setitem__("stored_as", "uint8"),
        "'stored_as' 'uint8' does not fit dtype bfloat16",
    ),
    "key without impl": (
        lambda m: m["entries"]["model/layers/2/rngs/key"].pop("key_impl"),
        "needs its 'key_impl'",
    ),
    "path disagrees with key": (
        lambda m: _entry(m).__setitem__("path", ["layers", 3, "kernel"]),
        "does not match the key",
    ),
    "foreign key prefix": (
        lambda m: m["entries"].__setitem__("../x", {}),
        "keys start with 'model/', 'optimizer/' or the name of a Module saved beside them",
    ),
    "version as bool": (lambda m: m.__setitem__("format_version", True), "format version True"),
}


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_a_manifest_of_the_wrong_structure_is_a_checkpoint_error(checkpoint, case):
    change, message = BAD_MANIFESTS[case]
    edit_manifest(checkpoint, change)
    with pytest.raises(CheckpointError, match=message):
        load(checkpoint, into=build(1))


def test_every_structural_problem_is_listed_at_once(checkpoint):
    def change(m):
        m["step"] = "x"
        _entry(m)["shape"] = "big"
        _entry(m)["dtype"] = "object"

    edit_manifest(checkpoint, change)
    with pytest.raises(CheckpointError) as info:
        load(checkpoint, into=build(1))
    assert len(info.value.problems) == 3


def test_a_huge_manifest_is_refused_before_it_is_read(checkpoint, monkeypatch):
    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(CheckpointError, match=r"more than the 100 a manifest may have"):
        load(checkpoint, into=build(1))


def test_a_deeply_nested_manifest_is_a_checkpoint_error(checkpoint):
    (checkpoint / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(CheckpointError, match="unreadable or corrupt"):
        load(checkpoint, into=build(1))


# -- tensor files that disagree with their manifest -----------------------------------------------
def rewrite_tensors(where, change):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(where / "tensors.safetensors"))
    change(tensors)
    save_file(tensors, str(where / "tensors.safetensors"))
    rehash(where)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda t: t.__setitem__("model/layers/3/bias", np.zeros(2, np.float16)),
            r"model\.layers\[3\]\.bias: the tensor file holds float16\(2,\) but the manifest "
            r"records float32\(2,\)",
        ),
        (
            lambda t: t.__setitem__("model/layers/3/bias", np.zeros(3, np.float32)),
            r"the tensor file holds float32\(3,\) but the manifest records float32\(2,\)",
        ),
        (
            lambda t: t.__setitem__("model/layers/2/rngs/key", np.zeros(2, np.float32)),
            r"records PRNG keys of shape \(\) \(uint32 key data\)",
        ),
    ],
)
def test_tensor_shapes_and_dtypes_are_checked_against_the_manifest(checkpoint, change, message):
    rewrite_tensors(checkpoint, change)
    model = build(1)
    before = values(model)
    with pytest.raises(CheckpointError, match=message):
        load(checkpoint, into=model)
    after = values(model)
    assert all(np.array_equal(before[k][1], after[k][1]) for k in before)  # nothing assigned


def test_an_unknown_key_implementation_is_a_checkpoint_error(checkpoint):
    edit_manifest(
        checkpoint,
        lambda m: m["entries"]["model/layers/2/rngs/key"].__setitem__("key_impl", "nope"),
    )
    with pytest.raises(CheckpointError, match=r"cannot be restored with key_impl 'nope'"):
        load(checkpoint, into=build(1))


# -- rotation and replacement touch only what save wrote ------------------------------------------
def test_rotation_leaves_a_users_files_alone(tmp_path):
    model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
    for step in (1, 2, 3):
        save(model, step_directory(tmp_path, step), step=step)
    mine = {
        ".step_notes": "a folder whose name starts like a leftover",
        ".step_00000004.tmp-abcdefgh": "named like a leftover, holding a user file",
        "step_00000000": "a user folder named like a checkpoint, with a manifest.json",
    }
    for name, text in mine.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text(text)
    (tmp_path / "step_00000000" / "manifest.json").write_text("{}")
    os.symlink(step_directory(tmp_path, 3), tmp_path / "step_00000005")  # a symlink: not ours
    leftover = tmp_path / ".step_00000006.tmp-k2j4h5g6"
    leftover.mkdir()
    (leftover / "tensors.safetensors").write_bytes(b"half")
    deleted = rotate(tmp_path, 1)
    assert [p.name for p in deleted] == ["step_00000001", "step_00000002"]
    for name, text in mine.items():
        assert (tmp_path / name / "notes.txt").read_text() == text
    assert (tmp_path / "step_00000005").is_symlink()
    assert not leftover.exists()


@pytest.mark.parametrize("what", ["folder", "file", "symlink"])
def test_save_refuses_to_replace_what_is_not_a_checkpoint(tmp_path, what):
    target = tmp_path / "target"
    if what == "folder":
        target.mkdir()
        (target / "thesis.tex").write_text("years of work")
    elif what == "file":
        target.write_text("years of work")
    else:
        (tmp_path / "real").mkdir()
        os.symlink(tmp_path / "real", target)
    model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
    with pytest.raises(
        CheckpointError,
        match="cannot save checkpoint .*\n  refusing to replace it: it exists and is not a",
    ):
        save(model, target)
    if what == "folder":
        assert (target / "thesis.tex").read_text() == "years of work"
    elif what == "file":
        assert target.read_text() == "years of work"
    else:
        assert target.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("where", ["/tmp/elsewhere", "../up", "a/../../b", " "])
def test_checkpoint_dir_must_stay_inside_the_run_directory(where):
    with pytest.raises(nnx_plugins.ConfigError, match="must be a relative path inside the run"):
        nnx_plugins.load_train_config({**CONFIG, "checkpoint": {"dir": where}})


# -- the property: refused, or bit-identical ------------------------------------------------------
def _paths(node, prefix=()):
    """Every (path, value) in a JSON tree."""
    yield prefix, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["bfloat16", "float32", "key", "uint16", "Param", "../x", "threefry2x32"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def manifest_mutations(draw, original):
    manifest = copy.deepcopy(original)
    places = list(_paths(manifest))
    path, _ = draw(st.sampled_from(places))
    replacement = draw(JSON)
    if not path:
        return replacement
    parent = manifest
    for key in path[:-1]:
        parent = parent[key]
    if draw(st.booleans()) and isinstance(parent, dict):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = replacement
    return manifest


PROPERTY_MANIFEST = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _reference(saved):
    where, expected = saved
    manifest = json.loads((where / "manifest.json").read_text())
    return where, expected, manifest


def _check_refused_or_identical(where, expected):
    model = build(1)
    try:
        load(where, into=model)
    except CheckpointError:
        return
    got = values(model)
    assert got.keys() == expected.keys()
    for key, (dtype, array) in expected.items():
        assert got[key][0] == dtype, key
        assert got[key][1].tobytes() == array.tobytes(), key


@PROPERTY_MANIFEST
@given(data=st.data())
def test_a_mutated_manifest_is_refused_or_loads_identical_values(saved, tmp_path, data):
    where, expected, manifest = _reference(saved)
    mutated = data.draw(manifest_mutations(manifest))
    target = pathlib.Path(tempfile.mkdtemp(dir=tmp_path)) / "c"
    shutil.copytree(where, target)
    (target / "manifest.json").write_text(json.dumps(mutated))
    _check_refused_or_identical(target, expected)


def _mutate_tensor_file(target, data, how):
    path = target / "tensors.safetensors"
    raw = bytearray(path.read_bytes())
    at = data.draw(st.integers(0, len(raw) - 1))
    if how == "flip":
        raw[at] ^= data.draw(st.integers(1, 255))
    elif how == "truncate":
        del raw[at:]
    elif how == "append":
        raw += data.draw(st.binary(min_size=1, max_size=64))
    else:
        width = data.draw(st.integers(1, 16))
        raw[at : at + width] = bytes(len(raw[at : at + width]))
    path.write_bytes(bytes(raw))


MUTATIONS = st.sampled_from(["flip", "truncate", "append", "zero"])
PROPERTY = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@PROPERTY
@given(data=st.data(), how=MUTATIONS)
def test_a_mutated_tensor_file_is_refused_or_loads_identical_values(saved, tmp_path, data, how):
    where, expected, _ = _reference(saved)
    target = pathlib.Path(tempfile.mkdtemp(dir=tmp_path)) / "c"
    shutil.copytree(where, target)
    _mutate_tensor_file(target, data, how)
    _check_refused_or_identical(target, expected)


@PROPERTY
@given(data=st.data(), how=MUTATIONS)
def test_a_rewritten_tensor_file_with_its_checksum_is_refused_or_fits_the_model(
    saved, tmp_path, data, how
):
    """An attacker who also fixes the checksum can change the numbers, nothing else: a load
    either fails with CheckpointError or gives every Variable the model's own shape and dtype."""
    where, expected, _ = _reference(saved)
    target = pathlib.Path(tempfile.mkdtemp(dir=tmp_path)) / "c"
    shutil.copytree(where, target)
    _mutate_tensor_file(target, data, how)
    rehash(target)
    model = build(1)
    try:
        load(target, into=model)
    except CheckpointError:
        return
    got = values(model)
    for key, (dtype, array) in expected.items():
        assert got[key][0] == dtype and got[key][1].shape == array.shape, key

"""nnx import hf on odd inputs not tried elsewhere: shard indexes that name a tensor twice or
disagree with the shards, config.json and generation/tokenizer configs of the wrong types, SRC
and DST given oddly, a destination that cannot be made; each refused in one line naming the
file (and field), nothing written, nothing outside DST left changed. And two imports into one
DST: one wins whole, the other says so."""

import errno
import json
import os
import pathlib

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import nnx_plugins
from nnx_plugins import PretrainedError, import_hf
from nnx_plugins.training._config import load_train_config

from .conftest import FIXTURES


def refused(source, out, match):
    with pytest.raises(PretrainedError, match=match) as caught:
        import_hf(source, out)
    assert "\n" not in str(caught.value)  # (one line at the command)
    assert not out.exists() or not any(out.iterdir())
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")] == []
    return caught.value


def edit(path: pathlib.Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def shard(source: pathlib.Path, number: int) -> pathlib.Path:
    return source / f"model-0000{number}-of-00003.safetensors"


def add_tensor(path: pathlib.Path, name: str, value: np.ndarray) -> None:
    tensors = load_file(str(path))
    tensors[name] = value
    save_file(tensors, str(path), metadata={"format": "pt"})


# -- sharded checkpoints ---------------------------------------------------------------------
def test_an_index_naming_a_tensor_twice_is_refused(tmp_path, copy_of):
    source = copy_of("mistral")
    index = source / "model.safetensors.index.json"
    text = index.read_text().replace(
        '"weight_map": {',
        '"weight_map": {"model.norm.weight": "model-00001-of-00003.safetensors", ',
        1,
    )
    index.write_text(text)
    refused(
        source,
        tmp_path / "out",
        r"index\.json: model\.safetensors\.index\.json gives the key 'model\.norm\.weight' twice "
        r'in one object \(JSON would keep the last silently: "model-00001-of-00003\.safetensors" '
        r'then "model-00003-of-00003\.safetensors"\); give each once',
    )


@pytest.mark.parametrize("copy_into", [1, 3])
def test_a_second_copy_of_an_indexed_tensor_is_ignored_in_either_shard_order(
    tmp_path, copy_of, copy_into
):
    """The index says which file holds a tensor (as transformers reads it): a copy in another
    shard was refused or ignored depending on which shard sorted first."""
    source = copy_of("mistral")
    placed = json.loads((source / "model.safetensors.index.json").read_text())["weight_map"]
    holder = 2
    name = next(n for n, f in sorted(placed.items()) if f == shard(source, holder).name)
    add_tensor(
        shard(source, copy_into),
        name,
        np.full(load_file(str(shard(source, holder)))[name].shape, 7, np.float32),
    )
    import_hf(source, tmp_path / "out")
    reference = import_hf(FIXTURES / "mistral", tmp_path / "reference")
    ours = nnx_plugins.load(tmp_path / "out" / "checkpoint")
    theirs = nnx_plugins.load(reference.checkpoint)
    np.testing.assert_array_equal(ours.norm.scale.value, theirs.norm.scale.value)
    assert (
        nnx_plugins.read_manifest(tmp_path / "out" / "checkpoint")["sha256"]
        == (nnx_plugins.read_manifest(reference.checkpoint)["sha256"])
    )


def test_a_tensor_outside_the_index_in_two_shards_is_refused(tmp_path, copy_of):
    source = copy_of("mistral")
    for number in (1, 2):
        add_tensor(shard(source, number), "model.extra.weight", np.zeros(2, np.float32))
    refused(
        source,
        tmp_path / "out",
        r"00002-of-00003\.safetensors: holds the tensor 'model\.extra\.weight', which .*"
        r"00001-of-00003\.safetensors holds too; each tensor must be in one file \(or placed "
        r"in one by model\.safetensors\.index\.json\)",
    )


# -- config.json, generation_config.json, tokenizer_config.json -------------------------------
@pytest.mark.parametrize(
    ("content", "kind"), [("3", r"a number \(int\)"), ("null", "null"), ('"x"', "text of 1")]
)
def test_a_config_json_that_is_not_an_object_says_what_it_holds(tmp_path, copy_of, content, kind):
    source = copy_of("llama")
    (source / "config.json").write_text(content)
    refused(
        source,
        tmp_path / "out",
        rf"config\.json must hold a JSON object \(\{{\.\.\.\}}\), got {kind}",
    )


def test_a_model_that_cannot_be_built_is_said_in_one_line(tmp_path, copy_of):
    source = copy_of("llama")
    edit(source / "config.json", lambda c: c.update(num_attention_heads=3))
    error = refused(
        source,
        tmp_path / "out",
        r"config\.json: the model it describes cannot be built: .*model\.blocks\.block\.attention"
        r": building SelfAttention raised ValueError: SelfAttention num_heads \(3\) must be a "
        r"multiple of num_kv_heads \(2\).*Fix the config\.json values behind it",
    )
    assert "<dict>" not in str(error)


@pytest.mark.parametrize(
    ("file", "field", "value", "match"),
    [
        ("generation", "eos_token_id", "170", r"'eos_token_id' must be a token id \(a whole number >= 0\) or a list of them, got \"170\""),
        ("generation", "eos_token_id", [170, "x"], r"'eos_token_id' must be .*, got \[170, \"x\"\]"),
        ("generation", "eos_token_id", True, r"'eos_token_id' must be .*, got true"),
        ("generation", "eos_token_id", 170.0, r"'eos_token_id' must be .*, got 170\.0"),
        ("generation", "eos_token_id", 10**9, r"'eos_token_id' holds 1000000000, outside the tokenizer's vocabulary of 320 token ids \(0 to 319\)"),
        ("generation", "pad_token_id", "2", r"'pad_token_id' must be a token id \(a whole number >= 0\), got \"2\""),
        ("generation", "pad_token_id", 400, r"'pad_token_id' holds 400, outside the tokenizer's vocabulary of 320"),
        ("config", "eos_token_id", [170, "2"], r"config\.json: 'eos_token_id' must be a token id"),
    ],
)  # fmt: skip
def test_special_token_ids_of_the_wrong_type_or_outside_the_vocabulary(
    tmp_path, copy_of, file, field, value, match
):
    """They were dropped silently (a string EOS: generation never stopped at it), or written
    as they were (an id outside the vocabulary), or refused as the converter's fault."""
    source = copy_of("llama")
    if file == "config":
        (source / "generation_config.json").unlink()
    edit(
        source / f"{'generation_' if file == 'generation' else ''}config.json",
        lambda c: c.update({field: value}),
    )
    error = refused(source, tmp_path / "out", match)
    assert error.where.endswith(f"{'generation_' if file == 'generation' else ''}config.json")


@pytest.mark.parametrize(
    ("change", "expected"),
    [({"eos_token_id": [170, 3]}, ([170, 3], 2)), ({"pad_token_id": -1}, ([170], None))],
)
def test_an_eos_list_and_an_unset_negative_padding_id_are_taken(
    tmp_path, copy_of, change, expected
):
    source = copy_of("llama")
    edit(source / "generation_config.json", lambda c: c.update(change))
    done = import_hf(source, tmp_path / "out")
    tokenizer = load_train_config(done.config).sections["tokenizer"].arguments
    assert (tokenizer.get("eos_token_ids"), tokenizer.get("pad_token_id")) == expected


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{eos", r"tokenizer_config\.json: tokenizer_config\.json is not valid JSON"),
        ("", r"tokenizer_config\.json is not valid JSON: Expecting value: line 1 column 1"),
        ("[1]", r"tokenizer_config\.json must hold a JSON object .*, got a list of 1 item"),
        (
            '{"eos_token": 5}',
            r"'eos_token' must be the text of a token .*; got 5\. Fix or remove it",
        ),
        ('{"mask_token": {"content": 4}}', r"'mask_token' must be .*; got \{\"content\": 4\}"),
    ],
)
def test_a_malformed_tokenizer_config_is_refused(tmp_path, copy_of, content, match):
    """It was copied into DST as it was, and every reader of it ignored it silently."""
    source = copy_of("bert")
    (source / "tokenizer_config.json").write_text(content)
    refused(source, tmp_path / "out", match)


def test_a_special_token_given_as_an_object_is_read(tmp_path, copy_of):
    source = copy_of("bert")
    edit(source / "tokenizer_config.json", lambda c: c.update(mask_token={"content": "[MASK]"}))
    done = import_hf(source, tmp_path / "out")
    assert (
        load_train_config(done.config).sections["data"].arguments["masking"]["mask_token_id"] == 4
    )


# -- SRC and DST -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_a_source_that_is_a_file_names_its_folder(tmp_path, name):
    refused(
        FIXTURES / "llama" / name,
        tmp_path / "out",
        rf"llama/{name}: is a file, not a directory: give the directory transformers' "
        rf"save_pretrained wrote \({FIXTURES / 'llama'}, the folder this file is in\)",
    )


def test_empty_source_and_destination_are_named(tmp_path, monkeypatch):
    monkeypatch.chdir(FIXTURES / "llama")  # (an empty SRC was read as ., an empty --out as .)
    with pytest.raises(
        PretrainedError, match=r"^cannot import '': SRC is empty: give the directory"
    ):
        import_hf("", tmp_path / "out")
    with pytest.raises(PretrainedError, match=r"^cannot import '': --out is empty: give a new"):
        import_hf(FIXTURES / "llama", "")


@pytest.mark.parametrize("form", ["trailing slash", "relative", "unicode and spaces"])
def test_source_and_destination_paths_of_any_form(tmp_path, copy_of, monkeypatch, form):
    source = copy_of("llama")
    if form == "unicode and spaces":
        source = source.rename(tmp_path / "mödel ✓ dir")
    monkeypatch.chdir(tmp_path)
    given = {"trailing slash": f"{source}/", "relative": source.name}.get(form, str(source))
    out = {"trailing slash": f"{tmp_path}/out/", "relative": "out"}.get(form, "öut dir")
    done = import_hf(given, out)
    assert nnx_plugins.load(done.checkpoint).blocks.count == 2


def test_a_source_folder_that_cannot_be_entered_is_an_error_not_a_traceback(
    tmp_path, copy_of, monkeypatch
):
    source = copy_of("llama")
    real = os.stat

    def stat(path, *args, **kwargs):
        if os.fspath(path).startswith(str(source) + os.sep):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    refused(
        source,
        tmp_path / "out",
        r"src-llama/config\.json: cannot be read: permission denied \(EACCES\)",
    )


def test_a_destination_under_a_file_is_named(tmp_path):
    """It was "writing it failed: it exists already (EEXIST)", of DST."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        PretrainedError, match=rf"--out cannot be made: {tmp_path / 'file'} is a file, not a folder"
    ):
        import_hf(FIXTURES / "llama", tmp_path / "file" / "sub" / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_destination_that_cannot_be_made_names_the_folder(tmp_path, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("nnx_plugins.pretrained._import.tempfile.mkdtemp", denied)
    refused(
        FIXTURES / "llama",
        tmp_path / "out",
        rf"--out cannot be made in {tmp_path}: permission denied \(EACCES\); nothing was "
        r"written\. Choose an --out in a folder you can write to",
    )


def test_folders_made_for_the_destination_are_removed_when_it_fails(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("nnx_plugins.pretrained._import.write_checkpoint", interrupted)
    with pytest.raises(KeyboardInterrupt):
        import_hf(FIXTURES / "vit", tmp_path / "a" / "b" / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_side_file_that_cannot_be_read_is_named_not_the_destination(tmp_path, monkeypatch):
    from nnx_plugins.pretrained import _source

    real = _source.read_regular

    def denied(path, limit):
        if os.path.basename(path) == "tokenizer.json":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, limit)

    monkeypatch.setattr(_source, "read_regular", denied)
    refused(
        FIXTURES / "llama",
        tmp_path / "out",
        r"^cannot import .*llama/tokenizer\.json: cannot be read: permission denied \(EACCES\)$",
    )


# -- two imports into one DST ----------------------------------------------------------------
@pytest.mark.parametrize("made", [False, True])
def test_an_import_that_loses_the_race_for_dst_says_so_and_leaves_the_winners(
    tmp_path, monkeypatch, made
):
    """Another import fills DST while this one writes: this one's rename fails; the winner's
    output is whole and loads; no temporary folder is left."""
    from nnx_plugins.pretrained import _import

    out = tmp_path / "out"
    if made:
        out.mkdir()  # (an empty DST given to both)
    real, raced = _import.check, []

    def race():
        if not raced:
            raced.append(None)
            raced[0] = import_hf(FIXTURES / "llama", out)  # (the winner: done meanwhile)
        real()

    monkeypatch.setattr(_import, "check", race)
    with pytest.raises(
        PretrainedError, match=r"--out was written by another process while this import ran"
    ):
        import_hf(FIXTURES / "llama", out)
    assert nnx_plugins.load(raced[0].checkpoint).blocks.count == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]

"""nnx import hf against a hostile user's SRC and arguments: a tensor relabelled as integers,
weights given twice (``model.safetensors`` and an index), a float64 checkpoint, a SRC whose name
writes YAML, numbers past a float's range, an index of a million entries, values float16 cannot
hold, side files that are not files of SRC, tensor names holding escape sequences, config.json
values of the wrong type or given twice. Each is refused in one line naming the file, field or
tensor (nothing written), or imported as transformers would load it."""

import json
import math
import os
import pathlib
import re
import shutil
import struct

import numpy as np
import pytest
import yaml
from safetensors.numpy import load_file, save_file

import nnx_plugins
from nnx_plugins import Converter, PretrainedError, Rule, import_hf, register_converter
from nnx_plugins.cli._main import main
from nnx_plugins.training._config import load_train_config

from .conftest import FIXTURES


def refused(source, out, match, **options):
    with pytest.raises(PretrainedError, match=match) as caught:
        import_hf(source, out, **options)
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message  # (one line, no escape sequence)
    assert not out.exists() or not any(out.iterdir())
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")] == []
    return caught.value


def edit(path: pathlib.Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def relabel(path: pathlib.Path, name: str, dtype: str) -> None:
    """Give the tensor ``name`` of a safetensors file another dtype of the same width (its
    bytes unchanged), as a damaged or hostile header would."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header[name]["dtype"] = dtype
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length :])


def change_tensor(path: pathlib.Path, name: str, change) -> None:
    tensors = load_file(str(path))
    tensors[name] = change(tensors[name].copy())
    save_file(tensors, str(path), metadata={"format": "pt"})


# -- 1. integer tensors ----------------------------------------------------------------------
@pytest.mark.parametrize(("code", "dtype"), [("I32", "int32"), ("U32", "uint32")])
def test_a_tensor_relabelled_as_integers_is_refused_not_cast(tmp_path, copy_of, code, dtype):
    """It was cast to float32 and imported: exit 0, garbage weights."""
    source = copy_of("llama")
    relabel(source / "model.safetensors", "model.norm.weight", code)
    refused(
        source,
        tmp_path / "out",
        r"tensors of a dtype that is not floating-point, where the model's parameters are .*: "
        rf"model\.norm\.weight is {dtype}",
    )


# -- 2. model.safetensors and an index -------------------------------------------------------
def test_a_single_file_beside_an_index_is_read_as_transformers_reads_it(tmp_path, copy_of):
    """transformers' from_pretrained loads model.safetensors when it is there (the index
    only without it); nnx read the index: other weights than transformers'."""
    source = copy_of("mistral")
    merged = {}
    for shard in sorted(source.glob("model-*.safetensors")):
        merged.update(load_file(str(shard)))
    merged["model.norm.weight"] = np.full_like(merged["model.norm.weight"], 7.0)
    save_file(merged, str(source / "model.safetensors"), metadata={"format": "pt"})
    done = import_hf(source, tmp_path / "out")
    model = nnx_plugins.load(done.checkpoint)
    assert np.all(np.asarray(model.norm.scale.value) == 7.0)


def test_without_the_single_file_the_index_is_read(tmp_path, copy_of):
    source = copy_of("mistral")
    done = import_hf(source, tmp_path / "out")
    assert done.parameters > 0 and not (source / "model.safetensors").exists()


# -- 4. float64 ------------------------------------------------------------------------------
def float64_llama(source: pathlib.Path) -> None:
    tensors = load_file(str(source / "model.safetensors"))
    tensors = {name: value.astype(np.float64) for name, value in tensors.items()}
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})


def test_a_float64_checkpoint_is_imported_as_float32_and_said_so(tmp_path, copy_of, capsys):
    """It was imported with param_dtype float64, which jax (without x64) cannot load: nnx
    generate refused the checkpoint."""
    source = copy_of("llama")
    float64_llama(source)
    done = import_hf(source, tmp_path / "out")
    assert (done.dtype, done.converted_from) == ("float32", "float64")
    assert "param_dtype" not in done.config.read_text()
    model = nnx_plugins.load(done.checkpoint)
    reference = np.load(FIXTURES / "llama" / "reference.npz")
    logits = np.asarray(model(reference["input_ids"]))
    assert logits.dtype == np.float32
    assert np.abs(logits - reference["logits"]).max() / np.abs(reference["logits"]).max() < 1e-4
    assert main(["import", "hf", str(source), "--out", str(tmp_path / "cli")]) == 0
    assert "float32, converted from the checkpoint's float64" in capsys.readouterr().out


# -- 5. a SRC whose name writes YAML ---------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "m\ntrain: {steps: 999999999}\n#",
        "m #x\ninclude: other.yaml\nmodel: null",
        "m\u2028train: {steps: 7}",
        "m\rdata: null",
    ],
)
def test_a_source_name_cannot_write_lines_of_the_config(tmp_path, imported, name):
    """The SRC path was written raw into the first comment line of config.yaml."""
    source = tmp_path / name
    shutil.copytree(FIXTURES / "llama", source)
    done = import_hf(source, tmp_path / "out")
    written = done.config.read_text()
    plain = (imported("llama") / "config.yaml").read_text()
    assert yaml.safe_load(written) == yaml.safe_load(plain)
    assert written.splitlines()[1:] == plain.splitlines()[1:]
    assert json.dumps(str(source.resolve())) in written.splitlines()[0]
    assert load_train_config(done.config).sections["train"].steps == 100


# -- 6, 12. numbers past a float's range, NaN, Infinity --------------------------------------
@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("rms_norm_eps", 10**400, r"'rms_norm_eps' must be a finite number >= 0, got 1000+\.\.\. "),
        ("rms_norm_eps", math.nan, r"'rms_norm_eps' must be a finite number >= 0, got nan"),
        ("rms_norm_eps", math.inf, r"'rms_norm_eps' must be a finite number >= 0, got inf"),
        (
            "rope_parameters",
            {"rope_type": "default", "rope_theta": 10**400},
            r"'rope_theta' must be a finite number >= 0, got 1000+\.\.\. ",
        ),
    ],
)
def test_a_number_a_float_cannot_hold_is_refused_by_its_field(tmp_path, copy_of, key, value, match):
    """A 400-digit number was a bare OverflowError traceback; NaN and Infinity were refused
    by the layer, named by nnx's field (model.norm.epsilon), not config.json's."""
    source = copy_of("llama")
    edit(source / "config.json", lambda c: c.update({key: value}))
    refused(source, tmp_path / "out", r"config\.json: " + match)


def test_a_400_digit_number_is_one_line_at_the_command(tmp_path, copy_of, capsys):
    source = copy_of("llama")
    edit(source / "config.json", lambda c: c.update(rms_norm_eps=10**400))
    assert main(["import", "hf", str(source), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'rms_norm_eps' must be a finite number" in err
    assert "Traceback" not in err and len(err) < 400


# -- 7. an index of a million entries --------------------------------------------------------
def test_an_index_is_checked_once_per_file_not_per_entry(tmp_path, copy_of, monkeypatch):
    """Each of 1.3 million entries was resolved (0.2 ms each): 3 minutes before refusal."""
    source = copy_of("mistral")
    index = source / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    shards = sorted(set(weight_map.values()))
    weight_map.update({f"bogus.{i}": shards[i % len(shards)] for i in range(3000)})
    index.write_text(json.dumps({"weight_map": weight_map}))
    resolved = []
    real = pathlib.Path.resolve

    def counting(self, *args, **kwargs):
        resolved.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "resolve", counting)
    refused(source, tmp_path / "out", r"does not hold the tensor 'bogus\.")
    assert len(resolved) <= len(shards) + 4


# -- 8. values float16 cannot hold -----------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("model.norm.weight", "float16"),  # (copied)
        ("model.layers.0.self_attn.q_proj.weight", "float16"),  # (transposed)
        ("model.norm.weight", "bfloat16"),
    ],
)
def test_a_value_past_the_largest_of_the_dtype_is_refused(tmp_path, copy_of, recwarn, name, dtype):
    """--dtype float16 turned 70000 into inf silently (a raw numpy RuntimeWarning)."""
    source = copy_of("llama")
    big = 7e4 if dtype == "float16" else 1e300

    def grow(array):
        array = array.astype(np.float64) if dtype == "bfloat16" else array
        array.flat[3] = -big
        return array

    change_tensor(source / "model.safetensors", name, grow)
    shown = "70000" if dtype == "float16" else "1e\\+300"
    refused(
        source,
        tmp_path / "out",
        rf"the tensor {name.replace('.', chr(92) + '.')} \(float(32|64)\) holds values up to "
        rf"{shown} in magnitude, past the largest {dtype} \(.*\): they would become inf\. "
        r"Import it in a dtype that holds them",
        dtype=dtype,
    )
    assert [str(w.message) for w in recwarn if "overflow" in str(w.message)] == []


def test_values_within_float16_are_imported(tmp_path, copy_of):
    source = copy_of("llama")
    change_tensor(source / "model.safetensors", "model.norm.weight", lambda a: a + 6e4)
    done = import_hf(source, tmp_path / "out", dtype="float16")
    assert done.dtype == "float16"


# -- 9. side files ---------------------------------------------------------------------------
def fifo(path: pathlib.Path) -> None:
    path.unlink()
    os.mkfifo(path)


def dangling(path: pathlib.Path) -> None:
    path.unlink()
    os.symlink(path.parent / "gone.json", path)


def device(path: pathlib.Path) -> None:
    path.unlink()
    os.symlink("/dev/zero", path)


def outside(path: pathlib.Path) -> None:
    elsewhere = path.parent.parent / f"elsewhere-{path.name}"
    shutil.copy(path, elsewhere)
    path.unlink()
    os.symlink(elsewhere, path)


@pytest.mark.parametrize("name", ["tokenizer.json", "generation_config.json"])
@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (fifo, r"is not a regular file: it is a FIFO"),
        (dangling, r"cannot be read \(a symlink to .*gone\.json\): No such file"),
        (device, r"is not a regular file: it is a character device .*\(a symlink to /dev/zero\)"),
        (
            outside,
            r"is a symlink to .*elsewhere-.*, leading out of its folder .*: an import copies",
        ),
    ],
)
def test_a_side_file_that_is_not_a_file_of_the_source_is_refused(
    tmp_path, copy_of, name, damage, match
):
    """Unreadable, it was dropped silently (exit 0, no tokenizer section); leading out of SRC,
    the file it named was copied."""
    source = copy_of("llama")
    damage(source / name)
    error = refused(source, tmp_path / "out", match)
    assert error.where == str(source / name)


def test_a_side_file_linked_inside_the_source_is_copied(tmp_path, copy_of):
    source = copy_of("llama")
    (source / "tokenizer.json").rename(source / "real-tokenizer.json")
    os.symlink("real-tokenizer.json", source / "tokenizer.json")
    done = import_hf(source, tmp_path / "out")
    copied = done.directory / "tokenizer.json"
    assert not copied.is_symlink()
    assert copied.read_bytes() == (source / "real-tokenizer.json").read_bytes()


@pytest.mark.parametrize("family", ["llama", "mistral"])  # (one file; shards and an index)
def test_a_hugging_face_hub_snapshot_imports_through_its_blob_links(tmp_path, family):
    # (huggingface_hub's cache: snapshots/REV/NAME -> ../../blobs/HASH; refused as links out)
    repo = tmp_path / f"models--tiny--{family}"
    snapshot = repo / "snapshots" / "5a1b"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, path in enumerate(sorted((FIXTURES / family).iterdir())):
        shutil.copy(path, repo / "blobs" / f"{i:040x}")
        os.symlink(f"../../blobs/{i:040x}", snapshot / path.name)
    done = import_hf(snapshot, tmp_path / "out")
    direct = import_hf(FIXTURES / family, tmp_path / "direct")
    for name in ("tokenizer.json", "checkpoint/manifest.json"):
        copied = done.directory / name
        assert not copied.is_symlink() and copied.is_file()
    ours = nnx_plugins.load(done.checkpoint)(np.arange(6).reshape(1, 6) + 3)
    theirs = nnx_plugins.load(direct.checkpoint)(np.arange(6).reshape(1, 6) + 3)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    os.symlink(FIXTURES / family / "tokenizer.json", snapshot / "elsewhere.json")
    (snapshot / "tokenizer.json").unlink()
    os.symlink("elsewhere.json", snapshot / "tokenizer.json")  # (a link to a link out)
    refused(snapshot, tmp_path / "again", "leading out of its folder")


# -- 10. names from a header -----------------------------------------------------------------
def test_a_tensor_name_cannot_write_to_the_terminal(tmp_path, copy_of, capsys):
    evil = "evil\nimported LlamaForCausalLM: all good\x1b[8m"
    source = copy_of("llama")
    tensors = load_file(str(source / "model.safetensors"))
    tensors[evil] = np.zeros(2, np.float32)
    save_file(tensors, str(source / "model.safetensors"))
    refused(source, tmp_path / "out", re.escape(f"unexpected tensors: {evil!r}"))
    assert main(["import", "hf", str(source), "--out", str(tmp_path / "cli")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err


# -- 11, 12, 13. config.json values ----------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "change", "match"),
    [
        (
            "llama",
            {"hidden_act": ["silu"]},
            r"'hidden_act' is \['silu'\], not an activation this converter supports \(a name "
            r"is\); supported: gelu, ",
        ),
        (
            "gpt2",
            {"activation_function": {"gelu": 1}},
            r"'activation_function' is \{'gelu': 1\}, not an activation this converter supports",
        ),
        ("gpt2", {"n_inner": -5}, r"'n_inner' must be a positive whole number, got -5"),
        (
            "llama",
            {"rope_parameters": {"rope_type": {"x": 1}}},
            r"'rope_parameters\.rope_type' is \{'x': 1\}: this converter supports the RoPE "
            r"scalings 'default' and 'llama3' only",
        ),
        ("llama", {"pretraining_tp": True}, r"'pretraining_tp' is True, which this converter"),
        ("bert", {"is_decoder": 0}, r"'is_decoder' is 0, which this converter does not support"),
        ("gpt2", {"add_cross_attention": 0}, r"'add_cross_attention' is 0, which this converter"),
        ("gpt2", {"scale_attn_weights": 1}, r"'scale_attn_weights' is 1, which this converter"),
    ],
)
def test_a_config_json_value_is_refused_by_its_field(tmp_path, copy_of, family, change, match):
    source = copy_of(family)
    edit(source / "config.json", lambda c: c.update(change))
    refused(source, tmp_path / "out", r"config\.json: " + match)


def test_a_missing_field_is_said_missing(tmp_path, copy_of):
    """It was "'n_embd' must be a positive whole number, got None"."""
    source = copy_of("gpt2")
    edit(source / "config.json", lambda c: c.pop("n_embd"))
    refused(source, tmp_path / "out", r"config\.json: 'n_embd' is missing: give it")


def test_a_key_given_twice_in_config_json_is_refused(tmp_path, copy_of):
    """JSON kept the last silently."""
    source = copy_of("llama")
    text = (source / "config.json").read_text()
    (source / "config.json").write_text(text.replace("{", '{"hidden_size": 64, ', 1))
    refused(
        source,
        tmp_path / "out",
        r"config\.json: config\.json gives the key 'hidden_size' twice in one object",
    )


def test_an_empty_list_of_eos_ids_is_refused(tmp_path, copy_of):
    source = copy_of("llama")
    edit(source / "generation_config.json", lambda c: c.update(eos_token_id=[]))
    refused(
        source,
        tmp_path / "out",
        r"generation_config\.json: 'eos_token_id' is an empty list: give a token id or a list",
    )


def test_a_pack_converter_reading_a_missing_field_names_it(tmp_path, nnx_registry):
    """A converter's KeyError('input_size') was said as just "input_size"."""
    register_converter(
        "checks.AcmeForTests",
        Converter(
            config=lambda c: {"model": {"type": "Linear", "in_features": c["input_size"]}},
            table=lambda c: [Rule("w", "kernel", "transpose")],
            layers=lambda c: 0,
        ),
    )
    source = tmp_path / "src"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"architectures": ["AcmeForTests"]}))
    save_file({"w": np.zeros((2, 2), np.float32)}, str(source / "model.safetensors"))
    refused(
        source,
        tmp_path / "out",
        r"config\.json: config\.json has no field 'input_size', which the converter reads "
        r"\(converter checks\.AcmeForTests of ",
    )


# -- 12. --out -------------------------------------------------------------------------------
def test_an_out_that_is_a_link_to_a_folder_is_said_a_link(tmp_path):
    (tmp_path / "empty").mkdir()
    os.symlink(tmp_path / "empty", tmp_path / "link")
    with pytest.raises(PretrainedError, match=r"--out is a symlink \(to .*empty\); the import"):
        import_hf(FIXTURES / "llama", tmp_path / "link")
    assert os.listdir(tmp_path / "empty") == []


@pytest.mark.parametrize("out", [".", ".."])
def test_an_out_of_dot_is_refused_before_the_work(tmp_path, monkeypatch, out):
    """--out . ran the whole conversion, then failed with EBUSY."""
    from nnx_plugins.pretrained import _import

    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    monkeypatch.setattr(_import, "Source", None)  # (reached: a TypeError, not the refusal)
    with pytest.raises(PretrainedError, match=r"--out is '\.', '\.\.', the root or a mount"):
        import_hf(FIXTURES / "llama", out)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b"]


# -- 14. NUL ---------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["source", "out"])
def test_a_path_with_a_nul_is_refused(tmp_path, which):
    """It was a bare ValueError (embedded null byte)."""
    paths = {"source": str(FIXTURES / "llama"), "out": str(tmp_path / "out")}
    paths[which] += "\x00x"
    name = "SRC" if which == "source" else "--out"
    with pytest.raises(PretrainedError, match=rf"{name} holds a NUL character"):
        import_hf(paths["source"], paths["out"])


def test_a_path_that_is_not_printable_is_shown_escaped(tmp_path):
    """The message named it raw: a SRC holding a newline wrote two lines on stderr."""
    source = tmp_path / "m\nimported LlamaForCausalLM\x1b[8m"
    with pytest.raises(PretrainedError) as caught:
        import_hf(source, tmp_path / "out")
    assert str(caught.value) == f"cannot import {str(source)!r}: no such directory"
    assert caught.value.where == str(source)

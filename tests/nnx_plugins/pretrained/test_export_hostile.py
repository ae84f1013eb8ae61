"""Exports given hostile inputs: side files of export_hf that are symlinks leading out of their
folder, devices, FIFOs, folders, too large or not what transformers reads (each refused naming
the file, nothing written, never copied or left out silently); export_jax inputs it cannot
take (symbolic axes only the model's sizes fix, sizes past 32-bit indexing, dtypes jax narrows
or that cannot hold the token ids); a report that cannot be printed after the output is whole.
"""

import errno
import io
import os
import shutil

import jax
import pytest
import yaml

from nnx_plugins import PretrainedError, export_hf
from nnx_plugins.cli._main import main
from nnx_plugins.pretrained._export_jax import MAX_AXIS, export_jax
from nnx_plugins.pretrained._exporting import ExportError
from nnx_plugins.training.data._tokenizers import MAX_TOKENIZER_BYTES

from .test_export_jax import CNN, checkpoint_of, gpt_run


@pytest.fixture
def llama(imported, tmp_path):
    """A writable copy of the imported tiny Llama, in a folder of its own."""
    target = tmp_path / "model" / "llama"
    shutil.copytree(imported("llama"), target)
    return target


def refused(folder, match):
    """export_hf of ``folder`` refused with ``match``, in one line; nothing written."""
    out = folder.parent / "out"
    with pytest.raises(PretrainedError, match=match) as caught:
        export_hf(folder / "config.yaml", checkpoint=folder / "checkpoint", out=out)
    text = str(caught.value)
    assert text.startswith("cannot export ") and text.count("cannot export") == 1
    assert "\n" not in text
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]
    return caught.value


def replace(path, make):
    path.unlink()
    make(path)


# -- export hf: side files -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_side_file_that_is_a_symlink_out_of_its_folder_is_refused(llama, tmp_path, name):
    """It was copied into the export, whatever it led to (/etc/passwd as tokenizer.json)."""
    elsewhere = tmp_path / name  # (a valid file of its kind, outside the model's folder)
    shutil.copyfile(llama / name, elsewhere)
    replace(llama / name, lambda path: path.symlink_to(elsewhere))
    error = refused(
        llama,
        rf"{name}: is a symlink to {elsewhere}, leading out of its folder .*llama: an export "
        r"copies that folder's own files only\. Put the file itself there, or remove the link$",
    )
    assert error.where == str(llama / name)


def test_a_tokenizer_symlinked_to_a_system_file_is_refused(llama):
    replace(llama / "tokenizer.json", lambda path: path.symlink_to("/etc/passwd"))
    refused(llama, r"tokenizer\.json: is a symlink to /etc/passwd, leading out of its folder")


def test_a_symlink_inside_the_folder_is_followed(llama, tmp_path):
    """A link to a file of the same folder is that folder's file: copied as a file."""
    (llama / "tokenizer.json").rename(llama / "tok.json")
    (llama / "tokenizer.json").symlink_to("tok.json")
    out = tmp_path / "out"
    export_hf(llama / "config.yaml", checkpoint=llama / "checkpoint", out=out)
    assert not (out / "tokenizer.json").is_symlink()
    assert (out / "tokenizer.json").read_bytes() == (llama / "tok.json").read_bytes()


@pytest.mark.parametrize(
    ("name", "make", "kind"),
    [
        ("generation_config.json", os.mkfifo, r"a FIFO \(named pipe\)"),
        ("tokenizer_config.json", os.mkfifo, r"a FIFO \(named pipe\)"),
        ("tokenizer.json", os.mkdir, r"a directory"),
        ("tokenizer.json", lambda path: path.symlink_to("/dev/zero"),
         r"a character device \(a terminal or /dev/\.\.\.\) \(a symlink to /dev/zero\)"),
    ],
)  # fmt: skip
def test_a_side_file_that_is_not_a_regular_file_is_refused(llama, name, make, kind):
    """It was left out of the export silently (exit 0, the file missing)."""
    replace(llama / name, make)
    error = refused(
        llama,
        rf"{name}: is not a regular file: it is {kind}\. Put the file itself there, or remove "
        r"it$",
    )
    assert error.where == str(llama / name)


def test_a_dangling_side_file_symlink_is_refused(llama):
    replace(llama / "tokenizer_config.json", lambda path: path.symlink_to("gone.json"))
    refused(
        llama,
        r"tokenizer_config\.json: cannot be read \(a symlink to gone\.json\): No such file or "
        r"directory \(ENOENT\)$",
    )


def test_a_tokenizer_past_the_size_a_tokenizer_may_have_is_refused_unread(llama):
    """It was copied (300 MB), though the tokenizer reader refuses anything past 256 MB."""
    with open(llama / "tokenizer.json", "r+b") as handle:
        handle.truncate(MAX_TOKENIZER_BYTES + 1)  # (sparse: nothing is written to the disk)
    refused(
        llama,
        rf"tokenizer\.json: it holds {MAX_TOKENIZER_BYTES + 1:,} bytes, more than "
        rf"{MAX_TOKENIZER_BYTES:,} \(the most a tokenizer\.json may have\); it is not a file "
        r"transformers wrote: fix or remove it$",
    )


@pytest.mark.parametrize("content", ['{"a": 1}', "root:x:0:0:root:/root:/bin/bash\n"])
def test_a_tokenizer_json_that_is_not_a_tokenizer_is_refused(llama, content):
    """It was copied unchecked: transformers then fails on the export."""
    (llama / "tokenizer.json").write_text(content)
    error = refused(
        llama, r"tokenizer\.json: not a tokenizer\.json the tokenizers library can read"
    )
    assert "root:x" not in str(error)  # (its content is not quoted)


def test_a_config_json_that_is_not_a_regular_file_is_not_said_missing(llama):
    """It was "there is no config.json beside config.yaml", though one is there."""
    replace(llama / "config.json", lambda path: path.symlink_to("/dev/zero"))
    refused(llama, r"config\.json: config\.json cannot be read: it is a character device")


def test_the_command_refuses_a_side_file_in_one_line(llama, capsys):
    os.unlink(llama / "generation_config.json")
    os.mkfifo(llama / "generation_config.json")
    argv = ["export", "hf", str(llama / "config.yaml"), "--checkpoint", str(llama / "checkpoint")]
    assert main([*argv, "--out", str(llama.parent / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nnx: error: cannot export ") and err.count("\n") == 1
    assert "generation_config.json: is not a regular file: it is a FIFO" in err
    assert not (llama.parent / "out").exists()


# -- export jax: the input -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile-cnn")
    return folder, checkpoint_of(CNN, folder)


def test_image_sizes_only_the_model_gives_are_named_with_them(imported, tmp_path):
    """The ViT takes 16x16 images: a symbolic height and width were tried as 8x8 (sizes nobody
    gave), said as "the model cannot run on float32[2,8,8,3] (the input of --input-shape
    b,h,w,3)"; now the model's sizes are tried, and named in the input_shape that fixes them."""
    vit = imported("vit")
    with pytest.raises(
        ExportError,
        match=r"does not trace with a symbolic axis 1 \('h'\) and axis 2 \('w'\): .* Fix those "
        r"sizes with --input-shape b,16,16,3 \(input_shape='b,16,16,3'\)\.$",
    ):
        export_jax(
            vit / "config.yaml",
            checkpoint=vit / "checkpoint",
            out=tmp_path / "v.jax",
            input_shape="b,h,w,3",
        )
    assert not (tmp_path / "v.jax").exists()


def test_a_symbolic_size_nothing_gives_is_named_not_shown_as_given(imported, tmp_path):
    """Neither the data nor the model gives the channels: the size tried is said as nnx's
    guess, and the axis named, not "the model cannot run on ... (the input of ...)"."""
    vit = imported("vit")
    with pytest.raises(
        ExportError,
        match=r"the model does not trace with a symbolic axis 3 \('c'\), and 8, the size tried "
        r"in its place \(no data section or layer of the model gives it\), does not run "
        r"either: ValueError: .* Give axis 3 \('c'\) the size the model takes, e\.g\. "
        r"--input-shape b,16,16,C with C a number\.$",
    ):
        export_jax(
            vit / "config.yaml",
            checkpoint=vit / "checkpoint",
            out=tmp_path / "v.jax",
            input_shape="b,h,16,c",
        )
    assert not (tmp_path / "v.jax").exists()


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ("99999999999999999999999,8,8,1", r"axis 0 is 99999999999999999999999"),
        ("9223372036854775808,8,8,1", r"axis 0 is 9223372036854775808"),
        ("9223372036854775807,8,8,1", r"axis 0 is 9223372036854775807"),
        ("b,4294967296,8,1", r"axis 1 is 4294967296"),
        ("b,8,8," + "9" * 5000, r"axis 3 is 99999999999999999999\.\.\. \(5000 digits\)"),
        ((2**31, 8, 8, 1), r"axis 0 is 2147483648"),
    ],
)
def test_a_size_past_32_bit_indexing_is_refused(cnn, shape, match):
    """It was a TypeError of jax (or of its C++ binding), or an artifact that never runs."""
    folder, checkpoint = cnn
    with pytest.raises(
        ExportError,
        match=rf"input_shape .*: {match}, more than {MAX_AXIS:,} \(2\*\*31-1\), the most an axis "
        r"may have: jax indexes with 32-bit integers \(without jax_enable_x64\), so no input "
        r"could have it\. Give a smaller size, or a name for a symbolic size",
    ):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "big.jax", input_shape=shape)
    assert not (folder / "big.jax").exists()


def test_the_largest_size_is_taken(cnn):
    folder, checkpoint = cnn
    result = export_jax(
        CNN, checkpoint=checkpoint, out=folder / "max.jax", input_shape=f"{MAX_AXIS},8,8,1"
    )
    assert result.inputs == f"float32[{MAX_AXIS},8,8,1]"


def test_a_non_ascii_digit_is_not_a_size(cnn):
    folder, checkpoint = cnn
    with pytest.raises(ExportError, match=r"input_shape 'b,²,8,1' is not a shape"):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "x.jax", input_shape="b,²,8,1")


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="jax keeps int64 with x64 enabled")
def test_a_dtype_jax_narrows_is_refused(cnn):
    """int64 made an int32 artifact silently (jax runs without 64-bit types by default)."""
    folder, checkpoint = cnn
    with pytest.raises(
        ExportError,
        match=r"input_dtype int64: jax runs without 64-bit types here \(jax_enable_x64 is off\), "
        r"so the artifact would take int32 in its place\. Give --input-dtype int32 "
        r"\(input_dtype='int32'\), or set JAX_ENABLE_X64=1 to keep int64\.$",
    ):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "x.jax", input_dtype="int64")
    assert not (folder / "x.jax").exists()


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile-gpt")
    config = gpt_run(folder)
    return folder, config, checkpoint_of(config, folder)


def test_a_dtype_that_cannot_hold_the_token_ids_is_refused(imported, gpt, tmp_path):
    """uint8 was taken for the 320 tokens of the tiny Llama: ids 256 to 319 cannot be given."""
    llama = imported("llama")
    with pytest.raises(
        ExportError,
        match=r"input_dtype uint8 holds the ids 0 to 255, but the model has 320 tokens \(ids 0 "
        r"to 319\): those past 255 could not be given\. Give --input-dtype int32",
    ):
        export_jax(
            llama / "config.yaml",
            checkpoint=llama / "checkpoint",
            out=tmp_path / "x.jax",
            input_dtype="uint8",
        )
    folder, config, checkpoint = gpt
    with pytest.raises(ExportError, match=r"input_dtype bool holds the ids 0 to 1, but the model"):
        export_jax(config, checkpoint=checkpoint, out=folder / "x.jax", input_dtype="bool")
    assert not (tmp_path / "x.jax").exists() and not (folder / "x.jax").exists()
    result = export_jax(config, checkpoint=checkpoint, out=folder / "x.jax", input_dtype="uint8")
    assert result.inputs == "uint8[b,t]"  # (13 tokens: uint8 holds them all)


# -- the report of a complete export ---------------------------------------------------------------
class _Full(io.TextIOBase):
    """A stdout on a full disk (> /dev/full)."""

    def writable(self):
        return True

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_report_that_cannot_be_printed_leaves_the_whole_artifact(cnn, monkeypatch, capsys):
    """It was a traceback (exit 1) after the artifact was written whole."""
    folder, checkpoint = cnn
    config = folder / "cnn.yaml"
    config.write_text(yaml.safe_dump(CNN))
    monkeypatch.setattr("sys.stdout", _Full())
    out = folder / "reported.jax"
    argv = ["export", "jax", str(config), "--checkpoint", str(checkpoint), "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        f"nnx: error: {out} was written whole (it is complete), but the report of it could not "
        "be printed on stdout: no space left on the device (ENOSPC).\n"
    )
    assert jax.export.deserialize(out.read_bytes()).in_avals[0].shape[1:] == (8, 8, 1)

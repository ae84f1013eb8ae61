"""export_jax: an artifact plain jax runs with the model's outputs (in a process where nnx cannot
be imported), symbolic batch and length, and every refusal with nothing written."""

import errno
import json
import pathlib
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import nnx_core as nnx
import nnx_plugins
from nnx_plugins.pretrained import _export_jax
from nnx_plugins.pretrained._export_jax import export_jax
from nnx_plugins.pretrained._exporting import ExportError

from ..generation.gpt import gpt_config

CNN = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Conv", "in_features": 1, "out_features": 4, "kernel_size": [3, 3]},
            {"type": "BatchNorm", "num_features": 4},
            {"type": "relu"},
            {"type": "Flatten"},
            {"type": "Dropout", "rate": 0.3},
            {"type": "Linear", "in_features": 256, "out_features": 10},
        ],
    },
    "data": {"type": "digits", "layout": "NHWC"},
}


def gpt_run(folder: pathlib.Path) -> dict:
    (folder / "notes.txt").write_text("abcdefghijkl" * 20, encoding="utf-8")
    return {
        "model": gpt_config(),
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": str(folder / "notes.txt"), "seq_len": 24},
    }


def checkpoint_of(config: dict, folder: pathlib.Path, seed: int = 1) -> pathlib.Path:
    """A checkpoint of the config's model with weights other than a fresh build's (seed 1)."""
    return nnx_plugins.save(nnx_plugins.build_model(config, seed=seed), folder / "checkpoint")


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export-cnn")
    return folder, checkpoint_of(CNN, folder)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export-gpt")
    config = gpt_run(folder)
    return folder, config, checkpoint_of(config, folder)


def expected(config: dict, checkpoint: pathlib.Path, inputs: list) -> list:
    """The outputs of the model itself (in evaluation mode) on each of ``inputs``."""
    model = nnx_plugins.build_model(config)
    nnx_plugins.load(checkpoint, into=model)
    model.eval()
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, x: nnx.merge(graphdef, state)(x))
    return [np.asarray(forward(state, x)) for x in inputs]


_PLAIN_JAX = textwrap.dedent(
    """
    import json, sys
    for name in ("nnx_core", "nnx_layers", "nnx_plugins", "flax"):
        sys.modules[name] = None  # (importing any of them now fails)
    import jax, numpy as np
    jobs, answers = json.loads(sys.argv[1]), {}
    for artifact, inputs in jobs:
        exported = jax.export.deserialize(open(artifact, "rb").read())
        for name in inputs:
            x = np.load(name)
            answers[name] = name + ".out.npy"
            np.save(answers[name], np.asarray(exported.call(x)))
        try:
            exported.call(np.zeros((1, 25), np.int32))  # past the GPT's 24 positions
            answers[artifact] = "ran"
        except Exception as error:
            answers[artifact] = type(error).__name__
    print(json.dumps(answers))
    """
)


def test_plain_jax_runs_the_artifacts_with_the_models_outputs(cnn, gpt):
    """Both artifacts run in a process that imports only jax and numpy, at several batch
    sizes and (for the GPT) sequence lengths, with the outputs of the model itself."""
    cnn_folder, cnn_ckpt = cnn
    gpt_folder, gpt_cfg, gpt_ckpt = gpt
    made = [
        export_jax(CNN, checkpoint=cnn_ckpt, out=cnn_folder / "cnn.jax"),
        export_jax(gpt_cfg, checkpoint=gpt_ckpt, out=gpt_folder / "gpt.jax"),
    ]
    assert (made[0].inputs, made[0].outputs) == ("float32[b,8,8,1]", "float32[b,10]")
    assert (made[1].inputs, made[1].outputs) == ("int32[b,t]", "float32[b,t,13]")
    assert made[0].size == made[0].path.stat().st_size
    rng = np.random.default_rng(0)
    cases = {
        made[0].path: [rng.normal(size=(b, 8, 8, 1)).astype(np.float32) for b in (1, 5)],
        made[1].path: [rng.integers(0, 13, size=s).astype(np.int32) for s in [(1, 3), (4, 24)]],
    }
    jobs, references = [], {}
    for artifact, inputs in cases.items():
        config, ckpt = (CNN, cnn_ckpt) if artifact == made[0].path else (gpt_cfg, gpt_ckpt)
        names = [f"{artifact}.{index}.npy" for index in range(len(inputs))]
        for name, x, reference in zip(names, inputs, expected(config, ckpt, inputs)):
            np.save(name, x)
            references[name] = reference
        jobs.append((str(artifact), names))
    done = subprocess.run(
        [sys.executable, "-c", _PLAIN_JAX, json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for name, reference in references.items():
        got = np.load(answers[name])
        assert got.shape == reference.shape
        np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)
    assert answers[str(made[1].path)] != "ran"  # the GPT's length is bounded by its 24 positions
    assert answers[str(made[0].path)] != "ran"  # int32[1,25] is not an image


def test_input_shape_fixes_axes(cnn):
    folder, checkpoint = cnn
    out = folder / "fixed.jax"
    result = export_jax(CNN, checkpoint=checkpoint, out=out, input_shape="1,8,8,1")
    assert result.inputs == "float32[1,8,8,1]" and result.outputs == "float32[1,10]"
    result = export_jax(
        CNN, checkpoint=checkpoint, out=folder / "f2.jax", input_shape=("n", 8, 8, 1)
    )
    assert result.inputs == "float32[n,8,8,1]"


def test_a_config_without_data_takes_input_shape_and_dtype(gpt):
    folder, config, checkpoint = gpt
    bare = {"model": config["model"]}
    result = export_jax(
        bare, checkpoint=checkpoint, out=folder / "bare.jax", input_shape="b,s", input_dtype="int32"
    )
    assert result.inputs == "int32[b,s]" and result.outputs == "float32[b,s,13]"
    task_only = {"model": config["model"], "task": {"type": "language_model"}}
    result = export_jax(task_only, checkpoint=checkpoint, out=folder / "task.jax")
    assert result.inputs == "int32[b,t]"


def nothing_new(folder: pathlib.Path, before: set) -> bool:
    return set(folder.iterdir()) == before


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            {"input_shape": "b,h,w,1"},
            r"does not trace with a symbolic axis 1 \('h'\) and axis 2 \('w'\): ValueError: "
            r"Linear expects .* Fix those sizes with --input-shape b,8,8,1",
        ),
        (
            {"input_shape": "8,8,1"},
            r"input_shape 8,8,1 has 3 axes but the model's input \(data \(digits, layout NHWC\)\) "
            r"has 4: b,8,8,1\. Give the batch axis first, e\.g\. --input-shape b,8,8,1 or 1,8,8,1",
        ),
        (
            {"input_shape": "b,8,8,2"},
            r"the model cannot run on float32\[2,8,8,2\] \(the input of --input-shape b,8,8,2\): "
            r"ValueError: Conv expects",
        ),
        ({"input_shape": "b,-1,8,1"}, r"input_shape 'b,-1,8,1' is not a shape: give 1 to 8 axes"),
        ({"input_shape": ""}, r"input_shape '' is not a shape"),
        ({"input_shape": (True, 8, 8, 1)}, r"is not a shape"),
        ({"input_shape": "b," * 9 + "1"}, r"is not a shape: give 1 to 8 axes"),
        ({"input_dtype": "complex64"}, r"input_dtype 'complex64' is not one of float32, "),
    ],
)
def test_bad_inputs_are_refused_and_nothing_is_written(cnn, options, match):
    folder, checkpoint = cnn
    before = set(folder.iterdir())
    with pytest.raises(ExportError, match=match):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "bad.jax", **options)
    assert nothing_new(folder, before)


def test_a_symbolic_length_the_model_cannot_take_is_named(tmp_path):
    """A model that reshapes by the length (Flatten into a Linear) traces only with a fixed
    length: the error names the sequence length and the input_shape that fixes it."""
    model = {
        "type": "Sequential",
        "layers": [
            {"type": "Embed", "num_embeddings": 5, "features": 2},
            {"type": "Flatten"},
            {"type": "Linear", "in_features": 16, "out_features": 3},
        ],
    }
    config = {"model": model, "task": {"type": "language_model"}}
    checkpoint = checkpoint_of(config, tmp_path)
    with pytest.raises(
        ExportError,
        match=r"symbolic sequence length \(axis 1, 't'\): .* --input-shape b,8 "
        r"\(input_shape='b,8'\)",
    ):
        export_jax(config, checkpoint=checkpoint, out=tmp_path / "x.jax", input_shape="b,t")
    result = export_jax(config, checkpoint=checkpoint, out=tmp_path / "x.jax", input_shape="b,8")
    assert result.inputs == "int32[b,8]"


def test_an_unknown_input_is_refused(tmp_path):
    config = {"model": {"type": "Linear", "in_features": 3, "out_features": 2}}
    checkpoint = checkpoint_of(config, tmp_path)
    with pytest.raises(
        ExportError,
        match=r"the model's input is unknown: the config has no data section .* "
        r"--input-shape b,8,8,1",
    ):
        export_jax(config, checkpoint=checkpoint, out=tmp_path / "x.jax")
    assert not (tmp_path / "x.jax").exists()


def test_an_existing_output_or_a_missing_folder_is_refused(cnn):
    folder, checkpoint = cnn
    (folder / "taken.jax").write_bytes(b"keep")
    with pytest.raises(ExportError, match=r"the output .*taken\.jax exists \(a file\): an export "):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "taken.jax")
    assert (folder / "taken.jax").read_bytes() == b"keep"
    (folder / "dir.jax").mkdir()
    with pytest.raises(ExportError, match=r"dir\.jax exists \(a folder\)"):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "dir.jax")
    with pytest.raises(ExportError, match=r"its folder .*nowhere does not exist"):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "nowhere" / "x.jax")


def test_an_output_inside_a_checkpoint_under_a_file_or_naming_a_folder_is_refused(cnn):
    """Written inside a step_N folder, an export hid that checkpoint from runs and nnx eval."""
    folder, checkpoint = cnn
    from nnx_plugins.training.checkpoints._save import latest_checkpoint

    inside = latest_checkpoint(checkpoint) or pathlib.Path(checkpoint)
    for out, match in [
        (inside / "model.jax", r"would be inside the checkpoint .*: a checkpoint holds its own"),
        (folder / "afile" / "x.jax", r"its folder .*afile is a file, not a folder"),
        (f"{folder / 'out'}/", r"ends with '/', as a folder does, but this export writes one"),
        ("", r"--out is empty"),
    ]:
        (folder / "afile").write_text("mine")
        with pytest.raises(ExportError, match=match):
            export_jax(CNN, checkpoint=checkpoint, out=out)
    assert latest_checkpoint(checkpoint) in (inside, None) and not (inside / "model.jax").exists()
    assert not (folder / "out").exists()


def test_weights_past_the_artifact_limit_are_refused(cnn, monkeypatch):
    folder, checkpoint = cnn
    monkeypatch.setattr(_export_jax, "ARTIFACT_LIMIT", 1000)
    with pytest.raises(ExportError, match=r"the model's weights take 0\.00 GiB, more than a jax"):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "big.jax")
    assert not (folder / "big.jax").exists()


def test_a_full_disk_leaves_nothing(cnn, monkeypatch):
    folder, checkpoint = cnn
    before = set(folder.iterdir())

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    with pytest.raises(ExportError, match=r"cannot write .*full\.jax: no space left on the device"):
        export_jax(CNN, checkpoint=checkpoint, out=folder / "full.jax")
    assert nothing_new(folder, before)


def test_a_checkpoint_that_does_not_fit_is_a_checkpoint_error(cnn, tmp_path):
    _, checkpoint = cnn
    other = {**CNN, "model": {"type": "Linear", "in_features": 64, "out_features": 10}}
    with pytest.raises(nnx_plugins.CheckpointError, match=r"model\.kernel|missing|unexpected"):
        export_jax(other, checkpoint=checkpoint, out=tmp_path / "x.jax")
    assert not (tmp_path / "x.jax").exists()


def test_an_imported_language_model_exports_with_a_bounded_symbolic_length(imported, tmp_path):
    """The tiny Llama of the fixtures: token ids of any batch and length up to its 64
    positions (its max_length), with the model's logits; the data is not read."""
    source = imported("llama")
    result = export_jax(
        source / "config.yaml", checkpoint=source / "checkpoint", out=tmp_path / "llama.jax"
    )
    assert (result.inputs, result.outputs) == ("int32[b,t]", "float32[b,t,320]")
    exported = jax.export.deserialize(result.path.read_bytes())
    tokens = np.arange(3 * 7, dtype=np.int32).reshape(3, 7) % 320
    model = nnx_plugins.load(source / "checkpoint")
    np.testing.assert_allclose(exported.call(tokens), model(tokens), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception):  # noqa: B017 - jax's own refusal; its words vary by version
        exported.call(np.zeros((1, 65), np.int32))

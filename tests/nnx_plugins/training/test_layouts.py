"""The same training on any layout: a GPT (a `Repeat` of blocks with ``remat``) on 8 simulated CPU
devices as ``fsdp=8``, ``data=2,fsdp=2,model=2`` and ``fsdp=4,model=2`` (and ``data=8`` when a run
resumes under it) follows the one-device loss curve, and so does an imported Llama
(``data=2,fsdp=2,model=2``); every array stays where the layout puts it, none is ever whole on one
device when ``fsdp`` splits it; checkpoints written under one layout load (and resume) under
another. Two processes of 4 devices each follow one process of 8 (test_two_processes below).

One subprocess (the device count is fixed when JAX starts) trains every layout once and reports
what the tests below check. The model is tiny and each run 4 steps: the time goes to compiling.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnx_core as nnx
from nnx_plugins import import_hf, load, load_config
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._sharded import constructor
from tests.nnx_plugins.pretrained.conftest import FIXTURES
from tests.nnx_plugins.training.test_processes import finish, start, start_two, write_config

WIDTH, VOCAB, SEQ = 16, 256, 8


def gpt_config(path):
    """A small GPT over the bytes of ``path``: embeddings, 2 pre-norm blocks in a `Repeat` with
    ``remat`` (causal attention with 2 heads, a gelu MLP), a final norm and a head."""
    # (no attention biases: the key's bias gets no gradient - softmax ignores what it adds - and
    # Adam turns its float noise into full steps that differ between any two layouts)
    attention = {
        "type": "MultiHeadAttention",
        "num_heads": 2,
        "in_features": WIDTH,
        "is_causal": True,
        "decode": False,
        "use_bias": False,
    }
    mlp = [
        {"type": "LayerNorm", "num_features": WIDTH},
        {"type": "Linear", "in_features": WIDTH, "out_features": 4 * WIDTH},
        {"type": "gelu"},
        {"type": "Linear", "in_features": 4 * WIDTH, "out_features": WIDTH},
    ]
    block = {
        "type": "Sequential",
        "layers": [
            {
                "type": "Residual",
                "block": {
                    "type": "Sequential",
                    "layers": [{"type": "LayerNorm", "num_features": WIDTH}, attention],
                },
            },
            {"type": "Residual", "block": {"type": "Sequential", "layers": mlp}},
        ],
    }
    return {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Embed", "num_embeddings": VOCAB, "features": WIDTH},
                {"type": "PositionEmbed", "max_length": SEQ, "features": WIDTH},
                {"type": "Repeat", "count": 2, "remat": True, "block": block},
                {"type": "LayerNorm", "num_features": WIDTH},
                {"type": "Linear", "in_features": WIDTH, "out_features": VOCAB},
            ],
        },
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": str(path), "level": "bytes", "seq_len": SEQ},
        "optimizer": {"type": "adam", "learning_rate": 0.01},
        "train": {"steps": 4, "batch_size": 16, "log_interval": 1},
        "checkpoint": {"interval": 2},
    }


# (data=8 alone: test_loop.py's eight-device test, and the resume under data=8 below)
LAYOUTS = {
    "fsdp8": {"fsdp": 8},
    "data2_fsdp2_model2": {"data": 2, "fsdp": 2, "model": 2},
    "fsdp4_model2": {"fsdp": 4, "model": 2},
}

SCRIPT = """
import json, pathlib, shutil, sys
import jax, numpy as np
import nnx_core as nnx
from nnx_plugins import load, train
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._mesh import run_layout
from nnx_plugins.training._sharded import constructor, create_sharded

def losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["split"] == "train"]

def placement(model, optimizer, layout):
    # every leaf where the layout puts it; the leaves whole on some device although fsdp>1
    planned = layout.specs(nnx.state((model, optimizer)))
    wrong, whole = [], []
    for path, variable in nnx.state((model, optimizer)).flat_state():
        value = variable.get_raw_value()
        if str(value.sharding.spec) != str(planned[tuple(path)]):
            wrong.append([str(path), str(value.sharding.spec), str(planned[tuple(path)])])
        big = isinstance(variable, (nnx.Param, nnx.OptState)) and value.ndim and value.size >= 64
        if big and layout.mesh.shape["fsdp"] > 1:
            block = max(s.data.size for s in value.addressable_shards)
            if block == value.size:
                whole.append(str(path))
    return wrong, whole

def values(model, optimizer, kinds=nnx.Param):
    return [np.asarray(jax.device_get(v.get_raw_value()), np.float64)
            for _, v in nnx.state((model, optimizer), kinds).flat_state()]

def largest_difference(first, second):
    return max(float(np.abs(a - b).max()) for a, b in zip(first, second))

TRAINED = (nnx.Param, nnx.OptState)

def curves(config, layouts, root):
    # train config on one device and on each layout: the report, the final values
    report = {"devices": jax.device_count(), "runs": {}}
    one = train(config, run_dir=root / "one", progress=False)
    report["runs"]["one"] = {"loss": losses(one.run_dir)}
    reference = values(one.model, one.optimizer)
    parsed = load_train_config(config)
    finals = {}
    for name, mesh in layouts.items():
        result = train(config, run_dir=root / name, mesh=mesh, progress=False)
        wrong, whole = placement(result.model, result.optimizer, run_layout(parsed, mesh))
        report["runs"][name] = {
            "loss": losses(result.run_dir),
            "wrong": wrong, "whole": whole,
            "params": largest_difference(values(result.model, result.optimizer), reference),
        }
        finals[name] = values(result.model, result.optimizer, TRAINED)
    return report, reference, finals

def moves(config, root, report, reference, finals):
    # checkpoints of one layout loaded, and a run resumed, under another
    parsed = load_train_config(config)
    # a checkpoint of fsdp=8 loaded under data=2,fsdp=2,model=2
    target = run_layout(parsed, {"data": 2, "fsdp": 2, "model": 2})
    model, optimizer = create_sharded(constructor(parsed), target)
    load(root / "fsdp8" / "checkpoints", into=model, optimizer=optimizer)
    wrong, whole = placement(model, optimizer, target)
    report["loaded"] = {
        "wrong": wrong,
        "params": largest_difference(values(model, optimizer, TRAINED), finals["fsdp8"]),
    }
    # the run of fsdp=4,model=2, as if stopped after its step-2 checkpoint, resumed under data=8
    shutil.copytree(root / "fsdp4_model2", root / "moved")
    shutil.rmtree(root / "moved" / "checkpoints" / "step_00000004")
    moved = train(config, run_dir=root / "moved", mesh={"data": 8}, resume=True, progress=False)
    report["resumed"] = {
        "loss": losses(moved.run_dir), "steps": moved.steps_trained,
        "params": largest_difference(values(moved.model, moved.optimizer), reference),
    }

models, root = json.loads(sys.argv[1]), pathlib.Path(sys.argv[2])
reports = {}
for name, job in models.items():
    report, reference, finals = curves(job["config"], job["layouts"], root / name)
    if job.get("moves"):
        moves(job["config"], root / name, report, reference, finals)
    reports[name] = report
print(json.dumps(reports))
"""


def run_eight_devices(*arguments, timeout=900):
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu"
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(arguments[0]), *arguments[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def corpus(folder):
    """About 3 KB of Python source (no download): ~370 windows of 8 bytes."""
    path = folder / "corpus.txt"
    path.write_text(
        pathlib.Path(json.__file__).read_text(encoding="utf-8")[:3000], encoding="utf-8"
    )
    return path


LLAMA_LAYOUTS = {"data2_fsdp2_model2": {"data": 2, "fsdp": 2, "model": 2}}  # (all three axes)


def llama_config(folder, text):
    """tests/fixtures/hf/llama imported (`nnx import hf`: a CausalLM of SelfAttention with 4
    query and 2 key/value heads, RoPE, GatedMLP and RMSNorm blocks in a Repeat), its tokenizer
    and config as imported, trained on ``text`` for 4 steps."""
    done = import_hf(FIXTURES / "llama", folder / "llama")
    overrides = ["data.path=" + str(text), "data.seq_len=8", "train.steps=4"]
    overrides += ["train.batch_size=16", "train.log_interval=1", "optimizer.learning_rate=0.001"]
    overrides += ["checkpoint.interval=2"]
    return load_train_config(load_config(done.config, overrides=overrides)).to_dict()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layouts")
    text = corpus(folder)
    models = {
        "gpt": {"config": gpt_config(text), "layouts": LAYOUTS, "moves": True},
        "llama": {"config": llama_config(folder, text), "layouts": LLAMA_LAYOUTS},
    }
    return run_eight_devices(SCRIPT, json.dumps(models), str(folder))


@pytest.fixture
def report(reports):
    return reports["gpt"]


CASES = [("gpt", name) for name in LAYOUTS] + [("llama", name) for name in LLAMA_LAYOUTS]


@pytest.mark.parametrize(("model", "name"), CASES)
def test_every_layout_follows_the_one_device_loss_curve(reports, model, name):
    report = reports[model]
    assert report["devices"] == 8
    one, run = report["runs"]["one"], report["runs"][name]
    assert len(one["loss"]) == 4 and one["loss"][-1] < one["loss"][0]
    np.testing.assert_allclose(run["loss"], one["loss"], rtol=1e-4)
    assert run["params"] < 1e-4  # the trained parameters, largest absolute difference


@pytest.mark.parametrize(("model", "name"), CASES)
def test_every_array_stays_where_the_layout_puts_it(reports, model, name):
    # after 4 steps: every parameter, statistic, Rng state and optimizer moment
    assert reports[model]["runs"][name]["wrong"] == []


@pytest.mark.parametrize(
    ("model", "name"),
    [(m, n) for m, n in CASES if n != "data8"],
)
def test_no_device_holds_a_whole_parameter_or_moment_when_fsdp_splits_them(reports, model, name):
    assert reports[model]["runs"][name]["whole"] == []


def test_a_checkpoint_loads_and_resumes_under_another_layout(report):
    assert report["loaded"]["wrong"] == []
    assert report["loaded"]["params"] == 0.0
    np.testing.assert_allclose(report["resumed"]["loss"], report["runs"]["one"]["loss"], rtol=1e-4)
    assert report["resumed"]["params"] < 1e-4
    assert report["resumed"]["steps"] == 2


# -- two processes ---------------------------------------------------------------------------
def checkpoint_values(checkpoint, config):
    """Every parameter and optimizer moment of a checkpoint, loaded here on one device."""
    model, optimizer = constructor(load_train_config(config))()
    load(checkpoint, into=model, optimizer=optimizer)
    state = nnx.state((model, optimizer), (nnx.Param, nnx.OptState))
    return {path: np.asarray(v.get_raw_value()) for path, v in state.flat_state()}


def test_two_processes_of_four_devices_train_like_one_process_of_eight(tmp_path):
    config = gpt_config(corpus(tmp_path))
    path = write_config(tmp_path, config, name="gpt.json")
    two_dir, one_dir = tmp_path / "two", tmp_path / "one"
    mesh = ["--mesh", "fsdp=4,model=2"]  # (fsdp spans both processes)
    two = start_two([path, "--run-dir", str(two_dir), "--no-progress", *mesh])
    one = start([path, "--run-dir", str(one_dir), "--no-progress", *mesh], devices=8)
    (code0, out0, err0), (code1, out1, err1), (code, out, err) = finish([*two, one], timeout=900)
    assert (code0, code1, code) == (0, 0, 0), err0[-3000:] + err1[-3000:] + err[-3000:]
    assert "memory per device (--mesh fsdp=4,model=2, 8 devices): parameters" in out0
    assert out1 == ""

    def curve(run_dir):
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if r["split"] == "train"]

    assert len(curve(two_dir)) == 4
    np.testing.assert_allclose(curve(two_dir), curve(one_dir), rtol=1e-4)
    final = "checkpoints/step_00000004"
    assert sorted(os.listdir(two_dir / final))[1:] == [
        "tensors-00000-of-00002.safetensors",
        "tensors-00001-of-00002.safetensors",
    ]
    got, want = (checkpoint_values(d / final, config) for d in (two_dir, one_dir))
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-6, err_msg=str(key))

"""Training from a config: accuracy, exact resume, logs and plot, errors, eval, many devices."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import nnx_core as nnx
from nnx_plugins import CheckpointError, ConfigError, evaluate, read_manifest, train
from nnx_plugins.training import _loop
from nnx_plugins.training.data._base import DataError
from nnx_plugins.training.data._bundled import Digits

# BatchNorm (BatchStats), Dropout (Rng state), Adam with a schedule (optimizer state, count).
MLP = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Linear", "in_features": 64, "out_features": 32},
            {"type": "BatchNorm", "num_features": 32},
            {"type": "relu"},
            {"type": "Dropout", "rate": 0.2},
            {"type": "Linear", "in_features": 32, "out_features": 10},
        ],
    },
    "optimizer": {
        "type": "adamw",
        "learning_rate": {"type": "cosine_decay_schedule", "init_value": 0.01, "decay_steps": 60},
        "clip_grad_norm": 5.0,
    },
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 60, "batch_size": 32, "seed": 3, "eval_interval": 20, "log_interval": 5},
    "checkpoint": {"interval": 20, "keep": 2},
}


def rows(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def values(node):
    out = {}
    for path, variable in nnx.state(node).flat_state():
        value = variable.value
        if jax.numpy.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        out[path] = np.asarray(value)
    return out


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    return train(MLP, run_dir=tmp_path_factory.mktemp("full"), progress=False)


def test_short_run_learns_well_above_chance(full_run):
    assert full_run.step == 60
    assert full_run.test_accuracy > 0.85  # chance is 0.1
    assert full_run.checkpoint.name == "step_00000060"
    assert [p.name for p in sorted((full_run.run_dir / "checkpoints").iterdir())] == [
        "step_00000040",
        "step_00000060",
    ]


def test_metrics_log_and_plot(full_run):
    records = rows(full_run.run_dir / "metrics.jsonl")
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    test_steps = [r["step"] for r in records if r["split"] == "test"]
    val_steps = [r["step"] for r in records if r["split"] == "val"]
    assert train_steps == list(range(5, 61, 5)) and val_steps == [20, 40, 60]
    assert test_steps == [60]  # (the test split: at the end only)
    assert all(r["examples_per_second"] > 0 for r in records if r["split"] == "train")
    assert records[-1]["accuracy"] == full_run.test_accuracy
    assert (full_run.run_dir / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_manifest_holds_the_training_config(full_run):
    manifest = read_manifest(full_run.checkpoint)
    assert manifest["step"] == 60
    assert manifest["config"]["optimizer"] == {**MLP["optimizer"], "trainable": ["Param"]}
    assert manifest["config"]["train"]["seed"] == 3


def test_resume_reaches_the_parameters_of_an_uninterrupted_run(full_run, tmp_path):
    first = train(MLP, run_dir=tmp_path, progress=False, stop_at=20)  # an eval step
    assert first.step == 20 and first.checkpoint.name == "step_00000020"
    resumed = train(MLP, run_dir=tmp_path, progress=False, resume=True)
    assert resumed.step == 60
    want, got = values(full_run.model), values(resumed.model)
    assert want.keys() == got.keys()
    for path in want:
        np.testing.assert_array_equal(want[path], got[path], err_msg=str(path))
    for path, value in values(full_run.optimizer).items():
        np.testing.assert_array_equal(value, values(resumed.optimizer)[path], err_msg=str(path))
    full = rows(full_run.run_dir / "metrics.jsonl")
    again = rows(tmp_path / "metrics.jsonl")
    strip = lambda rows: [(r["step"], r["split"], r["loss"]) for r in rows]  # noqa: E731
    assert strip(again) == strip(full)


def test_resume_without_a_checkpoint_starts_at_zero(tmp_path, capsys):
    from rich.console import Console

    config = {**MLP, "train": {**MLP["train"], "steps": 4, "eval_interval": 2}}
    result = train(
        config,
        run_dir=tmp_path,
        resume=True,
        progress=True,
        console=Console(file=sys.stdout, width=1000),
    )
    assert result.step == 4
    out = capsys.readouterr().out
    assert "no checkpoint in" in out and "starting from step 0" in out
    assert "step      2/4  val loss" in out and "step      4/4  test loss" in out


def test_trainable_filter_freezes_other_kinds(tmp_path):
    config = {
        "model": {"type": "acme.GatedDense", "in_features": 64, "out_features": 10, "lora_rank": 4},
        "optimizer": {"type": "sgd", "learning_rate": 0.1, "trainable": ["acme.LoRAParam"]},
        "data": {"type": "digits", "layout": "flat"},
        "train": {"steps": 3, "batch_size": 16},
    }
    import nnx_plugins

    before = values(nnx_plugins.build(config, rngs=nnx.Rngs(0)))
    after = values(train(config, run_dir=tmp_path, progress=False).model)
    changed = sorted(p for p in before if not np.array_equal(before[p], after[p]))
    assert changed == [("lora_a",), ("lora_b",)]


def test_evaluate_a_checkpoint(full_run):
    metrics = evaluate(MLP, full_run.run_dir / "checkpoints")
    assert metrics["step"] == 60 and metrics["checkpoint"].endswith("step_00000060")
    assert metrics["accuracy"] == pytest.approx(full_run.test_accuracy)


def test_evaluate_refuses_a_checkpoint_of_another_model(full_run):
    other = {**MLP, "model": {"type": "Linear", "in_features": 64, "out_features": 10}}
    with pytest.raises(CheckpointError, match=r"model\.kernel: missing from the checkpoint"):
        evaluate(other, full_run.checkpoint)


@pytest.mark.parametrize(
    "model, data, match",
    [
        (
            {"type": "Linear", "in_features": 64, "out_features": 5},
            {"layout": "flat"},
            r"<dict>: model: the model returns float32\[2,5\] but the 10 classes of digits need "
            r"logits of shape \(batch, 10\): end the model with a layer of 10 outputs\.$",
        ),
        (
            {"type": "Linear", "in_features": 64, "out_features": 10},
            {"layout": "NHWC"},
            r"<dict>: model: Linear cannot take float32\[2,8,8,1\] from the data \(digits, layout "
            r"NHWC\): ValueError: Linear expects an input whose last axis is 64.* \(data\.layout: "
            r"flat gives digits as float32\[64\], for a Linear first layer",
        ),
    ],
)
def test_model_that_does_not_fit_the_data(tmp_path, model, data, match):
    with pytest.raises(ConfigError, match=match):
        train(
            {"model": model, "data": {"type": "digits", **data}}, run_dir=tmp_path, progress=False
        )


def test_missing_npz_file(tmp_path):
    config = {"model": MLP["model"], "data": {"type": "npz", "path": str(tmp_path / "none.npz")}}
    with pytest.raises(DataError, match=r"data\.path: no such file"):
        train(config, run_dir=tmp_path, progress=False)


def test_npz_training(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    (tmp_path / "c.yaml").write_text(
        textwrap.dedent("""\
        model: {type: Linear, in_features: 3, out_features: 2}
        optimizer: {type: sgd, learning_rate: 0.5}
        data: {type: npz, path: d.npz, test_fraction: 0.25}
        train: {epochs: 5, batch_size: 25}
        """)
    )
    result = train(tmp_path / "c.yaml", run_dir=tmp_path / "run", progress=False)
    # (150 training examples, 15 held out for validation: 5 batches of 25 per epoch)
    assert result.step == 25 and result.test_accuracy > 0.9


# -- the command line ------------------------------------------------------------------------
def test_cli_train_then_eval(tmp_path, capsys):
    from nnx_plugins.cli._main import main

    config = tmp_path / "mlp.json"
    config.write_text(json.dumps({**MLP, "train": {**MLP["train"], "steps": 10}}))
    assert main(["train", str(config), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "trained 10 steps in" in out and "test accuracy: " in out
    assert main(["eval", str(config), "--checkpoint", str(tmp_path / "run" / "checkpoints")]) == 0
    assert "(step 10): test accuracy" in capsys.readouterr().out
    assert main(["eval", str(config), "--checkpoint", str(tmp_path / "nothing")]) == 1
    assert "nothing:\n  no such directory" in capsys.readouterr().err


def test_cli_reports_config_errors_with_locations(tmp_path, capsys):
    from nnx_plugins.cli._main import main

    config = tmp_path / "bad.yaml"
    config.write_text(
        "model: {type: Linear, in_features: 64, out_features: 10}\n"
        "optimizer: {type: adam, learning_rat: 0.1}\n"
    )
    assert main(["train", str(config), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert f"{config}:2:39: optimizer.learning_rat: unknown argument 'learning_rat'" in err
    assert "Did you mean 'learning_rate'?" in err


@pytest.mark.parametrize(
    "mesh, match",
    [
        (
            "data=3",
            r"--mesh data=3 needs 3 devices but 1 \w+ device\(s\) are visible.*"
            r"xla_force_host_platform_device_count=3",
        ),
        (
            "pipeline=2",
            r"--mesh: unknown axis 'pipeline' in 'pipeline=2'; the mesh axes are data, fsdp and "
            r"model",
        ),
        ("data=0", r"--mesh expects AXIS=N"),
        ("model=2", r"--mesh model=2 needs 2 devices but 1"),
    ],
)
def test_cli_mesh_errors(tmp_path, capsys, mesh, match):
    import re

    from nnx_plugins.cli._main import main

    config = tmp_path / "c.json"
    config.write_text(json.dumps(MLP))
    assert main(["train", str(config), "--mesh", mesh, "--run-dir", str(tmp_path)]) == 1
    assert re.search(match, capsys.readouterr().err)


def test_batch_must_divide_over_the_data_axis(tmp_path):
    config = {**MLP, "train": {**MLP["train"], "batch_size": 30}}
    script = textwrap.dedent(f"""
        from nnx_plugins import train
        try:
            train({config!r}, run_dir={str(tmp_path)!r}, mesh={{"data": 4}}, progress=False)
        except ValueError as error:
            print(error)
    """)
    out = _run_with_devices(script, 4)
    assert "train.batch_size 30 must be divisible by the mesh's data axis (4)" in out


# -- many devices ----------------------------------------------------------------------------
def _run_with_devices(script, count):
    env = dict(
        os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={count}", JAX_PLATFORMS="cpu"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# The first Linear has no bias: a bias right before BatchNorm gets no gradient, and Adam turns
# its float noise into full-size steps that differ between any two device layouts (the loss
# does not depend on it; the eval-mode statistics, and so the test accuracy, do).
SHARDED = {
    "model": {
        "type": "Sequential",
        "layers": [
            {
                "type": "Linear",
                "in_features": 64,
                "out_features": 32,
                "use_bias": False,
                "kernel_metadata": {"sharding_names": [None, "model"]},
            },
            {"type": "BatchNorm", "num_features": 32},
            {"type": "relu"},
            {"type": "Dropout", "rate": 0.2},
            {
                "type": "Linear",
                "in_features": 32,
                "out_features": 10,
                "kernel_metadata": {"sharding_names": ["model", None]},
            },
        ],
    },
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 24, "batch_size": 32, "log_interval": 1, "eval_interval": 12},
}


def test_eight_devices_follow_the_one_device_loss_curve(tmp_path):
    script = textwrap.dedent(f"""
        import json, jax
        from nnx_plugins import train
        config = {SHARDED!r}
        curves = {{}}
        for name, mesh in [("one", None), ("data8", {{"data": 8}}),
                           ("data4_model2", {{"data": 4, "model": 2}})]:
            result = train(config, run_dir={str(tmp_path)!r} + "/" + name, mesh=mesh,
                           progress=False)
            with open(result.run_dir / "metrics.jsonl") as handle:
                rows = [json.loads(line) for line in handle]
            kernel = result.model.layers[0].kernel.value
            curves[name] = {{
                "loss": [r["loss"] for r in rows if r["split"] == "train"],
                "accuracy": result.test_accuracy,
                "devices": len(kernel.sharding.device_set),
                "spec": str(kernel.sharding.spec) if mesh else None}}
        print(json.dumps({{"count": jax.device_count(), "curves": curves}}))
    """)
    report = json.loads(_run_with_devices(script, 8).strip().splitlines()[-1])
    assert report["count"] == 8
    curves = report["curves"]
    assert len(curves["one"]["loss"]) == 24
    for name in ("data8", "data4_model2"):
        np.testing.assert_allclose(
            curves[name]["loss"], curves["one"]["loss"], rtol=2e-3, atol=2e-4
        )
        assert curves[name]["accuracy"] == pytest.approx(curves["one"]["accuracy"], abs=0.01)
        assert curves[name]["devices"] == 8
    assert curves["data4_model2"]["spec"] == "P(None, 'model')"
    # replicated: 'model' is not a mesh axis of size > 1 here
    assert curves["data8"]["spec"] == "P()"


def test_run_directories_are_never_mixed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**MLP, "train": {**MLP["train"], "steps": 2}}))
    first = train(config, progress=False)
    second = train(config, progress=False)
    assert (first.run_dir, second.run_dir) == (
        tmp_path.joinpath("runs", "tiny").relative_to(tmp_path),
        tmp_path.joinpath("runs", "tiny-1").relative_to(tmp_path),
    )
    assert train(config, progress=False, resume=True).run_dir == second.run_dir
    with pytest.raises(
        ValueError,
        match=r"runs/tiny already holds checkpoints \(newest: "
        r"step_00000002\)\. Pass --resume \(resume=True\) to continue that run, or "
        r"choose another --run-dir",
    ):
        train(config, run_dir="runs/tiny", progress=False)


def test_cli_interrupt_says_how_to_resume(tmp_path, capsys, monkeypatch):
    from nnx_plugins.cli._main import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_loop, "train", interrupted)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(MLP))
    assert main(["train", str(config)]) == 130
    err = capsys.readouterr().err
    assert "interrupted. The checkpoints written so far are intact" in err and "--resume" in err


def test_resume_with_a_changed_config_and_a_torn_log_line(tmp_path, capsys):
    from rich.console import Console

    short = {**MLP, "train": {**MLP["train"], "steps": 4, "eval_interval": 2, "log_interval": 2}}
    train(short, run_dir=tmp_path, progress=False)
    other = {**short, "optimizer": {"type": "sgd", "learning_rate": 0.1}}
    with pytest.raises(CheckpointError, match=r"optimizer\.opt_state\[0\]: unexpected entry"):
        train(other, run_dir=tmp_path, resume=True, progress=False)  # another state structure
    with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"step": 5, "spl')  # killed mid-write
    longer = {
        **short,
        "optimizer": {  # same state structure, another peak learning rate
            **MLP["optimizer"],
            "learning_rate": {**MLP["optimizer"]["learning_rate"], "init_value": 0.005},
        },
        "train": {**short["train"], "steps": 6},
    }
    console = Console(file=sys.stdout, width=1000)
    result = train(longer, run_dir=tmp_path, resume=True, progress=True, console=console)
    out = capsys.readouterr().out
    assert "note: the optimizer section(s) differ from the checkpoint's config" in out
    records = rows(tmp_path / "metrics.jsonl")
    assert result.step == 6 and [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6]


def test_resume_of_a_finished_run_trains_nothing(full_run, tmp_path):
    import shutil

    shutil.copytree(full_run.run_dir, tmp_path / "copy")
    again = train(MLP, run_dir=tmp_path / "copy", resume=True, progress=False)
    assert again.step == 60 and again.test_accuracy == full_run.test_accuracy
    assert again.checkpoint.name == "step_00000060"
    assert rows(tmp_path / "copy" / "metrics.jsonl") == rows(full_run.run_dir / "metrics.jsonl")


# -- run parts: non-finite losses, the best checkpoint, other tasks ------------------------------
POISON_STEP = 13


@pytest.fixture
def poisoned(nnx_registry):
    """A dataset whose batch of step 13 (1-based) holds a NaN."""
    from nnx_plugins import register_dataset
    from nnx_plugins.training.data._bundled import Digits

    @register_dataset("test.poisoned")
    class Poisoned(Digits):
        def __init__(self):
            super().__init__(layout="flat")

        def batch(self, step, batch_size, seed):
            batch = super().batch(step, batch_size, seed)
            if step + 1 == POISON_STEP:
                batch["inputs"] = batch["inputs"].copy()
                batch["inputs"][0, 0] = np.nan
            return batch

    return {
        **MLP,
        "data": {"type": "test.poisoned"},
        "train": {**MLP["train"], "steps": 40},
        "checkpoint": {"interval": 5, "keep": 2},
    }


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_finite_checkpoint(poisoned, tmp_path):
    from nnx_plugins import TrainingDivergedError, load

    with pytest.raises(
        TrainingDivergedError,
        match=rf"training stopped: the loss became NaN or infinite at step {POISON_STEP}; the last checkpoint, .*step_00000010, is finite",
    ) as info:
        train(poisoned, run_dir=tmp_path, progress=False)
    assert info.value.step == POISON_STEP and info.value.checkpoint.name == "step_00000010"
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert kept == ["step_00000005", "step_00000010"]
    for name in kept:
        model = load(tmp_path / "checkpoints" / name)
        assert all(np.isfinite(v).all() for v in values(model).values())
    assert max(r["step"] for r in rows(tmp_path / "metrics.jsonl")) == 10  # (no NaN logged)


def test_a_non_finite_loss_before_any_checkpoint_says_none_was_written(poisoned, tmp_path):
    from nnx_plugins import TrainingDivergedError

    late = {**poisoned, "checkpoint": {"interval": 100, "keep": 2}}
    with pytest.raises(
        TrainingDivergedError,
        match=rf"NaN or infinite at step {POISON_STEP}; no checkpoint was written before it: "
        r"train again after lowering the learning rate",
    ) as info:
        train(late, run_dir=tmp_path, progress=False)
    assert info.value.checkpoint is None and not list((tmp_path / "checkpoints").glob("step_*"))


def test_the_cli_reports_a_non_finite_loss_in_one_line(poisoned, tmp_path, capsys):
    import yaml

    from nnx_plugins.cli._main import main

    (tmp_path / "c.yaml").write_text(yaml.safe_dump(poisoned))
    assert (
        main(
            ["train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run"), "--no-progress"]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert (
        f"the loss became NaN or infinite at step {POISON_STEP}" in err and "Traceback" not in err
    )


def test_keep_best_keeps_the_best_checkpoint_beside_the_newest(tmp_path):
    config = {
        **MLP,
        "checkpoint": {
            "interval": 10,
            "keep": 1,
            "keep_best": {"metric": "val.loss", "mode": "max"},
        },
    }
    result = train(config, run_dir=tmp_path, progress=False)
    best = json.loads((tmp_path / "checkpoints" / "best.json").read_text())
    tests = [r for r in rows(tmp_path / "metrics.jsonl") if r["split"] == "val"]
    worst = max(tests, key=lambda r: r["loss"])
    assert best["step"] == worst["step"] == 20 and best["value"] == pytest.approx(worst["loss"])
    kept = sorted(
        p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith("step_")
    )
    assert kept == ["step_00000020", result.checkpoint.name]
    assert read_manifest(tmp_path / "checkpoints" / "step_00000020")["run"]["metrics"]["val"][
        "loss"
    ] == pytest.approx(worst["loss"])


def test_labels_outside_the_model_classes_are_named_before_training(tmp_path):
    np.savez(
        tmp_path / "d.npz",
        x=np.ones((50, 64)),
        y=np.r_[np.zeros(30, int), [3, 10], np.zeros(18, int)],
    )
    config = {**MLP, "data": {"type": "npz", "path": str(tmp_path / "d.npz")}}
    with pytest.raises(
        DataError,
        match=r"data: d\.npz: label y\[31\] is 10, outside the model's 10 classes \(0 to 9\)",
    ):
        train(config, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_regression_end_to_end_by_the_cli(tmp_path, capsys):
    from nnx_plugins.cli._main import main

    (tmp_path / "r.yaml").write_text(
        textwrap.dedent("""\
        model:
          type: Sequential
          layers:
            - {type: Linear, in_features: 10, out_features: 16}
            - {type: relu}
            - {type: Linear, in_features: 16, out_features: 1}
        task: {type: regression}
        data: {type: diabetes}
        optimizer: {type: adam, learning_rate: 0.05}
        train: {steps: 150, batch_size: 32}
        """)
    )
    assert (
        main(
            ["train", str(tmp_path / "r.yaml"), "--run-dir", str(tmp_path / "run"), "--no-progress"]
        )
        == 0
    )
    out = capsys.readouterr().out
    r2 = float(out.strip().splitlines()[-1].split(" r2 ")[1])
    assert "test loss" in out and " mse " in out and " mae " in out and 0.2 < r2 < 1
    assert (
        main(
            [
                "eval",
                str(tmp_path / "r.yaml"),
                "--checkpoint",
                str(tmp_path / "run" / "checkpoints"),
            ]
        )
        == 0
    )
    assert f" r2 {r2:.5g}" in capsys.readouterr().out


TEXT_MODEL = {
    "type": "Sequential",
    "layers": [
        {"type": "Embed", "num_embeddings": 40, "features": 16},
        {"type": "Linear", "in_features": 16, "out_features": 40},
    ],
}


def test_a_language_model_trains_and_its_vocabulary_is_held_to(tmp_path):
    (tmp_path / "a.txt").write_text("the cat sat on the mat. " * 80)
    config = {
        "model": TEXT_MODEL,
        "task": {"type": "language_model"},
        "data": {
            "type": "text",
            "path": str(tmp_path / "a.txt"),
            "seq_len": 16,
            "level": "characters",
        },
        "optimizer": {"type": "adam", "learning_rate": 0.05},
        "train": {"steps": 40, "batch_size": 8},
    }
    result = train(config, run_dir=tmp_path / "run", progress=False)
    assert set(result.metrics) == {"loss", "perplexity", "bits_per_token", "accuracy"}
    assert result.metrics["bits_per_token"] < 2.0  # (a repeated sentence of 10 characters)
    vocabulary = read_manifest(result.checkpoint)["run"]["data"]["vocabulary"]
    assert vocabulary == "".join(sorted(set("the cat sat on the mat. ")))
    (tmp_path / "a.txt").write_text("the dog sat on the log! " * 80)  # (other characters)
    with pytest.raises(
        CheckpointError,
        match=r"data: the checkpoint's character vocabulary \(11 characters\) differs from this text's \(12\): new characters '!dgl', missing characters '\.cm'",
    ):
        evaluate(config, result.checkpoint)
    more = {**config, "train": {**config["train"], "steps": 60}}
    with pytest.raises(CheckpointError, match=r"differs from this text's"):
        train(more, run_dir=tmp_path / "run", progress=False, resume=True)


def test_a_non_finite_state_is_never_checkpointed(nnx_registry, tmp_path):
    from nnx_plugins import Callback, TrainingDivergedError, register_callback

    @register_callback("test.spoil")
    class Spoil(Callback):
        def after_step(self, run, step):
            if step == 7:  # (the running mean only: the loss stays finite in training mode)
                run.model.layers[1].mean.value = run.model.layers[1].mean.value * np.nan

    config = {**MLP, "callbacks": ["test.spoil"], "checkpoint": {"interval": 5, "keep": 3}}
    with pytest.raises(
        TrainingDivergedError,
        match=r"the weights or optimizer state hold NaN or infinite values at step 10; the last checkpoint, .*step_00000005, is finite",
    ):
        train(config, run_dir=tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_00000005"]


def test_a_dataset_without_epochs_needs_train_steps(nnx_registry, tmp_path):
    from nnx_plugins import register_dataset
    from nnx_plugins.training.data._base import Dataset

    @register_dataset("test.endless")
    class Endless(Dataset):
        def describe(self):
            return Digits(layout="flat").describe()

        def batch(self, step, batch_size, seed):
            return Digits(layout="flat").batch(step, batch_size, seed)

        def test_batches(self, batch_size):
            return Digits(layout="flat").test_batches(batch_size)

    config = {**MLP, "data": {"type": "test.endless"}, "train": {"batch_size": 32}}
    with pytest.raises(ConfigError, match=r"train: Endless has no epochs: give train\.steps"):
        train(config, run_dir=tmp_path, progress=False)
    config["train"] = {"batch_size": 32, "steps": 10}
    assert train(config, run_dir=tmp_path, progress=False).step == 10


def test_every_evaluation_reaches_the_callbacks_the_last_included(nnx_registry, tmp_path):
    from nnx_plugins import Callback, register_callback

    seen = []

    @register_callback("test.count_evaluations")
    class Count(Callback):
        def after_eval(self, run, step, results):
            seen.append((step, sorted(results)))
            return False

    config = {
        **MLP,
        "train": {**MLP["train"], "steps": 50, "eval_interval": 5},
        "callbacks": ["test.count_evaluations"],
        "checkpoint": {},
    }
    result = train(config, run_dir=tmp_path, progress=False)
    assert [step for step, _ in seen] == list(range(5, 51, 5))  # (10 evaluations, 10 calls)
    assert seen[0][1] == ["val"] and seen[-1][1] == ["test", "val"]  # (the last: val and test)
    assert result.metrics == {
        k: v for k, v in rows(tmp_path / "metrics.jsonl")[-1].items() if k in result.metrics
    }

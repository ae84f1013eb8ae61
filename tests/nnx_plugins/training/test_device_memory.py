"""What each device holds, shown and checked before a run over a mesh allocates anything (the
figures over 8 simulated devices: test_layouts.py and benchmarks/fsdp.py)."""

import json

import jax
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import nnx_core as nnx
from nnx_plugins import ConfigError, train
from nnx_plugins.training import _device_memory
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._device_memory import (
    DeviceMemory,
    check_device_memory,
    memory_line,
    memory_rows,
    per_device_bytes,
)
from nnx_plugins.training._memory_report import layout_memory, layout_step_memory
from nnx_plugins.training._mesh import make_mesh, run_layout

CONFIG = {
    "model": {
        "type": "Sequential",
        "layers": [
            {"type": "Linear", "in_features": 64, "out_features": 32},
            {"type": "relu"},
            {"type": "Linear", "in_features": 32, "out_features": 10},
        ],
    },
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "data": {"type": "digits", "layout": "flat"},
    "train": {"steps": 2, "batch_size": 32},
}
PARAMS = 4 * (64 * 32 + 32 + 32 * 10 + 10)  # float32


def test_a_block_counts_its_share_and_a_replicated_array_counts_whole():
    mesh = make_mesh({"data": 1})
    whole = jax.ShapeDtypeStruct((8, 4), "float32", sharding=NamedSharding(mesh, PartitionSpec()))
    state = nnx.State({"a": nnx.Param(whole), "b": nnx.BatchStat(whole)})
    assert per_device_bytes(state) == 256
    assert per_device_bytes(state, where=lambda v: isinstance(v, nnx.Param)) == 128


def test_one_device_of_a_mesh_holds_everything():
    config = load_train_config(CONFIG)
    memory = layout_memory(config, run_layout(config, {"data": 1}), allow_large=False)
    # (adam: mu and nu, its count; the optimizer's step)
    assert memory == DeviceMemory("--mesh data=1", 1, 1, PARAMS, 2 * PARAMS + 8, PARAMS)
    measured = layout_step_memory(config, run_layout(config, {"data": 1}), allow_large=False)
    # (the step holds at least the parameters, the optimizer state and the batch)
    assert measured.step_bytes >= 3 * PARAMS + 32 * 64 * 4
    assert measured.total_bytes == measured.step_bytes
    assert memory_line(measured).startswith(
        "memory per device (--mesh data=1, 1 devices): parameters 9.4 KB, optimizer state "
        "18.8 KB, train step peak "
    )
    assert [row[0] for row in memory_rows(measured)] == [
        "parameters",
        "optimizer state",
        "train step peak",
        "total",
    ]


def test_a_run_that_does_not_fit_is_refused_with_the_figures(monkeypatch):
    config = load_train_config(CONFIG)
    memory = DeviceMemory("--mesh fsdp=8", 8, 8, 1000, 2000, 1000)
    monkeypatch.setattr(_device_memory, "_host_available", lambda: 8 * 3500)
    with pytest.raises(
        ConfigError,
        match=r"model: training over --mesh fsdp=8 needs 3\.9 KB on each of its 8 devices "
        r"\(parameters 1000 B, optimizer state 2\.0 KB, gradients 1000 B\) but the 8 CPU devices "
        r"of this process share 27\.3 KB of available host memory, 3\.4 KB each\. "
        r"Split the parameters over more devices \(--mesh fsdp=N, model=M\), make the model or "
        r"the batch smaller, or pass --allow-large",
    ):
        check_device_memory(memory, config, allow_large=False)
    assert check_device_memory(memory, config, allow_large=True) is memory
    stepped = DeviceMemory("--mesh fsdp=8", 8, 8, 1000, 2000, 1000, step_bytes=5000)
    with pytest.raises(ConfigError, match=r"the compiled train step's peak 4\.9 KB\)"):
        check_device_memory(stepped, config, allow_large=False)


@pytest.mark.parametrize("room", ["parameters", "step"])
def test_train_refuses_before_the_first_step(tmp_path, monkeypatch, room):
    config = load_train_config(CONFIG)
    measured = layout_step_memory(config, run_layout(config, {"data": 1}), allow_large=False)
    # room for the parameters, the optimizer state and the gradients but not for the step, or
    # for nothing
    estimate = measured.parameter_bytes + measured.optimizer_bytes + measured.gradient_bytes
    assert measured.step_bytes > estimate
    limit = estimate if room == "step" else 100
    monkeypatch.setattr(_device_memory, "_host_available", lambda: limit)
    what = "the compiled train step's peak" if room == "step" else "gradients"
    with pytest.raises(ConfigError, match=f"training over --mesh data=1 needs .*{what}"):
        train(CONFIG, run_dir=tmp_path / "run", mesh={"data": 1}, progress=False)
    assert not (tmp_path / "run").exists()  # (nothing started, nothing written)


def test_train_shows_what_each_device_holds(tmp_path):
    from rich.console import Console

    console = Console(record=True, width=200)
    result = train(CONFIG, run_dir=tmp_path, mesh={"data": 1}, progress=False, console=console)
    assert result.step == 2
    assert (
        "memory per device (--mesh data=1, 1 devices): parameters 9.4 KB, optimizer state "
        "18.8 KB, train step peak" in console.export_text()
    )
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["split"] == "test"


# -- nnx build --summary --mesh ----------------------------------------------------------------
def build_command(tmp_path, capsys, config, *flags):
    from nnx_plugins.cli._main import main

    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    status = main(["build", str(path), *flags])
    out, err = capsys.readouterr()
    return status, out, err


def test_build_shows_what_each_device_holds(tmp_path, capsys):
    status, out, err = build_command(tmp_path, capsys, CONFIG, "--mesh", "data=1")
    assert (status, err) == (0, "")
    assert "per device (--mesh data=1, 1 devices)" in out
    for row in ("parameters", "9.4 KB", "optimizer state", "18.8 KB", "train step peak", "total"):
        assert row in out
    model_only = {"model": CONFIG["model"], "mesh": {"data": 1}}  # (the config's own mesh)
    status, out, err = build_command(tmp_path, capsys, model_only)
    assert status == 0 and "gradients (estimate)" in out
    assert "train step peak: not compiled (give the config a data section)" in out


@pytest.mark.parametrize(
    ("mesh", "message"),
    [
        (
            "pipeline=2",
            "nnx: error: --mesh: unknown axis 'pipeline' in 'pipeline=2'; the mesh axes "
            "are data, fsdp and model (e.g. --mesh data=2,fsdp=2,model=2).\n",
        ),
        (
            "fsdp=2",
            "nnx: error: --mesh fsdp=2 needs 2 devices but 1 CPU device(s) are visible. On "
            "CPU, simulate more with XLA_FLAGS=--xla_force_host_platform_device_count=2.\n",
        ),
    ],
)
def test_build_with_a_bad_mesh(tmp_path, capsys, mesh, message):
    status, out, err = build_command(tmp_path, capsys, CONFIG, "--mesh", mesh)
    assert (status, err) == (1, message)


def test_build_refuses_what_does_not_fit_unless_allowed(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_device_memory, "_host_available", lambda: 1000)
    status, out, err = build_command(tmp_path, capsys, CONFIG, "--mesh", "data=1")
    assert status == 1 and "per device (--mesh data=1, 1 devices)" in out
    assert "training over --mesh data=1 needs" in err and "the host has 1000 B available" in err
    status, _, err = build_command(tmp_path, capsys, CONFIG, "--mesh", "data=1", "--allow-large")
    assert (status, err) == (0, "")


def test_a_rule_naming_nothing_is_a_warning_line(tmp_path, capsys):
    config = {**CONFIG, "sharding_rules": {"embd": "fsdp"}}
    status, _, err = build_command(tmp_path, capsys, config, "--mesh", "data=1")
    assert status == 0
    assert err.startswith(
        "nnx: warning: sharding_rules names ['embd'], which no layer of the model "
        "declares; those rules do nothing. Did you mean 'embed'?"
    )

"""The --mesh grammar and the device mesh (multi-device runs: test_layouts.py, test_loop.py)."""

import jax
import numpy as np
import pytest

from nnx_plugins.training._mesh import (
    batch_placer,
    check_axes,
    first_bad_step,
    make_mesh,
    mesh_text,
    parse_mesh,
)


def test_parse_and_make_mesh():
    assert parse_mesh("data=1") == {"data": 1}
    assert parse_mesh("data=4, model=2") == {"data": 4, "model": 2}
    assert parse_mesh("model=2,fsdp=2,data=2") == {"model": 2, "fsdp": 2, "data": 2}
    assert parse_mesh("fsdp=8") == {"fsdp": 8}
    mesh = make_mesh({"data": 1})
    assert mesh.axis_names == ("data", "fsdp", "model") and mesh.devices.shape == (1, 1, 1)
    assert make_mesh({"fsdp": 1}).shape == {"data": 1, "fsdp": 1, "model": 1}


def test_mesh_text_names_the_axes_in_use():
    assert mesh_text({"data": 2, "fsdp": 1, "model": 4}) == "--mesh data=2,model=4"
    assert mesh_text({"data": 1, "fsdp": 1, "model": 1}) == "--mesh data=1"


@pytest.mark.parametrize(
    "text",
    ["data=0", "data=x", "data=2,data=2", "data=²", "data=٣", "", " ", ",", "=2"]
    + ["data=" + "9" * 100, "data=-1", "data=1,model=", "fsdp=2,,model=2"],
)
def test_bad_mesh_text(text):
    with pytest.raises(
        ValueError,
        match=r"--mesh expects AXIS=N\[,AXIS=N\.\.\.\] with the axes data, fsdp and model, "
        r"each at most once, and positive sizes, e\.g\. data=2,fsdp=2,model=2; got ",
    ):
        parse_mesh(text)


@pytest.mark.parametrize("text", ["batch=2", "data=2,pipeline=2", "Data=2", "fsdp=2,modle=2"])
def test_an_unknown_mesh_axis_names_the_known_ones(text):
    with pytest.raises(
        ValueError,
        match=r"--mesh: unknown axis '\w+' in .*; the mesh axes are data, fsdp and model",
    ):
        parse_mesh(text)


def test_an_unknown_axis_from_python_names_the_known_ones():
    # (before issue 28 this built a 1x1 mesh and trained on one device)
    with pytest.raises(
        ValueError,
        match=r"mesh=\{'pipeline': 8\} names unknown axes \['pipeline'\]; the mesh axes are data, "
        r"fsdp and model",
    ):
        make_mesh({"pipeline": 8})
    with pytest.raises(
        ValueError, match=r"mesh sizes must be positive integers, got \{'fsdp': 0\}"
    ):
        check_axes({"fsdp": 0})
    with pytest.raises(ValueError, match=r"positive integers, got \{'data': True\}"):
        check_axes({"data": True})


def test_a_mesh_larger_than_the_devices_says_how_to_simulate_more():
    with pytest.raises(
        ValueError,
        match=r"--mesh fsdp=1024 needs 1024 devices but .*"
        r"XLA_FLAGS=--xla_force_host_platform_device_count=1024",
    ):
        make_mesh({"fsdp": 1024})


def test_the_first_bad_step_counter_is_committed_where_the_step_returns_it():
    counter = first_bad_step(None)
    assert int(counter) == 0 and counter.committed
    mesh = make_mesh({"data": 1})
    placed = first_bad_step(mesh)
    assert placed.sharding == jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def test_the_batch_is_split_over_data_and_fsdp_together():
    mesh = make_mesh({"data": 1})
    batch = batch_placer(mesh, 4)({"x": np.zeros((4, 2), np.float32)})
    assert batch["x"].sharding.spec == jax.sharding.PartitionSpec(("data", "fsdp"))


# -- several processes (the real runs: test_processes.py) --------------------------------------
class FakeDevice:
    platform = "cpu"

    def __init__(self, process_index, id):
        self.process_index, self.id = process_index, id

    def __repr__(self):
        return f"d{self.process_index}.{self.id}"


@pytest.fixture
def two_processes(monkeypatch):
    from nnx_plugins.training import _mesh

    devices = [FakeDevice(p, 4 * p + i) for p in (0, 1) for i in range(4)]
    monkeypatch.setattr(_mesh.jax, "process_count", lambda: 2)
    monkeypatch.setattr(_mesh.jax, "devices", lambda: devices)
    return devices


def test_a_mesh_over_processes_takes_an_equal_share_of_each(two_processes):
    from nnx_plugins.training._mesh import _spread

    assert [str(d) for d in _spread(two_processes, 4, "--mesh data=4")] == [
        "d0.0",
        "d0.1",
        "d1.4",
        "d1.5",
    ]
    assert _spread(two_processes, 8, "--mesh data=8") == two_processes


def test_a_mesh_that_cannot_be_split_over_the_processes(two_processes):
    from nnx_plugins.training._mesh import _spread

    with pytest.raises(
        ValueError,
        match=r"--mesh data=3 has 3 devices, which cannot be split evenly over 2 "
        r"processes; use a multiple of 2 \(e\.g\. data=4\)",
    ):
        make_mesh({"data": 3})
    with pytest.raises(
        ValueError,
        match=r"takes 3 devices from each of the 2 processes, but process\(es\) 1 \(2 devices\) "
        r"have fewer",
    ):
        _spread(two_processes[:6], 6, "--mesh data=6")


def test_too_few_devices_over_processes_says_how_many_each_needs(two_processes):
    with pytest.raises(
        ValueError,
        match=r"needs 16 devices but 8 CPU device\(s\) are visible over 2 processes\. On CPU, "
        r"simulate more with XLA_FLAGS=--xla_force_host_platform_device_count=8\.",
    ):
        make_mesh({"data": 16})


@pytest.mark.parametrize("mesh", ["", "data=²"])
def test_a_bad_mesh_on_the_command_line_is_a_clear_error(tmp_path, capsys, mesh):
    from nnx_plugins.cli._main import main

    config = tmp_path / "c.yaml"
    config.write_text("model: {type: Linear, in_features: 64, out_features: 10}\n")
    assert main(["train", str(config), "--mesh", mesh, "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err == (
        "nnx: error: --mesh expects AXIS=N[,AXIS=N...] with the axes data, fsdp and model, each "
        f"at most once, and positive sizes, e.g. data=2,fsdp=2,model=2; got {mesh!r}.\n"
    )
    assert not (tmp_path / "run").exists()

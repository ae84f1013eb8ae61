"""The --mesh grammar and the device mesh (multi-device runs: tests/nnx_plugins/training/test_loop.py)."""

import pytest

from nnx_plugins.training._mesh import make_mesh, parse_mesh


def test_parse_and_make_mesh():
    assert parse_mesh("data=1") == {"data": 1}
    assert parse_mesh("data=4, model=2") == {"data": 4, "model": 2}
    mesh = make_mesh({"data": 1})
    assert mesh.axis_names == ("data", "model") and mesh.devices.shape == (1, 1)


@pytest.mark.parametrize("text", ["model=2", "data=0", "data=x", "data=2,data=2", "batch=2"])
def test_bad_mesh_text(text):
    with pytest.raises(ValueError, match=r"--mesh (expects data=N|needs a 'data' axis)"):
        parse_mesh(text)


def test_a_mesh_larger_than_the_devices_says_how_to_simulate_more():
    with pytest.raises(
        ValueError,
        match=r"needs 1024 devices but .*XLA_FLAGS=--xla_force_host_platform_device_count=1024",
    ):
        make_mesh({"data": 1024})

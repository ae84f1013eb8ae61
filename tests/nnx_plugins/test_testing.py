"""The conformance kit itself: it passes good layers and names every problem of bad ones."""

import pytest

import nnx_core
from nnx_core import Module, Rngs
from nnx_plugins.testing import (
    LayerCheckError,
    check_layer,
    check_variable_type,
    fake_distribution,
    isolated_registry,
)

from .conftest import installed


class Normalizing(Module):
    """Breaks the round trip: stores ``sizes`` as a tuple of its own making."""

    def __init__(self, sizes: int | list[int], *, rngs: Rngs):
        self.sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)


def test_check_layer_passes_builtins_and_activations(nnx_registry):
    assert check_layer(
        "Conv",
        {"in_features": 1, "out_features": 2, "kernel_size": [3, 3]},
        input_shape=(1, 5, 5, 1),
    ).output_shape == (1, 5, 5, 2)
    assert check_layer("relu").spec.is_activation


def test_check_layer_reports_round_trip_differences(fake_modules):
    fake_modules.Normalizing = Normalizing
    pack = fake_distribution(
        "norm-pack", entry_points={"nnx.layers": {"norm.Normalizing": "fakepack:Normalizing"}}
    )
    with isolated_registry(distributions=[*installed("nnx-jax"), pack]):
        check_layer("norm.Normalizing", {"sizes": [2]})
        with pytest.raises(LayerCheckError, match=r"round trip differs at sizes: \[3\] != 3"):
            check_layer("norm.Normalizing", {"sizes": 3})


def test_check_variable_type(nnx_registry, monkeypatch):
    assert check_variable_type("acme.LoRAParam").__name__ == "LoRAParam"
    monkeypatch.setattr(nnx_core, "variable_name", lambda cls: "wrong")
    with pytest.raises(
        LayerCheckError, match=r"nnx_core.variable_name\(LoRAParam\) is not 'acme.LoRAParam'"
    ):
        check_variable_type("acme.LoRAParam")


class Fragile(Module):
    """Stores its argument under another name (to_config fails) and cannot run forward."""

    def __init__(self, features: int, *, rngs: Rngs):
        self.size = features

    def __call__(self, x):
        raise ValueError("forward is broken")


class Unbuildable(Module):
    def __init__(self, features: int, *, rngs: Rngs):
        raise RuntimeError("init is broken")


def test_check_layer_collects_the_failures_of_the_layers_own_code(nnx_registry):
    from nnx_plugins import register_layer

    register_layer("kit.Fragile")(Fragile)
    register_layer("kit.Unbuildable")(Unbuildable)
    with pytest.raises(LayerCheckError) as info:
        check_layer("kit.Fragile", {"features": 3}, input_shape=(2, 3))
    assert str(info.value).splitlines() == [
        "check_layer('kit.Fragile') failed:",
        "  to_config(layer) failed: ValueError: to_config cannot read Fragile.features at model: "
        "store each constructor argument as an attribute of the same name, or give the class a "
        "config_model.",
        "  the forward pass on (2, 3) failed: ValueError: forward is broken",
    ]
    with pytest.raises(
        LayerCheckError,
        match=r"building the layer failed: ConfigError: 1 problem in <dict>:\n .* building "
        r"kit.Unbuildable raised RuntimeError: init is broken",
    ):
        check_layer("kit.Unbuildable", {"features": 3}, input_shape=(2, 3))
    with pytest.raises(
        LayerCheckError,
        match=r"(?s)validating the config failed: ConfigError: .*unknown key 'featurez'",
    ):
        check_layer("kit.Fragile", {"featurez": 3})
    with pytest.raises(
        LayerCheckError, match=r"looking up 'kit.Nope' failed: UnknownNameError: Unknown layer"
    ):
        check_layer("kit.Nope")


# -- the run-part checks ---------------------------------------------------------------------
def test_run_part_checks_pass_for_the_builtins(nnx_registry, tmp_path):
    import jax.numpy as jnp

    from nnx_plugins.testing import (
        check_callback,
        check_dataset,
        check_logger,
        check_metric,
        check_task,
    )

    assert check_dataset("diabetes").describe().inputs.shape == (10,)
    assert check_task(
        "classification", data={"type": "digits", "layout": "flat"}, output_shape=(10,)
    )
    assert (
        float(check_metric("mse", values={"predictions": jnp.ones(2), "targets": jnp.zeros(2)}))
        == 1.0
    )
    assert check_logger("jsonl", run_dir=tmp_path / "run") == ["metrics.jsonl"]
    assert check_callback("ema").decay == 0.999


def test_run_part_checks_list_what_is_wrong(nnx_registry, tmp_path):
    import itertools

    import numpy as np

    from nnx_core.metrics import Average
    from nnx_plugins import (
        ArrayDataset,
        Callback,
        Logger,
        Task,
        register_callback,
        register_dataset,
        register_logger,
        register_metric,
        register_task,
    )
    from nnx_plugins.testing import (
        PartCheckError,
        check_callback,
        check_dataset,
        check_logger,
        check_metric,
        check_task,
    )

    counter = itertools.count()

    @register_dataset("bad.data")
    class Impure(ArrayDataset):
        def __init__(self):
            super().__init__(np.zeros((8, 2)), np.zeros(8, int), np.zeros((2, 2)), np.zeros(2, int))

        def batch(self, step, batch_size, seed):
            batch = super().batch(step, batch_size, seed)
            return {**batch, "inputs": batch["inputs"] + next(counter)}

    with pytest.raises(
        PartCheckError,
        match=r"batch\(0, \.\.\.\) differs between two calls: it must be a pure function",
    ):
        check_dataset("bad.data", batch_size=2)

    @register_task("bad.task")
    class Vector(Task):
        gives = ("loss", "predictions")

        def loss(self, outputs, batch):
            return outputs.sum(axis=1), {"loss": outputs}

    with pytest.raises(
        PartCheckError,
        match=r"(?s)loss\(\) gave .* as the loss; it must be a float scalar.*does not give 'predictions'",
    ):
        check_task("bad.task", data="diabetes", output_shape=(1,))

    @register_metric("bad.metric")
    class Remembers(Average):
        requires = ("loss",)

        def reset(self):
            pass

        def update(self, *, loss, **_):
            super().update(values=loss)

        def compute(self):
            return self.total.value

    import jax.numpy as jnp

    with pytest.raises(
        PartCheckError, match=r"after reset\(\) and the same update, compute\(\) differs"
    ):
        check_metric("bad.metric", values={"loss": jnp.array([1.0, 3.0, 5.0])})
    with pytest.raises(PartCheckError, match=r"values lack \['loss'\], which it requires"):
        check_metric("bad.metric", values={})

    @register_logger("bad.logger")
    class Outside(Logger):
        def open(self, run_dir, start):
            (run_dir.parent / "stray.txt").write_text("oops")

        def write(self, record):
            pass

    with pytest.raises(
        PartCheckError,
        match=r"(?s)it wrote nothing in the run directory.*it wrote outside the run directory",
    ):
        check_logger("bad.logger", run_dir=tmp_path / "run")

    @register_callback("bad.callback")
    class Opaque(Callback):
        def state(self):
            return {"when": object()}

        def watches(self):
            return {"metric": "loss"}

    with pytest.raises(
        PartCheckError,
        match=r"(?s)state\(\) is not JSON.*it watches 'loss' \(argument 'metric'\): expected split\.key",
    ):
        check_callback("bad.callback")
    with pytest.raises(
        PartCheckError, match=r"the task 'regression' refused its config \{'loss': 'l3'\}"
    ):
        check_task("regression", {"loss": "l3"})

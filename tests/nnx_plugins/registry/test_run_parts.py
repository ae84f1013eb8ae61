"""The five run-part groups on the registry's machinery: entry points of the pip-installed pack,
its pluggy hook, in-process registration, collisions, broken plugins, did-you-mean."""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from nnx_plugins import (
    ConfigError,
    NameCollisionError,
    PluginLoadError,
    PluginNameError,
    PluginWarning,
    Settings,
    config_schema,
    get_run_part,
    register_callback,
    register_dataset,
    register_logger,
    register_metric,
    register_task,
)
from nnx_plugins.registry._listing import offers
from nnx_plugins.testing import fake_distribution
from nnx_plugins.training._config import load_train_config

MODEL = {"type": "Linear", "in_features": 64, "out_features": 10}


@pytest.mark.parametrize(
    "kind, name, target",
    [
        ("dataset", "acme.waves", "acme_layers.waves:Waves"),
        ("task", "acme.quantile", "acme_layers.quantile:Quantile"),
        ("logger", "acme.text", "acme_layers.text_log:TextLog"),
    ],
)
def test_the_installed_pack_provides_parts_through_entry_points(nnx_registry, kind, name, target):
    (offer,) = [o for o in offers(nnx_registry, kind) if o.name == name]
    assert (offer.plugin.distribution, offer.target, offer.status) == (
        "acme-layers",
        target,
        "available",
    )
    cls = get_run_part(kind, name)
    assert f"{cls.__module__}:{cls.__qualname__}" == target


def test_the_pack_hook_provides_a_callback(nnx_registry):
    cls = get_run_part("callback", "acme.stop_below")
    assert cls.__module__ == "acme_layers.plugin"
    assert "acme.stop_below" in nnx_registry.names("callback")


def test_builtins_are_unqualified_names_of_nnx(nnx_registry):
    assert {"classification", "regression", "language_model"} <= set(nnx_registry.names("task"))
    assert {"digits", "diabetes", "npz", "text"} <= set(nnx_registry.names("dataset"))
    assert {"accuracy", "top_k_accuracy", "mse", "mae", "r2", "perplexity"} <= set(
        nnx_registry.names("metric")
    )
    assert {"jsonl", "csv", "tensorboard"} <= set(nnx_registry.names("logger"))
    assert {"early_stopping", "ema"} <= set(nnx_registry.names("callback"))


def test_listing_run_parts_imports_neither_jax_nor_a_pack():
    code = textwrap.dedent("""
        import sys
        from nnx_plugins.cli._main import main
        assert main(["tasks", "list"]) == 0 and main(["datasets", "list", "acme"]) == 0
        print(sorted(m for m in ("jax", "pydantic", "acme_layers.waves") if m in sys.modules))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_in_process_registration_of_each_kind(nnx_registry):
    from nnx_core.metrics import Average
    from nnx_plugins import Callback, Logger, Task

    @register_task("mine.task")
    class MyTask(Task):
        def loss(self, outputs, batch):
            return outputs.mean(), {}

    @register_dataset("mine.data")
    class MyData:
        def describe(self): ...
        def batch(self, step, batch_size, seed): ...
        def test_batches(self, batch_size): ...

    @register_metric("mine.metric")
    class MyMetric(Average):
        pass

    @register_logger("mine.logger")
    class MyLogger(Logger):
        def write(self, record):
            pass

    @register_callback("mine.callback")
    class MyCallback(Callback):
        pass

    for kind, name, cls in [
        ("task", "mine.task", MyTask),
        ("dataset", "mine.data", MyData),
        ("metric", "mine.metric", MyMetric),
        ("logger", "mine.logger", MyLogger),
        ("callback", "mine.callback", MyCallback),
    ]:
        assert get_run_part(kind, name) is cls
    config = load_train_config({"model": MODEL, "task": "mine.task", "loggers": ["mine.logger"]})
    assert config.sections["task"].type == "mine.task"


@pytest.mark.parametrize(
    "decorate, obj, error, match",
    [
        (
            register_task,
            type("Plain", (), {"loss": lambda self, o, b: None}),
            PluginNameError,
            r"without a namespace",
        ),
        (
            register_task,
            type("NoLoss", (), {}),
            PluginLoadError,
            r"provides task 'mine.t' as the class NoLoss, which has no method 'loss'",
        ),
        (
            register_dataset,
            type("Half", (), {"describe": lambda self: None}),
            PluginLoadError,
            r"has no method 'batch' \(a dataset needs describe, batch, test_batches\)",
        ),
        (
            register_metric,
            type("NotMetric", (), {"reset": 1, "update": 1, "compute": 1}),
            PluginLoadError,
            r"not a subclass of nnx_core\.metrics\.Metric",
        ),
        (
            register_logger,
            object(),
            PluginLoadError,
            r"provides logger 'mine.t' as <object object at .*>, which is not a class",
        ),
        (register_callback, len, PluginLoadError, r"which is not a class"),
    ],
)
def test_in_process_registration_is_checked_at_once(nnx_registry, decorate, obj, error, match):
    name = "Unqualified" if error is PluginNameError else "mine.t"
    with pytest.raises(error, match=match):
        decorate(name)(obj)


def test_a_name_the_pack_provides_cannot_be_registered_in_process(nnx_registry):
    class Other:
        def describe(self): ...
        def batch(self, *a): ...
        def test_batches(self, *a): ...

    with pytest.raises(
        NameCollisionError, match=r"Dataset 'acme.waves' is already provided by acme-layers 0\.1\.0"
    ):
        register_dataset("acme.waves")(Other)


COLLIDING = fake_distribution(
    "other-parts", "2.0", entry_points={"nnx.datasets": {"acme.waves": "fakepack:OtherGatedDense"}}
)
BROKEN = fake_distribution(
    "broken-parts", "0.3", entry_points={"nnx.tasks": {"broken.task": "boom:Task"}}
)


def test_two_distributions_of_one_name_collide_and_a_preference_settles_it(with_fakes):
    with with_fakes(COLLIDING):
        with pytest.raises(
            NameCollisionError,
            match=r"Dataset 'acme.waves' is provided by 2 distributions: acme-layers 0\.1\.0 .* and other-parts 2\.0",
        ):
            get_run_part("dataset", "acme.waves")
        with pytest.raises(
            ConfigError, match=r"data\.type: Dataset 'acme.waves' is provided by 2 distributions"
        ):
            load_train_config({"model": MODEL, "data": {"type": "acme.waves"}})
    with with_fakes(COLLIDING, settings=Settings(prefer={"acme.waves": "acme-layers"})):
        assert get_run_part("dataset", "acme.waves").__module__ == "acme_layers.waves"


def test_a_broken_plugin_is_isolated(with_fakes):
    with with_fakes(BROKEN):
        with pytest.warns(
            PluginWarning,
            match=r"broken-parts 0\.3 failed to load task 'broken.task' from boom:Task: RuntimeError: boom at import",
        ):
            with pytest.raises(PluginLoadError):
                get_run_part("task", "broken.task")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            config = load_train_config({"model": MODEL, "task": "regression", "data": "diabetes"})
        assert config.sections["task"].type == "regression"
    with with_fakes(BROKEN, settings=Settings(strict=True)):
        with pytest.raises(PluginLoadError, match=r"broken-parts 0\.3 failed to load task"):
            get_run_part("task", "broken.task")


def test_a_broken_part_is_left_out_of_the_schema(with_fakes):
    with with_fakes(BROKEN):
        with pytest.warns(PluginWarning):
            schema = config_schema()
    titles = [s.get("title") for s in schema["properties"]["task"]["anyOf"]]
    assert "regression" in titles and "language_model" in titles and "broken.task" not in titles


@pytest.mark.parametrize(
    "section, match",
    [
        (
            {"loggers": [{"type": "cvs"}]},
            r"loggers\[0\]\.type: Unknown logger 'cvs'\. Did you mean 'csv'",
        ),
        (
            {"callbacks": [{"type": "early_stoping"}]},
            r"callbacks\[0\]\.type: Unknown callback 'early_stoping'\. Did you mean 'early_stopping'",
        ),
        (
            {"task": {"type": "regresion"}},
            r"task\.type: Unknown task 'regresion'\. Did you mean 'regression'",
        ),
        (
            {"metrics": ["top_k_acuracy"]},
            r"metrics\[0\]\.type: Unknown metric 'top_k_acuracy'\. Did you mean 'top_k_accuracy'",
        ),
        (
            {"task": {"type": "regression", "los": "mae"}},
            r"task\.los: unknown argument 'los' for task 'regression'\. Did you mean 'loss'\? Valid keys: type, loss, huber_delta",
        ),
        (
            {"task": {"type": "regression", "loss": "l1"}},
            r"task\.loss: Input should be 'mse', 'mae' or 'huber'",
        ),
        ({"loggers": {"type": "csv"}}, r"loggers: expected a list of loggers"),
        (
            {"callbacks": [{"type": "ema", "decay": 1.5}]},
            r"callbacks\[0\]: callback 'ema' refused it: decay must be in \[0, 1\), got 1\.5",
        ),
        (
            {"metrics": [{"type": "top_k_accuracy", "k": 0}]},
            r"metrics\[0\]: metric 'top_k_accuracy' refused it: top_k_accuracy needs k >= 1",
        ),
        ({"task": 5}, r"task: expected a task name or \(type: NAME, \.\.\.its arguments\)"),
    ],
)
def test_bad_part_sections_are_located_with_a_suggestion(section, match):
    with pytest.raises(ConfigError, match=match):
        load_train_config({"model": MODEL, **section})


def test_a_hook_offering_an_unqualified_part_is_refused(with_fakes, tmp_path):
    (tmp_path / "parthook.py").write_text(
        textwrap.dedent("""
        from nnx_plugins import Logger, hookimpl

        class Quiet(Logger):
            def write(self, record):
                pass

        @hookimpl
        def nnx_register_run_parts(registry):
            registry.add_logger("quiet", Quiet)
    """)
    )
    sys.path.insert(0, str(tmp_path))
    try:
        hooked = fake_distribution(
            "part-hook", "1.0", entry_points={"nnx.plugins": {"quiet": "parthook"}}
        )
        with with_fakes(hooked) as registry:
            with pytest.warns(
                PluginWarning, match=r"part-hook 1\.0 provides logger 'quiet' without a namespace"
            ):
                registry.load_kind("logger")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("parthook", None)

"""The registry: lazy loading, collisions, failures, strict mode, hooks, reverse lookup."""

import json
import subprocess
import sys
import textwrap

import pytest

import nnx_core
from nnx_core import Module, Variable, variable_type
from nnx_plugins import (
    NameCollisionError,
    PluginLoadError,
    PluginNameError,
    PluginWarning,
    Registry,
    Settings,
    UnknownNameError,
    default_registry,
)
from nnx_plugins.testing import fake_distribution

from ..conftest import BROKEN, COLLIDING, OtherGatedDense, installed


def registry_of(*fakes, **settings):
    return Registry(
        settings=Settings(**settings), distributions=[*installed("nnx-jax", "acme-layers"), *fakes]
    )


def test_builtin_and_pack_names_are_listed_without_import():
    sys.modules.pop("acme_layers.dense", None)
    registry = registry_of()
    assert {"Linear", "relu", "acme.GatedDense"} <= set(registry.names("layer"))
    assert {"Param", "acme.LoRAParam"} <= set(registry.names("variable"))
    assert "acme_layers.dense" not in sys.modules
    (provider,) = registry.providers("layer", "acme.GatedDense")
    assert (provider.plugin.distribution, provider.status) == ("acme-layers", "not loaded")


def test_lookup_imports_on_first_use_and_registers_variable_kinds():
    registry = registry_of()
    cls = registry.get("variable", "acme.LoRAParam")
    assert variable_type("acme.LoRAParam") is cls
    assert registry.get("layer", "acme.GatedDense").__name__ == "GatedDense"
    assert registry.providers("layer", "acme.GatedDense")[0].status == "loaded"


def test_hook_plugin_names_load_by_namespace():
    registry = registry_of()
    assert registry.get("layer", "acme.Swish").__name__ == "swish"
    assert dict((r.name, s) for r, s in registry.hook_plugins())["acme"] == "loaded"


def test_unknown_name_suggests_close_names():
    with pytest.raises(
        UnknownNameError, match=r"Unknown layer 'Lienar'\. Did you mean 'Linear'( or '\w+')*\?"
    ) as info:
        registry_of().get("layer", "Lienar")
    assert info.value.suggestions[0] == "Linear"


def test_unknown_namespace_lists_installed_packs():
    with pytest.raises(
        UnknownNameError,
        match=r"No installed distribution provides zzz\.\* names; "
        r"installed packs: acme-layers 0\.1\.0",
    ):
        registry_of().get("layer", "zzz.Thing")


def test_unknown_name_of_a_disabled_pack_says_why():
    registry = registry_of(autoload=False)
    with pytest.raises(
        UnknownNameError,
        match=r"acme-layers 0\.1\.0 provides the 'acme' namespace "
        r"but is disabled by NNX_DISABLE_PLUGIN_AUTOLOAD",
    ):
        registry.get("layer", "acme.GatedDense")
    assert registry.get("layer", "Linear").__name__ == "Linear"


def test_allowlist_keeps_builtins_and_listed_packs():
    registry = registry_of(allowlist=frozenset({"other"}))
    assert "acme.GatedDense" not in registry.names("layer")
    assert "Linear" in registry.names("layer")
    with pytest.raises(UnknownNameError, match="not in NNX_PLUGINS"):
        registry.get("layer", "acme.GatedDense")


def test_collision_names_both_distributions(fake_modules):
    registry = registry_of(COLLIDING)
    with pytest.raises(
        NameCollisionError,
        match=r"'acme.GatedDense' is provided by 2 distributions: "
        r"acme-layers 0\.1\.0 .* and other-layers 2\.0",
    ) as info:
        registry.get("layer", "acme.GatedDense")
    assert [p.distribution for p in info.value.providers] == ["acme-layers", "other-layers"]
    assert info.value.plugin.distribution == "acme-layers"


def test_collision_resolved_by_preference(fake_modules):
    registry = registry_of(COLLIDING, prefer={"acme.GatedDense": "other-layers"})
    assert registry.get("layer", "acme.GatedDense") is OtherGatedDense
    assert (
        registry_of(COLLIDING)
        .get("layer", "acme.GatedDense", prefer={"acme.GatedDense": "acme_layers"})
        .__name__
        == "GatedDense"
    )


def test_preference_naming_no_provider_is_reported(fake_modules):
    with pytest.raises(NameCollisionError, match=r"The preference acme.GatedDense=nope names none"):
        registry_of(COLLIDING).get("layer", "acme.GatedDense", prefer={"acme.GatedDense": "nope"})


def test_broken_pack_warns_once_and_the_rest_works(fake_modules):
    registry = registry_of(BROKEN)
    with pytest.warns(
        PluginWarning,
        match=r"broken-layers 0\.3 failed to load layer 'broken.Dense' "
        r"from boom:Dense: RuntimeError: boom at import",
    ) as record:
        with pytest.raises(PluginLoadError, match="boom at import") as info:
            registry.get("layer", "broken.Dense")
        with pytest.raises(PluginLoadError, match="boom at import"):
            registry.get("layer", "broken.Other")
        with pytest.raises(PluginLoadError, match="boom at import"):
            registry.get("layer", "broken.Dense")
    assert len(record) == 1
    assert str(info.value.plugin) == "broken-layers 0.3"
    assert registry.providers("layer", "broken.Dense")[0].status.startswith("failed: ")
    assert registry.get("layer", "Linear").__name__ == "Linear"
    assert len(registry.failures()) == 2


def test_strict_mode_raises_instead_of_warning(fake_modules):
    registry = registry_of(BROKEN, strict=True)
    with pytest.raises(PluginLoadError, match="boom at import"):
        registry.load_all()


@pytest.mark.parametrize(
    ("kind", "target", "message"),
    [
        ("nnx.variables", "fakepack:NotAVariable", "is not a subclass of nnx_core.Variable"),
        ("nnx.layers", "fakepack:NotAVariable", "is not a subclass of nnx_core.Module"),
        ("nnx.layers", "fakepack:not_callable", "neither a Module subclass nor an activation"),
        ("nnx.layers", "fakepack:an_instance", "as an instance of OtherGatedDense, not the class"),
    ],
)
def test_wrong_objects_are_load_failures(fake_modules, kind, target, message):
    pack = fake_distribution("odd", entry_points={kind: {"odd.Thing": target}})
    registry = registry_of(pack)
    with pytest.warns(PluginWarning, match=message), pytest.raises(PluginLoadError, match=message):
        registry.get("variable" if kind == "nnx.variables" else "layer", "odd.Thing")


def test_variable_kind_name_clash_with_core_is_a_load_failure(fake_modules):
    pack = fake_distribution(
        "odd",
        entry_points={
            "nnx.variables": {"odd.Param": "fakepack:FakeParam", "odd.Again": "fakepack:FakeParam"}
        },
    )
    registry = registry_of(pack)
    registry.get("variable", "odd.Param")
    with (
        pytest.warns(PluginWarning),
        pytest.raises(PluginLoadError, match="could not register Variable kind 'odd.Again'"),
    ):
        registry.get("variable", "odd.Again")


def test_unqualified_third_party_names_are_rejected():
    pack = fake_distribution(
        "odd", entry_points={"nnx.layers": {"Dense": "fakepack:X", "bad name": "m:x"}}
    )
    with pytest.warns(
        PluginWarning, match=r"odd 0\.1\.0 provides layer 'Dense' without a namespace"
    ):
        registry = registry_of(pack)
    assert "Dense" not in registry.names("layer")
    assert all(isinstance(f, PluginNameError) for f in registry.failures())
    with pytest.raises(PluginNameError, match="without a namespace"):
        registry_of(pack, strict=True)


def test_hooks_register_layers_and_variable_kinds(fake_modules):
    pack = fake_distribution("hooky", entry_points={"nnx.plugins": {"hooky": "hookpack"}})
    registry = registry_of(pack)
    assert registry.get("layer", "hooky.cube")(2) == 8
    scale = registry.get("variable", "hooky.Scale")
    assert issubclass(scale, Variable) and variable_type("hooky.Scale") is scale
    assert registry.name_of(scale, "variable") == "hooky.Scale"


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("badhook", "provides layer 'Unqualified' without a namespace"),
        ("raisinghook", r"failed to run the hooks of plugin 'bad' \(raisinghook\): KeyError"),
        (
            "typohook",
            r"failed to register hooks of plugin 'bad' .*unknown hook 'nnx_register_layer'",
        ),
        ("boom", r"failed to import plugin 'bad' \(boom\): RuntimeError: boom at import"),
    ],
)
def test_failing_hook_plugins_warn_once(fake_modules, module, message):
    pack = fake_distribution("bad-hooks", entry_points={"nnx.plugins": {"bad": module}})
    registry = registry_of(pack)
    with pytest.warns(PluginWarning, match=message):
        failures = registry.load_all()
    assert [f.plugin.distribution for f in failures] == ["bad-hooks"]
    assert dict((r.name, s) for r, s in registry.hook_plugins())["bad"].startswith("failed: ")
    with pytest.raises(UnknownNameError, match=r"Plugin 'bad' of bad-hooks 0\.1\.0 failed to load"):
        registry.get("layer", "bad.Anything")


def test_name_of_finds_builtins_packs_and_rejects_strangers():
    registry = registry_of()
    from acme_layers.dense import GatedDense

    from nnx_layers import Linear, relu

    assert [registry.name_of(o) for o in (Linear, relu, GatedDense)] == [
        "Linear",
        "relu",
        "acme.GatedDense",
    ]

    class Stranger(Module):
        pass

    with pytest.raises(UnknownNameError, match=r"Stranger is not a registered layer"):
        registry.name_of(Stranger)


def test_default_registry_is_shared(nnx_registry):
    assert default_registry() is nnx_registry


def test_unknown_unqualified_names_do_not_load_hook_plugins():
    registry = registry_of()
    with pytest.raises(UnknownNameError, match="Unknown layer 'Nope'"):
        registry.get("layer", "Nope")
    assert dict((r.name, s) for r, s in registry.hook_plugins())["acme"] == "not loaded"
    with pytest.raises(UnknownNameError, match="Unknown layer 'other.Nope'"):
        registry.get("layer", "other.Nope")
    assert dict((r.name, s) for r, s in registry.hook_plugins())["acme"] == "loaded"


# -- kinds by their entry-point names: nnx_core's resolver asks the registry ----------------------
def test_claim_kind_names_a_pack_class_from_its_own_package_only():
    from acme_layers.variables import LoRAParam

    registry = registry_of()
    assert registry.claim_kind(LoRAParam) == "acme.LoRAParam"
    assert registry.providers("layer", "acme.GatedDense")[0].status == "not loaded"

    class Stranger(Variable):
        pass

    assert registry.claim_kind(Stranger) is None
    assert dict((r.name, s) for r, s in registry.hook_plugins())["acme"] == "not loaded"


def test_claim_kind_runs_the_hook_plugins_of_the_class_package(fake_modules):
    import hookpack

    pack = fake_distribution("hooky", entry_points={"nnx.plugins": {"hooky": "hookpack"}})
    assert registry_of(pack).claim_kind(hookpack.Scale) == "hooky.Scale"


def test_core_lookups_reach_the_default_registry(with_fakes):
    with with_fakes(BROKEN, COLLIDING):
        assert nnx_core.variable_type("acme.LoRAParam").__name__ == "LoRAParam"
        with pytest.raises(KeyError, match="No Variable kind is registered as 'nope.Kind'"):
            nnx_core.variable_type("nope.Kind")
    pack = fake_distribution("odd", entry_points={"nnx.variables": {"odd.K": "fakepack:FakeParam"}})
    twin = fake_distribution(
        "twin", entry_points={"nnx.variables": {"odd.K": "fakepack:FakeParam"}}
    )
    with with_fakes(pack, twin):
        with pytest.raises(NameCollisionError, match=r"'odd.K' is provided by 2 distributions"):
            nnx_core.variable_type("odd.K")


FRESH_PROCESS = {
    "built through nnx_plugins": """
        import nnx_core, nnx_plugins
        model = nnx_plugins.build({"type": "acme.GatedDense", "in_features": 4,
                                   "out_features": 3, "lora_rank": 2})
    """,
    "pack imported directly, nnx_plugins afterwards": """
        import nnx_core
        from acme_layers.dense import GatedDense
        model = GatedDense(4, 3, lora_rank=2, rngs=nnx_core.Rngs(0))
        import nnx_plugins
    """,
    "nnx_plugins imported first, then used": """
        import nnx_plugins, nnx_core
        from acme_layers.dense import GatedDense
        model = GatedDense(4, 3, lora_rank=2, rngs=nnx_core.Rngs(0))
        nnx_plugins.get_layer("Linear")
    """,
}
CHECK = """
    import json, os, tempfile
    kind = type(model.lora_a)
    where = nnx_plugins.save(model, os.path.join(tempfile.mkdtemp(), "c"))
    print(json.dumps([
        nnx_core.variable_name(kind),
        sorted(p[-1] for p, _ in nnx_core.state(model, "acme.LoRAParam").flat_state()),
        nnx_plugins.read_manifest(where)["entries"]["model/lora_a"]["kind"],
    ]))
"""


def test_a_pack_kind_has_its_entry_point_name_in_a_fresh_process_in_any_import_order():
    runs = {
        case: subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script) + textwrap.dedent(CHECK)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case, script in FRESH_PROCESS.items()
    }
    for case, run in runs.items():
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, f"{case}: {err}"
        name, adapters, in_checkpoint = json.loads(out)
        assert (name, adapters, in_checkpoint) == (
            "acme.LoRAParam",
            ["lora_a", "lora_b"],
            "acme.LoRAParam",
        ), case


def test_build_summary_shows_pack_kinds_by_name_in_a_fresh_process(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "model: {type: acme.GatedDense, in_features: 4, out_features: 3, lora_rank: 2}\n"
    )
    code = "import sys; from nnx_plugins.cli._main import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run(
        [sys.executable, "-c", code, "build", str(path), "--summary"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "[acme.LoRAParam]" in run.stdout and "acme_layers.variables" not in run.stdout


@pytest.mark.parametrize(
    ("kind", "name", "match"),
    [
        (
            "dataset",
            "npzz",
            r"Unknown dataset 'npzz'\. Did you mean 'npz'\? Registered datasets: "
            r"acme\.waves, csv, diabetes, digits, npz, text\.$",
        ),
        ("dataset", "zzzz", r"Unknown dataset 'zzzz'\. Registered datasets: acme\.waves, csv, "),
        (
            "task",
            "regresion",
            r"Did you mean 'regression'\? Registered tasks: acme\.quantile, "
            r"classification, language_model, regression\.$",
        ),
        ("callback", "x", r"Registered callbacks: .*early_stopping, ema"),
        ("logger", "x", r"Registered loggers: .*csv, jsonl, tensorboard"),
        ("metric", "x", r"Registered metrics: accuracy, .*top_k_accuracy\.$"),
        (
            "layer",
            "Zzzz",
            r"Unknown layer 'Zzzz'\. `nnx layers list` shows the registered layers\.$",
        ),
        ("variable", "Zzzz", r"Registered Variable kinds: .*Param"),
    ],
)
def test_an_unknown_name_lists_the_registered_ones_or_the_command_that_does(kind, name, match):
    registry = registry_of()
    with pytest.raises(UnknownNameError, match=match):
        registry.get(kind, name)

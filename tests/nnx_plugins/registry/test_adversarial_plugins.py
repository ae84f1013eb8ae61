"""Hostile and careless packs: each probe is a clear `PluginError` naming the pack, never a crash.

Every probe pack is a real module file under ``tmp_path``, imported for real through a
`fake_distribution` (its metadata only is fake). For each one: the documented error type with
``.plugin``; ``nnx`` exits non-zero with ``nnx: error: ...`` and no traceback where it refuses;
``nnx config schema`` keeps stdout valid JSON (and warns in the CLI's own format); and every
other name keeps working. The last tests run the real ``nnx`` command in a subprocess against
packs installed as ``.dist-info`` directories, so that the real stdout, stderr and exit status
are what is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from nnx_plugins import (
    NameCollisionError,
    PluginLoadError,
    PluginWarning,
    Settings,
    build,
    get_layer,
)
from nnx_plugins.cli._main import main
from nnx_plugins.testing import fake_distribution, isolated_registry

from ..conftest import installed

GOOD_LAYER = """
from nnx_core import Module, Rngs

class Dense(Module):
    def __init__(self, features: int, *, rngs: Rngs):
        self.features = features

    def __call__(self, x):
        return x
"""

#: module source per probe: what a careless or hostile pack does when imported
FAILING_IMPORTS = {
    "sys_exit": ("import sys\nsys.exit(3)\n", r"SystemExit: 3 \(the pack called sys\.exit\(\)\)"),
    "system_exit": ("raise SystemExit('bye')\n", r"SystemExit: bye \(the pack called sys\.exit"),
    "generator_exit": ("raise GeneratorExit\n", r"failed to load layer .*: GeneratorExit\."),
    "memory_error": ("raise MemoryError('10 TB')\n", r"MemoryError: 10 TB \(the pack ran out"),
    "recursion": (
        "def down(n):\n    return down(n + 1)\ndown(0)\n",
        r"RecursionError: maximum recursion depth .*\(infinite recursion in the pack\)",
    ),
    "raises": ("raise ImportError('needs libfoo.so')\n", r"ImportError: needs libfoo\.so"),
}

HOOKS = {
    "hook_raises": (
        "@hookimpl\ndef nnx_register_layers(registry):\n    raise RuntimeError('hook broke')\n",
        r"failed to run the hooks of plugin 'probe' \(probe_mod\): RuntimeError: hook broke",
    ),
    "hook_exits": (
        "@hookimpl\ndef nnx_register_layers(registry):\n    raise SystemExit(2)\n",
        r"failed to run the hooks of plugin 'probe' .*SystemExit: 2 \(the pack called sys",
    ),
    "hook_non_class": (
        "@hookimpl\ndef nnx_register_variable_types(registry):\n"
        "    registry.add_variable_type('probe.Kind', 42)\n",
        r"provides Variable kind 'probe.Kind' as 42, which is not a subclass of nnx_core.Variable",
    ),
}


@pytest.fixture
def probe(monkeypatch, tmp_path):
    """Write ``probe_mod.py`` with ``source`` and return a distribution pointing at it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "probe_mod", raising=False)

    def make(source, *, group="nnx.layers", entries=None, name="probe-pack"):
        (tmp_path / "probe_mod.py").write_text(textwrap.dedent(source))
        entries = entries or {"probe.Dense": "probe_mod:Dense"}
        return fake_distribution(name, "1.0", entry_points={group: entries})

    yield make
    sys.modules.pop("probe_mod", None)


def registry_with(*packs, strict=False):
    distributions = [*installed("nnx-jax", "acme-layers"), *packs]
    return isolated_registry(distributions=distributions, settings=Settings(strict=strict))


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_everything_else_works():
    assert get_layer("Linear").__name__ == "Linear"
    model = build({"type": "acme.GatedDense", "in_features": 2, "out_features": 2, "lora_rank": 1})
    assert type(model).__name__ == "GatedDense"


def assert_schema_still_json(capsys, *, without):
    code, out, err = cli(capsys, "config", "schema")
    schema = json.loads(out)  # stdout is nothing but the schema
    assert code == 0 and without not in schema["$defs"] and "acme.GatedDense" in schema["$defs"]
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("case", sorted(FAILING_IMPORTS))
def test_a_pack_failing_on_import_is_a_load_error_naming_it(capsys, probe, case):
    source, cause = FAILING_IMPORTS[case]
    pack = probe(GOOD_LAYER + source)
    with registry_with(pack):
        with pytest.warns(PluginWarning, match=cause):
            with pytest.raises(PluginLoadError, match=rf"probe-pack 1\.0 .*{cause}") as info:
                get_layer("probe.Dense")
        assert str(info.value.plugin) == "probe-pack 1.0"
        assert "Upgrade or reinstall probe-pack" in info.value.fix
        assert_everything_else_works()
        code, out, err = cli(capsys, "layers", "show", "probe.Dense")
        assert code == 1 and out == "" and "Traceback" not in err
        assert err.startswith("nnx: error: probe-pack 1.0 failed to load layer 'probe.Dense'")
        assert "\n  fix: Upgrade or reinstall probe-pack" in err


@pytest.mark.parametrize("case", sorted(FAILING_IMPORTS))
def test_schema_stays_json_and_warns_in_the_cli_format(capsys, probe, case):
    source, cause = FAILING_IMPORTS[case]
    with registry_with(probe(GOOD_LAYER + source)):
        err = assert_schema_still_json(capsys, without="probe.Dense")
    lines = err.splitlines()
    assert lines[0].startswith("nnx: warning: probe-pack 1.0 failed to load layer 'probe.Dense'")
    assert lines[1].startswith("  fix: Upgrade or reinstall probe-pack, or run without it")
    assert "warnings.warn" not in err and len(lines) == 2


def test_strict_mode_turns_the_schema_into_an_error_with_nothing_on_stdout(capsys, probe):
    with registry_with(probe(GOOD_LAYER + "import sys\nsys.exit(3)\n"), strict=True):
        code, out, err = cli(capsys, "config", "schema")
        assert code == 1 and out == "" and "Traceback" not in err
        assert err.startswith("nnx: error: probe-pack 1.0 failed to load layer 'probe.Dense'")
        assert get_layer("Linear").__name__ == "Linear"


@pytest.mark.parametrize(
    "noise, channel",
    [
        ("print('hello from a pack')", "hello from a pack"),
        ("import sys\nsys.stderr.write('note from a pack\\n')", "note from a pack"),
        ("import io, sys\nsys.stdout = io.StringIO()\nprint('swallowed?')", None),
    ],
)
def test_a_pack_writing_on_import_leaves_stdout_to_the_command(capsys, probe, noise, channel):
    with registry_with(probe(noise + "\n" + GOOD_LAYER)):
        code, out, err = cli(capsys, "config", "schema")
        schema = json.loads(out)
        assert code == 0 and "probe.Dense" in schema["$defs"]
        if channel is not None:
            assert channel in err
        print("the command's own output")
        assert capsys.readouterr().out == "the command's own output\n"  # stdout was restored
        assert_everything_else_works()


@pytest.mark.parametrize(
    "group, entry, message",
    [
        ("nnx.layers", "probe_mod:NUMBER", "provides layer 'probe.X' as 42, which is neither"),
        ("nnx.layers", "probe_mod:Plain", "as the class Plain, which is not a subclass of"),
        ("nnx.layers", "probe_mod:Configured", "whose config_model is {'a': 1}, which is not a"),
        ("nnx.variables", "probe_mod:make", "provides Variable kind 'probe.X' as <function make"),
        ("nnx.variables", "probe_mod:NUMBER", "Variable kind 'probe.X' as 42, which is not a"),
        ("nnx.config_sections", "probe_mod:Plain", "config section 'probe.X' as <class"),
        ("nnx.layers", "probe_mod:Missing", "AttributeError: module 'probe_mod' has no attribute"),
    ],
)
def test_a_pack_providing_the_wrong_object_is_a_load_error(capsys, probe, group, entry, message):
    source = """
        from nnx_core import Module
        NUMBER = 42
        class Plain:
            pass
        class Configured(Module):
            config_model = {"a": 1}
        def make():
            pass
    """
    pack = probe(source, group=group, entries={"probe.X": entry})
    kind = {"nnx.layers": "layer", "nnx.variables": "variable", "nnx.config_sections": "section"}
    with registry_with(pack) as registry:
        with pytest.warns(PluginWarning, match=message):
            with pytest.raises(PluginLoadError, match=message) as info:
                registry.get(kind[group], "probe.X")
        assert info.value.plugin.distribution == "probe-pack"
        assert_everything_else_works()
        if group == "nnx.layers":
            assert_schema_still_json(capsys, without="probe.X")


def test_two_packs_providing_one_name_collide_and_the_rest_works(capsys, probe):
    first = probe(GOOD_LAYER)
    second = fake_distribution(
        "rival-pack", "2.0", entry_points={"nnx.layers": {"probe.Dense": "probe_mod:Dense"}}
    )
    with registry_with(first, second):
        with pytest.raises(NameCollisionError, match=r"probe-pack 1\.0 .* and rival-pack 2\.0"):
            get_layer("probe.Dense")
        code, _, err = cli(capsys, "layers", "show", "probe.Dense")
        assert code == 1 and "Traceback" not in err
        assert "\n  fix: Choose one with NNX_PREFER='probe.Dense=probe-pack'" in err
        assert_schema_still_json(capsys, without="probe.Dense")
        assert_everything_else_works()


@pytest.mark.parametrize("case", sorted(HOOKS))
def test_hooks_that_fail_are_load_errors_naming_the_pack(capsys, probe, case):
    body, message = HOOKS[case]
    pack = probe(
        "from nnx_plugins import hookimpl\n" + body,
        group="nnx.plugins",
        entries={"probe": "probe_mod"},
    )
    with registry_with(pack) as registry:
        with pytest.warns(PluginWarning, match=message):
            failures = registry.load_all()
        assert [type(f) for f in failures] == [PluginLoadError]
        assert str(failures[0].plugin) == "probe-pack 1.0"
        err = assert_schema_still_json(capsys, without="probe.Anything")
        assert err == ""  # warned once per distribution, already
        assert_everything_else_works()


def test_a_hook_that_prints_leaves_stdout_to_the_command(capsys, probe):
    pack = probe(
        """
        from nnx_plugins import hookimpl

        @hookimpl
        def nnx_register_layers(registry):
            print("registering probe.half")
            registry.add_layer("probe.half", lambda x: x / 2)
        """,
        group="nnx.plugins",
        entries={"probe": "probe_mod"},
    )
    with registry_with(pack):
        code, out, err = cli(capsys, "config", "schema")
        assert code == 0 and "probe.half" in json.loads(out)["$defs"]
        assert "registering probe.half" in err


def test_keyboard_interrupt_on_import_is_not_swallowed(probe):
    with registry_with(probe("raise KeyboardInterrupt\n")) as registry:
        with pytest.raises(KeyboardInterrupt):
            registry.get("layer", "probe.Dense")
        assert registry.providers("layer", "probe.Dense")[0].status == "not loaded"


# -- the real command, on packs installed as .dist-info directories ------------------------------
def install(site, name, module, source, entries):
    """A minimal installed distribution: ``<module>.py`` and ``<name>-1.0.dist-info``."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entries.items())
    (info / "entry_points.txt").write_text(f"[nnx.layers]\n{lines}")


def run_nnx(site, *argv):
    # (the pack's folder first, then whatever PYTHONPATH the suite runs with)
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    code = "import sys; from nnx_plugins.cli._main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_real_command_survives_a_pack_that_exits_and_one_that_prints(tmp_path):
    install(tmp_path, "exit-pack", "exit_mod", "import sys\nsys.exit(5)\n", {"ex.D": "exit_mod:D"})
    install(
        tmp_path,
        "loud-pack",
        "loud_mod",
        "print('LOUD')\n" + GOOD_LAYER,
        {"loud.D": "loud_mod:Dense"},
    )
    schema = run_nnx(tmp_path, "config", "schema")
    assert schema.returncode == 0, schema.stderr
    assert "loud.D" in json.loads(schema.stdout)["$defs"]
    assert "LOUD" in schema.stderr and "Traceback" not in schema.stderr
    assert (
        "nnx: warning: exit-pack 1.0 failed to load layer 'ex.D' from exit_mod:D: SystemExit: 5 "
        "(the pack called sys.exit()).\n  fix: Upgrade or reinstall exit-pack" in schema.stderr
    )
    show = run_nnx(tmp_path, "layers", "show", "ex.D")
    assert show.returncode == 1 and show.stdout == "" and "Traceback" not in show.stderr
    warning, fix, error = show.stderr.splitlines()  # the fix once, with the warning
    assert warning.startswith("nnx: warning: exit-pack 1.0 failed to load layer 'ex.D'")
    assert fix.startswith("  fix: Upgrade or reinstall exit-pack")
    assert error == "nnx: error: " + warning.removeprefix("nnx: warning: ")


@pytest.mark.parametrize(
    "closing",
    [
        "import sys\nsys.stdout.close()\n",  # (sys.stdout is stderr while a pack is imported)
        "import sys\nsys.stderr.close()\n",
        "import sys\nsys.__stderr__.close()\n",
        "import os\nos.close(2)\n",
    ],
)
def test_a_pack_that_closes_stdout_or_stderr_does_not_silence_the_command(tmp_path, closing):
    install(
        tmp_path, "closer-pack", "closer_mod", closing + GOOD_LAYER, {"cl.D": "closer_mod:Dense"}
    )
    (tmp_path / "bad.yaml").write_text("model: {type: cl.D, features: 2, nope: 3}\n")
    done = run_nnx(tmp_path, "config", "validate", str(tmp_path / "bad.yaml"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr == (
        f"1 problem in {tmp_path / 'bad.yaml'}:\n  {tmp_path / 'bad.yaml'}:1:34: model.nope: "
        "unknown key 'nope' for cl.D. Valid keys: features.\n"
    )
    shown = run_nnx(tmp_path, "layers", "show", "cl.D")  # (stdout too, when only stderr was hit)
    if "stdout" in closing or "stderr.close" in closing:
        assert shown.returncode == 0 and "cl.D" in shown.stdout, shown.stderr

"""The nnx command."""

import errno
import io
import json
import re
import subprocess
import sys

import pytest
import yaml

from nnx_plugins import set_default_registry
from nnx_plugins.cli._main import main

from ..conftest import BROKEN, COLLIDING
from ..corpus import NESTED


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_listing_imports_neither_jax_nor_plugins():
    script = (
        "import sys\n"
        "from nnx_plugins.cli._main import main\n"
        "assert main(['layers', 'list']) == 0\n"
        "assert main(['plugins', 'list']) == 0\n"
        "assert main(['variables', 'list']) == 0\n"
        "heavy = ('jax', 'jaxlib', 'acme_layers', 'nnx_core', 'nnx_layers', 'pydantic', 'pluggy')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert "acme.GatedDense" in result.stdout


def test_plugins_list_and_check(capsys, nnx_registry):
    code, out, _ = run(capsys, "plugins", "list")
    assert code == 0 and "acme-layers" in out and "nnx-jax" in out and "acme" in out
    code, out, err = run(capsys, "plugins", "check")
    assert code == 0 and "ok" in out and err == ""


def test_plugins_check_reports_failures_and_collisions(capsys, with_fakes):
    with with_fakes(BROKEN, COLLIDING):
        code, out, err = run(capsys, "plugins", "check")
    assert code == 1 and "FAILED" in out
    assert "nnx: error: broken-layers 0.3 failed to load layer 'broken.Dense'" in err
    assert "nnx: error: Layer 'acme.GatedDense' is provided by 2 distributions" in err


def test_plugins_check_in_strict_mode_stops_at_the_first_failure(capsys, with_fakes):
    from nnx_plugins import Settings

    with with_fakes(BROKEN, settings=Settings(strict=True)):
        code, _, err = run(capsys, "plugins", "check")
    assert code == 1 and err.startswith("nnx: error: broken-layers 0.3 failed")


def test_layers_list_with_patterns(capsys, nnx_registry):
    code, out, _ = run(capsys, "layers", "list", "acme.*")
    assert code == 0 and "acme.GatedDense" in out and "Linear" not in out
    assert "Not loaded pluggy plugins may add more names: acme (acme-layers 0.1.0)" in out
    code, out, _ = run(capsys, "layers", "list", "norm")
    assert "BatchNorm" in out and "LayerNorm" in out
    code, _, err = run(capsys, "layers", "list", "zzz")
    assert code == 1 and "no layer name matches 'zzz'" in err


def test_layers_list_shows_collisions(capsys, with_fakes):
    with with_fakes(COLLIDING):
        _, out, _ = run(capsys, "layers", "list", "acme.Gated*")
    assert "collision" in out and "other-layers 2.0" in out


def test_layers_show(capsys, nnx_registry):
    code, out, _ = run(capsys, "layers", "show", "acme.GatedDense")
    assert code == 0 and "layer acme_layers.dense:GatedDense from acme-layers 0.1.0" in out
    assert "gate_activation" in out and '"sigmoid"' in out and "(required)" in out
    code, out, _ = run(capsys, "layers", "show", "relu")
    assert code == 0 and "activation function" in out
    code, _, err = run(capsys, "layers", "show", "Lienar")
    assert code == 1 and re.search(r"Did you mean 'Linear'( or '\w+')*\?", err)


def test_variables_list(capsys, nnx_registry):
    code, out, _ = run(capsys, "variables", "list")
    assert code == 0 and "acme.LoRAParam" in out and "BatchStat" in out


def test_config_validate(capsys, nnx_registry, tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump({"model": NESTED}))
    bad.write_text("model:\n  type: Linear\n  in_feature: 3\n")
    code, out, _ = run(capsys, "config", "validate", str(good))
    assert code == 0 and "good.yaml: ok (Sequential)" in out
    code, out, err = run(capsys, "config", "validate", str(good), str(bad))
    assert code == 1 and "good.yaml: ok" in out
    assert (
        "bad.yaml:3:3: model.in_feature: unknown key 'in_feature' for Linear. Did you mean 'in_features'?"
        in err
    )


def test_config_schema(capsys, nnx_registry, tmp_path):
    code, out, _ = run(capsys, "config", "schema")
    assert code == 0 and json.loads(out)["title"] == "nnx config"
    target = tmp_path / "schema.json"
    assert run(capsys, "config", "schema", "-o", str(target))[0] == 0
    assert "acme.GatedDense" in json.loads(target.read_text())["$defs"]
    code, _, err = run(capsys, "config", "schema", "-o", str(tmp_path / "no" / "such" / "dir.json"))
    assert code == 1 and "cannot write" in err


def test_build_summary(capsys, nnx_registry, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"model": NESTED}))
    code, out, _ = run(capsys, "build", str(path), "--summary")
    assert code == 0 and "model.layers[4].block" in out and "acme.GatedDense" in out
    assert "BatchStat" in out and "RngKey" in out and "total:" in out
    code, out, _ = run(capsys, "build", str(path))
    assert code == 0 and out.startswith("total: ")
    path.write_text("model: {type: Nope}\n")
    code, _, err = run(capsys, "build", str(path))
    assert code == 1 and "m.yaml:1:15: model.type: Unknown layer 'Nope'" in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["layers"])
    assert info.value.code == 2 and "required" in capsys.readouterr().err


def test_bad_switches_are_reported(capsys, monkeypatch):
    monkeypatch.setenv("NNX_STRICT_PLUGINS", "maybe")
    previous = set_default_registry(None)
    try:
        code, _, err = run(capsys, "layers", "list")
    finally:
        set_default_registry(previous)
    assert code == 1 and "NNX_STRICT_PLUGINS='maybe' is not a boolean" in err


def test_every_command_group_is_on_the_command_line(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("plugins", "layers", "variables", "config", "build", "train", "eval"):
        assert command in out, command


def test_config_validate_checks_the_training_sections(capsys, tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(
        "model: {type: Sequential, layers: [{type: Linear, in_features: 4, out_features: 2}]}\n"
        "optimizer: {type: adam, learning_rat: 0.1}\n"
        "train: {stepz: 10}\n"
    )
    assert main(["config", "validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert (
        f"{path}:2:" in err
        and "optimizer.learning_rat" in err
        and "Did you mean 'learning_rate'" in err
    )
    assert f"{path}:3:" in err and "Did you mean 'steps'" in err


@pytest.mark.parametrize(
    ("argv", "usage", "message"),
    [
        (
            ["train", "c.yaml", "--steps", "5"],
            "nnx train FILE",
            "unknown option --steps. A value of the config is set as KEY=VALUE after the file: "
            "write train.steps=5.",
        ),
        (["train", "c.yaml", "--batch-size=64"], "nnx train FILE", "write train.batch_size=64."),
        (["build", "c.yaml", "--keep"], "nnx build FILE", "write checkpoint.keep=VALUE."),
        (
            ["config", "validate", "c.yaml", "--seed", "3"],
            "nnx config validate FILE",
            "write train.seed=3.",
        ),
        (
            ["train", "c.yaml", "train.seed=1", "--stepz", "5"],
            "nnx train FILE",
            "unknown option --stepz. Options are listed by --help; a value of the config is set "
            "as KEY=VALUE after the file, e.g. train.steps=5. Did you mean 'train.steps'?",
        ),
    ],
)
def test_an_unknown_option_shows_the_override_meant(capsys, tmp_path, argv, usage, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    first, second = err.splitlines()
    assert first.startswith(f"usage: {usage}") and second.startswith("nnx: error: unknown option")
    assert second.endswith(message)
    assert "as a file" not in err and "got files" not in err


def test_version_prints_the_versions_from_metadata_without_importing_jax():
    import importlib.metadata

    script = (
        "import sys\n"
        "from nnx_plugins.cli._main import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit as stop:\n"
        "    print('status', stop.code)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'jaxlib', 'pydantic'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    first, status, imported = result.stdout.strip().splitlines()
    nnx, jax = importlib.metadata.version("nnx-jax"), importlib.metadata.version("jax")
    assert first.startswith(f"nnx {nnx} (distribution nnx-jax; jax {jax}, jaxlib ")
    assert status == "status 0" and imported == "[]"


class _Full(io.StringIO):
    """A stdout on a full disk."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("stdout", "problem"),
    [(_Full(), "no space left on the device (ENOSPC)"), (None, "stdout is closed (EBADF)")],
)
def test_output_that_cannot_be_written_is_one_line(capsys, monkeypatch, stdout, problem):
    # (a traceback before: OSError from rich's write, or AttributeError on None.isatty)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["layers", "list"]) == 1
    err = capsys.readouterr().err
    assert err == f"nnx: error: cannot write the output on stdout: {problem}.\n"
    assert sys.stdout is stdout


def test_a_closed_stdout_of_a_real_process_is_one_line_and_exit_1():
    done = subprocess.run(
        [
            "sh",
            "-c",
            'exec "$0" "$@" >&-',
            sys.executable,
            "-c",
            "from nnx_plugins.cli._main import run; run()",
            "layers",
            "list",
        ],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert (
        done.stderr == "nnx: error: cannot write the output on stdout: stdout is closed (EBADF).\n"
    )

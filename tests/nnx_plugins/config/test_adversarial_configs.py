"""Hostile configs: every probe is a located ConfigError naming the limit, nothing is written.

The bomb-like probes run through the real command line in a subprocess limited to 1 GiB of
address space more than it maps once jax and the command are loaded
(`resource.setrlimit(RLIMIT_AS)`), and a timeout: each must exit 1 with the error on stderr, no
traceback, and no file created. The subprocess runs jax on the CPU (``JAX_PLATFORMS=cpu``) and
measures its baseline after jax loaded its backends and plugins, so that the address space a
GPU runtime maps (gigabytes, on a machine with an accelerator) does not count. The same probes
run in-process too, where the exact message (the limit's name and how to raise it) is checked.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from nnx_plugins import ConfigError, ConfigLimits, load_config

MODEL = "model: {type: Linear, in_features: 2, out_features: 3}\n"


def laughs(levels=9):
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def interpolation_bomb(levels=9):
    lines = ["model: {type: relu}", "train:", "  b0: [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"  b{i}: [" + ", ".join([f"'${{train.b{i - 1}}}'"] * 9) + "]")
    return "\n".join(lines) + "\n"


def text_bomb(levels=30):
    lines = ["model: {type: relu}", "train:", "  s0: xxxxxxxxxxxxxxxx"]
    for i in range(1, levels + 1):
        lines.append(f"  s{i}: '${{train.s{i - 1}}}${{train.s{i - 1}}}'")
    return "\n".join(lines) + "\n"


def chain(length=500):
    lines = ["model: {type: Linear, in_features: '${train.c0}', out_features: 2}", "train:"]
    lines += [f"  c{i}: '${{train.c{i + 1}}}'" for i in range(length)]
    return "\n".join([*lines, f"  c{length}: 4"]) + "\n"


# name -> (files to write, argv after `nnx`, message on stderr)
PROBES = {
    "billion laughs": (
        {"bomb.yaml": laughs()},
        ["config", "validate", "bomb.yaml"],
        r"bomb.yaml:\d+:\d+: .*more than max_nodes=100,000 values .*NNX_CONFIG_MAX_NODES=N",
    ),
    "10,000 nested lists": (
        {"deep.yaml": "model: " + "[" * 10_000 + "]" * 10_000 + "\n"},
        ["config", "validate", "deep.yaml"],
        r"deep.yaml:1:108: <root>: the config is nested deeper than max_depth=100 levels",
    ),
    "10,000 nested mappings": (
        {"deep.yaml": "model: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n"},
        ["config", "show", "deep.yaml"],
        r"deep.yaml:1:\d+: <root>: the config is nested deeper than max_depth=100 levels",
    ),
    "10,000 nested JSON arrays": (
        {"deep.json": '{"model": ' + "[" * 10_000 + "]" * 10_000 + "}"},
        ["build", "deep.json"],
        r"deep.json:1:\d+: <root>: .*max_depth=100 .*NNX_CONFIG_MAX_DEPTH=N",
    ),
    "10,000 nested JSON objects": (
        {"deep.json": '{"model": ' + '{"a": ' * 10_000 + "1" + "}" * 10_000 + "}"},
        ["config", "validate", "deep.json"],
        r"deep.json:1:\d+: <root>: .*max_depth=100",
    ),
    "a 50 MB config": (
        {"huge.yaml": 50 << 20},
        ["config", "validate", "huge.yaml"],
        r"huge.yaml: <root>: the config is larger than max_bytes=1,048,576 bytes "
        r"\(52,428,800 bytes .*nothing was parsed\. .*NNX_CONFIG_MAX_BYTES=N",
    ),
    "/dev/zero": (
        {},
        ["config", "validate", "/dev/zero"],
        r"/dev/zero: <root>: not a regular file \(a device or other special file\)",
    ),
    "a FIFO": (
        {"pipe.yaml": "fifo"},
        ["config", "show", "pipe.yaml"],
        r"pipe.yaml: <root>: not a regular file \(a FIFO\).*Nothing was read",
    ),
    "a directory": (
        {"folder.yaml/x": ""},
        ["build", "folder.yaml"],
        r"folder.yaml: <root>: not a regular file \(a directory\)",
    ),
    "an include of /dev/zero": (
        {"main.yaml": "include: [zero.yaml]\n" + MODEL, "zero.yaml": "->/dev/zero"},
        ["config", "validate", "main.yaml"],
        r"zero.yaml: <root>: not a regular file",
    ),
    "an include of a 50 MB file": (
        {"main.yaml": "include: [huge.yaml]\n" + MODEL, "huge.yaml": 50 << 20},
        ["config", "validate", "main.yaml"],
        r"huge.yaml: <root>: the config is larger than max_bytes=1,048,576 bytes",
    ),
    "includes that fan out": (
        {
            "main.yaml": "include: [" + ", ".join(["a.yaml"] * 8) + "]\n" + MODEL,
            "a.yaml": "include: [" + ", ".join(["b.yaml"] * 8) + "]\n",
            "b.yaml": MODEL,
        },
        ["config", "validate", "main.yaml"],
        r"a.yaml:1:35: include\[3\]: the config reads more than max_files=32 files .* the "
        r"include chain here is 3 files long: main.yaml -> a.yaml -> b.yaml\. .*"
        r"NNX_CONFIG_MAX_FILES",
    ),
    "aliases across includes": (  # (each file is under the limit; together they are not)
        {
            "main.yaml": "include: [a.yaml, b.yaml]\n" + MODEL,
            "a.yaml": laughs(4),
            "b.yaml": laughs(4),
        },
        ["config", "validate", "main.yaml"],
        r"b.yaml:\d+:\d+: a4\[\d\].*max_nodes=100,000",
    ),
    "an interpolation bomb": (
        {"bomb.yaml": interpolation_bomb()},
        ["config", "show", "bomb.yaml"],
        r"bomb.yaml:\d+:\d+: train.b\d\[\d\]: the config holds more than max_nodes=100,000",
    ),
    "a text interpolation bomb": (
        {"bomb.yaml": text_bomb()},
        ["config", "validate", "bomb.yaml"],
        r"bomb.yaml:\d+:\d+: train.s\d+: string interpolation produces more than "
        r"max_bytes=1,048,576 characters",
    ),
    "a chain of 500 interpolations": (
        {"chain.yaml": chain()},
        ["config", "validate", "chain.yaml"],
        r"chain.yaml:\d+:\d+: <root>: .*max_depth=100 .*chains of interpolations",
    ),
    "an override nested 10,000 deep": (
        {"ok.yaml": MODEL},
        ["config", "show", "ok.yaml", "model.in_features=" + "[" * 10_000],
        r"<override model.in_features=\[\[\[+\.\.\.>:1:120: model.in_features: .*max_depth=100",
    ),
    "100,000 copies of a 400 KB string in one string": (
        {
            "bomb.yaml": "model: {type: relu}\nw: '"
            + "x" * 400_000
            + "'\nb: '"
            + "${w}" * 100_000
            + "'\n"
        },
        ["config", "show", "bomb.yaml"],
        r"bomb.yaml:3:4: b: string interpolation produces more than max_bytes=1,048,576",
    ),
    "an override key path 30,000 keys long": (  # (an argument holds at most 128 KiB)
        {"ok.yaml": MODEL},
        ["config", "show", "ok.yaml", "train." + ".".join(["a"] * 30_000) + "=1"],
        r"<override train.a.a.a.*\.\.\.>:1:\d+: <root>: the config is nested deeper than "
        r"max_depth=100",
    ),
    "an include of a list": (
        {"main.yaml": "include: [list.yaml]\n" + MODEL, "list.yaml": "[1, 2, 3]\n"},
        ["config", "validate", "main.yaml"],
        r"main.yaml:1:11: include\[0\]: cannot include .*list.yaml: it holds a list of 3 items in "
        r"10 bytes, not a mapping",
    ),
    "a chain of 1,000 includes": (
        {
            **{f"f{i}.yaml": f"include: [f{i + 1}.yaml]\n" for i in range(999)},
            "f999.yaml": MODEL,
        },
        ["config", "validate", "f0.yaml"],
        r"f31.yaml:1:11: include\[0\]: the config reads more than max_files=32 files .* chain "
        r"here is 33 files long: f0.yaml -> f1.yaml -> f2.yaml -> \.\.\. -> f31.yaml -> f32.yaml",
    ),
    "training on a bomb": (
        {"bomb.yaml": laughs()},
        ["train", "bomb.yaml", "--no-progress", "train.steps=1"],
        r"max_nodes=100,000",
    ),
}

LIMITED = textwrap.dedent(
    """
    import resource
    import jax
    jax.devices()  # (backends and plugins loaded before the limit)
    from nnx_plugins.cli._main import main
    with open("/proc/self/status") as status:  # (VmSize: the address space mapped so far)
        baseline = int(status.read().split("VmSize:")[1].split()[0]) << 10
    resource.setrlimit(resource.RLIMIT_AS, (baseline + (1 << 30), baseline + (1 << 30)))
    """
)
CPU = dict(os.environ, JAX_PLATFORMS="cpu")  # (where jax would find an accelerator too)

RUNNER = LIMITED + textwrap.dedent(
    """
    import contextlib, io, json, os, sys, time, traceback
    def peak_kb():  # (VmHWM: this process's peak resident size so far)
        return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
    before = peak_kb()  # (python, jax with its plugins, our packages: machine-dependent)
    results = {}
    for name, (folder, argv) in json.loads(sys.argv[1]).items():
        os.chdir(folder)
        err = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except BaseException:
                code, err = "raised", io.StringIO(traceback.format_exc())
        results[name] = [code, err.getvalue(), time.perf_counter() - start]
    print(json.dumps({"results": results, "before_kb": before, "peak_kb": peak_kb()}))
    """
)


def write(folder, files):
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == "fifo":
            os.mkfifo(path)
        elif isinstance(content, int):
            with open(path, "wb") as handle:
                handle.truncate(content)  # (sparse: 50 MB of size, no disk)
        elif content.startswith("->"):
            os.symlink(content[2:], path)
        elif content:
            path.write_text(content)


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Run every probe through the command line in one memory-limited subprocess."""
    folders, argvs = {}, {}
    for index, (name, (files, argv, _)) in enumerate(PROBES.items()):
        folder = tmp_path_factory.mktemp(f"probe{index}")
        write(folder, files)
        folders[name] = (folder, tree(folder))
        argvs[name] = [str(folder), argv]
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=600,
        env=CPU,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return report, folders


@pytest.mark.parametrize("name", list(PROBES))
def test_each_probe_is_a_clear_error_and_writes_nothing(probed, name):
    report, folders = probed
    code, stderr, _ = report["results"][name]
    assert code == 1, stderr
    assert "Traceback" not in stderr
    assert any(re.search(PROBES[name][2], line) for line in stderr.splitlines()), stderr[:2000]
    folder, before = folders[name]
    assert tree(folder) == before  # (nothing written: no runs/ either)


def test_the_probes_stay_small(probed):
    report, _ = probed
    grown = report["peak_kb"] - report["before_kb"]  # what the probes added to the imports
    assert grown < 128 << 10, (report["before_kb"], report["peak_kb"])


def test_the_real_command_exits_1_without_a_traceback(tmp_path):
    (tmp_path / "bomb.yaml").write_text(laughs())
    script = LIMITED + "import sys\nsys.exit(main(sys.argv[1:]))\n"
    result = subprocess.run(
        [sys.executable, "-c", script, "config", "validate", "bomb.yaml"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=CPU,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("1 problem in bomb.yaml:\n  bomb.yaml:")
    assert tree(tmp_path) == ["bomb.yaml"]


# -- in-process: the messages, and the limits can be raised ----------------------------------------
def test_raising_a_limit_lets_a_config_through(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 2, out_features: 3}\n"
        "plugins: {prefer: {" + ", ".join(f"n{i}.X: d" for i in range(40)) + "}}\n"
    )
    with pytest.raises(ConfigError, match=r"m.yaml:2:\d+: plugins.prefer.*max_nodes=50 "):
        load_config(path, limits=ConfigLimits(max_nodes=50))
    assert len(load_config(path, limits=ConfigLimits(max_nodes=200)).prefer) == 40


def test_limits_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "m.yaml"
    path.write_text(MODEL)
    monkeypatch.setenv("NNX_CONFIG_MAX_BYTES", "20")
    with pytest.raises(ConfigError, match=r"larger than max_bytes=20 bytes \(55 bytes"):
        load_config(path)
    monkeypatch.setenv("NNX_CONFIG_MAX_BYTES", "1_000")
    assert load_config(path).model["out_features"] == 3


def test_overrides_count_toward_the_byte_limit(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MODEL)
    with pytest.raises(
        ConfigError,
        match=r"<override model.name=x+\.\.\.>: <root>: .*max_bytes=100 bytes \(126 bytes",
    ):
        load_config(path, overrides=["model.name=" + "x" * 60], limits=ConfigLimits(max_bytes=100))


def test_a_deep_but_allowed_config_is_an_ordinary_problem():
    deep = 1
    for _ in range(98):  # (model + in_features + 98 lists: depth 100, the limit)
        deep = [deep]
    with pytest.raises(ConfigError, match=r"<dict>: model.in_features: Input should be a valid"):
        load_config({"model": {"type": "Linear", "in_features": deep, "out_features": 2}})


def test_a_config_past_pythons_stack_is_refused_not_crashed():
    deep = {"type": "Linear", "in_features": 2, "out_features": 2}
    for _ in range(3000):  # layers inside layers: the walker recurses per layer
        deep = {"type": "Sequential", "layers": [deep]}
    with pytest.raises(ConfigError, match=r"nested too deeply for Python's recursion limit"):
        load_config({"model": deep}, limits=ConfigLimits(max_depth=10_000, max_nodes=10**6))


def test_a_deep_value_past_pythons_stack_is_described_short():
    deep = 1
    for _ in range(20_000):  # (its whole repr would pass Python's recursion limits)
        deep = [deep]
    with pytest.raises(
        ConfigError,
        match=r"model\.in_features: Input should be a valid integer "
        r"\(got list \[\[\[.{0,50}\]\]\]\)",
    ):
        load_config(
            {"model": {"type": "Linear", "in_features": deep, "out_features": 2}},
            limits=ConfigLimits(max_depth=10**6, max_nodes=10**6),
        )

"""Adversarial probes of config values: YAML booleans, NaN/inf, huge and out-of-range numbers.

Every probe must fail at validation (`load_train_config`, which `nnx config validate`, `nnx build`
and `nnx train` all run first) with a `ConfigError` located at the value (``file:line:col`` and
path) and saying what was received, and at the CLI exit 1 with the message and no traceback.
"""

import re
import subprocess
import sys

import pytest

from nnx_plugins import ConfigError, train
from nnx_plugins.cli._main import main
from nnx_plugins.training._config import load_train_config

from ..corpus import HUGE

LINEAR = "model: {type: Linear, in_features: 64, out_features: 10}\n"


def layer(node: str) -> str:
    return f"model:\n  type: Sequential\n  layers:\n    - {node}\n"


# (name, YAML text, expected "line:col path: message" regex)
PROBES = [
    (
        "dropout rate above 1",
        layer("{type: Dropout, rate: 1.5}"),
        r"4:29: model\.layers\[0\]\.rate: Input should be less than or equal to 1 \(got float 1\.5\)",
    ),
    (
        "dropout rate: on",
        layer("{type: Dropout, rate: on}"),
        r"4:29: model\.layers\[0\]\.rate: Input should be a valid number \(got bool True\)",
    ),
    (
        "padding SIDEWAYS",
        layer("{type: Conv, in_features: 1, out_features: 2, kernel_size: 3, padding: SIDEWAYS}"),
        r"4:78: model\.layers\[0\]\.padding: Input should be 'SAME', 'SAME_LOWER', 'VALID', 'CIRCULAR' or 'CAUSAL' \(got str 'SIDEWAYS'\)",
    ),
    (
        "padding true",
        layer("{type: Conv, in_features: 1, out_features: 2, kernel_size: 3, padding: true}"),
        r"model\.layers\[0\]\.padding: Input should be 'SAME', .* or 'CAUSAL', an integer or a list \(got bool True\)",
    ),
    (
        "in_features: yes",
        "model: {type: Linear, in_features: yes, out_features: 2}\n",
        r"1:36: model\.in_features: Input should be a valid integer \(got bool True\)",
    ),
    (
        "in_features: 10**100",
        f"model: {{type: Linear, in_features: {10**100}, out_features: 2}}\n",
        r"1:36: model\.in_features: Input should be less than or equal to 2147483647",
    ),
    (
        "in_features as a string",
        "model: {type: Linear, in_features: '4', out_features: 2}\n",
        r"model\.in_features: Input should be a valid integer \(got str '4'\)",
    ),
    (
        "zero out_features",
        "model: {type: Linear, in_features: 4, out_features: 0}\n",
        r"model\.out_features: Input should be greater than or equal to 1 \(got int 0\)",
    ),
    (
        "a zero in kernel_size",
        layer("{type: Conv, in_features: 1, out_features: 2, kernel_size: [3, 0]}"),
        r"model\.layers\[0\]\.kernel_size\[1\]: Input should be greater than or equal to 1 \(got int 0\)",
    ),
    (
        "BatchNorm momentum above 1",
        layer("{type: BatchNorm, num_features: 4, momentum: 1.5}"),
        r"model\.layers\[0\]\.momentum: Input should be less than or equal to 1",
    ),
    (
        "negative epsilon",
        layer("{type: LayerNorm, num_features: 4, epsilon: -1.0e-6}"),
        r"model\.layers\[0\]\.epsilon: Input should be greater than or equal to 0",
    ),
    (
        "infinite epsilon",
        layer("{type: RMSNorm, num_features: 4, epsilon: .inf}"),
        r"model\.layers\[0\]\.epsilon: Input should be a finite number \(got float inf\)",
    ),
    (
        "NaN initializer scale",
        "model: {type: Linear, in_features: 4, out_features: 2, kernel_init: {type: normal, stddev: .nan}}\n",
        r"model\.kernel_init: invalid argument 'stddev' for initializer 'normal': Input should be a finite number \(got nan\)",
    ),
    (
        "boolean initializer scale",
        "model: {type: Linear, in_features: 4, out_features: 2, bias_init: {type: constant, value: yes}}\n",
        r"model\.bias_init: invalid argument 'value' for initializer 'constant': Input should be a valid number \(got True\)",
    ),
    (
        "NaN function argument",
        layer("{type: leaky_relu, negative_slope: .nan}"),
        r"model\.layers\[0\]\.negative_slope: Input should be a finite number \(got float nan\)",
    ),
    (
        "celu alpha 0",
        layer("{type: celu, alpha: 0.0}"),
        r"model\.layers\[0\]\.alpha: Input should be greater than 0",
    ),
    (
        "NaN learning rate",
        LINEAR + "optimizer: {type: adam, learning_rate: .nan}\n",
        r"2:40: optimizer\.learning_rate: Input should be a finite number \(got float nan\)",
    ),
    (
        "infinite learning rate",
        LINEAR + "optimizer: {type: sgd, learning_rate: .inf}\n",
        r"optimizer\.learning_rate: Input should be a finite number \(got float inf\)",
    ),
    (
        "negative learning rate",
        LINEAR + "optimizer: {type: adam, learning_rate: -0.1}\n",
        r"optimizer\.learning_rate: optax\.adam's argument 'learning_rate' must be a finite number >= 0 \(got float -0\.1\)",
    ),
    (
        "learning_rate: on",
        LINEAR + "optimizer: {type: adam, learning_rate: on}\n",
        r"optimizer\.learning_rate: Input should be a valid number \(got bool True\)",
    ),
    (
        "b1 above 1",
        LINEAR + "optimizer: {type: adam, learning_rate: 0.1, b1: 1.5}\n",
        r"optimizer\.b1: optax\.adam's argument 'b1' must be a number in \[0, 1\) \(got float 1\.5\)",
    ),
    (
        "NaN in a schedule",
        LINEAR + "optimizer: {type: adam, learning_rate: {type: constant_schedule, value: .nan}}\n",
        r"optimizer\.learning_rate\.value: Input should be a finite number",
    ),
    (
        "schedule optax refuses",
        LINEAR
        + "optimizer:\n  type: sgd\n  learning_rate: {type: cosine_decay_schedule, init_value: 0.1, decay_steps: 0}\n",
        r"4:78: optimizer\.learning_rate\.decay_steps: optax\.cosine_decay_schedule refused it: The cosine_decay_schedule requires positive decay_steps",
    ),
    (
        "infinite clipping",
        LINEAR + "optimizer: {type: adam, learning_rate: 0.1, clip_grad_norm: .inf}\n",
        r"optimizer\.clip_grad_norm: Input should be a finite number",
    ),
    (
        "huge step count",
        LINEAR + f"train: {{steps: {10**100}}}\n",
        r"2:16: train\.steps: Input should be less than or equal to 2147483647",
    ),
    (
        "batch_size: yes",
        LINEAR + "train: {batch_size: yes}\n",
        r"train\.batch_size: Input should be a valid integer \(got bool True\)",
    ),
    (
        "NaN test fraction",
        LINEAR + "data: {type: npz, path: d.npz, test_fraction: .nan}\n",
        r"2:47: data\.test_fraction: Input should be a finite number \(got float nan\)",
    ),
]


@pytest.fixture
def probe_file(tmp_path):
    def write(text):
        path = tmp_path / "m.yaml"
        path.write_text(text)
        return path

    return write


@pytest.mark.parametrize(("name", "text", "expected"), PROBES, ids=[p[0] for p in PROBES])
def test_probe_is_a_located_config_error(probe_file, name, text, expected):
    path = probe_file(text)
    with pytest.raises(ConfigError) as info:
        load_train_config(path)
    lines = [f"{p.line}:{p.column}: {p}" for p in info.value.problems]
    assert any(re.search(expected, line) for line in lines), lines


@pytest.mark.parametrize(("name", "text", "expected"), PROBES, ids=[p[0] for p in PROBES])
def test_probe_at_the_cli_exits_1_without_a_traceback(probe_file, capsys, name, text, expected):
    path = probe_file(text)
    for argv in (["config", "validate", str(path)], ["build", str(path)]):
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert "Traceback" not in err and re.search(expected.split(": ", 1)[-1], err), err


def test_optax_refusals_are_config_errors_before_make(tmp_path):
    config = {
        "model": {"type": "Linear", "in_features": 64, "out_features": 10},
        "optimizer": {
            "type": "sgd",
            "learning_rate": {"type": "cosine_decay_schedule", "init_value": 0.1, "decay_steps": 0},
        },
    }
    with pytest.raises(ConfigError, match=r"optimizer\.learning_rate\.decay_steps: optax\."):
        load_train_config(config)


def test_a_model_of_a_trillion_parameters_is_refused_with_the_size_it_needs(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text(HUGE)
    with pytest.raises(
        ConfigError,
        match=r"huge\.yaml:2:3: model: training this model needs at least 14\.6 TB \(3\.6 TB of "
        r"Variables, 3\.6 TB of gradients, 7\.3 TB of optimizer state; activations not counted\) "
        r"but only .* is free\. .*pass --allow-large",
    ):
        train(path, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_the_cli_refuses_the_huge_model_without_a_traceback(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text(HUGE)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nnx_plugins.cli._main",
            "train",
            str(path),
            "--run-dir",
            str(tmp_path / "run"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "training this model needs at least 14.6 TB" in result.stderr

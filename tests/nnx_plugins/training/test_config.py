"""The train and checkpoint sections, and load_train_config over every training section."""

import re
import textwrap

import pytest

from nnx_plugins import ConfigError, DataError
from nnx_plugins.training._config import check_data_path, load_train_config

MODEL = {"type": "Linear", "in_features": 64, "out_features": 10}


def problems_of(config):
    with pytest.raises(ConfigError) as info:
        load_train_config(config)
    return [str(p) for p in info.value.problems]


def test_defaults_fill_every_section():
    config = load_train_config({"model": MODEL})
    sections = config.sections
    assert sections["optimizer"].type == "adam"
    assert sections["optimizer"].arguments == {"learning_rate": 1e-3}
    assert sections["data"].type == "digits" and sections["data"].arguments == {"layout": "NHWC"}
    assert sections["task"].model_dump() == {"type": "classification"}
    assert sections["loggers"].model_dump() == [{"type": "jsonl"}]
    assert sections["metrics"].model_dump() == sections["callbacks"].model_dump() == []
    assert sections["train"].batch_size == 64 and sections["train"].steps is None
    assert sections["train"].precision == "float32"
    assert sections["checkpoint"].keep == 3 and sections["checkpoint"].dir == "checkpoints"
    assert sections["checkpoint"].keep_best is None
    assert sections["optimizer"].accumulate_steps == 1


@pytest.mark.parametrize(
    "config, match",
    [
        ({"data": {"type": "mnist"}}, r"data\.type: Unknown dataset 'mnist'"),
        ({"data": {"type": "npz"}}, r"data\.path: dataset 'npz' needs the argument 'path'"),
        (
            {"data": {"type": "digits", "path": "x.npz"}},
            r"data\.path: unknown argument 'path' for dataset 'digits'\. .*Valid keys: type, layout",
        ),
        ({"data": {"layout": "NCHW"}}, r"data\.layout: Input should be 'NHWC' or 'flat'"),
        (
            {"data": {"type": "npz", "path": "a.npz", "test_fraction": 1.5}},
            r"data\.test_fraction: dataset 'npz' refused it: test_fraction must be in \(0, 1\)",
        ),
        (
            {"train": {"precision": "float16"}},
            r"train\.precision: Input should be 'float32' or 'bfloat16'",
        ),
        (
            {"checkpoint": {"keep_best": {"metric": "test.loss", "mode": "lowest"}}},
            r"checkpoint\.keep_best\.mode: Input should be 'min' or 'max'",
        ),
        (
            {"optimizer": {"accumulate_steps": 0}},
            r"optimizer\.accumulate_steps: Input should be greater than 0",
        ),
        (
            {"train": {"steps": 10, "epochs": 2}},
            r"train: Value error, give either 'steps' \(10\) or 'epochs' \(2\), not both",
        ),
        ({"train": {"batch_size": 0}}, r"train\.batch_size: Input should be greater than 0"),
        ({"train": {"steps": 2.5}}, r"train\.steps: Input should be a valid integer"),
        ({"train": {"seed": -1}}, r"train\.seed: Input should be greater than or equal to 0"),
        (
            {"train": {"batchsize": 8}},
            r"train\.batchsize: unknown key 'batchsize'\. Did you mean 'batch_size'",
        ),
        (
            {"checkpoint": {"keeep": 2}},
            r"checkpoint\.keeep: unknown key 'keeep'\. Did you mean 'keep'",
        ),
        ({"checkpoint": {"interval": 0}}, r"checkpoint\.interval: Input should be greater than 0"),
        (
            {"optimiser": {"type": "adam"}},
            r"optimiser: unknown section 'optimiser'\. Did you mean 'optimizer'",
        ),
        (
            {"early_stopping": {"patience": 3}},
            r"early_stopping: unknown section 'early_stopping'\. .*Known sections: .*callbacks",
        ),
        ({"loger": [{"type": "csv"}]}, r"loger: unknown section 'loger'\. Did you mean 'loggers'"),
    ],
)
def test_section_errors(config, match):
    problems = problems_of({"model": MODEL, **config})
    assert any(__import__("re").search(match, p) for p in problems), problems


def test_every_problem_at_once_with_file_positions(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        textwrap.dedent("""\
        model:
          type: Linear
          in_features: 64
          out_features: 10
        optimizer:
          type: adamw
          learning_rate: 0.01
          weight_decy: 0.1
        train:
          batch_size: -3
        checkpoint:
          keeep: 2
        """)
    )
    with pytest.raises(ConfigError) as info:
        load_train_config(path)
    text = str(info.value)
    assert "3 problems in" in text
    assert f"{path}:8:16: optimizer.weight_decy: unknown argument 'weight_decy'" in text
    assert f"{path}:10:15: train.batch_size: Input should be greater than 0" in text
    assert f"{path}:12:3: checkpoint.keeep: unknown key 'keeep'" in text


def test_npz_path_is_relative_to_the_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 2, out_features: 2}\n"
        "data: {type: npz, path: data/d.npz}\n"
    )
    assert load_train_config(path).sections["data"].arguments["path"] == str(
        tmp_path / "data" / "d.npz"
    )


def test_a_path_given_as_an_override_is_relative_to_the_current_directory(tmp_path, monkeypatch):
    """``nnx train DST/config.yaml data.path=notes.txt``: notes.txt where the user is, as the
    shell completes it; the file's own paths stay relative to the file."""
    from nnx_plugins import load_config

    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "c.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 2, out_features: 2}\n"
        "data: {type: npz, path: d.npz}\n"
        "checkpoint: {init_from: checkpoint}\n"
    )
    monkeypatch.chdir(tmp_path)
    config = load_train_config(load_config(path, overrides=["data.path=mine.npz"]))
    assert config.sections["data"].arguments["path"] == str(tmp_path / "mine.npz")
    assert config.sections["checkpoint"].init_from == str(tmp_path / "model" / "checkpoint")
    config = load_train_config(load_config(path, overrides=["checkpoint.init_from=run/best"]))
    assert config.sections["data"].arguments["path"] == str(tmp_path / "model" / "d.npz")
    assert config.sections["checkpoint"].init_from == str(tmp_path / "run" / "best")
    with pytest.raises(
        DataError,
        match=r"<override data.path=mine.npz>:1:11: data.path: no such file '.*/mine.npz' \(a "
        r"relative path given as an override is relative to the current directory\)\.",
    ):
        check_data_path(load_train_config(load_config(path, overrides=["data.path=mine.npz"])))


def test_npz_defaults_are_filled_in():
    data = load_train_config({"model": MODEL, "data": {"type": "npz", "path": "/d.npz"}}).sections[
        "data"
    ]
    assert data.arguments == {
        "path": "/d.npz",
        "x": "x",
        "y": "y",
        "x_test": "x_test",
        "y_test": "y_test",
        "x_val": "x_val",
        "y_val": "y_val",
        "test_fraction": 0.2,
    }
    assert data.validation is None  # (the data section's own key: unset, the default)


def test_json_schema_has_the_file_spelling():
    from nnx_plugins import config_schema

    schema = config_schema()["properties"]
    assert {
        "optimizer",
        "data",
        "train",
        "checkpoint",
        "task",
        "loggers",
        "callbacks",
        "metrics",
    } <= set(schema)
    optimizer = schema["optimizer"]
    assert "arguments" not in optimizer["properties"] and optimizer["additionalProperties"] is True
    assert {"type": "number"} in optimizer["properties"]["learning_rate"]["anyOf"]
    assert schema["train"]["additionalProperties"] is False


def test_a_missing_data_file_is_located_where_data_path_is_written(tmp_path, capsys):
    from nnx_plugins import DataError
    from nnx_plugins.cli._main import main

    path = tmp_path / "c.yaml"
    path.write_text(
        "model: {type: Linear, in_features: 64, out_features: 10}\n"
        "data:\n  type: npz\n  path: nowhere.npz\n"
    )
    message = (
        rf"{re.escape(str(path))}:4:9: data.path: no such file "
        rf"'{re.escape(str(tmp_path / 'nowhere.npz'))}' \(a relative path is relative to the config\)\."
    )
    with pytest.raises(DataError, match=message):
        check_data_path(load_train_config(path))
    assert main(["train", str(path), "--run-dir", str(tmp_path / "run")]) == 1
    assert re.fullmatch(message + "\n", capsys.readouterr().err)
    with pytest.raises(DataError, match=r"<dict>: data.path: no such file '/no/such.npz'\.$"):
        check_data_path(
            load_train_config({"model": MODEL, "data": {"type": "npz", "path": "/no/such.npz"}})
        )
    assert not (tmp_path / "run").exists()

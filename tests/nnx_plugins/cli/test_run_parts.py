"""nnx tasks|datasets|metrics|loggers|callbacks list|show."""

import pytest

from nnx_plugins.cli._main import main


@pytest.mark.parametrize(
    "kind, names",
    [
        ("tasks", ["classification", "regression", "language_model", "acme.quantile"]),
        ("datasets", ["digits", "diabetes", "npz", "text", "acme.waves"]),
        (
            "metrics",
            ["accuracy", "top_k_accuracy", "mse", "mae", "r2", "perplexity", "bits_per_token"],
        ),
        ("loggers", ["jsonl", "csv", "tensorboard", "acme.text"]),
        ("callbacks", ["early_stopping", "ema"]),
    ],
)
def test_list_shows_every_name_with_its_provider(nnx_registry, capsys, kind, names):
    assert main([kind, "list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in names) and "available" in out


def test_list_with_a_pattern_and_no_match(nnx_registry, capsys):
    assert main(["datasets", "list", "acme.*"]) == 0
    out = capsys.readouterr().out
    assert "acme.waves" in out and "digits" not in out
    assert main(["loggers", "list", "nothing"]) == 1
    assert "nnx: error: no logger name matches 'nothing'." in capsys.readouterr().err


def test_show_prints_the_config_fields(nnx_registry, capsys):
    assert main(["tasks", "show", "regression"]) == 0
    out = capsys.readouterr().out
    assert "regression: task nnx_plugins.training.tasks._regression:Regression from nnx-jax" in out
    assert "huber_delta" in out and '"mse"' in out
    assert main(["datasets", "show", "npz"]) == 0
    assert "(required)" in capsys.readouterr().out


def test_show_an_unknown_name_suggests_one(nnx_registry, capsys):
    assert main(["callbacks", "show", "early_stoping"]) == 1
    assert (
        "nnx: error: Unknown callback 'early_stoping'. Did you mean 'early_stopping'?"
        in capsys.readouterr().err
    )

"""The optimizer section: optax by name, its arguments checked; accumulate_steps."""

import re

import optax
import pytest

from nnx_plugins import ConfigError
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._optimizer import (
    OptimizerSection,
    make_optimizer,
    optimizer_names,
    schedule_names,
)

MODEL = {"type": "Linear", "in_features": 64, "out_features": 10}


def problems_of(config):
    with pytest.raises(ConfigError) as info:
        load_train_config(config)
    return [str(p) for p in info.value.problems]


def test_optimizer_names_come_from_optax():
    names = optimizer_names()
    assert {"adam", "adamw", "sgd", "lion", "rmsprop", "adafactor"} <= set(names)
    assert "scale_by_learning_rate" not in names
    assert {"cosine_decay_schedule", "warmup_cosine_decay_schedule", "linear_schedule"} <= set(
        schedule_names()
    )


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd", "lion", "rmsprop", "adabelief", "lamb"])
def test_every_optimizer_builds_with_a_learning_rate(name):
    section = OptimizerSection.model_validate({"type": name, "learning_rate": 0.01})
    assert hasattr(make_optimizer(section), "update")


def test_schedule_clipping_and_arguments_build_the_optax_chain():
    import jax.numpy as jnp

    section = OptimizerSection.model_validate(
        {
            "type": "sgd",
            "momentum": 0.9,
            "nesterov": True,
            "clip_grad_norm": 1.0,
            "clip_grad_value": 0.5,
            "learning_rate": {
                "type": "piecewise_constant_schedule",
                "init_value": 0.1,
                "boundaries_and_scales": {10: 0.5},
            },
        }
    )
    tx = section.make()
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    updates, _ = tx.update({"w": jnp.array([10.0, 0.0])}, state, params)
    # clipped to 0.5 by value, global norm 0.5 <= 1, then nesterov sgd: -0.1 * (0.5 + 0.9 * 0.5)
    assert updates["w"].tolist() == pytest.approx([-0.095, 0.0])
    expected = optax.chain(
        optax.clip(0.5), optax.clip_by_global_norm(1.0), optax.sgd(0.1, momentum=0.9, nesterov=True)
    )
    want, _ = expected.update({"w": jnp.array([10.0, 0.0])}, expected.init(params), params)
    assert updates["w"].tolist() == pytest.approx(want["w"].tolist())


def test_dump_is_the_flat_config_spelling():
    data = {
        "type": "adamw",
        "learning_rate": 0.01,
        "weight_decay": 0.1,
        "clip_grad_norm": 2.0,
        "trainable": ["Param"],
    }
    assert OptimizerSection.model_validate(data).model_dump() == data
    config = load_train_config({"model": MODEL, "optimizer": data})
    assert load_train_config(config.to_dict()).sections["optimizer"].model_dump() == data


@pytest.mark.parametrize(
    "section, match",
    [
        (
            {"type": "adamx", "learning_rate": 0.1},
            r"optimizer\.type: unknown optax optimizer 'adamx'\. Did you mean 'adamax' or 'adam'",
        ),
        (
            {"type": "adamw", "learning_rate": 0.1, "weight_decy": 0.1},
            r"optimizer\.weight_decy: unknown argument 'weight_decy' for optax\.adamw\. Did you mean 'weight_decay'",
        ),
        (
            {"type": "adam", "learning_rate": 0.1, "trainble": ["Param"]},
            r"Did you mean 'trainable'",
        ),
        ({"type": "adam"}, r"optimizer: optax\.adam needs the argument 'learning_rate'"),
        (
            {"type": "adam", "learning_rate": 0.1, "b1": True},
            r"optimizer\.b1: Input should be a valid number \(got bool True\)",
        ),
        ({"type": "adam", "learning_rate": "fast"}, r"optimizer\.learning_rate: .*got str 'fast'"),
        (
            {"type": "adam", "learning_rate": 0.1, "mu_dtype": "floot32"},
            r"optimizer\.mu_dtype: expected a dtype name",
        ),
        (
            {"type": "adamw", "learning_rate": 0.1, "mask": [1]},
            r"optimizer\.mask: optax\.adamw's argument 'mask' takes a Python object",
        ),
        (
            {"type": "adam", "learning_rate": {"type": "cosine_decay"}},
            r"optimizer\.learning_rate\.type: expected an optax schedule name as 'type'\. Did you mean 'cosine_decay_schedule'",
        ),
        (
            {"type": "adam", "learning_rate": {"init_value": 0.1}},
            r"optimizer\.learning_rate: expected an optax schedule name",
        ),
        (
            {
                "type": "adam",
                "learning_rate": {"type": "linear_schedule", "init_value": 0.1, "end_value": 0.0},
            },
            r"optimizer\.learning_rate: optax\.linear_schedule needs the argument 'transition_steps'",
        ),
        (
            {
                "type": "adam",
                "learning_rate": {
                    "type": "linear_schedule",
                    "init_value": 0.1,
                    "end_value": 0.0,
                    "transition_steps": 1.5,
                },
            },
            r"learning_rate\.transition_steps: Input should be a valid integer",
        ),
        (
            {"type": "adam", "learning_rate": 0.1, "b2": {"type": "constant_schedule", "value": 1}},
            r"optimizer\.b2: optax\.adam's argument 'b2' does not take a schedule",
        ),
        (
            {"type": "adam", "learning_rate": 0.1, "clip_grad_norm": -1},
            r"optimizer\.clip_grad_norm: Input should be greater than 0",
        ),
        (
            {"type": "adam", "learning_rate": 0.1, "trainable": ["Parm"]},
            # other tests may have registered kinds such as 'odd.Param' in this process
            r"optimizer\.trainable\[0\]: unknown Variable kind 'Parm'\. Did you mean [^?]*'Param'",
        ),
        ({"type": 3, "learning_rate": 0.1}, r"optimizer\.type: Input should be a valid string"),
    ],
)
def test_optimizer_errors(section, match):
    problems = problems_of({"model": MODEL, "optimizer": section})
    assert any(__import__("re").search(match, p) for p in problems), problems


@pytest.mark.parametrize(
    "name, close", [("LoraParam", "acme.LoRAParam"), ("Parm", "Param"), ("batchstat", "BatchStat")]
)
def test_trainable_suggests_kinds_with_and_without_namespace(name, close):
    import nnx_core

    class Unnamed(nnx_core.Variable):  # has only an automatic name: never listed
        pass

    problems = problems_of(
        {"model": MODEL, "optimizer": {"type": "adam", "learning_rate": 0.1, "trainable": [name]}}
    )
    # kinds registered by other tests in this process (e.g. 'odd.Param') may be suggested too
    assert re.search(rf"Did you mean [^?]*{re.escape(repr(close))}", problems[0])
    assert "acme.LoRAParam" in problems[0]
    assert Unnamed.__qualname__ not in problems[0]


def test_trainable_accepts_plugin_kinds():
    config = load_train_config(
        {
            "model": MODEL,
            "optimizer": {
                "type": "adam",
                "learning_rate": 0.1,
                "trainable": ["acme.LoRAParam", "BatchStat"],
            },
        }
    )
    assert config.sections["optimizer"].trainable == ["acme.LoRAParam", "BatchStat"]


@pytest.mark.parametrize("steps", [20, 50])
def test_a_warmup_as_long_as_the_run_is_named_not_left_to_optax(tmp_path, steps):
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: {type: Linear, in_features: 64, out_features: 10}\n"
        "data: {type: digits, layout: flat}\n"
        "optimizer:\n"
        "  type: adamw\n"
        "  learning_rate:\n"
        "    type: warmup_cosine_decay_schedule\n"
        "    init_value: 0.0\n"
        "    peak_value: 0.01\n"
        "    warmup_steps: 50\n"
        "    decay_steps: ${train.steps}\n"
        f"train: {{steps: {steps}}}\n"
    )
    from nnx_plugins import load_config

    with pytest.raises(ConfigError) as info:
        load_train_config(load_config(config))
    assert re.search(
        r"c\.yaml:10:18: optimizer\.learning_rate\.decay_steps: decay_steps counts the warmup "
        rf"too, so it must be larger than warmup_steps \(50\); it is {steps}\. Make the run "
        r"longer \(train\.steps",
        str(info.value),
    ), str(info.value)

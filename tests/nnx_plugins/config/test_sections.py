"""Top-level sections registered by other tools."""

import pydantic
import pytest

from nnx_plugins import ConfigError, load_config, register_section
from nnx_plugins.config._sections import _SECTIONS


class Optimizer(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    name: str = "adam"
    learning_rate: float = 1e-3


@pytest.fixture
def optimizer_section():
    register_section("optimizer_test", Optimizer)
    yield
    _SECTIONS.pop("optimizer_test", None)


def test_registered_sections_are_validated(optimizer_section):
    config = load_config({"model": {"type": "relu"}, "optimizer_test": {"learning_rate": 0.1}})
    assert config.sections["optimizer_test"] == Optimizer(learning_rate=0.1)
    assert config.to_dict()["optimizer_test"] == {"name": "adam", "learning_rate": 0.1}


def test_section_problems_join_model_problems(optimizer_section):
    with pytest.raises(ConfigError, match=r"2 problems") as info:
        load_config({"model": {"type": "rleu"}, "optimizer_test": {"learning_rat": 0.1}})
    messages = [str(p) for p in info.value.problems]
    assert any(
        "optimizer_test.learning_rat: unknown key 'learning_rat'. Did you mean 'learning_rate'?"
        in m
        for m in messages
    )
    with pytest.raises(
        ConfigError, match=r"optimizer_test\.learning_rate: Input should be a valid number"
    ):
        load_config({"model": {"type": "relu"}, "optimizer_test": {"learning_rate": "fast"}})
    with pytest.raises(
        ConfigError, match=r"unknown section 'optimizer_tset'\. Did you mean 'optimizer_test'\?"
    ):
        load_config({"model": {"type": "relu"}, "optimizer_tset": {}})


@pytest.mark.parametrize(
    ("name", "model", "error", "message"),
    [
        (
            "x",
            dict,
            TypeError,
            r"register_section\('x', \.\.\.\) expects a pydantic BaseModel subclass",
        ),
        ("model", Optimizer, ValueError, r"The config section 'model' is reserved"),
        ("include", Optimizer, ValueError, r"The config section 'include' is reserved"),
        ("optimizer_test", pydantic.BaseModel, ValueError, r"already registered to Optimizer"),
    ],
)
def test_bad_registrations(optimizer_section, name, model, error, message):
    with pytest.raises(error, match=message):
        register_section(name, model)
    assert register_section("optimizer_test", Optimizer) is Optimizer

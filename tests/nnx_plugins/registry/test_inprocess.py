"""In-process registration: the rules of entry points (names, collisions, config models), raised at once."""

import jax.numpy as jnp
import pydantic
import pytest

import nnx_core
from nnx_core import Module, Param, Rngs, Variable
from nnx_plugins import (
    NameCollisionError,
    PluginLoadError,
    PluginNameError,
    Registry,
    Settings,
    build,
    config_schema,
    get_layer,
    get_variable_type,
    load_config,
    register_layer,
    register_variable_kind,
    to_config,
)
from nnx_plugins.registry._errors import IN_PROCESS


class Block(Module):
    def __init__(self, features: int, *, scale: float = 2.0, rngs: Rngs):
        self.features, self.scale = features, scale
        self.w = Param(jnp.full((features,), scale))

    def __call__(self, x):
        return x * self.w


class Custom(Module):
    class config_model(pydantic.BaseModel):  # noqa: N801 - the attribute name is the protocol
        model_config = pydantic.ConfigDict(extra="forbid")
        width: int = 3

    def __init__(self, width: int = 3, *, rngs: Rngs):
        self.width = width


def cube(x):
    return x**3


def test_a_registered_layer_works_like_a_published_one(nnx_registry):
    assert register_layer("inproc.Block")(Block) is Block
    assert get_layer("inproc.Block") is Block
    layer = build({"type": "inproc.Block", "features": 2})
    assert layer(jnp.ones(2)).tolist() == [2.0, 2.0]
    assert to_config(layer) == {"type": "inproc.Block", "features": 2, "scale": 2.0}
    assert config_schema()["$defs"]["inproc.Block"]["required"] == ["type", "features"]
    with pytest.raises(Exception, match=r"model\.feature: unknown key 'feature' for inproc\.Block"):
        load_config({"model": {"type": "inproc.Block", "feature": 2}})


def test_a_registered_activation_is_a_layer_and_an_argument(nnx_registry):
    register_layer("inproc.cube")(cube)
    assert build({"type": "inproc.cube"})(jnp.full(2, 2.0)).tolist() == [8.0, 8.0]
    gated = build(
        {
            "type": "acme.GatedDense",
            "in_features": 2,
            "out_features": 2,
            "gate_activation": "inproc.cube",
        }
    )
    assert gated.gate_activation is cube
    assert to_config(gated)["gate_activation"] == "inproc.cube"


def test_a_custom_config_model_is_used(nnx_registry):
    register_layer("inproc.Custom")(Custom)
    assert build({"type": "inproc.Custom", "width": 5}).width == 5
    assert config_schema()["$defs"]["inproc.Custom"]["properties"]["width"]["default"] == 3


def test_a_registered_kind_is_known_by_name_everywhere(nnx_registry):
    @register_variable_kind("inproc.Ema")
    class Ema(Variable):
        pass

    class Model(Module):
        def __init__(self):
            self.w = Param(jnp.ones(2))
            self.avg = Ema(jnp.zeros(2))

    assert nnx_core.variable_name(Ema) == "inproc.Ema" and get_variable_type("inproc.Ema") is Ema
    assert [p for p, _ in nnx_core.state(Model(), "inproc.Ema").flat_state()] == [("avg",)]


def test_registering_the_same_object_or_a_redefinition_again_is_fine(nnx_registry):
    def define():
        def ramp(x):
            return x

        return ramp

    first, again = define(), define()
    register_layer("inproc.ramp")(first)
    register_layer("inproc.ramp")(first)
    register_layer("inproc.ramp")(again)  # a re-run notebook cell
    assert get_layer("inproc.ramp") is again


def test_registration_can_target_a_given_registry(nnx_registry):
    mine = Registry(settings=Settings(autoload=False))
    register_layer("inproc.mine", registry=mine)(cube)
    assert mine.get("layer", "inproc.mine") is cube
    assert "inproc.mine" not in nnx_registry.names("layer")


@pytest.mark.parametrize(
    "name, match",
    [
        ("Cube", r"in-process provides layer 'Cube' without a namespace; .* 'mypack.Cube'"),
        ("Inproc.Cube", r"provides layer 'Inproc.Cube', which is not a valid name"),
        ("inproc.", r"which is not a valid name; use 'namespace.Name'"),
        (3, r"in-process names are strings such as 'my.Block', got 3"),
    ],
)
def test_names_must_be_namespaced(nnx_registry, name, match):
    with pytest.raises(PluginNameError, match=match) as info:
        register_layer(name)(cube)
    assert info.value.plugin == IN_PROCESS


@pytest.mark.parametrize(
    "name, holder",
    [
        ("acme.GatedDense", r"acme-layers 0\.1\.0 \(acme_layers\.dense:GatedDense\)"),
        ("acme.Swish", r"acme-layers 0\.1\.0 \(acme_layers\.plugin:swish\)"),  # from a hook
    ],
)
def test_a_name_a_distribution_provides_is_a_collision(nnx_registry, name, holder):
    with pytest.raises(NameCollisionError, match=rf"'{name}' is already provided by {holder}") as e:
        register_layer(name)(cube)
    assert [str(p) for p in e.value.providers] == ["acme-layers 0.1.0", "in-process"]
    assert e.value.fix == f"Register it under your own namespace, e.g. 'mine.{name[5:]}'."
    assert get_layer(name) is not cube


def test_two_objects_under_one_in_process_name_collide(nnx_registry):
    register_layer("inproc.twice")(cube)
    with pytest.raises(
        NameCollisionError,
        match=r"'inproc.twice' is already provided by in-process \(.*:cube\); registering "
        r".*:Block in-process",
    ):
        register_layer("inproc.twice")(Block)
    assert get_layer("inproc.twice") is cube


def test_a_kind_name_a_distribution_provides_is_a_collision(nnx_registry):
    class Lora(Param):
        pass

    with pytest.raises(NameCollisionError, match=r"Variable kind 'acme.LoRAParam' is already"):
        register_variable_kind("acme.LoRAParam")(Lora)
    assert nnx_core.variable_type("acme.LoRAParam") is not Lora


class _Named(Variable, kind="inproc.Named"):
    pass


@pytest.mark.parametrize(
    "register, obj, match",
    [
        (
            register_layer,
            object,
            r"as the class object, which is not a subclass of nnx_core.Module",
        ),
        (register_layer, 42, r"as 42, which is neither a Module subclass nor an activation"),
        (
            register_layer,
            Block(2, rngs=Rngs(0)),
            r"in-process provides layer 'inproc.Other' as an instance of Block, not the class: "
            r"that one object \(and its parameters\) would be shared by every config naming it\. "
            r"Register the class Block itself\.",
        ),
        (register_variable_kind, Block, r"as <class .*Block'>, which is not a subclass of"),
        (
            register_variable_kind,
            _Named,
            r"could not register Variable kind 'inproc.Other': .*"
            r"already registered as 'inproc.Named'",
        ),
    ],
)
def test_wrong_objects_raise_at_once(nnx_registry, register, obj, match):
    with pytest.raises(PluginLoadError, match=match) as info:
        register("inproc.Other")(obj)
    assert info.value.fix == "Fix the object you registered, or register another one."
    assert "inproc.Other" not in nnx_registry.names("layer")


def test_a_config_model_that_is_not_pydantic_is_refused(nnx_registry):
    class Odd(Module):
        config_model = dict

    with pytest.raises(PluginLoadError, match=r"'inproc.Odd' whose config_model is <class 'dict'>"):
        register_layer("inproc.Odd")(Odd)


def test_disabled_autoload_still_allows_in_process_names():
    registry = Registry(settings=Settings(autoload=False))
    register_layer("acme.GatedDense", registry=registry)(Block)  # the pack is switched off
    assert registry.get("layer", "acme.GatedDense") is Block

"""Fixtures for the plugin tests: fake layer packs (mocked metadata) next to the real ones."""

import importlib.metadata as metadata
import os
import signal
import sys
import textwrap
import types

import pytest

from nnx_core import Module, Param, Rngs
from nnx_plugins.testing import fake_distribution, isolated_registry, nnx_registry  # noqa: F401


class OtherGatedDense(Module):
    """A colliding ``acme.GatedDense`` from another distribution."""

    def __init__(self, in_features: int, *, rngs: Rngs):
        self.in_features = in_features


class NotAVariable:
    pass


class FakeParam(Param):
    pass


def other_swish(x):
    return x


@pytest.fixture
def fake_modules(monkeypatch, tmp_path):
    """Importable modules for fake distributions: ``fakepack`` (good) and ``boom`` (raises)."""
    module = types.ModuleType("fakepack")
    module.OtherGatedDense = OtherGatedDense
    module.NotAVariable = NotAVariable
    module.other_swish = other_swish
    module.not_callable = 42
    module.an_instance = OtherGatedDense(3, rngs=Rngs(0))

    module.FakeParam = FakeParam
    monkeypatch.setitem(sys.modules, "fakepack", module)
    (tmp_path / "boom.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "hookpack.py").write_text(
        textwrap.dedent("""
        from nnx_core import Variable
        from nnx_plugins import hookimpl

        class Scale(Variable):
            pass

        def cube(x):
            return x ** 3

        @hookimpl
        def nnx_register_layers(registry):
            registry.add_layer("hooky.cube", cube)

        @hookimpl
        def nnx_register_variable_types(registry):
            registry.add_variable_type("hooky.Scale", Scale)
    """)
    )
    (tmp_path / "badhook.py").write_text(
        textwrap.dedent("""
        from nnx_plugins import hookimpl

        @hookimpl
        def nnx_register_layers(registry):
            registry.add_layer("Unqualified", print)
    """)
    )
    (tmp_path / "raisinghook.py").write_text(
        textwrap.dedent("""
        from nnx_plugins import hookimpl

        @hookimpl
        def nnx_register_layers(registry):
            raise KeyError("hook exploded")
    """)
    )
    (tmp_path / "typohook.py").write_text(
        textwrap.dedent("""
        from nnx_plugins import hookimpl

        @hookimpl
        def nnx_register_layer(registry):
            pass
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in (
        "boom",
        "badhook",
        "raisinghook",
        "typohook",
    ):  # hookpack stays: its kind is global
        monkeypatch.delitem(sys.modules, name, raising=False)
    return module


def installed(*names):
    """The really installed distributions called ``names`` (e.g. ``nnx``, ``acme-layers``)."""
    wanted = set(names)
    return [d for d in metadata.distributions() if d.metadata["Name"] in wanted]


@pytest.fixture
def with_fakes(fake_modules):
    """Build a default registry from the real ``nnx`` + ``acme-layers`` and the given fakes."""

    def make(*fakes, settings=None):
        return isolated_registry(
            distributions=[*installed("nnx-jax", "acme-layers"), *fakes], settings=settings
        )

    return make


COLLIDING = fake_distribution(
    "other-layers",
    "2.0",
    entry_points={"nnx.layers": {"acme.GatedDense": "fakepack:OtherGatedDense"}},
)
BROKEN = fake_distribution(
    "broken-layers",
    "0.3",
    entry_points={"nnx.layers": {"broken.Dense": "boom:Dense", "broken.Other": "boom:Other"}},
)


@pytest.fixture
def sigterm_default():
    """SIGTERM at its default, as a command finds it (`stop_on_signals` takes it only then)."""
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


@pytest.fixture
def sigterm_after(monkeypatch):
    """``sigterm_after(module, name)``: from now on ``module.name`` sends this process SIGTERM
    just after it returns, and the handler runs before the caller sees the result (a signal
    landing at that moment)."""

    def patch(module, name):
        real = getattr(module, name)

        def then_sigterm(*args, **kwargs):
            result = real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # (the handler runs here)
                pass
            return result

        monkeypatch.setattr(module, name, then_sigterm)

    return patch

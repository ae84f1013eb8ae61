"""BoundFunction: equal and hashable by value, callable, picklable, introspectable."""

import functools
import inspect
import pickle

import jax.numpy as jnp

from nnx_layers import Sequential, leaky_relu, softmax
from nnx_plugins.config._bound import BoundFunction


def test_equal_bindings_are_equal_and_hash_alike():
    a = BoundFunction(softmax, {"axis": [0]})
    b = BoundFunction(softmax, {"axis": (0,)})
    assert a == b and hash(a) == hash(b) and a.arguments == {"axis": (0,)}
    assert a != BoundFunction(softmax, {"axis": 1})
    assert a != BoundFunction(leaky_relu, {"axis": 0})
    assert functools.partial(softmax, axis=0) != functools.partial(softmax, axis=0)  # (why)


def test_call_adds_the_bound_arguments_and_lets_the_call_override_them():
    f = BoundFunction(leaky_relu, {"negative_slope": 0.5})
    assert f(jnp.array([-2.0])).tolist() == [-1.0]
    assert f(jnp.array([-2.0]), negative_slope=0.25).tolist() == [-0.5]


def test_signature_hides_the_bound_arguments():
    f = BoundFunction(leaky_relu, {"negative_slope": 0.5})
    assert list(inspect.signature(f).parameters) == ["x"]
    model = Sequential(f)
    assert model(jnp.array([-2.0]), rngs=None).tolist() == [-1.0]


def test_pickle_and_repr():
    f = BoundFunction(leaky_relu, {"negative_slope": 0.5})
    assert pickle.loads(pickle.dumps(f)) == f
    assert repr(f) == "leaky_relu(negative_slope=0.5)"

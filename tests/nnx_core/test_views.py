"""view, view_info and with_attributes: copies with other modes, as flax.nnx's."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import nnx_core as nnx


class Drop(nnx.Module):
    def __init__(self):
        self.deterministic = False
        self.w = nnx.Param(jnp.ones(2))

    def set_view(self, deterministic: bool | None = None):
        """Set by nnx.view.

        Args:
          deterministic: if True, no dropout.
            A second line.
        """
        if deterministic is not None:
            self.deterministic = deterministic


class Norm(nnx.Module):
    def __init__(self):
        self.use_running_average = False

    def set_view(self, use_running_average: bool | None = None, **kwargs):
        if use_running_average is not None:
            self.use_running_average = use_running_average
        return kwargs


class Block(nnx.Module):
    def __init__(self):
        self.drop, self.norm, self.rngs = Drop(), Norm(), nnx.Rngs(0)


def test_view_calls_set_view_on_a_copy_sharing_the_variables():
    block = Block()
    new = nnx.view(block, deterministic=True, use_running_average=True)
    assert new.drop.deterministic and new.norm.use_running_average
    assert not block.drop.deterministic and not block.norm.use_running_average
    assert new.drop.w is block.drop.w
    only = nnx.view(block, only=Drop, deterministic=True)
    assert only.drop.deterministic and not only.norm.use_running_average


def test_view_with_an_unknown_argument_raises_unless_told_not_to():
    with pytest.raises(ValueError, match=r"view: Unused keys found in nnx.view: \['nope'\]"):
        nnx.view(Block(), only=Drop, deterministic=True, nope=1)
    assert (
        nnx.view(Block(), only=Drop, nope=1, raise_if_not_found=False).drop.deterministic is False
    )


def test_view_info_documents_each_class_once():
    info = nnx.view_info([Block(), Block()])
    assert info == (
        "Drop:\n  deterministic: bool | None = None\n    if True, no dropout.\n"
        "    A second line.\nNorm:\n"
        "  set_view(self, use_running_average: 'bool | None' = None, **kwargs)"
    )
    assert nnx.view_info(Block(), only=Norm).startswith("Norm:")
    assert nnx.view_info(nnx.Rngs(0)) == ""


def test_with_attributes_sets_existing_attributes_on_a_copy():
    block = Block()
    new = nnx.with_attributes(block, deterministic=True, use_running_average=True)
    assert new.drop.deterministic and new.norm.use_running_average and not block.drop.deterministic
    only = nnx.with_attributes(block, only=Norm, use_running_average=True, graph=False)
    assert only.norm.use_running_average and not only.drop.deterministic
    with pytest.raises(
        ValueError,
        match=r"Could not find at least one instance of the following attributes: \['nope'\]",
    ):
        nnx.with_attributes(block, nope=1)
    assert nnx.with_attributes(block, nope=1, raise_if_not_found=False) is not block

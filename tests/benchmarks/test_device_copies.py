"""The device-copy and profile reports of benchmarks/train_step.py and benchmarks/_profile.py
(what a GPU run prints to find per-step copies; no timing asserted)."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import nnx_core as nnx

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import _models  # noqa: E402
import _profile  # noqa: E402
import train_step  # noqa: E402


def test_our_step_and_the_donated_plain_step_copy_alike():
    x, y = _models.data()
    objs, step, _ = _models.nnx_steps(2)
    state, plain, _ = _models.plain_steps(2, donate=True)
    ours_ops = train_step.hlo_copies(step.lower(*objs, x, y))
    assert ours_ops == train_step.hlo_copies(plain.lower(state, x, y))
    run = train_step.module_runner(objs, step)
    run(2)
    assert train_step.copies_per_step(run, 3) == (0.0, 0.0)  # nothing copied, nothing refused
    assert train_step.implicit_transfers(run) == "none"


def test_copies_before_the_call_and_implicit_transfers_are_counted():
    objs, step, _ = _models.nnx_steps(2)
    run = train_step.module_runner(objs, step)
    run(1)
    held = jax.tree.leaves(nnx.state(objs[0], nnx.Param))  # the parameters' arrays, held here
    before, refused = train_step.copies_per_step(run, 1)
    assert before == len(held) and refused == 0.0  # each copied once, the copy donated
    assert all(not x.is_deleted() for x in held)  # what was held is still valid
    assert train_step.copies_per_step(run, 1) == (0.0, 0.0)  # once only
    numpy_input = jax.jit(lambda a: a + 1)
    found = train_step.implicit_transfers(lambda n: numpy_input(np.ones(3)))
    assert found.startswith("yes"), found


def test_a_profile_is_summarised_per_timeline_and_op(tmp_path):
    f = jax.jit(lambda a: (a @ a).sum())
    a = jnp.ones((8, 8))

    def run(n):
        for _ in range(n):
            out = f(a)
        jax.block_until_ready(out)

    text = _profile.profile(run, 4, tmp_path / "trace")
    assert "## /host:CPU / python" in text
    assert "| event | per call | us per call | us each |" in text
    assert _profile.summarise(tmp_path / "nothing", 1).startswith("no trace under")

"""A Module whose call changes every kind of state a lifted transform must hand back.

Shared by the transform tests: ``Probe`` bumps a BatchStat, draws from an Rng stream and sows
an Intermediate (into an existing Variable, so that control flow sees values change, not
structure); ``run_in_devices`` runs a script with several CPU devices.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

import nnx_core as nnx


class Probe(nnx.Module):
    def __init__(self, w=2.0):
        self.w = nnx.Param(jnp.asarray(w, jnp.float32))
        self.stat = nnx.BatchStat(jnp.zeros((), jnp.float32))
        self.rngs = nnx.Rngs(noise=0)
        self.seen = nnx.Intermediate(jnp.zeros((), jnp.float32))

    def __call__(self, x):
        self.stat.value = self.stat.value + 1
        noise = jax.random.uniform(self.rngs.noise(), ())
        self.sow(nnx.Intermediate, "seen", jnp.sum(x), reduce_fn=lambda prev, new: prev + new)
        return self.w.value * x + 0 * noise


def stacked(n):
    """``n`` Probes stacked by vmap (every Variable gets a leading axis of size n)."""
    return nnx.vmap(lambda w: Probe(w))(jnp.arange(1.0, n + 1.0))


def assert_probed(p, calls, seen):
    """``p`` was called ``calls`` times in total and saw inputs summing to ``seen``."""
    np.testing.assert_allclose(p.stat.value, calls)
    np.testing.assert_array_equal(p.rngs.noise.count.value, calls)
    np.testing.assert_allclose(p.seen.value, seen, rtol=1e-6)
    for v in (p.stat.value, p.seen.value, p.rngs.noise.count.value):
        assert not isinstance(v, jax.core.Tracer)


def run_in_devices(script, count=4):
    """Run ``script`` in a subprocess that sees ``count`` CPU devices; return its stdout."""
    env = dict(
        os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={count}", JAX_PLATFORMS="cpu"
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout

"""A jit step over several CPU devices is dispatched only once the previous one finished.

Regression test for flax's data-parallel toy example (8 host devices) aborting in XLA:CPU's
all-reduce rendezvous ("only 7 of them arrived on time") on a busy 2-core machine: with
asynchronous dispatch the loop queued step after step (see nnx_core/_transforms/_inflight.py).
"""

from __future__ import annotations

import jax.numpy as jnp

from nnx_core._transforms._inflight import multi_device_cpu, wait_for_previous

from .probe import run_in_devices

STEPS = """
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import nnx_core as nnx

mesh = jax.make_mesh((4,), ("data",))

class M(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.eye(256) * 0.5)

m = M()
nnx.update(m, jax.device_put(nnx.state(m), NamedSharding(mesh, P())))

@nnx.jit{options}
def step(m, x):
    y = x
    for _ in range(40):
        y = jnp.tanh(y @ m.w)
    loss = jnp.mean(y)  # an all-reduce over the data axis
    m.w.value = m.w.value + loss * 1e-6
    return loss

x = jax.device_put(jnp.ones((128, 256)), NamedSharding(mesh, P("data")))
step(m, x).block_until_ready()
losses, ready = [], []
for _ in range(6):
    loss = step(m, x)
    if losses:
        ready.append(losses[-1].is_ready())  # the previous step, once this one is dispatched
    losses.append(loss)
print(ready)
"""


def test_a_step_over_several_cpu_devices_waits_for_the_previous_step():
    # donation by default, and donate_argnums=() (the other dispatch path)
    for options in ("", "(donate_argnums=())"):
        assert run_in_devices(STEPS.format(options=options)).split() == ["[True,"] + [
            "True,"
        ] * 3 + ["True]"]


def test_single_device_arrays_and_other_values_never_wait():
    assert multi_device_cpu([jnp.ones(2), 3, None]) is None
    wait_for_previous([jnp.ones(2), "x"])  # returns at once: nothing spread over devices

"""Quickstart: a small model trained with optax for a few steps; prints the loss falling.

Run: python examples/quickstart.py
"""

import jax
import jax.numpy as jnp
import optax

import nnx_core as nnx
from nnx_layers import BatchNorm, Dropout, Linear


class MLP(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.layers = [
            Linear(1, 64, rngs=rngs),
            BatchNorm(64, rngs=rngs),
            Dropout(0.1, rngs=rngs),
            Linear(64, 1, rngs=rngs),
        ]

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = layer(x)
        return self.layers[-1](jax.nn.gelu(x))


def main() -> None:
    model = MLP(rngs=nnx.Rngs(0, dropout=1))
    optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)
    x = jnp.linspace(-2, 2, 256)[:, None]
    y = jnp.sin(2 * x)

    @nnx.jit
    def train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    print(model.summary())
    for step in range(301):
        loss = train_step(model, optimizer, x, y)
        if step % 50 == 0:
            print(f"step {step:3d}  loss {float(loss):.4f}")
    model.eval()
    print(f"eval loss {float(jnp.mean((model(x) - y) ** 2)):.4f}")


if __name__ == "__main__":
    main()

"""Models larger than one device: what each device holds, and what a step costs, per layout.

Run on 8 simulated CPU devices (the flag before JAX starts):

    export XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu
    python benchmarks/fsdp.py memory              # a ~100M GPT with Adam, per layout
    python benchmarks/fsdp.py speed               # step time, ours against flax.nnx and plain jax
    python benchmarks/fsdp.py largest --gib 16    # the largest GPT 8 devices of 16 GiB in all train

and on one accelerator (``python benchmarks/fsdp.py gpu``): the ~100M GPT's memory on one
device, and its step time, ours against flax.nnx and a donated plain ``jax.jit`` step.

- ``memory``: the GPT of ``nnx train`` (a config: byte embeddings, a `Repeat` of pre-norm
  blocks, a head; ``--width 768 --layers 14``: 99.6M parameters) laid out by nnx's default
  rules. Per device: parameters and optimizer state (from the layout: the bytes of each
  device's blocks), the compiled train step's peak (XLA's memory analysis): what ``nnx build
  --summary --mesh`` prints and ``nnx train`` checks. Nothing is allocated, except that the
  ``fsdp=8`` model and optimizer are then created for real (`create_sharded`) and their
  blocks on each device counted, to check the plan against what JAX allocates.
- ``speed``: benchmarks/_gpt.py's GPT (unrolled blocks; ``--width 256 --layers 4``, sequence
  64, batch 8), the same parameters placed by the same layout for every variant: ours
  (``nnx_core.jit``, the step nnx train runs) over ``data=8`` and ``fsdp=8``, flax.nnx's
  default ``nnx.jit`` over ``fsdp=8``, and a plain ``jax.jit`` step on a pytree with donated
  buffers over ``fsdp=8`` (the limit). The variants take turns, ``--steps`` steps each, over
  ``--rounds`` rounds; medians.
- ``largest``: the deepest GPT (``--width 1024``, 16 heads, sequence 256, batch 8, Adam) whose
  per-device total (the compiled step's peak) times 8 fits ``--gib``, for ``data=8`` and
  ``fsdp=8``: the check ``nnx train`` makes before its first step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

import nnx_core as nnx
from nnx_plugins.config._summary import summarize
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._layout import Layout
from nnx_plugins.training._memory_report import layout_step_memory
from nnx_plugins.training._mesh import make_mesh, run_layout
from nnx_plugins.training._sharded import constructor, create_sharded

sys.path.insert(0, str(Path(__file__).parent))
import _gpt  # noqa: E402

GIB = 1024**3


# -- the GPT of nnx train (a config) -------------------------------------------------------------
def gpt_config(
    width: int, layers: int, heads: int, seq: int, batch: int, remat: bool = False
) -> dict[str, Any]:
    """A GPT over bytes: embeddings, ``layers`` pre-norm blocks in a `Repeat` (with ``remat``:
    each block's activations recomputed in the backward pass), a head."""
    attention = {
        "type": "MultiHeadAttention",
        "num_heads": heads,
        "in_features": width,
        "is_causal": True,
        "decode": False,
    }
    mlp = [
        {"type": "LayerNorm", "num_features": width},
        {"type": "Linear", "in_features": width, "out_features": 4 * width},
        {"type": "gelu"},
        {"type": "Linear", "in_features": 4 * width, "out_features": width},
    ]
    norm = {"type": "LayerNorm", "num_features": width}
    block = {
        "type": "Sequential",
        "layers": [
            {"type": "Residual", "block": {"type": "Sequential", "layers": [norm, attention]}},
            {"type": "Residual", "block": {"type": "Sequential", "layers": mlp}},
        ],
    }
    return {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Embed", "num_embeddings": 256, "features": width},
                {"type": "PositionEmbed", "max_length": seq, "features": width},
                {"type": "Repeat", "count": layers, "remat": remat, "block": block},
                norm,
                {"type": "Linear", "in_features": width, "out_features": 256},
            ],
        },
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": "stdlib:asyncio", "level": "bytes", "seq_len": seq},
        "optimizer": {"type": "adam", "learning_rate": 1e-3},
        "train": {"steps": 10, "batch_size": batch},
    }


def planned(config: dict[str, Any], mesh: dict[str, int]) -> Any:
    """What each device holds for a run of ``config`` over ``mesh`` (nothing allocated)."""
    loaded = load_train_config(config)
    return layout_step_memory(loaded, run_layout(loaded, mesh), allow_large=True)


def count_parameters(config: dict[str, Any]) -> int:
    """How many parameters the config's model has (built abstractly)."""
    return summarize(config).by_kind["Param"][0]


def allocated_per_device(config: dict[str, Any], mesh: dict[str, int]) -> list[int]:
    """The bytes each device holds once the model and optimizer are created over ``mesh``."""
    loaded = load_train_config(config)
    layout = run_layout(loaded, mesh)
    model, optimizer = create_sharded(constructor(loaded), layout)
    held = dict.fromkeys(layout.mesh.devices.flat, 0)
    for _, variable in nnx.state((model, optimizer)).flat_state():
        value = variable.get_raw_value()
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        for shard in value.addressable_shards:
            held[shard.device] += shard.data.nbytes
    return list(held.values())


def mb(nbytes: float) -> str:
    return f"{nbytes / 1024**2:,.1f} MB"


def memory(args: argparse.Namespace) -> None:
    config = gpt_config(args.width, args.layers, args.heads, args.seq, args.batch, args.remat)
    print(
        f"GPT: {count_parameters(config) / 1e6:.1f}M parameters, Adam; batch {args.batch} x "
        f"{args.seq} tokens; {jax.device_count()} devices"
    )
    layouts = {
        "data=8": {"data": 8},
        "fsdp=8": {"fsdp": 8},
        "fsdp=4,model=2": {"fsdp": 4, "model": 2},
        "data=2,fsdp=2,model=2": {"data": 2, "fsdp": 2, "model": 2},
    }
    rows = {}
    for name, mesh in layouts.items():
        began = time.perf_counter()
        rows[name] = planned(config, mesh)
        print(f"  planned {name} in {time.perf_counter() - began:.0f} s", flush=True)
    replicated = rows["data=8"].parameter_bytes + rows["data=8"].optimizer_bytes
    print(
        "| layout | parameters / device | optimizer state / device | params + optimizer vs "
        "replicated | train step peak / device | all 8 devices |"
    )
    print("|---|---|---|---|---|---|")
    for name, m in rows.items():
        share = (m.parameter_bytes + m.optimizer_bytes) / replicated
        print(
            f"| `{name}` | {mb(m.parameter_bytes)} | {mb(m.optimizer_bytes)} | "
            f"{share:.4f} (1/{1 / share:.2f}) | {mb(m.step_bytes)} | "
            f"{mb(8 * m.total_bytes)} |"
        )
    for name in ("fsdp=8", "fsdp=4,model=2"):
        m = rows[name]
        bound = replicated / 8 * 1.05
        print(
            f"{name}: params + optimizer per device {mb(m.parameter_bytes + m.optimizer_bytes)} "
            f"<= 1/8 of replicated + 5% ({mb(bound)}): {m.parameter_bytes + m.optimizer_bytes <= bound}"
        )
    held = allocated_per_device(config, {"fsdp": 8})
    plan = rows["fsdp=8"].parameter_bytes + rows["fsdp=8"].optimizer_bytes
    print(
        f"fsdp=8 created for real: {mb(min(held))} to {mb(max(held))} per device "
        f"(planned {mb(plan)})"
    )


# -- step time: benchmarks/_gpt.py's GPT, ours / flax.nnx / plain -------------------------------
def specs_by_path(cfg: _gpt.Config, mesh: dict[str, int]) -> tuple[Any, Any]:
    """Our GPT's layout over ``mesh`` (path -> spec, nnx's default rules) and the mesh."""
    devices = make_mesh(mesh)
    model = nnx.eval_shape(lambda: _gpt.nnx_model(cfg))
    layout = Layout.of(devices, {})
    return layout.specs(nnx.state(model)), layout


def place_tree(tree: Any, specs: dict[Any, Any], mesh: Any) -> Any:
    """``tree`` (a nested dict like our state's pure dict) placed with ``specs`` by path."""

    def put(path: Any, leaf: Any) -> Any:
        key = tuple(getattr(k, "key", getattr(k, "idx", k)) for k in path)
        return jax.device_put(leaf, NamedSharding(mesh, specs[key]))

    return jax.tree_util.tree_map_with_path(put, tree)


def _ours(cfg: _gpt.Config) -> tuple[Any, Any]:
    model = _gpt.nnx_model(cfg)
    return model, nnx.Optimizer(model, cfg.tx(), wrt=nnx.Param)


@nnx.jit
def _OURS(model: Any, optimizer: Any, ids: Any, targets: Any) -> Any:  # noqa: N802
    """_gpt.nnx_step's step, for a model and optimizer created sharded."""
    loss, grads = nnx.value_and_grad(_gpt.nnx_loss)(model, ids, targets)
    optimizer.update(model, grads)
    return loss


def variants(cfg: _gpt.Config) -> dict[str, Any]:
    """name -> a function running one step (each with its own model, placed by the layout)."""
    steps: dict[str, Any] = {}
    pure = nnx.state(_gpt.nnx_model(cfg)).to_pure_dict()
    ids, targets = _gpt.data(cfg)
    for mesh_name, mesh in (("data=8", {"data": 8}), ("fsdp=8", {"fsdp": 8})):
        specs, layout = specs_by_path(cfg, mesh)
        batch = NamedSharding(layout.mesh, layout.batch_spec())
        x, y = jax.device_put(ids, batch), jax.device_put(targets, batch)
        objs = create_sharded(lambda: _ours(cfg), layout)  # (as nnx train creates them)
        steps[f"ours (nnx_core.jit) {mesh_name}"] = lambda o=objs, a=x, b=y: _OURS(*o, a, b)
        if mesh_name == "data=8":
            continue
        if _has_flax():
            from flax import nnx as fnnx

            flax = _gpt.flax_model(cfg, seed=1)
            _gpt.copy_into_flax(pure, flax)
            fstate = fnnx.state(flax)
            fnnx.replace_by_pure_dict(fstate, place_tree(pure, specs, layout.mesh))
            fnnx.update(flax, fstate)
            fobjs, fstep = _gpt.flax_step(cfg, flax)
            steps[f"flax.nnx (nnx.jit) {mesh_name}"] = lambda o=fobjs, s=fstep, a=x, b=y: s(
                *o, a, b
            )
        params = place_tree(jax.tree.map(np.asarray, pure), specs, layout.mesh)
        box = [(params, cfg.tx().init(params), jax.numpy.zeros((), jax.numpy.uint32))]
        plain = _gpt.plain_step(cfg)

        def run(box: list[Any] = box, plain: Any = plain, a: Any = x, b: Any = y) -> Any:
            box[0], loss = plain(box[0], a, b)
            return loss

        steps[f"plain jax.jit, donated (the limit) {mesh_name}"] = run
    return steps


def _has_flax() -> bool:
    try:
        import flax  # noqa: F401
    except ImportError:
        return False
    return True


def speed(args: argparse.Namespace) -> None:
    cfg = _gpt.Config(
        layers=args.layers,
        width=args.width,
        heads=args.heads,
        seq=args.seq,
        batch=args.batch,
        vocab=args.vocab,
    )
    steps = variants(cfg)
    first = {}
    for name, step in steps.items():  # (compile and check: every variant, the same first loss)
        began = time.perf_counter()
        first[name] = float(step())
        print(
            f"  {name}: first loss {first[name]:.6f}, first call {time.perf_counter() - began:.1f} s",
            flush=True,
        )
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            jax.block_until_ready(steps[name]())
            began = time.perf_counter()
            for _ in range(args.steps):
                loss = steps[name]()
            jax.block_until_ready(loss)
            times[name].append((time.perf_counter() - began) / args.steps)
    base = statistics.median(times[names[0]])
    limit = statistics.median(times[[n for n in names if n.startswith("plain")][0]])
    print(
        f"GPT {args.layers} x {args.width}, batch {args.batch} x {args.seq}; "
        f"{args.rounds} rounds x {args.steps} steps"
    )
    print("| variant | ms / step (median) | x ours data=8 | x plain fsdp=8 |")
    print("|---|---|---|---|")
    for name in names:
        median = statistics.median(times[name])
        print(f"| {name} | {median * 1e3:.1f} | {median / base:.2f} | {median / limit:.2f} |")


# -- the largest GPT a budget trains -----------------------------------------------------------
def largest(args: argparse.Namespace) -> None:
    budget = args.gib * GIB
    for name, mesh in (("data=8", {"data": 8}), ("fsdp=8", {"fsdp": 8})):
        fits, low, high = None, 1, args.max_layers
        while low <= high:
            layers = (low + high) // 2
            config = gpt_config(args.width, layers, args.heads, args.seq, args.batch, args.remat)
            total = 8 * planned(config, mesh).total_bytes
            ok = total <= budget
            print(
                f"  {name}: {layers} blocks, {count_parameters(config) / 1e6:.0f}M parameters: "
                f"{total / GIB:.2f} GiB on the 8 devices: {'fits' if ok else 'too large'}",
                flush=True,
            )
            if ok:
                fits, low = (layers, count_parameters(config), total), layers + 1
            else:
                high = layers - 1
        if fits is None:
            print(f"{name}: not even one block fits {args.gib} GiB")
        else:
            print(
                f"{name}: the largest that fits {args.gib} GiB: {fits[0]} blocks of width "
                f"{args.width}, {fits[1] / 1e6:.0f}M parameters ({fits[2] / GIB:.2f} GiB)"
            )


def gpu(args: argparse.Namespace) -> None:
    """One accelerator: the ~100M GPT's memory and step time (ours, flax.nnx, plain)."""
    config = gpt_config(args.width, args.layers, args.heads, args.seq, args.batch)
    m = planned(config, {"data": 1})
    print(
        f"{jax.devices()[0].device_kind}: GPT {count_parameters(config) / 1e6:.1f}M: parameters "
        f"{mb(m.parameter_bytes)}, optimizer state {mb(m.optimizer_bytes)}, train step peak "
        f"{mb(m.step_bytes)}"
    )
    cfg = _gpt.Config(
        layers=args.layers,
        width=args.width,
        heads=args.heads,
        seq=args.seq,
        batch=args.batch,
        vocab=args.vocab,
    )
    steps = one_device_variants(cfg)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():
        jax.block_until_ready(step())
    for _ in range(args.rounds):
        for name, step in steps.items():
            began = time.perf_counter()
            for _ in range(args.steps):
                loss = step()
            jax.block_until_ready(loss)
            times[name].append((time.perf_counter() - began) / args.steps)
    for name in steps:
        print(f"  {name}: {statistics.median(times[name]) * 1e3:.2f} ms / step")


def one_device_variants(cfg: _gpt.Config) -> dict[str, Any]:

    pure = nnx.state(_gpt.nnx_model(cfg)).to_pure_dict()
    ids, targets = _gpt.data(cfg)
    objs, step = _gpt.nnx_step(cfg, _gpt.nnx_model(cfg))
    out = {"ours (nnx_core.jit)": lambda: step(*objs, ids, targets)}
    if _has_flax():
        flax = _gpt.flax_model(cfg, seed=1)
        _gpt.copy_into_flax(pure, flax)
        fobjs, fstep = _gpt.flax_step(cfg, flax)
        out["flax.nnx (nnx.jit)"] = lambda: fstep(*fobjs, ids, targets)
    box = [_gpt.plain_state(cfg, pure)]
    plain = _gpt.plain_step(cfg)

    def run() -> Any:
        box[0], loss = plain(box[0], ids, targets)
        return loss

    out["plain jax.jit, donated (the limit)"] = run
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("memory", "speed", "largest", "gpu"))
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gib", type=float, default=16.0)
    parser.add_argument("--max-layers", type=int, default=256)
    parser.add_argument("--remat", action="store_true", help="Repeat(remat=True) in the GPT")
    args = parser.parse_args()
    defaults = {  # width, layers, heads, seq
        "memory": (768, 14, 12, 128),
        "gpu": (768, 14, 12, 128),
        "speed": (256, 4, 4, 64),
        "largest": (1024, 0, 16, 256),
    }[args.what]
    for key, value in zip(("width", "layers", "heads", "seq"), defaults):
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.what != "gpu" and jax.device_count() < 8:
        sys.exit("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
    {"memory": memory, "speed": speed, "largest": largest, "gpu": gpu}[args.what](args)


if __name__ == "__main__":
    main()

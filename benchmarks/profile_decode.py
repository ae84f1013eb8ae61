"""Where a cached decoding step's time goes on a device: a profile of `decode` (Repeat unrolled
and scanned) and of the plain-JAX decoder, plus the kernels of each compiled loop.

Run: python benchmarks/profile_decode.py OUT_DIR [--batch 1 8] [--new 64]

For each batch size and path: one profiled call (after a warm-up), summarised per op name
(`_profile.summarise`) into ``OUT_DIR/profile_b{batch}.md``, and the compiled program's op
counts (fusions, custom calls such as cuBLAS products, copies, while loops) so the paths'
kernels per step can be compared.
"""

from __future__ import annotations

import argparse
import collections
import re
import tempfile
from pathlib import Path

import jax
import numpy as np
from _plain_decode import _loop, plain_weights
from _profile import profile
from generate import make_model

import nnx_core as nnx
from nnx_plugins.generation import _decode as D
from nnx_plugins.generation._unroll import unrolling, unstack


def op_counts(hlo: str) -> str:
    ops = collections.Counter(re.findall(r"= \S+ (\w[\w-]*)\(", hlo))
    calls = collections.Counter(re.findall(r'custom_call_target="([^"]+)"', hlo))
    keep = ["fusion", "copy", "while", "dynamic-update-slice", "dynamic-slice", "transpose"]
    shown = ", ".join(f"{k} {ops[k]}" for k in keep if ops[k])
    return f"{sum(ops.values())} ops: {shown}; custom calls {dict(calls)}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--prompt", type=int, default=16)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    traces = Path(tempfile.mkdtemp())  # the raw traces stay out of OUT_DIR
    model = make_model("examples/text_gpt.yaml", a.prompt + a.new, [])
    weights = plain_weights(model)
    total = a.prompt + a.new
    for batch in a.batch:
        ids = jax.numpy.asarray(np.zeros((batch, a.prompt), np.int32))
        report = [f"# batch {batch}, {a.new} new tokens ({total} steps of the loop)\n"]
        for name, scan in (("decode, Repeat unrolled", False), ("decode, Repeat scanned", True)):
            g, state = nnx.split(model)
            state, treedef = jax.tree.flatten(state)
            if not scan:  # (as decode does: the blocks' weights taken apart first)
                plan = unrolling(g, treedef, state)
                g, treedef, state = plan.graphdef, plan.treedef, unstack(plan, state)
            options = dict(graphdef=g, treedef=treedef, new=a.new, temperature=0.0, top_k=None)
            key = jax.random.key(0)
            lowered = D._cached.lower(state, ids, key, **options)
            report.append(f"\n# {name}\ncompiled: {op_counts(lowered.compile().as_text())}")

            def run(calls: int, state=state, options=options, key=key, ids=ids) -> None:
                for _ in range(calls):
                    jax.block_until_ready(D._cached(state, ids, key, **options))

            report.append(profile(run, 1, traces / f"trace_{batch}_{scan}"))
        lowered = _loop.lower(weights, ids, new=a.new)
        report.append(f"\n# plain\ncompiled: {op_counts(lowered.compile().as_text())}")

        def plain(calls: int, ids: jax.Array = ids) -> None:
            for _ in range(calls):
                jax.block_until_ready(_loop(weights, ids, new=a.new))

        report.append(profile(plain, 1, traces / f"trace_{batch}_plain"))
        (out / f"profile_b{batch}.md").write_text("\n".join(report))
        print(f"batch {batch}: written", flush=True)


if __name__ == "__main__":
    main()

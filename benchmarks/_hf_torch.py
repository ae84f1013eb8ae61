"""The transformers (PyTorch) side of benchmarks/hf_generate.py, run in its own process by a
Python that has torch and transformers (the nnx side never imports them).

    python _hf_torch.py make DIR     # a random Llama-shaped model, written by save_pretrained
    python _hf_torch.py serve DIR [--device D] [--threads T]

``make`` draws the weights with a fixed seed (the same files every time). ``serve`` loads the
model once, then answers one JSON line per request line on stdin (``{"batch": B, "prompt": P,
"new": N}``): ``{"seconds": ..., "tokens": [[...], ...]}`` for one call of
``model.generate(ids, attention_mask=ones, max_new_tokens=N, min_new_tokens=N,
do_sample=False)`` (its KV cache, greedy; every row N tokens: no EOS stops a row early) on the
prompt ids the nnx side uses (`prompt_ids`). The harness sends the requests, so the two sides
take turns round by round.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

import numpy as np

#: the Llama-shaped model of the issue: 8 layers, hidden 512, 8 heads, 2 KV heads, vocab 32k
SHAPE = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)


def prompt_ids(batch: int, length: int, vocab: int) -> np.ndarray:
    """The prompts both sides decode: random token ids, fixed seed (no padding)."""
    return np.random.default_rng(0).integers(3, vocab, (batch, length)).astype(np.int64)


def make(directory: pathlib.Path, shape: dict | None = None) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**(shape or SHAPE), bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # (weights large enough that greedy steps have clear winners)
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.05 if "embed" not in name else 1.0)
    model.save_pretrained(directory, safe_serialization=True)


def serve(directory: pathlib.Path, args: argparse.Namespace) -> None:
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    model = model.eval().to(args.device)
    hello = {
        "threads": torch.get_num_threads(),
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
        "device": str(next(model.parameters()).device),
    }
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        ids = prompt_ids(request["batch"], request["prompt"], model.config.vocab_size)
        seconds, tokens = generate(model, torch.from_numpy(ids).to(args.device), request["new"])
        print(json.dumps({"seconds": seconds, "tokens": tokens.tolist()}), flush=True)


def generate(model: Any, ids: Any, new: int) -> tuple[float, np.ndarray]:
    """One greedy ``generate`` call: its wall time (device synchronized) and new tokens."""
    import torch

    cuda = ids.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start, out[:, ids.shape[1] :].cpu().numpy()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("make", "serve"))
    p.add_argument("directory", type=pathlib.Path)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--shape", default=None, help="JSON: the model's config.json sizes")
    a = p.parse_args(argv)
    if a.action == "make":
        make(a.directory, json.loads(a.shape) if a.shape else None)
        return
    serve(a.directory, a)


if __name__ == "__main__":
    main()

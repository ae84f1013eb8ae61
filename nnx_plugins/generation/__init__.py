"""Generation: decoding a language model token by token with the KV cache, `generate` from a run."""

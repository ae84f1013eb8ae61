"""Loggers of a run: where its records go (metrics.jsonl, metrics.csv, TensorBoard)."""

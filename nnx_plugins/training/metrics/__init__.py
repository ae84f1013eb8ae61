"""Metrics of a run: streaming `nnx_core.metrics` fed by the task, by registered name."""

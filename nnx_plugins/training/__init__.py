"""Training from a config: its config sections, data, the training loop, metrics and checkpoints."""

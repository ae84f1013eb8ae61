"""Pretrained models in and out: transformers checkpoints as configs, export for serving."""

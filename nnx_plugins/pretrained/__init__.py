"""Pretrained models in: transformers checkpoints as nnx configs and checkpoints (``nnx import hf``)."""

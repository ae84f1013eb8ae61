"""Pretrained models in and out: transformers checkpoints as nnx configs and checkpoints
(``nnx import hf``), and back out (``nnx export hf``) or for serving (``nnx export jax``)."""

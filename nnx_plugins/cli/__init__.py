"""The ``nnx`` command: one module per command group; listing reads package metadata only."""

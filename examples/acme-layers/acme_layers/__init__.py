"""acme_layers: an example nnx layer pack.

Nothing is imported here: nnx imports `acme_layers.dense`, `acme_layers.variables` and
`acme_layers.plugin` through the entry points, only when a config or a lookup needs them.
"""

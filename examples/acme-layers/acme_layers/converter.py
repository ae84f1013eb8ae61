"""A checkpoint converter a pack adds: ``AcmeMLPForClassification`` (a made-up family).

Its transformers-style checkpoint holds ``fc1.weight`` ``(hidden, inputs)``, ``fc1.bias``,
``fc2.weight`` ``(labels, hidden)`` and ``fc2.bias``, with a ``config.json`` giving
``input_size``, ``hidden_size`` and ``num_labels``. The converter is data: a function from that
config.json to an nnx config of registered layers, and a table of tensors to parameter paths.
pyproject.toml registers it as ``acme.AcmeMLPForClassification`` in ``nnx.converters``, so
``nnx import hf`` finds it by the architecture a config.json names.

Example:
    >>> from acme_layers.converter import ACME_MLP
    >>> ACME_MLP.config({"input_size": 4, "hidden_size": 8, "num_labels": 3})["model"]["layers"][1]
    {'type': 'relu'}
"""

from nnx_plugins import Converter, Rule


def _config(config):
    inputs, hidden, labels = config["input_size"], config["hidden_size"], config["num_labels"]
    layers = [
        {"type": "Linear", "in_features": inputs, "out_features": hidden},
        {"type": "relu"},
        {"type": "Linear", "in_features": hidden, "out_features": labels},
    ]
    return {"model": {"type": "Sequential", "layers": layers}, "task": {"type": "classification"}}


def _table(config):
    return [
        Rule("fc1.weight", "layers/0/kernel", "transpose"),
        Rule("fc1.bias", "layers/0/bias"),
        Rule("fc2.weight", "layers/2/kernel", "transpose"),
        Rule("fc2.bias", "layers/2/bias"),
    ]


ACME_MLP = Converter(config=_config, table=_table, layers=lambda config: 0)

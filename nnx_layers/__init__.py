"""nnx_layers: the built-in layers, initializers and activations of nnx.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_core import Rngs
    >>> import nnx_layers as nl
    >>> model = nl.Sequential(nl.Linear(4, 8, rngs=Rngs(0)), nl.relu, nl.Linear(8, 2, rngs=Rngs(0)))
    >>> model(jnp.ones((3, 4))).shape
    (3, 2)
"""

from . import activations as activations
from . import initializers as initializers
from ._conv import Conv as Conv
from ._conv import ConvTranspose as ConvTranspose
from ._dropout import Dropout as Dropout
from ._linear import Embed as Embed
from ._linear import Linear as Linear
from ._normalization import BatchNorm as BatchNorm
from ._normalization import LayerNorm as LayerNorm
from ._normalization import RMSNorm as RMSNorm
from ._sequential import Flatten as Flatten
from ._sequential import Sequential as Sequential
from .activations import elu as elu
from .activations import gelu as gelu
from .activations import leaky_relu as leaky_relu
from .activations import log_softmax as log_softmax
from .activations import relu as relu
from .activations import sigmoid as sigmoid
from .activations import silu as silu
from .activations import softmax as softmax
from .activations import softplus as softplus
from .activations import swish as swish
from .activations import tanh as tanh

# isort: split
# Recurrence, pooling, group/instance/weight/spectral norms and Reshape (issue 11).
from ._cells import GRUCell as GRUCell
from ._cells import LSTMCell as LSTMCell
from ._cells import OptimizedLSTMCell as OptimizedLSTMCell
from ._cells import RNNCellBase as RNNCellBase
from ._cells import SimpleCell as SimpleCell
from ._group_norm import GroupNorm as GroupNorm
from ._group_norm import InstanceNorm as InstanceNorm
from ._pooling import avg_pool as avg_pool
from ._pooling import max_pool as max_pool
from ._pooling import min_pool as min_pool
from ._pooling import pool as pool
from ._reshape import Reshape as Reshape
from ._rnn import RNN as RNN
from ._rnn import Bidirectional as Bidirectional
from ._weight_norms import SpectralNorm as SpectralNorm
from ._weight_norms import WeightNorm as WeightNorm

__all__ = [
    "Linear",
    "Embed",
    "Conv",
    "ConvTranspose",
    "BatchNorm",
    "LayerNorm",
    "RMSNorm",
    "Dropout",
    "Sequential",
    "Flatten",
    "relu",
    "gelu",
    "silu",
    "swish",
    "tanh",
    "sigmoid",
    "softmax",
    "log_softmax",
    "elu",
    "leaky_relu",
    "softplus",
    "initializers",
    "activations",
    "RNNCellBase",
    "LSTMCell",
    "OptimizedLSTMCell",
    "GRUCell",
    "SimpleCell",
    "RNN",
    "Bidirectional",
    "pool",
    "avg_pool",
    "max_pool",
    "min_pool",
    "GroupNorm",
    "InstanceNorm",
    "WeightNorm",
    "SpectralNorm",
    "Reshape",
]

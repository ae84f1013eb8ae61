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
from ._attention import MultiHeadAttention as MultiHeadAttention
from ._attention_masks import combine_masks as combine_masks
from ._attention_masks import make_attention_mask as make_attention_mask
from ._attention_masks import make_causal_mask as make_causal_mask
from ._cells import GRUCell as GRUCell
from ._cells import LSTMCell as LSTMCell
from ._cells import OptimizedLSTMCell as OptimizedLSTMCell
from ._cells import RNNCellBase as RNNCellBase
from ._cells import SimpleCell as SimpleCell
from ._checks import promote_dtype as promote_dtype
from ._containers import Flatten as Flatten
from ._containers import Parallel as Parallel
from ._containers import Residual as Residual
from ._containers import Sequential as Sequential
from ._conv import Conv as Conv
from ._conv import ConvTranspose as ConvTranspose
from ._dot_product_attention import dot_product_attention as dot_product_attention
from ._dot_product_attention import (
    dot_product_attention_weights as dot_product_attention_weights,
)
from ._dropout import Dropout as Dropout
from ._einsum import Einsum as Einsum
from ._group_norm import GroupNorm as GroupNorm
from ._group_norm import InstanceNorm as InstanceNorm
from ._language import CausalLM as CausalLM
from ._language import ImageClassifier as ImageClassifier
from ._language import MaskedLM as MaskedLM
from ._language import default_positions as default_positions
from ._linear import Embed as Embed
from ._linear import Linear as Linear
from ._linear_general import LinearGeneral as LinearGeneral
from ._lora import LoRA as LoRA
from ._lora import LoRALinear as LoRALinear
from ._lora import LoRAParam as LoRAParam
from ._normalization import BatchNorm as BatchNorm
from ._normalization import LayerNorm as LayerNorm
from ._normalization import RMSNorm as RMSNorm
from ._pooling import avg_pool as avg_pool
from ._pooling import max_pool as max_pool
from ._pooling import min_pool as min_pool
from ._pooling import pool as pool
from ._position import PositionEmbed as PositionEmbed
from ._prelu import PReLU as PReLU
from ._repeat import Repeat as Repeat
from ._reshape import Reshape as Reshape
from ._rnn import RNN as RNN
from ._rnn import Bidirectional as Bidirectional
from ._rope import RoPE as RoPE
from ._rope import dot_product_attention_with_rope as dot_product_attention_with_rope
from ._rope import rope_frequencies as rope_frequencies
from ._transformer import MLP as MLP
from ._transformer import GatedMLP as GatedMLP
from ._transformer import SelfAttention as SelfAttention
from ._transformer import TransformerBlock as TransformerBlock
from ._weight_norms import SpectralNorm as SpectralNorm
from ._weight_norms import WeightNorm as WeightNorm
from .activations import elu as elu
from .activations import gelu as gelu
from .activations import hard_silu as hard_silu
from .activations import hard_swish as hard_swish
from .activations import leaky_relu as leaky_relu
from .activations import log_softmax as log_softmax
from .activations import logsumexp as logsumexp
from .activations import normalize as normalize
from .activations import one_hot as one_hot
from .activations import relu as relu
from .activations import sigmoid as sigmoid
from .activations import silu as silu
from .activations import softmax as softmax
from .activations import softplus as softplus
from .activations import standardize as standardize
from .activations import swish as swish
from .activations import tanh as tanh
from .initializers import Initializer as Initializer

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
    "Residual",
    "Parallel",
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
    "MultiHeadAttention",
    "dot_product_attention",
    "dot_product_attention_weights",
    "make_attention_mask",
    "make_causal_mask",
    "combine_masks",
    "LinearGeneral",
    "Einsum",
    "PReLU",
    "LoRA",
    "LoRALinear",
    "LoRAParam",
    "hard_silu",
    "hard_swish",
    "logsumexp",
    "one_hot",
    "standardize",
    "normalize",
    "Initializer",
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
    "PositionEmbed",
    "promote_dtype",
    "Repeat",
    "RoPE",
    "dot_product_attention_with_rope",
    "rope_frequencies",
    "SelfAttention",
    "MLP",
    "GatedMLP",
    "TransformerBlock",
    "CausalLM",
    "MaskedLM",
    "ImageClassifier",
    "default_positions",
]

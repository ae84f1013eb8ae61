"""Whole transformer models: `CausalLM`, `MaskedLM` (BERT) and `ImageClassifier` (ViT).

Each is made of layers given to it (in a config, nested ``{type: ...}`` specs): the embeddings,
the blocks (usually a `Repeat` of `TransformerBlock`), a final norm and a head. The models add
only what sits between those parts: positions and padding for the language models, the patch
grid, class token and position table for the image classifier. Parameters given without
logical axis names get the names of their role (``("vocab", "embed")`` for the token table,
``("embed", "vocab")`` for a head, ``("embed",)`` for norms; docs/design/pretrained.md).
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Cache, Module, Param, Rngs

from . import initializers
from ._checks import check_param_dtype, check_positive_int, check_sequence_shape
from ._constraints import Size
from ._conv import Conv
from ._linear import Embed, Linear
from ._transformer import name_axes as _name_axes
from ._transformer import norm_axes as _norm_axes

__all__ = ["CausalLM", "MaskedLM", "ImageClassifier", "default_positions"]


def _tokens(layer: str, tokens: Any) -> jax.Array:
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 2 or not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ValueError(
            f"{layer} expects token ids of shape (batch, length), integers, got "
            f"{tokens.dtype}{list(tokens.shape)}. Pass e.g. jnp.array([[1, 2, 3]])."
        )
    return tokens


def _rows(layer: str, name: str, value: Any, shape: tuple[int, ...]) -> Any:
    if value is None:
        return None
    value = jnp.asarray(value)
    if value.shape != shape:
        raise ValueError(
            f"{layer} {name} must have the shape of the tokens, (batch, length) = {shape}, got "
            f"{value.shape}."
        )
    return value


def default_positions(mask: jax.Array | None, shape: tuple[int, int]) -> jax.Array:
    """The positions transformers gives a batch: ``arange(length)`` per row without a mask,
    else ``cumsum(mask) - 1`` (the first real token of a left-padded row is position 0), and
    1 on the padding, as its ``generate`` computes them.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import default_positions
        >>> default_positions(jnp.array([[0, 0, 1, 1], [1, 1, 1, 1]], bool), (2, 4)).tolist()
        [[1, 1, 0, 1], [0, 1, 2, 3]]
    """
    if mask is None:
        return jnp.broadcast_to(jnp.arange(shape[1], dtype=jnp.int32), shape)
    counted = jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1
    return jnp.where(mask, counted, 1)


def _start_caches(module: Any, shape: tuple[int, ...], dtype: Any) -> int:
    """Call ``init_cache`` on every outermost layer of ``module`` that has one."""
    started: list[tuple[Any, ...]] = []
    for path, layer in module.iter_modules():
        if any(path[: len(done)] == done for done in started):
            continue
        init = getattr(layer, "init_cache", None)
        if not callable(init):
            continue
        widths = [getattr(layer, name, None) for name in ("in_features", "features")]
        width = next((w for w in widths if isinstance(w, int)), shape[-1])
        init((*shape[:-1], width), dtype)
        started.append(tuple(path))
    return len(started)


class CausalLM(Module):
    """A decoder-only language model: token ids ``(batch, length)`` -> logits ``(batch, length, vocab)``.

    ``embed`` looks the tokens up (plus ``position_embed`` of the positions, GPT-2's learned
    table), ``blocks`` transform them (``positions`` and ``mask`` reach every block), ``norm``
    normalizes, and ``head`` (or, without one, ``embed.attend``: tied input and output
    embeddings) gives the logits.

    The call every language model here shares: ``mask`` is transformers' ``attention_mask``
    (True for a real token, False for padding), ``positions`` default to ``arange(length)``,
    or ``cumsum(mask) - 1`` with a mask (`default_positions`), as transformers' ``generate``
    numbers a left-padded row.

    Decoding: ``model.set_attributes(decode=True)`` then ``init_cache((batch, max_length,
    features))``; each call then takes the next chunk of every row (a whole prompt, then one
    token at a time), its positions continuing each row's count of real tokens
    (``next_position``), its keys, values and mask written into every attention's cache.

    Args:
        embed: the token `Embed` (``num_embeddings`` = the vocabulary).
        blocks: the transformer blocks, e.g. a `Repeat` of `TransformerBlock`.
        norm: the final norm.
        head: the output `Linear` (``features`` -> vocabulary); None: tied to ``embed``.
        position_embed: an `Embed` of positions added to the tokens (learned positions).
        max_length: the most positions the model takes (its ``max_position_embeddings``);
            at most ``position_embed.num_embeddings`` (a position past the table has no row);
            None: no limit but the position table's. Generation refuses a prompt plus new
            tokens beyond it.

    Raises:
        ValueError: ``embed`` and ``head`` of different widths or vocabularies, a
            ``position_embed`` of another width than ``embed``, a ``max_length`` past its
            ``num_embeddings``; at call time, tokens that are not integer ``(batch, length)``,
            a mask or positions of another shape, a sequence past ``max_length`` (or the
            position table), decoding without ``init_cache``.
        TypeError: an ``embed`` or ``position_embed`` that is not an `Embed`.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import (CausalLM, Embed, GatedMLP, RMSNorm, RoPE, Repeat,
        ...                         SelfAttention, TransformerBlock)
        >>> rngs = Rngs(0)
        >>> block = lambda rngs: TransformerBlock(
        ...     SelfAttention(16, 4, num_kv_heads=2, rope=RoPE(), is_causal=True, rngs=rngs),
        ...     GatedMLP(16, 32, rngs=rngs), RMSNorm(16, rngs=rngs), RMSNorm(16, rngs=rngs))
        >>> model = CausalLM(Embed(50, 16, rngs=rngs), Repeat(block, 2, rngs=rngs),
        ...                  RMSNorm(16, rngs=rngs))
        >>> tokens = jnp.array([[5, 6, 7, 8], [0, 0, 9, 10]])
        >>> mask = jnp.array([[1, 1, 1, 1], [0, 0, 1, 1]], bool)
        >>> logits = model(tokens, mask=mask)
        >>> logits.shape, model.embed.embedding.sharding_names
        ((2, 4, 50), ('vocab', 'embed'))
        >>> _ = model.set_attributes(decode=True)
        >>> model.init_cache((2, 6, 16))
        >>> prompt = model(tokens, mask=mask)        # the prompt as one chunk
        >>> bool(jnp.allclose(prompt[mask], logits[mask], atol=1e-4))
        True
        >>> model(jnp.array([[1], [2]])).shape       # then one token per row and step
        (2, 1, 50)
    """

    def __init__(
        self,
        embed: Embed,
        blocks: Module,
        norm: Module,
        head: Linear | None = None,
        *,
        position_embed: Embed | None = None,
        max_length: Size | None = None,
    ):
        if not isinstance(embed, Embed):
            raise TypeError(f"CausalLM embed must be an Embed, got {type(embed).__name__}.")
        self.embed, self.blocks, self.norm, self.head = embed, blocks, norm, head
        self.position_embed = position_embed
        self.max_length = (
            None if max_length is None else check_positive_int("CausalLM", "max_length", max_length)
        )
        if position_embed is not None:
            _check_position_table(embed, position_embed, self.max_length)
        self.features = embed.features
        self.vocab_size = embed.num_embeddings
        if head is not None and (
            head.in_features != embed.features or head.out_features != embed.num_embeddings
        ):
            raise ValueError(
                f"CausalLM head maps {head.in_features} -> {head.out_features} features but the "
                f"embedding has {embed.num_embeddings} tokens of {embed.features} features: give "
                f"the head in_features={embed.features}, out_features={embed.num_embeddings}."
            )
        _name_axes(embed, {"embedding": ("vocab", "embed")})
        _name_axes(position_embed, {"embedding": (None, "embed")})
        _name_axes(head, {"kernel": ("embed", "vocab"), "bias": ("vocab",)})
        _norm_axes(norm)
        self.decode = False
        self.next_position: Cache | None = None

    def __call__(
        self,
        tokens: jax.Array,
        *,
        positions: jax.Array | None = None,
        mask: jax.Array | None = None,
    ) -> jax.Array:
        """Logits ``(batch, length, vocab)`` of ``tokens`` ``(batch, length)``.

        Args:
            tokens: integer token ids (while decoding: the next chunk of every row).
            positions: ``(batch, length)`` integer positions; see the class docstring.
            mask: ``(batch, length)``: True for real tokens, False for padding.
        """
        tokens = _tokens("CausalLM", tokens)
        shape = tuple(tokens.shape)
        mask = _rows("CausalLM", "mask", mask, shape)
        mask = None if mask is None else mask.astype(bool)
        positions = _rows("CausalLM", "positions", positions, shape)
        if self.decode:
            automatic = self._continue(mask, shape)
        else:
            limit = self._limit()
            if limit is not None and shape[1] > limit[0]:
                raise ValueError(
                    f"CausalLM takes at most {limit[0]} positions ({limit[1]}) but got "
                    f"{shape[1]} tokens per row. Shorten the input."
                )
            automatic = default_positions(mask, shape)
        positions = automatic if positions is None else positions
        x = self.embed(tokens)
        if self.position_embed is not None:
            x = x + self.position_embed(positions)
        x = self.blocks(x, positions=positions, mask=mask)
        x = self.norm(x)
        return self.embed.attend(x) if self.head is None else self.head(x)

    def _limit(self) -> tuple[int, str] | None:
        """The most positions the model takes, and why: ``max_length``, else the position
        table's size (past it a position has no row), else None."""
        if self.max_length is not None:
            return self.max_length, "max_length"
        if self.position_embed is not None:
            return self.position_embed.num_embeddings, "position_embed.num_embeddings"
        return None

    def _continue(self, mask: Any, shape: tuple[int, ...]) -> jax.Array:
        """Decoding: the chunk's positions after each row's tokens so far; advance them."""
        if self.next_position is None:
            raise ValueError(
                "CausalLM is decoding (decode=True) but its cache is not initialized. Call "
                "model.init_cache((batch, max_length, features)) first."
            )
        start = self.next_position.value[:, None]
        if mask is None:
            offsets = jnp.broadcast_to(jnp.arange(shape[1], dtype=jnp.int32), shape)
            self.next_position.value = self.next_position.value + shape[1]
            return start + offsets
        counted = jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1
        self.next_position.value = self.next_position.value + mask.sum(-1).astype(jnp.int32)
        return jnp.where(mask, start + counted, 1)

    def init_cache(self, input_shape: Sequence[int], dtype: Any = jnp.float32) -> None:
        """Start decoding ``input_shape`` = ``(batch, max_length, features)``: every attention's
        cache, and ``next_position`` (each row's count of real tokens) at 0.

        Raises:
            ValueError: a shape that is not ``(batch, max_length, features)``, a
                ``max_length`` past the model's, or blocks with no cache to start.
        """
        shape = check_sequence_shape("CausalLM", input_shape, f"(1, 64, {self.features})")
        if len(shape) != 3:
            raise ValueError(
                f"CausalLM.init_cache needs (batch, max_length, features), got {shape}."
            )
        limit = self._limit()
        if limit is not None and shape[1] > limit[0]:
            raise ValueError(
                f"CausalLM.init_cache: {shape[1]} positions is more than the model's {limit[1]} "
                f"({limit[0]}). Decode at most {limit[0]} positions."
            )
        if not _start_caches(self.blocks, shape, dtype):
            raise ValueError(
                f"CausalLM.init_cache: no layer of the blocks ({type(self.blocks).__name__}) "
                "decodes from a cache. Use SelfAttention layers."
            )
        self.next_position = Cache(jnp.zeros((shape[0],), jnp.int32))


def _check_position_table(embed: Embed, position_embed: Any, max_length: int | None) -> None:
    """A `CausalLM`'s learned positions: an `Embed` of ``embed``'s width with a row for each
    of the ``max_length`` positions (an `Embed` lookup past its table gives NaN)."""
    if not isinstance(position_embed, Embed):
        raise TypeError(
            f"CausalLM position_embed must be an Embed, got {type(position_embed).__name__}."
        )
    if position_embed.features != embed.features:
        raise ValueError(
            f"CausalLM position_embed has {position_embed.features} features but the token "
            f"embed has {embed.features}: give the position_embed features={embed.features}."
        )
    rows = position_embed.num_embeddings
    if max_length is not None and max_length > rows:
        raise ValueError(
            f"CausalLM max_length={max_length} is more than its position_embed's num_embeddings "
            f"({rows}): positions past {rows - 1} have no row in the table (an Embed lookup past "
            f"its end gives NaN). Pass max_length <= {rows}, or a position_embed with "
            f"num_embeddings={max_length}."
        )


class MaskedLM(Module):
    """A BERT-style masked language model: token ids -> logits over the vocabulary per token.

    ``x = embed_norm(embed(tokens) + position_embed(positions) + type_embed(token_types))``,
    then ``blocks`` (every token attends to every real token: ``mask`` marks the padding),
    then ``transform`` (BERT's MLM head: dense, activation, norm) and the output layer:
    ``head`` or, without one, ``embed.attend`` (tied), plus a per-token ``bias``.

    Args:
        embed: the token `Embed`.
        position_embed: the learned position `Embed`.
        blocks: the transformer blocks (post-norm `TransformerBlock`s for BERT).
        transform: the prediction head's transform, e.g. a `Sequential` of `Linear`,
            ``gelu`` and `LayerNorm`.
        type_embed: the token-type (segment) `Embed`; None: no segments.
        embed_norm: the norm of the summed embeddings; None: none.
        head: the output `Linear`; None: tied to ``embed``.
        output_bias: whether to add a learned ``bias`` (vocabulary,) to the logits.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import (Embed, LayerNorm, MaskedLM, MLP, SelfAttention, Sequential,
        ...                         TransformerBlock)
        >>> rngs = Rngs(0)
        >>> block = TransformerBlock(SelfAttention(8, 2, rngs=rngs), MLP(8, 16, rngs=rngs),
        ...                          LayerNorm(8, rngs=rngs), LayerNorm(8, rngs=rngs), post_norm=True)
        >>> model = MaskedLM(Embed(30, 8, rngs=rngs), Embed(16, 8, rngs=rngs), block,
        ...                  LayerNorm(8, rngs=rngs), type_embed=Embed(2, 8, rngs=rngs))
        >>> model(jnp.ones((2, 5), int), mask=jnp.ones((2, 5), bool)).shape
        (2, 5, 30)
    """

    def __init__(
        self,
        embed: Embed,
        position_embed: Embed,
        blocks: Module,
        transform: Module,
        *,
        type_embed: Embed | None = None,
        embed_norm: Module | None = None,
        head: Linear | None = None,
        output_bias: bool = True,
    ):
        if not isinstance(embed, Embed) or not isinstance(position_embed, Embed):
            raise TypeError("MaskedLM embed and position_embed must be Embed layers.")
        self.embed, self.position_embed, self.blocks = embed, position_embed, blocks
        self.transform, self.type_embed, self.embed_norm, self.head = (
            transform,
            type_embed,
            embed_norm,
            head,
        )
        if not isinstance(output_bias, bool):
            raise TypeError(f"MaskedLM output_bias must be True or False, got {output_bias!r}.")
        self.output_bias = output_bias
        self.max_length = position_embed.num_embeddings
        self.bias: Param | None = None
        if output_bias:
            zeros = jnp.zeros((embed.num_embeddings,), embed.param_dtype)
            self.bias = Param(zeros, sharding_names=("vocab",))
        _name_axes(embed, {"embedding": ("vocab", "embed")})
        _name_axes(position_embed, {"embedding": (None, "embed")})
        _name_axes(type_embed, {"embedding": (None, "embed")})
        _name_axes(head, {"kernel": ("embed", "vocab"), "bias": ("vocab",)})
        _norm_axes(embed_norm)
        for _, layer in transform.iter_modules():
            _name_axes(layer, {"kernel": ("embed", None), "bias": (None,)})
            _norm_axes(layer)

    def __call__(
        self,
        tokens: jax.Array,
        *,
        mask: jax.Array | None = None,
        token_types: jax.Array | None = None,
        positions: jax.Array | None = None,
    ) -> jax.Array:
        """Logits ``(batch, length, vocab)``; ``mask``, ``token_types`` and ``positions`` are
        ``(batch, length)`` (all real, type 0 and ``arange(length)`` when None)."""
        tokens = _tokens("MaskedLM", tokens)
        shape = tuple(tokens.shape)
        mask = _rows("MaskedLM", "mask", mask, shape)
        mask = None if mask is None else mask.astype(bool)
        if shape[1] > self.max_length:
            raise ValueError(
                f"MaskedLM takes at most {self.max_length} positions (its position table) but "
                f"got {shape[1]} tokens per row."
            )
        positions = _rows("MaskedLM", "positions", positions, shape)
        positions = default_positions(None, shape) if positions is None else positions
        x = self.embed(tokens) + self.position_embed(positions)
        if self.type_embed is not None:
            types = _rows("MaskedLM", "token_types", token_types, shape)
            x = x + self.type_embed(jnp.zeros(shape, jnp.int32) if types is None else types)
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        x = self.blocks(x, positions=positions, mask=mask)
        x = self.transform(x)
        logits = self.embed.attend(x) if self.head is None else self.head(x)
        return logits if self.bias is None else logits + self.bias.value


class ImageClassifier(Module):
    """A vision transformer classifier: images ``(batch, height, width, channels)`` (NHWC) ->
    logits ``(batch, classes)``.

    ``patch_embed`` (a `Conv` whose kernel and stride are the patch size, ``VALID`` padding)
    cuts the image into patches; a learned ``class_token`` is put in front, the learned
    ``position_embedding`` (one row per patch, plus the class token's) added, ``blocks`` and
    ``norm`` applied, and ``head`` classifies the class token.

    Args:
        patch_embed: the patch projection.
        blocks: the transformer blocks (pre-norm `TransformerBlock`s for ViT).
        norm: the final norm.
        head: the classifier `Linear`.
        image_size: the height and width the model takes (one int for square images).
        param_dtype: dtype of ``class_token`` and ``position_embedding``.
        rngs: random streams for those two.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import (Conv, ImageClassifier, LayerNorm, Linear, MLP, SelfAttention,
        ...                         TransformerBlock)
        >>> rngs = Rngs(0)
        >>> block = TransformerBlock(SelfAttention(8, 2, rngs=rngs), MLP(8, 16, rngs=rngs),
        ...                          LayerNorm(8, rngs=rngs), LayerNorm(8, rngs=rngs))
        >>> model = ImageClassifier(Conv(3, 8, (4, 4), 4, padding="VALID", rngs=rngs), block,
        ...                         LayerNorm(8, rngs=rngs), Linear(8, 10, rngs=rngs),
        ...                         image_size=16, rngs=rngs)
        >>> model.position_embedding.shape, model(jnp.ones((2, 16, 16, 3))).shape
        ((17, 8), (2, 10))
    """

    def __init__(
        self,
        patch_embed: Conv,
        blocks: Module,
        norm: Module,
        head: Linear,
        *,
        image_size: Size | Sequence[Size],
        param_dtype: Any = jnp.float32,
        rngs: Rngs,
    ):
        if not isinstance(patch_embed, Conv):
            raise TypeError(
                f"ImageClassifier patch_embed must be a Conv, got {type(patch_embed).__name__}."
            )
        self.patch_embed, self.blocks, self.norm, self.head = patch_embed, blocks, norm, head
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if len(size) != 2 or not all(isinstance(s, int) and s >= 1 for s in size):
            raise ValueError(
                f"ImageClassifier image_size must be a positive int or (height, width), got "
                f"{image_size!r}."
            )
        self.image_size = image_size
        self.param_dtype = check_param_dtype("ImageClassifier", "param_dtype", param_dtype)
        patch = patch_embed.kernel_size
        if any(s % p for s, p in zip(size, patch)):
            raise ValueError(
                f"ImageClassifier image_size {size} is not a multiple of the patch size {patch} "
                f"(patch_embed's kernel_size)."
            )
        self.grid = tuple(s // p for s, p in zip(size, patch))
        features = patch_embed.out_features
        count = self.grid[0] * self.grid[1] + 1
        draw = initializers.normal(0.02)
        self.class_token = Param(
            draw(rngs.params(), (features,), param_dtype), sharding_names=("embed",)
        )
        self.position_embedding = Param(
            draw(rngs.params(), (count, features), param_dtype), sharding_names=(None, "embed")
        )
        _name_axes(patch_embed, {"kernel": (None, None, None, "embed"), "bias": ("embed",)})
        _name_axes(head, {"kernel": ("embed", None), "bias": (None,)})
        _norm_axes(norm)

    def __call__(self, images: jax.Array) -> jax.Array:
        """Logits ``(batch, classes)`` of ``images`` ``(batch, height, width, channels)``."""
        images = jnp.asarray(images)
        size = tuple(g * p for g, p in zip(self.grid, self.patch_embed.kernel_size))
        expected = (*size, self.patch_embed.in_features)
        if images.ndim != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"ImageClassifier takes images of shape (batch, {expected[0]}, {expected[1]}, "
                f"{expected[2]}) (NHWC), got {images.shape}. Transpose NCHW pixel values with "
                f"x.transpose(0, 2, 3, 1)."
            )
        x = self.patch_embed(images)
        x = x.reshape(x.shape[0], -1, x.shape[-1])
        token = jnp.broadcast_to(
            self.class_token.value.astype(x.dtype), (x.shape[0], 1, x.shape[-1])
        )
        x = jnp.concatenate([token, x], axis=1) + self.position_embedding.value.astype(x.dtype)
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])

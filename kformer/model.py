"""The paper's figure: an encoder stack, a decoder stack, and the models made of them.

    encoder_tokens (B, S) -> PositionalEmbedding -> N x TransformerBlock            -> context (B, S, D)
    decoder_tokens (B, T) -> PositionalEmbedding -> N x TransformerBlock(causal,
                             cross-attention over context)  -> Dense(V)            -> logits (B, T, V)

`build_transformer` wires an `Encoder` and a `Decoder` into a functional
keras.Model; decoding calls the two apart (the encoder once per source).
"""

import keras
from keras import ops

from kformer.layers import Dropout, PositionalEmbedding, TransformerBlock, make_padding_mask


class _Stack(keras.layers.Layer):
    """Embedding, dropout, `num_layers` TransformerBlocks, and a final LayerNorm for pre-LN."""

    def __init__(
        self,
        vocab_size,
        d_model,
        num_heads,
        num_layers,
        d_ff,
        dropout=0.1,
        norm_first=False,
        causal=False,
        cross_attention=False,
        embedding=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.d_ff = d_ff
        self.dropout = dropout
        self.norm_first = norm_first
        # A shared embedding (one vocabulary for both languages) belongs to the encoder; the decoder borrows it.
        self.embedding = embedding or PositionalEmbedding(vocab_size, d_model, name="embedding")
        self.embedding_dropout = Dropout(dropout)
        block = dict(dropout=dropout, causal=causal, cross_attention=cross_attention, norm_first=norm_first)
        self.blocks = [
            TransformerBlock(d_model, num_heads, d_ff, **block, name=f"block_{index}") for index in range(num_layers)
        ]
        # Pre-LN leaves the residual stream unnormalised after the last block.
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm") if norm_first else None

    def _build_stack(self, tokens_shape, context_shape=None):
        if not self.embedding.built:
            self.embedding.build(tokens_shape)
        x_shape = (*tokens_shape, self.d_model)
        for block in self.blocks:
            block.build(x_shape, context_shape)
        if self.final_norm is not None:
            self.final_norm.build(x_shape)

    def run_with_attention(self, tokens, context=None, context_padding_mask=None, training=None):
        """The stack's states `(B, T, D)` and each block's attention weights (a list of dicts)."""
        padding_mask = make_padding_mask(tokens)  # (B, T)
        x = self.embedding_dropout(self.embedding(tokens), training=training)  # (B, T, D)
        scores = []
        for block in self.blocks:
            x, block_scores = block(
                x,
                context=context,
                padding_mask=padding_mask,
                context_padding_mask=context_padding_mask,
                training=training,
                return_attention_scores=True,
            )
            scores.append(block_scores)
        return (x if self.final_norm is None else self.final_norm(x)), scores

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            d_ff=self.d_ff,
            dropout=self.dropout,
            norm_first=self.norm_first,
        )
        return config


@keras.saving.register_keras_serializable(package="kformer")
class Encoder(_Stack):
    """The encoder stack: source token ids -> context vectors `(B, S, D)`.

    Source padding (id 0) is masked in every self-attention layer.

    Args:
        vocab_size, d_model, num_heads, num_layers, d_ff, dropout, norm_first:
            as `Transformer`'s (`vocab_size`: the source vocabulary's).
    """

    def __init__(self, vocab_size, d_model, num_heads, num_layers, d_ff, dropout=0.1, norm_first=False, **kwargs):
        super().__init__(vocab_size, d_model, num_heads, num_layers, d_ff, dropout, norm_first, **kwargs)

    def build(self, encoder_tokens_shape):
        self._build_stack(encoder_tokens_shape)

    def call(self, encoder_tokens, training=None):
        return self.run_with_attention(encoder_tokens, training=training)[0]


@keras.saving.register_keras_serializable(package="kformer")
class Decoder(_Stack):
    """The decoder stack: target token ids (and the encoder's context) -> logits `(B, T, V)`.

    Self-attention is causal and masks target padding; cross-attention (when
    `cross_attention=True`) masks source padding. Logits are float32 under any
    precision policy. With `tie_embeddings=True` the output projection is the
    transposed token embedding, as in the paper's section 3.4. `embedding`
    (another stack's `PositionalEmbedding`) makes it use that table instead of
    its own: the encoder's, for one vocabulary shared by both languages (a
    model built so is saved and loaded by `Transformer(share_embeddings=True)`).

    Without cross-attention it is the decoder-only (GPT-style) stack.
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        num_heads,
        num_layers,
        d_ff,
        dropout=0.1,
        norm_first=False,
        cross_attention=True,
        tie_embeddings=False,
        embedding=None,
        **kwargs,
    ):
        super().__init__(
            vocab_size,
            d_model,
            num_heads,
            num_layers,
            d_ff,
            dropout,
            norm_first,
            causal=True,
            cross_attention=cross_attention,
            embedding=embedding,
            **kwargs,
        )
        self.cross_attention = cross_attention
        self.tie_embeddings = tie_embeddings
        self.output_projection = None if tie_embeddings else keras.layers.Dense(vocab_size, name="logits")

    def build(self, decoder_tokens_shape, context_shape=None, context_padding_mask_shape=None):
        self._build_stack(decoder_tokens_shape, context_shape)
        if self.output_projection is not None:
            self.output_projection.build((*decoder_tokens_shape, self.d_model))

    def call(self, decoder_tokens, context=None, context_padding_mask=None, training=None):
        x = self.run_with_attention(decoder_tokens, context, context_padding_mask, training)[0]  # (B, T, D)
        return self.logits(x)

    def empty_cache(self, batch_size, length):
        """The self-attention KV caches for decoding: per block, zero `(key, value)` `(batch_size, H, length, K)`."""
        return [block.self_attention.empty_cache(batch_size, length) for block in self.blocks]

    def context_cache(self, context):
        """Per block, the cross-attention `(key, value)` of the encoder output `(B, S, D)`: computed once per source."""
        return [tuple(block.cross_attention_layer.project(context, "key", "value")) for block in self.blocks]

    def decode_step(self, token, position, cache, context_cache=None, context_padding_mask=None):
        """The logits for the token after `token`, writing its keys and values into the cache.

        Args:
            token: int32 `(B, 1)`, the token at `position`.
            position: scalar int, where `token` stands (0 for [START]).
            cache: from `empty_cache` or the previous `decode_step`.
            context_cache: from `context_cache`, for a decoder with cross-attention; it
                may hold one row for every n rows of `token` (a sentence's beams).
            context_padding_mask: optional bool `(B_context, S)`, True at real source tokens.

        Returns:
            `(logits (B, V) float32, cache)`.
        """
        x = self.embedding(token, start_position=position)  # (B, 1, D)
        context_cache = context_cache or [None] * len(self.blocks)
        new_cache = []
        for block, block_cache, block_context in zip(self.blocks, cache, context_cache, strict=True):
            x, block_cache = block(
                x,
                context_padding_mask=context_padding_mask,
                training=False,
                cache=block_cache,
                cache_index=position,
                context_cache=block_context,
            )
            new_cache.append(block_cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.logits(x)[:, 0], new_cache

    def logits(self, x):
        """Decoder states `(B, T, D)` -> float32 logits `(B, T, V)`."""
        if self.tie_embeddings:
            table = self.embedding.token_embedding.embeddings  # (V, D)
            return ops.cast(ops.matmul(x, ops.transpose(ops.cast(table, x.dtype))), "float32")
        return ops.cast(self.output_projection(x), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(cross_attention=self.cross_attention, tie_embeddings=self.tie_embeddings)
        return config


def build_transformer(src_vocab_size, tgt_vocab_size, *settings, **named_settings):
    """The encoder-decoder `Transformer` with these settings, given as to it (d_model, num_heads, num_layers, d_ff,
    dropout, norm_first, tie_embeddings, share_embeddings: its docstring says what each is; its defaults apply)."""
    return Transformer(src_vocab_size, tgt_vocab_size, *settings, **named_settings)


@keras.saving.register_keras_serializable(package="kformer")
class Transformer(keras.Model):
    """The encoder-decoder Transformer: a Keras model built as a functional graph, as keras-hub's backbones are.

    One class whether or not the encoder and decoder share their token table:
    its config holds every argument, so a saved model is rebuilt with the
    table shared (a plain functional model's config cannot say that two
    layers hold one sublayer).

    Args:
        src_vocab_size: source vocabulary size (ids 0..V-1, 0 = padding).
        tgt_vocab_size: target vocabulary size.
        d_model: D, the model width.
        num_heads: H, attention heads per layer.
        num_layers: N, layers in the encoder and in the decoder.
        d_ff: the feed-forward hidden width.
        dropout: dropout rate while training.
        norm_first: pre-LN blocks instead of the paper's post-LN.
        tie_embeddings: use the target embedding as the output projection.
        share_embeddings: one embedding table for source and target tokens (one
            vocabulary for both languages: the sizes must be equal); with
            `tie_embeddings` it is the paper's three-way tying (section 3.4).

    Inputs `encoder_tokens` (B, S) and `decoder_tokens` (B, T), int32, 0 =
    padding; float32 logits (B, T, V) out. Its layers "encoder" and
    "decoder" can be called apart.
    """

    def __init__(
        self,
        src_vocab_size,
        tgt_vocab_size,
        d_model=256,
        num_heads=8,
        num_layers=4,
        d_ff=1024,
        dropout=0.1,
        norm_first=False,
        tie_embeddings=False,
        share_embeddings=False,
        **kwargs,
    ):
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs one vocabulary, but the sizes differ: {src_vocab_size} and {tgt_vocab_size}."
            )
        stack = dict(d_model=d_model, num_heads=num_heads, num_layers=num_layers, d_ff=d_ff, dropout=dropout)
        stack["norm_first"] = norm_first
        encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
        decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
        encoder = Encoder(src_vocab_size, **stack, name="encoder")
        embedding = encoder.embedding if share_embeddings else None
        decoder = Decoder(tgt_vocab_size, **stack, tie_embeddings=tie_embeddings, embedding=embedding, name="decoder")
        context = encoder(encoder_tokens)  # (B, S, D)
        logits = decoder(decoder_tokens, context=context, context_padding_mask=make_padding_mask(encoder_tokens))
        super().__init__([encoder_tokens, decoder_tokens], logits, name=kwargs.pop("name", "transformer"), **kwargs)
        settings = dict(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **stack)
        settings.update(tie_embeddings=tie_embeddings, share_embeddings=share_embeddings)
        self._settings = settings

    def get_config(self):
        return {"name": self.name, **self._settings}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@keras.saving.register_keras_serializable(package="kformer")
class SharedEmbeddingTransformer(Transformer):
    """How release 0.1.0 saved a model with a shared token table: `.keras` files of it load as a `Transformer`."""

    @classmethod
    def from_config(cls, config):
        vocab_size = config.pop("vocab_size")
        return Transformer(vocab_size, vocab_size, share_embeddings=True, **config)


def build_decoder_only(
    vocab_size, d_model=256, num_heads=8, num_layers=4, d_ff=1024, dropout=0.1, norm_first=False, tie_embeddings=False
):
    """The decoder-only (GPT-style) language model: masked self-attention and feed-forward blocks.

    Returns:
        keras.Model with input `decoder_tokens` (B, T), int32, 0 = padding,
        and float32 next-token logits (B, T, V) out.
    """
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    decoder = Decoder(
        vocab_size,
        d_model,
        num_heads,
        num_layers,
        d_ff,
        dropout,
        norm_first,
        cross_attention=False,
        tie_embeddings=tie_embeddings,
        name="decoder",
    )
    return keras.Model(decoder_tokens, decoder(decoder_tokens), name="decoder_only")

"""Seed 003's build-up, stage by stage: eight models, each fixing one failure of the one before.

    stage  adds                                              fixes
    1      the average of the source embeddings -> linear    (a start: bag of words)
    2      self-attention on raw dot products e_i . e_j      every word weighted alike
    3      learned W_Q, W_K, W_V, scores / sqrt(d_k)         one vector in three roles
    4      a decoder: causal self-attention, cross-attention  one token out, not a sentence
    5      sinusoidal positional encodings                   word order is invisible
    6      multi-head attention                              one attention pattern per token
    7      residual connections, layer norm, feed-forward    no depth, no per-token processing
    8      N stacked layers: `build_transformer`             one layer of each

Stages 1-3 read the source and score the first target word, as seed 003's
Parts 1-3 do: `encoder_tokens (B, S) -> logits (B, V)`. Stages 4-8 translate
whole sentences: `(encoder_tokens (B, S), decoder_tokens (B, T)) -> logits
(B, T, V)`, trained by teacher forcing and decoded one token at a time. Every
model returns logits; the softmax of the seed's `p(y) = softmax(W c + b)` sits
in the loss and in `first_tokens`. Stages 3-6 use bias-free projections, as
the seed's equations do.

More models for the course's questions: stage 0 (`build_mvp(0)`), the GRU
encoder-decoder that attention replaced, the same with attention
(`build_mvp(0, attention=True)`), and stage 7's three changes one at a time
(`build_mvp(7, parts=...)`). `train_stage` and `stage_scores` are the
course's recipe and scores, shared with `bench/stages.py`.

Everything else is built from kformer's own layers; only `DotProductSelfAttention`
(stage 2, attention with no projections) is new here, and it calls the same
attention core as every other layer.
"""

import keras
import numpy as np
from keras import ops

from kformer.data.corpus import INTRANSITIVE
from kformer.data.pipeline import make_dataset
from kformer.data.text import END_ID, PAD_ID, START_ID
from kformer.layers import (
    CrossAttention,
    FeedForward,
    MultiHeadSelfAttention,
    PositionalEmbedding,
    make_padding_mask,
    scaled_dot_product_attention,
)
from kformer.layers.attention import key_padding_mask
from kformer.model import build_transformer
from kformer.training.objectives import MaskedAccuracy, MaskedSparseCrossEntropy

STAGES = {
    1: "average of the source embeddings -> linear",
    2: "self-attention on raw dot products, no projections",
    3: "learned Q/K/V projections, scores scaled by 1/sqrt(d_k)",
    4: "a decoder: causal self-attention, cross-attention",
    5: "sinusoidal positional encodings",
    6: "multi-head attention",
    7: "residual connections, layer normalisation, feed-forward",
    8: "N stacked layers: the full Transformer",
}
STAGE_7_PARTS = ("residual", "norm", "feed_forward")


@keras.saving.register_keras_serializable(package="kformer")
class DotProductSelfAttention(keras.layers.Layer):
    """Seed 003's Part 2: self-attention with no projections and no scaling.

        score_ij = e_i . e_j,   alpha_ij = softmax_j(score_ij),   z_i = sum_j alpha_ij e_j

    Each token vector plays query, key and value at once. Masking: padded
    positions (the Keras mask of `x`) are never attended to; the mask passes on.

    Call arguments:
        x: float tensor `(B, T, D)`.
        return_attention_scores: also return the weights `(B, T, T)`.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, x, return_attention_scores=False, mask=None):
        attention_mask = None if mask is None else key_padding_mask(mask)  # (B, 1, T)
        z, weights = scaled_dot_product_attention(x, x, x, attention_mask, scale=1.0)  # (B, T, D), (B, T, T)
        return (z, weights) if return_attention_scores else z


def _first_word_model(stage, source_vocab_size, target_vocab_size, d_model):
    """Stages 1-3: embed, (attend,) average the token vectors, score every target word."""
    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    x = keras.layers.Embedding(source_vocab_size, d_model, mask_zero=True, name="embedding")(encoder_tokens)
    if stage == 2:
        x = DotProductSelfAttention(name="attention")(x)
    elif stage == 3:
        x = MultiHeadSelfAttention(1, d_model, head_dim=d_model, use_bias=False, name="attention")(x)
    context = keras.layers.GlobalAveragePooling1D(name="average")(x)  # (B, D): c = mean of the real tokens
    logits = keras.layers.Dense(target_vocab_size, name="logits")(context)  # (B, V): W c + b
    return keras.Model(encoder_tokens, logits, name=f"mvp_stage_{stage}")


def _rnn_seq2seq(source_vocab_size, target_vocab_size, d_model, units, attention=False):
    """Stage 0: a GRU reads the source into one vector, which starts a GRU that writes the target.

    The encoder-decoder of Cho et al. (2014) and Sutskever et al. (2014), which
    attention replaced: the decoder sees the source only through the
    encoder's last state, `(B, units)`, whatever the sentence's length.

    With `attention`, each decoder state h_t also reads every encoder state h_s
    (Luong et al., 2015, global attention) through one head of kformer's
    `CrossAttention`, its projections without biases: q_t = h_t W_Q,
    k_s = h_s W_K, v_s = h_s W_V, alpha_t = softmax_s(q_t . k_s / sqrt(units)),
    c_t = (sum_s alpha_ts v_s) W_O; the logits come from tanh(W_c [c_t; h_t] + b_c).
    """
    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    source = keras.layers.Embedding(source_vocab_size, d_model, mask_zero=True, name="source_embedding")(encoder_tokens)
    states, summary = keras.layers.GRU(units, return_sequences=True, return_state=True, name="encoder_gru")(source)
    x = keras.layers.Embedding(target_vocab_size, d_model, mask_zero=True, name="target_embedding")(decoder_tokens)
    x = keras.layers.GRU(units, return_sequences=True, name="decoder_gru")(x, initial_state=summary)  # (B, T, units)
    if attention:  # states: (B, S, units), one per source token
        reads = CrossAttention(1, units, use_bias=False, name="attention")(
            x, states, context_padding_mask=make_padding_mask(encoder_tokens)
        )  # (B, T, units)
        x = keras.layers.Dense(units, activation="tanh", name="attentional")(keras.layers.Concatenate()([reads, x]))
    logits = keras.layers.Dense(target_vocab_size, name="logits")(x)  # (B, T, V)
    name = "mvp_stage_0_gru_attention" if attention else "mvp_stage_0_gru"
    return keras.Model([encoder_tokens, decoder_tokens], logits, name=name)


def _single_layer_seq2seq(stage, source_vocab_size, target_vocab_size, d_model, num_heads, parts=(), d_ff=None):
    """Stages 4-6: one attention layer a side, with no residuals, norms or feed-forward.

    `parts` adds stage 7's changes to stage 6 by hand, any of STAGE_7_PARTS:
    each sub-layer's output becomes `norm(x + sublayer(x))`, its parts
    switched on one by one, and "feed_forward" adds the FFN sub-layer (width
    `d_ff`) after the attention on each side.
    """
    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    source_padding_mask = make_padding_mask(encoder_tokens)  # (B, S)
    target_padding_mask = make_padding_mask(decoder_tokens)  # (B, T)

    def embed(vocab_size, name):
        if stage >= 5:
            return PositionalEmbedding(vocab_size, d_model, name=name)
        return keras.layers.Embedding(vocab_size, d_model, mask_zero=True, name=name)

    def sublayer(x, y, name):  # x: the sub-layer's input, y: its output, both (B, T, D)
        if "residual" in parts:
            y = keras.layers.Add(name=f"{name}_residual")([x, y])
        if "norm" in parts:
            y = keras.layers.LayerNormalization(epsilon=1e-6, name=f"{name}_norm")(y)
        return y

    def feed_forward(x, name):
        if "feed_forward" not in parts:
            return x
        return sublayer(x, FeedForward(d_model, d_ff, name=name)(x), name)

    heads = num_heads if stage >= 6 else 1
    attention = dict(num_heads=heads, d_model=d_model, use_bias=False)
    source = embed(source_vocab_size, "source_embedding")(encoder_tokens)  # (B, S, D)
    context = MultiHeadSelfAttention(**attention, name="encoder_attention")(source, padding_mask=source_padding_mask)
    context = feed_forward(sublayer(source, context, "encoder_attention"), "encoder_feed_forward")  # (B, S, D)
    x = embed(target_vocab_size, "target_embedding")(decoder_tokens)  # (B, T, D)
    y = MultiHeadSelfAttention(**attention, causal=True, name="decoder_attention")(x, padding_mask=target_padding_mask)
    x = sublayer(x, y, "decoder_attention")
    y = CrossAttention(**attention, name="cross_attention")(x, context, context_padding_mask=source_padding_mask)
    x = feed_forward(sublayer(x, y, "cross_attention"), "decoder_feed_forward")
    logits = keras.layers.Dense(target_vocab_size, name="logits")(x)  # (B, T, V)
    name = "_plus_".join([f"mvp_stage_{stage}", *parts])
    return keras.Model([encoder_tokens, decoder_tokens], logits, name=name)


def build_mvp(
    stage,
    source_vocab_size,
    target_vocab_size,
    d_model=64,
    num_heads=4,
    num_layers=2,
    d_ff=None,
    dropout=0.0,
    parts=None,
    units=None,
    attention=False,
):
    """The model of one stage of seed 003's build-up (see the module docstring).

    Args:
        stage: 1 to 8, or 0 for a GRU encoder-decoder without attention, the
            RNN of seed 000's motivation that attention replaced.
        source_vocab_size, target_vocab_size: vocabulary sizes (id 0 = padding).
        d_model: D, the width of every stage.
        num_heads: H, heads from stage 6 on (stages 3-5 have one head of width D).
        num_layers: N, the layers a side of stage 8 (stage 7 has one).
        d_ff: the feed-forward width of stages 7-8; defaults to 4 * d_model.
        dropout: the dropout rate of stages 7-8.
        units: stage 0 only: the GRUs' width; defaults to d_model.
        attention: stage 0 only: the decoder also attends over every encoder
            state (Luong's global attention), not only its last.
        parts: stage 7 only: its changes one at a time, any of STAGE_7_PARTS
            ("residual", "norm", "feed_forward") added by hand to stage 6, so
            that each can be tried alone. None builds stage 7 itself,
            `build_transformer` with one layer a side (which also has biases
            in its projections).

    Returns:
        A keras.Model. Stages 1-3: `encoder_tokens (B, S) -> logits (B, V)`
        of the first target token. Stages 0 and 4-8: `[encoder_tokens (B, S),
        decoder_tokens (B, T)] -> logits (B, T, V)`.
    """
    if stage == 0:
        return _rnn_seq2seq(source_vocab_size, target_vocab_size, d_model, units or d_model, attention)
    if attention:
        raise ValueError(f"attention is for stage 0, the GRU; stages 1-8 have their own. Got stage={stage!r}.")
    if stage not in STAGES:
        raise ValueError(f"stage must be one of 0-8, got stage={stage!r}.")
    d_ff = d_ff or 4 * d_model
    if parts is not None:
        if stage != 7 or not set(parts) <= set(STAGE_7_PARTS):
            raise ValueError(
                f"parts is for stage 7 and takes any of {STAGE_7_PARTS}, got stage={stage!r}, parts={parts!r}."
            )
        return _single_layer_seq2seq(6, source_vocab_size, target_vocab_size, d_model, num_heads, parts, d_ff)
    if stage <= 3:
        return _first_word_model(stage, source_vocab_size, target_vocab_size, d_model)
    if stage <= 6:
        return _single_layer_seq2seq(stage, source_vocab_size, target_vocab_size, d_model, num_heads)
    return build_transformer(
        source_vocab_size,
        target_vocab_size,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=1 if stage == 7 else num_layers,
        d_ff=d_ff,
        dropout=dropout,
    )


def reads_whole_target(model):
    """True for stages 4-8 (encoder and decoder tokens in), False for stages 1-3."""
    return len(model.inputs) == 2


def compile_mvp(model, learning_rate=1e-3, jit_compile=False):
    """The one recipe every stage trains with: Adam, cross-entropy over real tokens, token accuracy.

    Stages 1-3 have one label per sentence (its first target token); the
    same loss and metric read it as a one-token target.
    """
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=MaskedSparseCrossEntropy(label_smoothing=0.0),
        metrics=[MaskedAccuracy()],
        jit_compile=jit_compile,
    )
    return model


def stage_dataset(model, pairs, source_tokenizer, target_tokenizer, **batching):
    """`make_dataset`'s batches shaped for `model`: the first target token alone for stages 1-3.

    Keyword arguments go to `kformer.data.pipeline.make_dataset` (batch_size, max_length, shuffle, seed, ...).
    """
    dataset = make_dataset(pairs, source_tokenizer, target_tokenizer, **batching)
    if reads_whole_target(model):
        return dataset
    return dataset.map(lambda inputs, labels: (inputs[0], labels[:, 0]))  # (B, S) -> the first word (B,)


def _encoder_tokens(sentences, source_tokenizer, max_length):
    return source_tokenizer.tokenize(list(sentences))[:, :max_length].to_tensor()  # (B, S)


def greedy_decode(model, encoder_tokens, max_length):
    """Decodes one token at a time, re-running the whole model on the prefix at every step.

    This is the seed's inference, plain: no cache (`kformer.inference.decoding` is the
    fast path for trained Transformers). Works for any stage 4-8 model.

    Args:
        encoder_tokens: int32 `(B, S)`, 0 = padding.
        max_length: the most tokens to generate.

    Returns:
        int32 numpy array `(B, T)`: each row's tokens, [END], then [PAD].
    """
    batch = ops.shape(encoder_tokens)[0]
    tokens = np.full((batch, 1), START_ID, "int32")  # (B, 1)
    done = np.zeros(batch, bool)
    for _ in range(max_length):
        logits = model([encoder_tokens, ops.convert_to_tensor(tokens)], training=False)  # (B, t, V)
        token = np.argmax(ops.convert_to_numpy(logits[:, -1]), axis=-1).astype("int32")  # (B,)
        token[done] = PAD_ID
        done |= token == END_ID
        tokens = np.concatenate([tokens, token[:, None]], axis=1)
        if done.all():
            break
    return tokens[:, 1:]


def translate(model, sentences, source_tokenizer, target_tokenizer, max_length=24):
    """Translations of `sentences` (Python strings) by a stage 4-8 model, greedily."""
    output = greedy_decode(model, _encoder_tokens(sentences, source_tokenizer, max_length), max_length)
    return [text.decode() for text in target_tokenizer.detokenize(output).numpy()]


def first_tokens(model, sentences, source_tokenizer, target_tokenizer, max_length=24):
    """The most likely first target token of each sentence, as a string, for any stage.

    Stages 1-3 score it directly; stages 4-8 take their first decoding step.
    """
    encoder_tokens = _encoder_tokens(sentences, source_tokenizer, max_length)
    if reads_whole_target(model):
        start = ops.full((len(sentences), 1), START_ID, "int32")
        logits = model([encoder_tokens, start], training=False)[:, 0]  # (B, V)
    else:
        logits = model(encoder_tokens, training=False)  # (B, V)
    ids = np.argmax(ops.convert_to_numpy(logits), axis=-1)
    return [target_tokenizer.vocabulary[i] for i in ids]


def train_stage(
    stage,
    train_pairs,
    source_tokenizer,
    target_tokenizer,
    seed=0,
    parts=None,
    epochs=2,
    batch_size=64,
    max_length=24,
    learning_rate=3e-3,
    **sizes,
):
    """Chapter 4's recipe: one stage built, seeded and trained; returns `(model, history)`.

    Every stage gets the same budget (`epochs` passes over `train_pairs` at
    `batch_size`), Adam at `learning_rate`, and the width of `build_mvp`'s
    defaults unless `sizes` (d_model, num_heads, units, attention, ...) say otherwise. `seed`
    sets Keras' random seed to `stage + 10 * seed`, so seed 0 of stage 5 is
    seed 5, and a stage-7 part model starts where stage 7 does.
    """
    keras.utils.set_random_seed(stage + 10 * seed)
    model = build_mvp(stage, source_tokenizer.vocab_size, target_tokenizer.vocab_size, parts=parts, **sizes)
    compile_mvp(model, learning_rate)
    data = stage_dataset(
        model, train_pairs, source_tokenizer, target_tokenizer, batch_size=batch_size, max_length=max_length
    )
    return model, model.fit(data, epochs=epochs, verbose=0, shuffle=False).history


def _both_right(right, first_of_pairs):
    return float(np.mean([right[i] and right[i + 1] for i in first_of_pairs]))


def stage_scores(model, twins, test_pairs, source_tokenizer, target_tokenizer, agreement=()):
    """Exact-match accuracies of one stage on role-swap twins and on test pairs, and its outputs.

    Args:
        twins: `role_swap_pairs` output, (english, spanish) pairs where pair 2i
            and 2i + 1 are the same words in another order.
        test_pairs: (english, spanish) pairs for whole-sentence accuracy.
        agreement: `agreement_pairs` output (present or past tense), for the
            four verb scores.

    Returns:
        `(scores, outputs)`. Scores, each a fraction: "first word", "first
        word, both twins" (over the twin pairs whose first Spanish words
        differ), "sentence", "sentence, both twins", "test split"; given
        `agreement`, also "verb agrees" (the main verb in the subject's
        number), "verb attracted" (only in the nearer noun's number), "verb
        number" (of the outputs that end in any intransitive verb, whatever
        the verb, those in the subject's number) and "ends in a verb" (the
        share of outputs that "verb number" counts). The sentence and verb
        scores are NaN for stages 1-3, which write one word. Outputs are the
        model's translations of the twins (their first words for stages 1-3).
    """
    sentences = [english for english, _ in twins]
    first_words = [spanish.split()[0] for _, spanish in twins]
    differing = [i for i in range(0, len(twins), 2) if first_words[i] != first_words[i + 1]]
    firsts = first_tokens(model, sentences, source_tokenizer, target_tokenizer)
    first_right = [a == b for a, b in zip(firsts, first_words, strict=True)]
    scores = {"first word": float(np.mean(first_right)), "first word, both twins": _both_right(first_right, differing)}
    verb_scores = ["verb agrees", "verb attracted", "verb number", "ends in a verb"]
    whole = ["sentence", "sentence, both twins", "test split"] + verb_scores * bool(agreement)
    if not reads_whole_target(model):
        return scores | dict.fromkeys(whole, np.nan), firsts
    outputs = translate(model, sentences, source_tokenizer, target_tokenizer)
    right = [output == spanish for output, (_, spanish) in zip(outputs, twins, strict=True)]
    test_outputs = translate(model, [english for english, _ in test_pairs], source_tokenizer, target_tokenizer)
    scores["sentence"] = float(np.mean(right))
    scores["sentence, both twins"] = _both_right(right, range(0, len(right), 2))
    scores["test split"] = float(np.mean([a == b for a, (_, b) in zip(test_outputs, test_pairs, strict=True)]))
    if agreement:
        written = [
            output.split()
            for output in translate(model, [e for e, *_ in agreement], source_tokenizer, target_tokenizer)
        ]
        scores["verb agrees"] = float(np.mean([r in w for w, (*_, r, _) in zip(written, agreement, strict=True)]))
        attracted = [wrong in w and r not in w for w, (*_, r, wrong) in zip(written, agreement, strict=True)]
        scores["verb attracted"] = float(np.mean(attracted))
        plural = {form for verb in INTRANSITIVE for form in (verb.spanish_plural, verb.spanish_past_plural)}
        verbs = plural | {form for verb in INTRANSITIVE for form in (verb.spanish, verb.spanish_past)}
        ends = [
            (w[-1] in plural, r in plural)
            for w, (*_, r, _) in zip(written, agreement, strict=True)
            if w and w[-1] in verbs
        ]
        scores["verb number"] = float(np.mean([said == meant for said, meant in ends])) if ends else np.nan
        scores["ends in a verb"] = len(ends) / len(agreement)
    return scores, outputs

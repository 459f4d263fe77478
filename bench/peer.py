"""The peer kformer is measured against: the same-size Transformer built from keras-hub's layers.

It follows the keras.io "English-to-Spanish translation with KerasHub" example:
keras-hub WordPiece tokenizers, TokenAndPositionEmbedding + TransformerEncoder /
TransformerDecoder layers, every sentence padded to `SEQUENCE_LENGTH` tokens, and
greedy decoding with keras_hub.samplers.GreedySampler re-running the model on the
padded prompt at every step.
"""

import keras
import keras_hub
import tensorflow as tf
from keras import ops

SEQUENCE_LENGTH = 40
RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]


def tokenizers(train_pairs, vocab_size=8000):
    """keras-hub WordPiece tokenizers learned from the training pairs (source, target)."""
    result = []
    for side in range(2):
        sentences = tf.data.Dataset.from_tensor_slices([pair[side] for pair in train_pairs]).batch(1024)
        vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
            sentences, vocabulary_size=vocab_size, reserved_tokens=RESERVED
        )
        result.append(keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary, oov_token="[UNK]"))
    return result


def model(
    source_vocab,
    target_vocab,
    d_model=256,
    num_heads=8,
    num_layers=2,
    d_ff=1024,
    dropout=0.1,
    sequence_length=SEQUENCE_LENGTH,
):
    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    x = keras_hub.layers.TokenAndPositionEmbedding(source_vocab, sequence_length, d_model, mask_zero=True)(
        encoder_tokens
    )
    for _ in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(d_ff, num_heads, dropout=dropout)(x)
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    y = keras_hub.layers.TokenAndPositionEmbedding(target_vocab, sequence_length, d_model, mask_zero=True)(
        decoder_tokens
    )
    for _ in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(d_ff, num_heads, dropout=dropout)(y, encoder_sequence=x)
    logits = keras.layers.Dense(target_vocab, name="logits")(y)
    return keras.Model([encoder_tokens, decoder_tokens], logits, name="keras_hub_transformer")


def dataset(pairs, source_tokenizer, target_tokenizer, batch_size=64, shuffle=True):
    """((encoder_tokens, decoder_tokens), labels), every sentence padded to SEQUENCE_LENGTH."""
    start, end = target_tokenizer.token_to_id("[START]"), target_tokenizer.token_to_id("[END]")
    packer = keras_hub.layers.StartEndPacker(SEQUENCE_LENGTH + 1, start_value=start, end_value=end)
    source_packer = keras_hub.layers.StartEndPacker(SEQUENCE_LENGTH)

    def prepare(source, target):
        encoder_tokens = source_packer(source_tokenizer(source))
        target = packer(target_tokenizer(target))
        return (encoder_tokens, target[:, :-1]), target[:, 1:]

    sources, targets = zip(*pairs, strict=True)
    data = tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
    if shuffle:
        data = data.shuffle(len(pairs), seed=0)
    return data.batch(batch_size).map(prepare, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def greedy_translate(peer, source_tokenizer, target_tokenizer, sentences, batch_size=64):
    """The keras.io example's decode_sequences, batched: GreedySampler over a padded prompt."""
    start, end = target_tokenizer.token_to_id("[START]"), target_tokenizer.token_to_id("[END]")
    source_packer = keras_hub.layers.StartEndPacker(SEQUENCE_LENGTH)
    sampler = keras_hub.samplers.GreedySampler()
    translations = []
    for first in range(0, len(sentences), batch_size):
        batch = sentences[first : first + batch_size]
        encoder_tokens = source_packer(source_tokenizer(tf.constant(batch)))

        def next_token(prompt, cache, index, encoder_tokens=encoder_tokens):
            logits = peer([encoder_tokens, prompt], training=False)[:, index - 1, :]
            return logits, None, cache

        prompt = ops.concatenate(
            [ops.full((len(batch), 1), start), ops.zeros((len(batch), SEQUENCE_LENGTH - 1), "int32")], axis=1
        )
        generated = sampler(next_token, prompt, stop_token_ids=[end], index=1)
        translations += [detokenize(target_tokenizer, row) for row in ops.convert_to_numpy(generated)]
    return translations


def detokenize(tokenizer, ids, end=3):
    """Ids after [START] up to [END], reserved ids dropped, as text (keras-hub joins pieces with spaces)."""
    kept = []
    for token in (int(i) for i in ids[1:]):
        if token == end:
            break
        if token >= len(RESERVED):
            kept.append(token)
    if not kept:
        return ""
    text = tokenizer.detokenize([kept])
    text = text[0] if isinstance(text, list) else text.numpy()[0]
    return text.decode() if isinstance(text, bytes) else text

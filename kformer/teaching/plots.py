"""Attention heatmaps of a translation, drawn with `matplotlib.figure.Figure`, not pyplot (as `training.history`'s
learning curves: no GUI backend needed, and the caller's backend left alone)."""

from matplotlib.figure import Figure


def attention_weights(trained, sentence, max_length=None):
    """Translates `sentence` greedily and collects every attention map on the way.

    The decoder is re-run teacher-forced on its own output, so each map shows
    what the model attended to while producing that translation.

    Returns:
        (source_tokens, target_tokens, translation, maps): token strings, the
        translation, and a dict {"encoder self-attention", "decoder
        self-attention", "cross-attention"} of lists (one per layer) of arrays
        `(H, rows, columns)`.
    """
    import numpy as np
    import tensorflow as tf

    from kformer.data.text import END_ID, START_ID
    from kformer.inference.decoding import decode
    from kformer.layers import make_padding_mask

    if trained.source_tokenizer is None:
        raise ValueError("attention maps are drawn for a translator; this model is a language model.")
    max_length = max_length or trained.max_length
    source_ids = trained.source_tokenizer.tokenize(tf.constant([sentence]))[:, :max_length].to_tensor()
    output = decode(trained.model, source_ids, max_length).numpy()[0]
    output = list(output[: list(output).index(END_ID) + 1] if END_ID in output else output[output > 0])
    decoder_tokens = tf.constant([[START_ID] + output[:-1]], tf.int32)
    encoder, decoder = trained.model.get_layer("encoder"), trained.model.get_layer("decoder")
    context, encoder_scores = encoder.run_with_attention(source_ids)
    _, decoder_scores = decoder.run_with_attention(decoder_tokens, context, make_padding_mask(source_ids))
    maps = {
        "encoder self-attention": [np.asarray(s["self_attention"][0]) for s in encoder_scores],
        "decoder self-attention": [np.asarray(s["self_attention"][0]) for s in decoder_scores],
        "cross-attention": [np.asarray(s["cross_attention"][0]) for s in decoder_scores],
    }
    source_tokens = [trained.source_tokenizer.vocabulary[i] for i in source_ids.numpy()[0]]
    target_tokens = [trained.target_tokenizer.vocabulary[i] for i in output]
    translation = trained.target_tokenizer.detokenize(tf.constant([output], tf.int32)).numpy()[0].decode()
    return source_tokens, target_tokens, translation, maps


def attention_heatmaps(trained, sentence, path=None):
    """Heatmaps of every layer and head: cross-attention, then decoder and encoder self-attention.

    Rows of a cross-attention map are the produced target tokens (each row
    is what the model looked at in the source while producing that token).

    Returns:
        The matplotlib Figure (also saved to `path` when given).

    Raises:
        ValueError: the sentence has no tokens (empty, or only spaces).
    """
    source_tokens, target_tokens, translation, maps = attention_weights(trained, sentence)
    if not source_tokens:
        raise ValueError(f"{sentence!r} has no tokens to attend to; give a sentence with at least one word.")
    inputs = ["[START]", *target_tokens[:-1]]
    axes_labels = {
        "cross-attention": (target_tokens, source_tokens),
        "decoder self-attention": (target_tokens, inputs),
        "encoder self-attention": (source_tokens, source_tokens),
    }
    layers = len(maps["cross-attention"])
    heads = maps["cross-attention"][0].shape[0]
    size = 0.35 * max(len(source_tokens), len(target_tokens)) + 1.5
    figure = Figure(figsize=(size * heads, size * 3 * layers))
    grid = figure.subplots(3 * layers, heads, squeeze=False)
    for kind_index, (kind, (rows, columns)) in enumerate(axes_labels.items()):
        for layer, weights in enumerate(maps[kind]):
            for head in range(heads):
                axis = grid[kind_index * layers + layer, head]
                image = axis.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0)
                axis.set_xticks(range(len(columns)), columns, rotation=90, fontsize=8)
                axis.set_yticks(range(len(rows)), rows, fontsize=8)
                axis.set_title(f"{kind}, layer {layer + 1}, head {head + 1}", fontsize=8)
                axis.set_xlabel("attends to", fontsize=7)
                axis.set_ylabel("token", fontsize=7)
    figure.suptitle(f'"{sentence}" -> "{translation}"')
    figure.tight_layout(rect=(0, 0, 0.9, 1 - 0.4 / figure.get_figheight()))  # room for the title and the bar
    figure.colorbar(image, cax=figure.add_axes((0.92, 0.3, 0.015, 0.4)), label="attention weight")
    if path is not None:
        figure.savefig(path, dpi=90)
    return figure

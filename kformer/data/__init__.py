"""Text and data: below the model, and needing nothing of it.

- `text`: the WordPiece tokenizer (tensorflow-text, inside the graph) and vocabulary learning.
- `pairs`: sentence-pair files, aligned files and text files read line by line and checked; deterministic splits.
- `stream`: corpora too large to hold: held-out splits and a sample read first, the training split as a stream.
- `pipeline`: the tf.data training pipeline (tokenize, teacher forcing, shuffle, bucket, pad).
- `corpus`: the built-in English->Spanish corpus, generated, no download.
"""

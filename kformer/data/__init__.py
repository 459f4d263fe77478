"""Text and data: below the model, and needing nothing of it.

- `text`: the WordPiece tokenizer (tensorflow-text, inside the graph) and vocabulary learning.
- `pairs`: sentence-pair files, aligned files and text files read and checked; deterministic splits.
- `pipeline`: the tf.data training pipeline (tokenize, teacher forcing, bucket, pad).
- `corpus`: the built-in English->Spanish corpus, generated, no download.
"""

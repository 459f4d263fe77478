"""Inference: the seed's "one token at a time", made fast.

- `decoding`: greedy, beam and sampled decoding loops inside the graph, over one step function.
- `translator`: `Translator`, text in, text out, one `tf.function`.
- `generator`: `Generator`, the decoder-only model's continuations.
"""

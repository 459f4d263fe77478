"""Generator: the decoder-only (GPT-style) model as text in, text out, in one tf.function.

The same machinery as translation (`kformer.inference.decoding`): one step function
over the fixed-size key/value cache, inside a `tf.while_loop`. The prompt is read
through the same step, a position at a time, and the continuation is chosen greedily
or sampled (temperature, top-k, top-p) with a seed.
"""

from pathlib import Path

import tensorflow as tf

from kformer.data.text import END, utf8_batch
from kformer.inference.decoding import continue_prompts, sampler
from kformer.inference.translator import padded_tokens
from kformer.model_dir import TrainedModel, load


class Generator(tf.Module):
    """Continues prompts with a trained decoder-only model.

    Args:
        model: a language-model directory (`kformer train --task lm`) or a
            loaded `TrainedModel` of a language model (no source tokenizer).
        max_new_tokens: the most tokens written after a prompt (a prompt over the model's
            `max_length` tokens is read up to it: its first `max_length` tokens).
        temperature: 0 for greedy (always the most likely token); above 0,
            sample from the softmax of logits / temperature.
        top_k: sample only among the k most likely tokens (0: no limit).
        top_p: sample only from the smallest set of tokens whose probability
            reaches top_p (1.0: no limit).
        seed: the sampling seed; the same seed, prompts and settings give the
            same continuation.
        stop_token: the token that ends a continuation (default [END]).
        use_cache: decode with the key/value cache (the fast path); False
            re-runs the model over the whole prefix at every step.

    Example:
    >>> generator = Generator("lm", temperature=0.8, top_k=20, seed=1)  # from `kformer train --task lm`
    >>> continuations = generator.generate(["el gato"])  # one string per prompt, without the prompt
    """

    ids_name = "generate_ids"  # the method taking token ids, for the export writers
    text_output = "continuations"  # what its texts come out as

    def __init__(
        self, model, max_new_tokens=50, temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_token=END, use_cache=True
    ):
        super().__init__(name="generator")
        trained = load(model) if isinstance(model, (str, Path)) else model
        if not isinstance(trained, TrainedModel) or trained.source_tokenizer is not None:
            kind = "translator" if isinstance(trained, TrainedModel) else type(trained).__name__
            raise ValueError(f"Generator needs a language model (kformer train --task lm), got a {kind}.")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got max_new_tokens={max_new_tokens!r}.")
        vocabulary = trained.target_tokenizer.vocabulary
        if stop_token not in vocabulary:
            raise ValueError(f"stop_token {stop_token!r} is not in the model's vocabulary.")
        self.model = trained.model
        self.tokenizer = trained.target_tokenizer
        self.max_length = int(trained.max_length)
        self.max_new_tokens = max_new_tokens
        self.use_cache = use_cache
        self.stop_id = vocabulary.index(stop_token)
        self._choose = sampler(temperature, top_k, top_p, int(seed))  # checks the settings

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="prompts")])
    def __call__(self, prompts):
        """tf.string `(B,)` -> continuations tf.string `(B,)` (without the prompt)."""
        prompt_tokens = padded_tokens(self.tokenizer.tokenize(prompts))
        return self.tokenizer.detokenize(self.generate_ids(prompt_tokens))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="prompt_tokens")])
    def generate_ids(self, prompt_tokens):
        """int32 `(B, P)`, right-padded with 0 -> int32 `(B, max_new_tokens)`: the continuations, then [PAD]."""
        prompt_tokens = prompt_tokens[:, : self.max_length]
        decoder = self.model.get_layer("decoder")
        return continue_prompts(
            decoder, prompt_tokens, self.max_new_tokens, self._choose, self.stop_id, use_cache=self.use_cache
        )

    def generate(self, prompts):
        """Python strings in, continuations (Python strings) out, one for each."""
        prompts = utf8_batch(prompts)
        return [text.decode("utf-8") for text in self(tf.constant(prompts, tf.string)).numpy()] if prompts else []

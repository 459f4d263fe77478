"""Every public layer through Keras' own layer test harness, as keras-hub's tests do.

`keras.src.testing.TestCase.run_layer_test` is private: Keras publishes no layer
test harness, and keras-hub's own `TestCase` builds on this one. It checks a
layer's config round trip, symbolic and eager calls, its weight counts, masking,
one training step and a copy built with `dtype="mixed_float16"`. If a Keras
release moves it, these tests fail at import rather than pass unchecked.
"""

import pytest
from keras.src.testing import TestCase

from kformer import layers

B, S, T, D, H, F, V = 2, 5, 4, 8, 2, 16, 11
WEIGHTS_PER_ATTENTION = 8  # query, key, value and output kernels and biases
WEIGHTS_PER_NORM = 2
WEIGHTS_PER_FEED_FORWARD = 4
# The harness's training step feeds a layer of two inputs one dict, which no
# two-input layer takes; Keras' own MultiHeadAttention tests turn it off too.
# The decoder's training is checked by every model test instead.
TWO_INPUTS_TRAIN = False

CASES = {
    "PositionalEmbedding": dict(
        layer_cls=layers.PositionalEmbedding,
        init_kwargs={"vocab_size": V, "d_model": D},
        input_shape=(B, T),
        input_dtype="int32",
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=1,
        run_training_check=False,  # integer inputs: nothing to differentiate
    ),
    "FeedForward": dict(
        layer_cls=layers.FeedForward,
        init_kwargs={"d_model": D, "d_ff": F},
        input_shape=(B, T, D),
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=WEIGHTS_PER_FEED_FORWARD,
        supports_masking=True,
    ),
    "MultiHeadSelfAttention": dict(
        layer_cls=layers.MultiHeadSelfAttention,
        init_kwargs={"num_heads": H, "d_model": D, "causal": True},
        input_shape=(B, T, D),
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=WEIGHTS_PER_ATTENTION,
    ),
    "CrossAttention": dict(
        layer_cls=layers.CrossAttention,
        init_kwargs={"num_heads": H, "d_model": D},
        input_shape={"x_shape": (B, T, D), "context_shape": (B, S, D)},
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=WEIGHTS_PER_ATTENTION,
        run_training_check=TWO_INPUTS_TRAIN,
    ),
    "CausalMask": dict(
        layer_cls=layers.CausalMask,
        init_kwargs={},
        input_shape=(B, T, D),
        expected_output_shape=(1, T, T),
        expected_output_dtype="bool",
        run_training_check=False,  # a mask has no gradient
        run_mixed_precision_check=False,  # a boolean output has no precision
    ),
    "TransformerBlock, encoder": dict(
        layer_cls=layers.TransformerBlock,
        init_kwargs={"d_model": D, "num_heads": H, "d_ff": F},
        input_shape=(B, T, D),
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=WEIGHTS_PER_ATTENTION + WEIGHTS_PER_FEED_FORWARD + 2 * WEIGHTS_PER_NORM,
        expected_num_seed_generators=2,  # the attention weights' dropout and the residual dropout
        supports_masking=True,
    ),
    "TransformerBlock, pre-LN decoder": dict(
        layer_cls=layers.TransformerBlock,
        init_kwargs={"d_model": D, "num_heads": H, "d_ff": F, "causal": True, "cross_attention": True}
        | {"norm_first": True},
        input_shape={"x_shape": (B, T, D), "context_shape": (B, S, D)},
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=2 * WEIGHTS_PER_ATTENTION + WEIGHTS_PER_FEED_FORWARD + 3 * WEIGHTS_PER_NORM,
        expected_num_seed_generators=3,  # both attentions' weights and the residual dropout
        run_training_check=TWO_INPUTS_TRAIN,
    ),
}


class _Harness(TestCase):
    def runTest(self):
        pass


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_layer_passes_keras_own_layer_test_harness(case):
    _Harness().run_layer_test(**CASES[case])


def test_every_public_layer_is_put_through_the_harness():
    tested = {CASES[case]["layer_cls"].__name__ for case in CASES}
    public = {name for name in layers.__all__ if isinstance(getattr(layers, name), type)} - {"Dropout"}
    assert public == tested

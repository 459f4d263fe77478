"""kformer's Dropout: Keras' Dropout outside XLA, a correct mask inside it."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kformer.layers import Dropout
from kformer.layers import dropout as dropout_module


def compiled_dropout(layer, shape):
    """The layer applied to ones under jit_compile, as a training step would."""
    return tf.function(lambda x: layer(x, training=True), jit_compile=True)(tf.ones(shape))


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_mask_under_xla_drops_the_rate_and_keeps_the_mean(rate):
    layer = Dropout(rate, seed=1)
    # 63 * 41 * 127 is not a multiple of 4: the last draw's spare bytes go unused.
    output = compiled_dropout(layer, (63, 41, 127)).numpy()
    dropped = output == 0
    assert abs(dropped.mean() - rate) < 0.005
    # The rate rounded to a multiple of 1/256 moves the scale by at most 1/512 / (1 - rate) relative.
    np.testing.assert_allclose(output[~dropped], 1 / (1 - rate), rtol=1 / 512 / (1 - rate) + 1e-6)
    assert abs(output.mean() - 1.0) < 0.01


def test_a_rate_near_one_under_xla_keeps_one_in_256_not_none():
    """0.999 rounds to 256/256; the mask keeps the one level below it, scaled by 256, never 0 * inf."""
    output = compiled_dropout(Dropout(0.999, seed=1), (256, 256)).numpy()
    kept = output[output != 0]
    assert np.isfinite(output).all() and 180 < kept.size < 340  # 65,536 / 256 = 256 expected
    np.testing.assert_array_equal(kept, 256.0)


def test_masks_under_xla_differ_between_calls_and_positions():
    layer = Dropout(0.5, seed=1)
    step = tf.function(lambda x: layer(x, training=True), jit_compile=True)
    first, second = (step(tf.ones((256, 256))).numpy() == 0 for _ in range(2))
    assert 0.4 < (first != second).mean() < 0.6  # independent masks disagree half the time
    assert not (first == first[:1]).all()  # rows are not copies of one another
    assert not (first == first[:, :1]).all()


def test_is_keras_dropout_outside_xla():
    x = tf.random.normal((8, 16))
    ours, theirs = Dropout(0.3, seed=7), keras.layers.Dropout(0.3, seed=7)
    np.testing.assert_array_equal(ours(x, training=True), theirs(x, training=True))
    eager_graph = tf.function(lambda x: ours(x, training=True))  # plain tf.function, no XLA
    assert 0.15 < (eager_graph(tf.ones((64, 64))).numpy() == 0).mean() < 0.45


def test_identity_when_not_training_and_under_xla():
    x = tf.random.normal((4, 5, 6))
    layer = Dropout(0.5)
    np.testing.assert_array_equal(layer(x, training=False), x)
    inference = tf.function(lambda x: layer(x, training=False), jit_compile=True)
    np.testing.assert_array_equal(inference(x), x)


def test_the_fast_path_really_runs_under_xla():
    """Only the ThreeFry path rounds the rate to 1/256: its scale is 256 / 230 for rate 0.1, not 1 / 0.9."""
    kept = compiled_dropout(Dropout(0.1, seed=3), (32, 32)).numpy()
    kept = kept[kept != 0]
    np.testing.assert_array_equal(kept, np.float32(256 / (256 - 26)))
    assert not np.any(kept == np.float32(1 / 0.9))
    assert dropout_module.compiling_with_xla() is False  # eagerly, not inside XLA


def test_without_the_xla_check_it_is_keras_dropout_under_xla(monkeypatch):
    monkeypatch.setattr(dropout_module, "_graph_in_xla", None)
    kept = compiled_dropout(Dropout(0.1, seed=3), (32, 32)).numpy()
    kept = kept[kept != 0]
    np.testing.assert_allclose(kept, 1 / 0.9, rtol=1e-6)  # Keras' scale


def test_identity_when_training_is_not_said():
    """Called outside `fit` without `training`, as a user would in a notebook: inference, nothing dropped."""
    x = tf.random.normal((4, 5, 6))
    layer = Dropout(0.5, seed=2)
    np.testing.assert_array_equal(layer(x), x)
    np.testing.assert_array_equal(tf.function(layer, jit_compile=True)(x), x)


def test_masks_under_xla_follow_the_layers_seed():
    """Two layers seeded alike drop the same elements; another seed drops others."""
    first, again, other = (compiled_dropout(Dropout(0.5, seed=seed), (64, 64)).numpy() == 0 for seed in (4, 4, 5))
    np.testing.assert_array_equal(first, again)
    assert 0.4 < (first != other).mean() < 0.6

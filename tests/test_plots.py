"""Pictures: the attention maps behind the heatmaps, and the learning curves."""

import matplotlib.image
import numpy as np
from conftest import run_fresh_python

from kformer import TrainedModel, build_transformer
from kformer.data.text import RESERVED_TOKENS, Tokenizer
from kformer.teaching import plots
from kformer.training.history import learning_curves

VOCAB = RESERVED_TOKENS + ["the", "black", "cat", "sleeps", "el", "gato", "negro", "duerme"]


def test_attention_maps_cover_every_layer_and_head_and_are_distributions():
    model = build_transformer(len(VOCAB), len(VOCAB), d_model=16, num_heads=2, num_layers=3, d_ff=32)
    trained = TrainedModel(model, Tokenizer(VOCAB), Tokenizer(VOCAB), {"max_length": 6})
    source, target, translation, maps = plots.attention_weights(trained, "the black cat sleeps")
    assert source == ["the", "black", "cat", "sleeps"]
    assert isinstance(translation, str) and 1 <= len(target) <= 6
    shapes = {
        "encoder self-attention": (2, 4, 4),
        "decoder self-attention": (2, len(target), len(target)),
        "cross-attention": (2, len(target), 4),
    }
    for kind, shape in shapes.items():
        assert len(maps[kind]) == 3
        for weights in maps[kind]:
            assert weights.shape == shape
            np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    for weights in maps["decoder self-attention"]:
        np.testing.assert_array_equal(np.triu(weights, k=1), 0.0)  # causal
    figure = plots.attention_heatmaps(trained, "the black cat sleeps")
    assert len(figure.axes) == 3 * 3 * 2 + 1  # a map per kind, layer and head, and one colour bar
    colour_bar = figure.axes[-1]
    assert colour_bar.get_ylabel() == "attention weight" and colour_bar.get_ylim() == (0.0, 1.0)


def test_learning_curves_are_a_png(tmp_path):
    history = {"loss": [3.0, 2.0, 1.5], "val_loss": [2.8, 2.1, 1.9], "accuracy": [0.2, 0.5, 0.6]}
    learning_curves(history, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert matplotlib.image.imread(tmp_path / "curves.png").shape[:2] == (400, 1000)  # loss and accuracy
    learning_curves({"loss": [3.0, 2.0]}, tmp_path / "loss.png")  # the multi-worker loop records no accuracy
    assert matplotlib.image.imread(tmp_path / "loss.png").shape[:2] == (400, 500)  # so loss alone, no empty panel
    learning_curves({**history, "val_bleu": [1.0, 40.0, 60.0], "val_chrf": [10.0, 60.0, 75.0]}, tmp_path / "bleu.png")
    assert matplotlib.image.imread(tmp_path / "bleu.png").shape[:2] == (400, 1500)  # and the validation BLEU


def test_importing_kformer_leaves_the_matplotlib_backend_alone(tmp_path):
    # A notebook's inline backend must survive `import kformer`; "svg" stands in for it here.
    code = """
    import os
    os.environ["MPLBACKEND"] = "svg"
    import matplotlib
    import kformer
    print(matplotlib.get_backend())
    """
    assert run_fresh_python(code, tmp_path).strip() == "svg"
